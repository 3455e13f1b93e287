"""Sharpness: the top eigenvalue of the training-loss Hessian, plain and preconditioned.

Cohen et al. 2021 (arXiv:2103.00065) show that full-batch gradient descent at learning rate lr
first sharpens (the top eigenvalue lambda_1 of the Hessian H rises) until lambda_1 reaches
2/lr, the threshold beyond which gradient descent on a quadratic diverges, and then hovers
there: the "edge of stability". Cohen et al. 2022 (arXiv:2207.14484) find the same for
adaptive methods in the preconditioned geometry: the top eigenvalue of P^-1 H settles at
(2 + 2 beta_1) / ((1 - beta_1) lr) for Adam (38/lr at beta_1 = 0.9).

The eigenvalue is found by Lanczos with full reorthogonalisation (Golub & Van Loan 2013,
"Matrix Computations", sec. 10.1) on Hessian-vector products (`engine.diagnostics.hessian`),
started from the previous call's top Ritz vector (warm start: the top eigenvector moves
slowly between two records). With k iterations it is exact once k >= n_params.

P^-1 H is not symmetric; with D = P^(-1/2) it is similar to the symmetric D H D (same
eigenvalues), which is what Lanczos runs on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from engine.diagnostics.hessian import LossHessian

ITERATIONS = 20  # Lanczos iterations per record (Hessian-vector products)


def lanczos_top(matvec: Callable[[np.ndarray], np.ndarray], size: int, iterations: int,
                start: np.ndarray | None = None, seed: int = 0
                ) -> tuple[float, np.ndarray]:
    """The largest eigenvalue of a symmetric operator and its Ritz vector, by Lanczos.

    Args:
        matvec: v -> A v, float64 [size] -> float64 [size], A symmetric.
        size: n, the dimension.
        iterations: k >= 1 Lanczos steps (products with A); min(k, n) are taken.
        start: float [size] starting vector (e.g. the previous Ritz vector); None or zero: a
            random one (`seed`).

    Returns:
        (lambda_max of the k x k tridiagonal T_k, its Ritz vector float64 [size], unit norm).
        The Ritz value is <= lambda_max(A) and equals it once k = n (exact arithmetic).

    Raises:
        ValueError: iterations < 1 or size < 1.
    """
    if iterations < 1 or size < 1:
        raise ValueError(f"iterations={iterations}, size={size} refused: both must be >= 1")
    steps = min(iterations, size)
    q = None if start is None else np.asarray(start, dtype=np.float64).reshape(-1)
    if q is None or not np.isfinite(q).all() or np.linalg.norm(q) == 0:
        q = np.random.default_rng(seed).standard_normal(size)
    basis = np.zeros((steps, size))
    alphas, betas = [], []
    q = q / np.linalg.norm(q)
    for j in range(steps):
        basis[j] = q
        w = matvec(q)
        alpha = float(q @ w)
        alphas.append(alpha)
        # full reorthogonalisation, twice ("twice is enough": Parlett 1998, sec. 6.9)
        for _ in range(2):
            w = w - basis[: j + 1].T @ (basis[: j + 1] @ w)
        beta = float(np.linalg.norm(w))
        if j == steps - 1 or beta <= 1e-12 * max(1.0, abs(alpha)):
            break  # an invariant subspace: T_j's eigenvalues are A's
        betas.append(beta)
        q = w / beta
    k = len(alphas)
    tridiagonal = np.diag(alphas) + np.diag(betas[: k - 1], 1) + np.diag(betas[: k - 1], -1)
    values, vectors = np.linalg.eigh(tridiagonal)
    ritz = basis[:k].T @ vectors[:, -1]
    return float(values[-1]), ritz / np.linalg.norm(ritz)


def preconditioner(optimizer_name: str, optimizer: Any, variables: Sequence[tf.Variable],
                   options: Mapping[str, Any]) -> list[tf.Tensor] | None:
    """The diagonal preconditioner P (one tensor per variable) of an adaptive optimizer's last
    step, such that its step is lr * P^-1 * (its momentum or gradient); None for others.

    Adam / AdamW, in the TensorFlow ("epsilon-hat") form the lab's Adam uses,
    `step = lr sqrt(1 - b2^t)/(1 - b1^t) m / (sqrt(v) + eps)`, i.e.
    P = (1 - b1^t) / sqrt(1 - b2^t) * (sqrt(v) + eps) with t = `iterations` (Cohen et al.
    2022, sec. 2: P_t = (1 - b1^t)[sqrt(v_t / (1 - b2^t)) + eps], the same up to where eps
    sits); `vhat` replaces v with AMSGrad. RMSprop (Keras): P = sqrt(rms - mg^2 + eps_in) +
    eps_out, epsilon inside the root when momentum > 0 and outside otherwise, `mg` only when
    centered.

    Returns:
        Tensors shaped like `variables` (their dtype), every element > 0 unless eps = 0 and a
        second moment is 0; or None.
    """
    if optimizer_name not in ("adam", "adamw", "rmsprop"):
        return None
    hypers = {name: float(tf.cast(optimizer._get_hyper(name), tf.float64))
              for name in optimizer._hyper if name != "learning_rate"
              and not callable(getattr(optimizer._hyper[name], "get_config", None))}
    out = []
    if optimizer_name in ("adam", "adamw"):
        t = max(float(optimizer.iterations.numpy()), 1.0)
        b1, b2, eps = hypers["beta_1"], hypers["beta_2"], hypers["epsilon"]
        scale = (1.0 - b1 ** t) / np.sqrt(1.0 - b2 ** t)
        second = "vhat" if options.get("amsgrad") else "v"
        for var in variables:
            v = optimizer.get_slot(var, second)
            out.append(scale * (tf.sqrt(tf.maximum(v, 0)) + eps))
        return out
    momentum, eps = hypers.get("momentum", 0.0), hypers["epsilon"]
    inside, outside = (eps, 0.0) if momentum > 0 else (0.0, eps)
    for var in variables:
        denominator = optimizer.get_slot(var, "rms")
        if options.get("centered"):
            denominator = denominator - tf.square(optimizer.get_slot(var, "mg"))
        out.append(tf.sqrt(tf.maximum(denominator + inside, 0)) + outside)
    return out


class Sharpness:
    """Top eigenvalues of H and of P^-1 H on a fixed batch, warm-started between calls.

    Args:
        hessian: the `LossHessian` of the training loss on the sharpness batch.
        iterations: Lanczos iterations per eigenvalue (`ITERATIONS`).
    """

    def __init__(self, hessian: LossHessian, iterations: int = ITERATIONS):
        self.hessian, self.iterations = hessian, iterations
        self._start: dict[str, np.ndarray | None] = {"plain": None, "preconditioned": None}

    def plain(self) -> float:
        """lambda_1(H) at the current weights (units: nats per unit weight squared)."""
        value, self._start["plain"] = lanczos_top(self.hessian.product, self.hessian.size,
                                                  self.iterations, self._start["plain"])
        return value

    def preconditioned(self, precondition: Sequence[tf.Tensor]) -> float:
        """lambda_1(P^-1 H) = lambda_1(D H D), D = P^(-1/2), for the diagonal P given as one
        tensor per variable (`preconditioner`)."""
        d = 1.0 / np.sqrt(self.hessian.flat_values(precondition))
        d[~np.isfinite(d)] = 0.0  # a coordinate with P = 0 never moves: no direction there
        value, self._start["preconditioned"] = lanczos_top(
            lambda v: d * self.hessian.product(d * v), self.hessian.size, self.iterations,
            self._start["preconditioned"])
        return value
