"""ViTDet's simple feature pyramid (Li et al., 2022): one stride-s ViT map turned into maps at strides s/4, s/2,
s and 2s by transposed convolutions and pooling, each projected to the same width — what FPN-style detection and
segmentation heads expect from a plain ViT."""

from __future__ import annotations

import keras

SCALES = (4.0, 2.0, 1.0, 0.5)


@keras.saving.register_keras_serializable(package="vit_keras")
class SimpleFeaturePyramid(keras.layers.Layer):
    """One `(B, H, W, C)` map -> a list of `(B, H·scale, W·scale, channels)` maps, one per scale in `scales`.

    Scale 4: two 2x2 stride-2 transposed convolutions with a LayerNorm and GELU between (ViTDet); 2: one; 1: the map
    itself; 0.5: 2x2 max pooling. Each is then projected: 1x1 convolution, LayerNorm, 3x3 convolution, LayerNorm.

    Example:
        >>> maps = SimpleFeaturePyramid(channels=16)(np.zeros((2, 4, 6, 48), "float32"))
        >>> [tuple(m.shape) for m in maps]
        [(2, 16, 24, 16), (2, 8, 12, 16), (2, 4, 6, 16), (2, 2, 3, 16)]
    """

    def __init__(self, channels: int = 256, scales=SCALES, **kwargs):
        super().__init__(**kwargs)
        self.channels = int(channels)
        self.scales = tuple(float(s) for s in scales)
        unknown = [s for s in self.scales if s not in SCALES]
        if unknown or not self.scales:
            raise ValueError(f"scales={tuple(scales)!r}: each scale must be one of {SCALES}.")
        repeated = sorted({s for s in self.scales if self.scales.count(s) > 1})
        if repeated:
            raise ValueError(f"scales={tuple(scales)!r} gives the scale(s) {repeated} more than once; give each once.")

    def build(self, input_shape):
        width = input_shape[-1]
        self.resamplers = [self._resampler(scale, width) for scale in self.scales]
        self.projections = [self._projection(i) for i in range(len(self.scales))]
        shape = tuple(input_shape)
        for resampler, projection in zip(self.resamplers, self.projections, strict=True):
            out = shape
            for layer in resampler:
                layer.build(out)
                out = layer.compute_output_shape(out)
            for layer in projection:
                layer.build(out)
                out = layer.compute_output_shape(out)

    def _resampler(self, scale, width):
        def up(name, filters):
            return keras.layers.Conv2DTranspose(filters, 2, strides=2, dtype=self.dtype_policy, name=name)

        if scale == 4.0:
            return [up("up4_0", width // 2), keras.layers.LayerNormalization(epsilon=1e-6, dtype=self.dtype_policy,
                                                                             name="up4_norm"),
                    keras.layers.Activation("gelu", dtype=self.dtype_policy), up("up4_1", width // 4)]
        if scale == 2.0:
            return [up("up2", width // 2)]
        if scale == 0.5:
            return [keras.layers.MaxPooling2D(2, dtype=self.dtype_policy, name="down2")]
        return []

    def _projection(self, index):
        def norm(name):
            return keras.layers.LayerNormalization(epsilon=1e-6, dtype=self.dtype_policy, name=name)

        return [keras.layers.Conv2D(self.channels, 1, use_bias=False, dtype=self.dtype_policy, name=f"lateral{index}"),
                norm(f"lateral{index}_norm"),
                keras.layers.Conv2D(self.channels, 3, padding="same", use_bias=False, dtype=self.dtype_policy,
                                    name=f"output{index}"),
                norm(f"output{index}_norm")]

    def call(self, feature_map):
        outputs = []
        for resampler, projection in zip(self.resamplers, self.projections, strict=True):
            x = feature_map
            for layer in (*resampler, *projection):
                x = layer(x)
            outputs.append(x)
        return outputs

    def compute_output_shape(self, input_shape):
        batch, rows, cols, _ = input_shape

        def scaled(side, scale):
            return None if side is None else int(side * scale)

        return [(batch, scaled(rows, s), scaled(cols, s), self.channels) for s in self.scales]

    def get_config(self):
        return {**super().get_config(), "channels": self.channels, "scales": self.scales}
