"""The image-text logits: cosine similarity of L2-normalised features, times `exp(logit_scale)`, plus SigLIP's
`logit_bias`.

Example:
    >>> layer = ContrastiveLogits(logit_bias=True)
    >>> layer.build(); _ = layer.logit_scale.assign(np.log(10.0)), layer.logit_bias.assign(-2.0)
    >>> np.round(np.asarray(layer(np.eye(2, dtype="float32"), np.eye(2, dtype="float32"))), 4).tolist()
    [[8.0, -2.0], [-2.0, 8.0]]
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

# CLIP's initial temperature, log(1/0.07) (the paper); SigLIP's init is log(10) with bias -10.
CLIP_INIT_SCALE = float(np.log(1 / 0.07))


def l2_normalize(x, epsilon: float = 1e-12):
    """`x / ||x||` over the last axis (transformers' `x / x.norm(dim=-1, keepdim=True)`; `epsilon` only keeps a
    zero vector finite).

    Example:
        >>> np.asarray(l2_normalize(np.array([[3.0, 4.0]], "float32"))).tolist()
        [[0.6000000238418579, 0.800000011920929]]
    """
    x = ops.convert_to_tensor(x)
    return x / ops.maximum(ops.sqrt(ops.sum(ops.square(x), axis=-1, keepdims=True)), epsilon)


@keras.saving.register_keras_serializable(package="vit_keras.zeroshot")
class ContrastiveLogits(keras.layers.Layer):
    """`logits_per_image = exp(logit_scale) · normalise(image) · normalise(text)ᵀ (+ logit_bias)`, (N, T).

    `logit_scale` is stored as its log (CLIP, SigLIP), `logit_bias` only when `logit_bias=True` (SigLIP).
    """

    def __init__(self, logit_bias: bool = False, init_scale: float = CLIP_INIT_SCALE, init_bias: float = -10.0,
                 **kwargs):
        super().__init__(**kwargs)
        self.use_logit_bias, self.init_scale, self.init_bias = bool(logit_bias), float(init_scale), float(init_bias)

    def build(self, image_features_shape=None, text_features_shape=None):
        self.logit_scale = self.add_weight(name="logit_scale", shape=(),
                                           initializer=keras.initializers.Constant(self.init_scale))
        self.logit_bias = (self.add_weight(name="logit_bias", shape=(),
                                           initializer=keras.initializers.Constant(self.init_bias))
                           if self.use_logit_bias else None)

    def call(self, image_features, text_features):
        image = l2_normalize(image_features)
        text = l2_normalize(text_features)
        logits = ops.matmul(image, ops.transpose(text)) * ops.exp(ops.cast(self.logit_scale, image.dtype))
        if self.logit_bias is not None:
            logits = logits + ops.cast(self.logit_bias, image.dtype)
        return logits

    def compute_output_shape(self, image_features_shape, text_features_shape):
        return (image_features_shape[0], text_features_shape[0])

    def get_config(self):
        return {**super().get_config(), "logit_bias": self.use_logit_bias, "init_scale": self.init_scale,
                "init_bias": self.init_bias}
