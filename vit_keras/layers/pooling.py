"""Reduce the encoder's token sequence to one vector: the class token, or the mean of the patches."""

from __future__ import annotations

import keras
from keras import ops

POOLINGS = ("token", "avg")


@keras.saving.register_keras_serializable(package="vit_keras")
class TokenPooling(keras.layers.Layer):
    """`"token"` takes the class token (`x[:, 0]`); `"avg"` averages the patch tokens (class token excluded).

    vit_jax's `classifier="gap"` is `"avg"` on a model without a class token.

    Example:
        >>> TokenPooling("avg", num_prefix_tokens=1)(keras.ops.ones((2, 5, 8))).shape
        (2, 8)
    """

    def __init__(self, method: str = "token", num_prefix_tokens: int = 1, **kwargs):
        super().__init__(**kwargs)
        if method not in POOLINGS:
            raise ValueError(f"`pooling` must be one of {POOLINGS} or None, got {method!r}.")
        if method == "token" and num_prefix_tokens < 1:
            raise ValueError(
                "pooling='token' needs a class token, but this model has none (classifier='gap'); "
                "use pooling='avg'."
            )
        self.method = method
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, x):
        if self.method == "token":
            return x[:, 0]
        return ops.mean(x[:, self.num_prefix_tokens :], axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "method": self.method, "num_prefix_tokens": self.num_prefix_tokens}
