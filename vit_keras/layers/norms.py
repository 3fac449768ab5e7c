"""The norms a block may be built with: LayerNorm (with its source's epsilon) and RMSNorm (AIMv2, timm `RmsNorm`).

Both declare their scale as `scale` (and LayerNorm its shift as `bias`), so a block's norm slots keep the names
`LayerNorm_0` / `LayerNorm_2` whichever kind fills them; an RMSNorm simply has no `bias` to take.

Example:
    >>> tuple(norm_layer("rmsnorm", 1e-5, name="LayerNorm_0")(keras.ops.ones((1, 2, 4))).shape)
    (1, 2, 4)
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.configs import NORMS
from vit_keras.layers.checkpoint import plain


@keras.saving.register_keras_serializable(package="vit_keras")
class RMSNorm(keras.layers.Layer):
    """`x / sqrt(mean(x²) + epsilon) · scale` over the last axis, computed in float32 and cast back.

    As timm's `RmsNorm` and transformers' `Aimv2RMSNorm`: no mean subtraction, no shift. The statistics are taken
    in float32 whatever the compute dtype (transformers does the same under bfloat16), so a bfloat16 model does not
    lose the small-variance channels.

    Example:
        >>> y = RMSNorm()(keras.ops.convert_to_tensor([[3.0, 4.0]]))
        >>> [round(float(v), 4) for v in y[0]]
        [0.8485, 1.1314]
    """

    def __init__(self, epsilon: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(input_shape[-1],), initializer="ones")

    def call(self, x):
        dtype = x.dtype
        x = ops.cast(x, "float32")
        x = x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)
        return ops.cast(x, dtype) * ops.cast(self.scale, dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def checkpoint_variables(self):
        return {"scale": plain(self.scale)}

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


def norm_layer(kind: str, epsilon: float, **kwargs) -> keras.layers.Layer:
    """A norm of `kind` (`"layernorm"` or `"rmsnorm"`) with `epsilon`; `kwargs` go to the layer (name, dtype).

    Example:
        >>> type(norm_layer("layernorm", 1e-6)).__name__
        'LayerNormalization'
    """
    if kind == "layernorm":
        return keras.layers.LayerNormalization(epsilon=epsilon, **kwargs)
    if kind == "rmsnorm":
        return RMSNorm(epsilon=epsilon, **kwargs)
    raise ValueError(f"A norm must be one of {NORMS}, got {kind!r}.")
