"""The fused fast path: whether a dense update runs as one in-place Keras kernel.

The pure rule (`coefficients` / `update`) is what a student reads and what the hyper-gradient
engine differentiates; tf_keras keeps the same split visible with `Adam` (fused
`ResourceApplyAdam`) beside `NonFusedAdam`. Here the rule stays the reference and the kernel is
an optimisation chosen per variable by `dense_kernel`: the optimizer asks for it (`fused`, the
kernel its `fused_kernel` names for the current configuration) and the kernel must exist for the
variable's dtype and device (`kernel_runs`: TensorFlow's kernel registry, or XLA's training ops
when the step is compiled with `jit_compile=True`). `tests/test_fused_kernels.py` holds the
kernels and the rules to the same numbers.
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf
from tensorflow.python.framework import kernels as _kernel_registry


# Training kernels that XLA can compile (TensorFlow's tf2xla training ops), for real float dtypes;
# under `jit_compile=True` any other kernel (e.g. `ResourceApplyAdamWithAmsgrad`) would fail to
# compile, so the rule runs instead.
XLA_KERNELS = frozenset({"ResourceApplyAdam", "ResourceApplyKerasMomentum",
                         "ResourceApplyGradientDescent",
                         "ResourceApplyRMSProp", "ResourceApplyCenteredRMSProp",
                         "ResourceApplyAdagradV2", "ResourceApplyAdadelta",
                         "ResourceApplyAdaMax", "ResourceApplyFtrlV2"})
XLA_KERNEL_DTYPES = frozenset({tf.float16, tf.bfloat16, tf.float32, tf.float64})


@functools.cache
def kernel_dtypes(op_name: str) -> dict[str, frozenset[str]]:
    """{device type ("CPU", "GPU"): dtype names} for which TensorFlow registers kernel `op_name`
    (read from TensorFlow's kernel registry; empty when the op is unknown)."""
    out: dict[str, set[str]] = {}
    try:
        registered = _kernel_registry.get_registered_kernels_for_op(op_name).kernel
    except Exception:  # noqa: BLE001 - an unknown op name: no kernel
        return {}
    for kernel in registered:
        types = [c.allowed_values.list.type for c in kernel.constraint if c.name == "T"]
        out.setdefault(kernel.device_type, set()).update(
            tf.as_dtype(t).name for t in (types[0] if types else ()))
    return {device: frozenset(names) for device, names in out.items()}


def in_xla_context() -> bool:
    """True while tracing a function compiled with XLA (`tf.function(jit_compile=True)`)."""
    try:
        from tensorflow.python.framework import ops
        from tensorflow.python.ops import control_flow_util
        return bool(control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()))
    except Exception:  # noqa: BLE001 - a private API that moved: assume no XLA (the safe side)
        return False


def kernel_runs(op_name: str, dtype: tf.DType, device: str) -> bool:
    """Whether kernel `op_name` can update a variable of `dtype` placed on `device` here.

    Under XLA: `op_name` in `XLA_KERNELS` and a real float dtype. Otherwise the kernel registry
    must list `dtype` for the device's type; a variable without a known device (`""`) needs the
    dtype on every device type the op is registered for.
    """
    if in_xla_context():
        return op_name in XLA_KERNELS and dtype in XLA_KERNEL_DTYPES
    registered = kernel_dtypes(op_name)
    device_type = tf.DeviceSpec.from_string(device or "").device_type
    wanted = [device_type.upper()] if device_type else list(registered)
    return bool(wanted) and all(dtype.name in registered.get(d, ()) for d in wanted)


RULE_METHODS = ("coefficients", "update", "update_decrement")


def defining_class(cls: type, name: str) -> type:
    """The class of `cls`'s MRO whose own body defines attribute `name`."""
    return next(c for c in cls.__mro__ if name in vars(c))


@functools.cache
def kernel_computes_the_rule(cls: type) -> bool:
    """True when the kernel `cls.fused_kernel` names computes `cls`'s own rule: `fused_kernel`
    is defined by the class that defines each of `RULE_METHODS`, or by a subclass of it.

    A student's subclass of a built-in (e.g. `class SignSGD(SGD)` with its own `update`)
    inherits SGD's `fused_kernel`, which names Keras's momentum kernel: that kernel computes
    SGD's rule, not the subclass's, so it must not run. A subclass that also defines
    `fused_kernel` vouches for its kernel itself.
    """
    kernel_owner = defining_class(cls, "fused_kernel")
    return all(issubclass(kernel_owner, defining_class(cls, m)) for m in RULE_METHODS)


def dense_kernel(optimizer: Any, var: tf.Variable) -> str | None:
    """The `tf.raw_ops` kernel `optimizer` (a `RuleOptimizer`) runs for the dense update of
    `var`, or None when its pure rule runs: `fused` is off, the class's rule is not the one its
    inherited kernel computes (`kernel_computes_the_rule`), `fused_kernel(var)` names none for
    the current configuration, or the kernel does not exist for `var`'s dtype and device."""
    # A class is hashable; mypy does not count `type[Any]` as Hashable for `functools.cache`.
    if not optimizer.fused or not kernel_computes_the_rule(
            type(optimizer)):  # type: ignore[arg-type]
        return None
    kernel = optimizer.fused_kernel(var)
    if kernel is None or not kernel_runs(kernel, var.dtype.base_dtype, var.device):
        return None
    return kernel


__all__ = ["RULE_METHODS", "XLA_KERNELS", "XLA_KERNEL_DTYPES", "defining_class", "dense_kernel",
           "in_xla_context", "kernel_computes_the_rule", "kernel_dtypes", "kernel_runs"]
