"""A Keras model's forward pass as a pure function of its weight tensors.

The hyper-gradient engine needs the loss as a function of weights that are *tensors* (a state
carried through many unrolled steps with tangents or under a tape), not of `tf.Variable`s that
training assigns in place (assignments carry no gradient and no tangent). Keras 2 has no
stateless call, so this module re-applies the layers of the lab's models with given weights.
Supported layers: InputLayer, Dense, Conv2D, Reshape, Flatten, Embedding,
GlobalAveragePooling1D, Activation, Dropout (identity: the lab never trains with dropout on).
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
import tf_keras

layers = tf_keras.layers


def _weights_by_layer(model: tf_keras.Model, weights: Sequence[tf.Tensor]
                      ) -> dict[int, list[tf.Tensor]]:
    """Map id(layer) -> that layer's weight tensors, in `model.trainable_variables` order."""
    position = {id(v): i for i, v in enumerate(model.trainable_variables)}
    return {
        id(layer): [weights[position[id(v)]] for v in layer.trainable_variables]
        for layer in model.layers
    }


def _apply_layer(layer: tf_keras.layers.Layer, h: tf.Tensor, w: list[tf.Tensor]) -> tf.Tensor:
    if isinstance(layer, (layers.InputLayer, layers.Dropout)):
        return h
    if isinstance(layer, layers.Dense):
        out = tf.matmul(h, w[0])  # inputs are [batch, features] in the lab's models
        return layer.activation(out + w[1] if layer.use_bias else out)
    if isinstance(layer, layers.Conv2D):
        out = tf.nn.conv2d(
            h, w[0], strides=layer.strides, padding=layer.padding.upper(),
            dilations=layer.dilation_rate,
        )
        return layer.activation(out + w[1] if layer.use_bias else out)
    if isinstance(layer, layers.Reshape):
        return tf.reshape(h, (-1, *layer.target_shape))
    if isinstance(layer, layers.Flatten):
        return tf.reshape(h, (tf.shape(h)[0], -1))
    if isinstance(layer, layers.Embedding):
        return tf.gather(w[0], tf.cast(h, tf.int32))
    if isinstance(layer, layers.GlobalAveragePooling1D):
        return tf.reduce_mean(h, axis=1)
    if isinstance(layer, layers.Activation):
        return layer.activation(h)
    raise NotImplementedError(
        f"layer {layer.name!r} of type {type(layer).__name__} is not supported by the "
        "hyper-gradient engine's functional forward pass"
    )


def functional_logits(
    model: tf_keras.Model, weights: Sequence[tf.Tensor], x: tf.Tensor
) -> tf.Tensor:
    """The output of a sequential `model` on `x` computed with `weights` instead of its variables.

    Args:
        model: a built `tf_keras.Sequential` (or functional chain) of supported layers.
        weights: tensors shaped like `model.trainable_variables`, in that order.
        x: input batch [batch, *input_shape].

    Returns:
        Tensor [batch, n_outputs] (logits), dtype of the weights.

    Raises:
        NotImplementedError: a layer type this module does not know (named in the message).
    """
    by_layer = _weights_by_layer(model, weights)
    h = x
    for layer in model.layers:
        h = _apply_layer(layer, h, by_layer[id(layer)])
    return h


def cross_entropy(
    model: tf_keras.Model, weights: Sequence[tf.Tensor], x: tf.Tensor, y: tf.Tensor
) -> tf.Tensor:
    """Mean sparse categorical cross-entropy (nats) of the logits on labels `y` [batch] (int)."""
    logits = functional_logits(model, weights, x)
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(y, tf.int32), logits=logits)
    )
