"""The BiT-style ResNet stem of the R+ViT hybrids (vit_jax `models_resnet.py`).

Weight-standardised convolutions, GroupNorm with 32 contiguous channel groups (eps 1e-6) and
TF-style SAME padding, as the hybrid checkpoints were trained with. Every convolution and pooling is channels-last
whatever `keras.config.image_data_format()` says: the stem works on the (batch, height, width, channels) images
the model takes, and GroupNorm groups the last axis.
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.configs import ResNetConfig
from vit_keras.layers.checkpoint import nested
from vit_keras.layers.dtypes import SublayerPolicies

GROUP_NORM_EPSILON = 1e-6
DATA_FORMAT = "channels_last"
WEIGHT_STANDARDIZATION_EPSILON = 1e-5


@keras.saving.register_keras_serializable(package="vit_keras")
class StdConv2D(keras.layers.Conv2D):
    """A `Conv2D` whose kernel is standardised over (height, width, in) at every call.

    `w ← (w − mean) / (std + 1e-5)`, the population std with the epsilon outside the square root,
    exactly as vit_jax's `StdConv`, so the stored kernels stay the raw checkpoint values.

    Example:
        >>> tuple(StdConv2D(8, 3, padding="same", use_bias=False)(keras.ops.ones((1, 4, 4, 2))).shape)
        (1, 4, 4, 8)
    """

    def convolution_op(self, inputs, kernel):
        mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        std = ops.std(kernel, axis=(0, 1, 2), keepdims=True)
        kernel = (kernel - mean) / (std + WEIGHT_STANDARDIZATION_EPSILON)
        return super().convolution_op(inputs, kernel)


def _ceil_div(size, stride):
    """A SAME-padded strided side: ceil(size / stride), None (any size) staying None."""
    return None if size is None else -(-size // stride)


def _group_norm(name, dtype):
    return keras.layers.GroupNormalization(groups=32, epsilon=GROUP_NORM_EPSILON, dtype=dtype, name=name)


@keras.saving.register_keras_serializable(package="vit_keras")
class BottleneckUnit(SublayerPolicies, keras.layers.Layer):
    """Pre-activation-free bottleneck: 1×1 → 3×3 (strided) → 1×1 (×4 channels), GroupNorm after each.

    The stride sits on the 3×3 `conv2` and on the projection, never on `conv1`. The last GroupNorm
    (`gn3`) starts at zero scale so that each unit starts as the identity.

    Example:
        >>> tuple(BottleneckUnit(features=32, strides=2)(keras.ops.ones((1, 8, 8, 64))).shape)
        (1, 4, 4, 128)
    """

    def __init__(self, features: int, strides: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.features = int(features)
        self.strides = int(strides)

    def build(self, input_shape):
        d = self.dtype_policy
        out = 4 * self.features
        conv = dict(use_bias=False, padding="same", data_format=DATA_FORMAT, dtype=d)
        self.needs_projection = input_shape[-1] != out or self.strides != 1
        if self.needs_projection:
            self.conv_proj = StdConv2D(out, 1, strides=self.strides, name="conv_proj", **conv)
            self.gn_proj = _group_norm("gn_proj", d)
        self.conv1 = StdConv2D(self.features, 1, name="conv1", **conv)
        self.gn1 = _group_norm("gn1", d)
        self.conv2 = StdConv2D(self.features, 3, strides=self.strides, name="conv2", **conv)
        self.gn2 = _group_norm("gn2", d)
        self.conv3 = StdConv2D(out, 1, name="conv3", **conv)
        self.gn3 = keras.layers.GroupNormalization(
            groups=32, epsilon=GROUP_NORM_EPSILON, gamma_initializer="zeros", dtype=d, name="gn3"
        )
        mid_shape = self.conv2.compute_output_shape(self.conv1.compute_output_shape(input_shape))
        if self.needs_projection:
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))
        self.conv1.build(input_shape)
        self.gn1.build(self.conv1.compute_output_shape(input_shape))
        self.conv2.build(self.conv1.compute_output_shape(input_shape))
        self.gn2.build(mid_shape)
        self.conv3.build(mid_shape)
        self.gn3.build(self.conv3.compute_output_shape(mid_shape))

    def call(self, x):
        residual = self.gn_proj(self.conv_proj(x)) if self.needs_projection else x
        y = ops.relu(self.gn1(self.conv1(x)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(residual + y)

    def checkpoint_variables(self):
        names = ["conv1", "conv2", "conv3"] + (["conv_proj"] if self.needs_projection else [])
        out = {}
        for conv in names:
            gn = conv.replace("conv", "gn")
            out.update({**nested(conv, getattr(self, conv)), **nested(gn, getattr(self, gn))})
        return out

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape
        s = self.strides
        return (batch, _ceil_div(height, s), _ceil_div(width, s), 4 * self.features)

    def get_config(self):
        return {**super().get_config(), "features": self.features, "strides": self.strides}


@keras.saving.register_keras_serializable(package="vit_keras")
class ResNetStem(SublayerPolicies, keras.layers.Layer):
    """Root (StdConv 7×7/2 → GroupNorm → ReLU → max-pool 3×3/2) and optional bottleneck stages.

    `num_layers=()` is the stem-only variant of R+Ti/16; `(3, 4, 9)` is R50+B/16's. Stage `i` has
    `64·width_factor·2^i` bottleneck features; every stage after the first halves the resolution.
    Sub-layers are named as in the checkpoints: `conv_root`, `gn_root`, `block{s}_unit{u}`.

    Example:
        >>> tuple(ResNetStem(num_layers=(1, 1))(keras.ops.ones((1, 64, 64, 3))).shape)
        (1, 8, 8, 512)
    """

    def __init__(self, num_layers=(), width_factor: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.config = ResNetConfig(tuple(int(n) for n in num_layers), int(width_factor))
        d = self.dtype_policy
        width = self.config.width
        self.conv_root = StdConv2D(width, 7, strides=2, padding="same", use_bias=False, data_format=DATA_FORMAT,
                                   dtype=d, name="conv_root")
        self.gn_root = _group_norm("gn_root", d)
        self.pool = keras.layers.MaxPooling2D(3, strides=2, padding="same", data_format=DATA_FORMAT, dtype=d,
                                              name="pool")
        self.units = []
        for stage, block_size in enumerate(self.config.num_layers):
            for unit in range(block_size):
                strides = 2 if stage > 0 and unit == 0 else 1
                self.units.append(
                    BottleneckUnit(
                        width * 2**stage, strides=strides, dtype=d, name=f"block{stage + 1}_unit{unit + 1}"
                    )
                )

    def build(self, input_shape):
        self.conv_root.build(input_shape)
        shape = self.conv_root.compute_output_shape(input_shape)
        self.gn_root.build(shape)
        shape = self.pool.compute_output_shape(shape)
        for unit in self.units:
            unit.build(shape)
            shape = unit.compute_output_shape(shape)

    def call(self, x):
        x = ops.relu(self.gn_root(self.conv_root(x)))
        x = self.pool(x)
        for unit in self.units:
            x = unit(x)
        return x

    def checkpoint_variables(self):
        """Named as in vit_jax: `conv_root`, `gn_root`, `block{s}/unit{u}/...` (no `resnet/` prefix)."""
        out = {**nested("conv_root", self.conv_root), **nested("gn_root", self.gn_root)}
        for unit in self.units:
            out.update(nested(unit.name.replace("_unit", "/unit"), unit))  # block1_unit1 -> block1/unit1
        return out

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape
        height, width = _ceil_div(height, 4), _ceil_div(width, 4)
        channels = self.config.width
        for stage in range(len(self.config.num_layers)):
            if stage > 0:
                height, width = _ceil_div(height, 2), _ceil_div(width, 2)
            channels = 4 * self.config.width * 2**stage
        return (batch, height, width, channels)

    def get_config(self):
        return {
            **super().get_config(),
            "num_layers": list(self.config.num_layers),
            "width_factor": self.config.width_factor,
        }
