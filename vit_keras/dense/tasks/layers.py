"""The layers of the published task heads on a ViT (EoMT, Depth Anything, ViTPose), in `keras.ops` for every
backend. Each declares its variables under the checkpoint names of `vit_keras.weights.task_schema`, relative to the
layer (`checkpoint_variables`), as the backbone's layers do.

The resizes are torch's `F.interpolate(mode="bilinear")`, with or without aligned corners, on images of any size.
Convolutions pad explicitly as torch does (`padding=p` on
every side), never TF's `"same"`.

Example:
    >>> x = keras.ops.ones((1, 4, 4, 2))
    >>> tuple(resize_bilinear(x, (8, 8), align_corners=True).shape)
    (1, 8, 8, 2)
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.layers.checkpoint import plain
from vit_keras.layers.transformer import ACTIVATION_FUNCTIONS

EOMT_LAYER_NORM_2D_EPSILON = 1e-6  # EomtLayerNorm2d's own default, whatever the config's layer_norm_eps
BATCH_NORM_EPSILON = 1e-5  # torch BatchNorm2d's default (ViTPose's classic decoder)
CLASSIC_DECODER_WIDTH = 256  # VitPoseClassicDecoder's fixed width


def _resize_axis(x, axis: int, out_size, align_corners: bool):
    """One axis of torch's bilinear interpolation: each output cell the blend of its two source cells (torch's
    source index: `i·(in − 1)/(out − 1)` with aligned corners, else the half-pixel `(i + 0.5)·in/out − 0.5`
    clamped at 0; the upper tap clamped to the border)."""
    in_size = ops.shape(x)[axis]
    index = ops.arange(out_size, dtype="float32")
    in_f, out_f = ops.cast(in_size, "float32"), ops.cast(out_size, "float32")
    if align_corners:
        source = index * (in_f - 1.0) / ops.maximum(out_f - 1.0, 1.0)
    else:
        source = ops.maximum((index + 0.5) * (in_f / out_f) - 0.5, 0.0)
    low = ops.floor(source)
    weight = ops.cast(source - low, x.dtype)
    low = ops.minimum(ops.cast(low, "int32"), in_size - 1)
    high = ops.minimum(low + 1, in_size - 1)
    shape = [1] * len(x.shape)
    shape[axis] = -1
    weight = ops.reshape(weight, shape)
    return ops.take(x, low, axis=axis) * (1.0 - weight) + ops.take(x, high, axis=axis) * weight


def resize_bilinear(x, size, align_corners: bool):
    """`x` (B, H, W, C) resized to `size` (h, w; static or symbolic) as torch's bilinear `F.interpolate` (no
    antialias).

    Example:
        >>> tuple(resize_bilinear(keras.ops.ones((1, 16, 16, 3)), (4, 4), align_corners=False).shape)
        (1, 4, 4, 3)
    """
    x = _resize_axis(x, 1, size[0], align_corners)
    return _resize_axis(x, 2, size[1], align_corners)


def conv2d(x, kernel, bias=None, *, strides: int = 1, padding: int = 0):
    """A torch `Conv2d` (zero `padding` on every side) on NHWC `x`, `kernel` (kh, kw, in, out)."""
    if padding:
        x = ops.pad(x, [[0, 0], [padding, padding], [padding, padding], [0, 0]])
    y = ops.conv(x, kernel, strides=strides, padding="valid")
    return y if bias is None else y + bias


def conv_transpose2d(x, kernel, bias=None, *, strides: int, padding: int = 0):
    """A torch `ConvTranspose2d` (`padding` cropped from every side) on NHWC `x`, `kernel` (kh, kw, out, in)."""
    y = ops.conv_transpose(x, kernel, strides=strides, padding="valid")
    if padding:
        y = y[:, padding:-padding, padding:-padding, :]
    return y if bias is None else y + bias


class DeclaredLayer(keras.layers.Layer):
    """A layer whose variables are made with `declare(name, shape)` under their checkpoint names (relative to the
    layer), which `checkpoint_variables` returns. They hold a checkpoint's arrays: they start at zero (norm scales and
    variances at one) until it is assigned, since random initializers compile one program per shape on JAX."""

    def declare(self, name: str, shape, initializer="zeros"):
        if not hasattr(self, "_declared"):
            self._declared = {}
        variable = self.add_weight(name=name.replace("/", "_"), shape=tuple(int(s) for s in shape),
                                   initializer=initializer)
        self._declared[name] = variable
        return variable

    def checkpoint_variables(self):
        return {name: plain(variable) for name, variable in getattr(self, "_declared", {}).items()}


# The task heads' `hidden_act`: the encoder's activations (transformers' "gelu" is the exact erf form) and ReLU.
TASK_ACTIVATIONS = {**ACTIVATION_FUNCTIONS, "relu": ops.relu}


def _activation(name: str):
    """The function of a task head's `hidden_act`, or a `ValueError` naming the ones it can be."""
    if name not in TASK_ACTIVATIONS:
        raise ValueError(f"A task head's activation (config.json `hidden_act`) must be one of "
                         f"{tuple(TASK_ACTIVATIONS)}, got {name!r}.")
    return TASK_ACTIVATIONS[name]


@keras.saving.register_keras_serializable(package="vit_keras")
class QueryTokens(DeclaredLayer):
    """EoMT's learned queries `(1, Q, D)`, put in front of the tokens: `(B, T, D)` -> `(B, Q + T, D)`.

    Example:
        >>> tuple(QueryTokens(3)(keras.ops.zeros((2, 5, 4))).shape)
        (2, 8, 4)
    """

    def __init__(self, num_queries: int, **kwargs):
        super().__init__(**kwargs)
        self.num_queries = int(num_queries)

    def build(self, input_shape):
        self.queries = self.declare("embedding", (1, self.num_queries, input_shape[-1]))

    def call(self, tokens):
        queries = ops.broadcast_to(ops.cast(self.queries, tokens.dtype),
                                   (ops.shape(tokens)[0], self.num_queries, tokens.shape[-1]))
        return ops.concatenate([queries, tokens], axis=1)

    def get_config(self):
        return {**super().get_config(), "num_queries": self.num_queries}


@keras.saving.register_keras_serializable(package="vit_keras")
class EomtMaskHead(DeclaredLayer):
    """EoMT's mask embedding MLP on the query tokens: fc1, act, fc2, act, fc3 (D -> D each)."""

    def __init__(self, activation: str = "gelu", **kwargs):
        super().__init__(**kwargs)
        self.activation = activation
        self._act = _activation(activation)

    def build(self, input_shape):
        width = input_shape[-1]
        self.fcs = [(self.declare(f"fc{k}/kernel", (width, width)), self.declare(f"fc{k}/bias", (width,)))
                    for k in (1, 2, 3)]

    def call(self, x):
        act = self._act
        for index, (kernel, bias) in enumerate(self.fcs):
            x = ops.matmul(x, kernel) + bias
            x = act(x) if index < 2 else x
        return x

    def get_config(self):
        return {**super().get_config(), "activation": self.activation}


@keras.saving.register_keras_serializable(package="vit_keras")
class EomtUpscale(DeclaredLayer):
    """EoMT's upscaling of the patch map, `num_blocks` times x2: ConvTranspose 2x2/2 -> act -> depthwise 3x3 (no
    bias) -> LayerNorm over channels. `(B, h, w, D)` -> `(B, h·2^n, w·2^n, D)`."""

    def __init__(self, num_blocks: int, activation: str = "gelu", **kwargs):
        super().__init__(**kwargs)
        self.num_blocks = int(num_blocks)
        self.activation = activation
        self._act = _activation(activation)

    def build(self, input_shape):
        width = input_shape[-1]
        self.blocks = [dict(
            deconv=(self.declare(f"block_{u}/deconv/kernel", (2, 2, width, width)),
                    self.declare(f"block_{u}/deconv/bias", (width,))),
            dwconv=self.declare(f"block_{u}/dwconv/kernel", (3, 3, 1, width)),
            norm=(self.declare(f"block_{u}/norm/scale", (width,), "ones"),
                  self.declare(f"block_{u}/norm/bias", (width,))),
        ) for u in range(self.num_blocks)]

    def call(self, x):
        act = self._act
        for block in self.blocks:
            x = act(conv_transpose2d(x, *block["deconv"], strides=2))
            x = ops.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
            kernel = ops.transpose(block["dwconv"], (0, 1, 3, 2))  # (3, 3, 1, C) -> (3, 3, C, 1)
            x = ops.depthwise_conv(x, kernel, strides=1, padding="valid")
            mean = ops.mean(x, axis=-1, keepdims=True)
            variance = ops.mean(ops.square(x - mean), axis=-1, keepdims=True)
            scale, bias = block["norm"]
            x = (x - mean) * ops.rsqrt(variance + EOMT_LAYER_NORM_2D_EPSILON) * scale + bias
        return x

    def get_config(self):
        return {**super().get_config(), "num_blocks": self.num_blocks, "activation": self.activation}


@keras.saving.register_keras_serializable(package="vit_keras")
class QueryAttentionMask(keras.layers.Layer):
    """EoMT's mask-guided attention from the current mask logits `(B, h, w, Q)`: each query attends to the patches
    where its mask, resized bilinear (align_corners=False) to the patch grid, is > 0, and to every query, class and
    register token; every other token attends everywhere. Returns `(B, T, T)` booleans (T = Q + prefix + patches).

    Example:
        >>> tuple(QueryAttentionMask(num_queries=2, num_prefix_tokens=1, grid=(2, 2))(
        ...     keras.ops.ones((1, 8, 8, 2))).shape)
        (1, 7, 7)
    """

    def __init__(self, num_queries: int, num_prefix_tokens: int, grid, **kwargs):
        super().__init__(**kwargs)
        self.num_queries, self.num_prefix_tokens = int(num_queries), int(num_prefix_tokens)
        self.grid = tuple(int(g) for g in grid)

    def call(self, masks):
        batch = ops.shape(masks)[0]
        resized = resize_bilinear(masks, self.grid, align_corners=False)
        visible = ops.transpose(ops.reshape(resized > 0, (batch, -1, self.num_queries)), (0, 2, 1))
        start = self.num_queries + self.num_prefix_tokens
        total = start + self.grid[0] * self.grid[1]
        query_rows = ops.concatenate([ops.ones((batch, self.num_queries, start), "bool"), visible], axis=2)
        other_rows = ops.ones((batch, total - self.num_queries, total), "bool")
        return ops.concatenate([query_rows, other_rows], axis=1)

    def compute_output_shape(self, input_shape):
        total = self.num_queries + self.num_prefix_tokens + self.grid[0] * self.grid[1]
        return (input_shape[0], total, total)

    def get_config(self):
        return {**super().get_config(), "num_queries": self.num_queries,
                "num_prefix_tokens": self.num_prefix_tokens, "grid": list(self.grid)}


def _may_differ(shape, other) -> bool:
    """Whether two spatial shapes may differ (unknown sides: resizing to the same size is the identity)."""
    return any(a is None or b is None or a != b for a, b in zip(shape, other))


@keras.saving.register_keras_serializable(package="vit_keras")
class DPTNeck(DeclaredLayer):
    """Depth Anything's DPT neck on the backbone's maps `(B, h, w, D)` (one per read stage): reassemble (1x1
    projection to `neck_hidden_sizes[s]`, then x`factor` transposed convolution, identity, or a stride-1/factor 3x3
    convolution), a 3x3 convolution (no bias) to `fusion_hidden_size`, then the fusion blocks from the deepest map
    up (pre-activation residual units, bilinear align_corners=True upsampling to the next map's size, x2 for the
    last, a 1x1 projection). Returns the last fused map, at twice the first map's resolution."""

    def __init__(self, neck_hidden_sizes, reassemble_factors, fusion_hidden_size: int, **kwargs):
        super().__init__(**kwargs)
        self.neck_hidden_sizes = [int(s) for s in neck_hidden_sizes]
        self.reassemble_factors = [float(f) for f in reassemble_factors]
        self.fusion_hidden_size = int(fusion_hidden_size)

    def build(self, input_shape):
        width, fusion = input_shape[0][-1], self.fusion_hidden_size
        self.stages = []
        for s, (channels, factor) in enumerate(zip(self.neck_hidden_sizes, self.reassemble_factors)):
            stage = dict(projection=(self.declare(f"reassemble_{s}/projection/kernel", (1, 1, width, channels)),
                                     self.declare(f"reassemble_{s}/projection/bias", (channels,))))
            if factor > 1:
                stage["upsample"] = int(round(factor))
                stage["resize"] = (self.declare(f"reassemble_{s}/resize/kernel", (int(round(factor)),) * 2
                                                + (channels, channels)),
                                   self.declare(f"reassemble_{s}/resize/bias", (channels,)))
            elif factor < 1:
                stage["downsample"] = int(round(1 / factor))
                stage["resize"] = (self.declare(f"reassemble_{s}/resize/kernel", (3, 3, channels, channels)),
                                   self.declare(f"reassemble_{s}/resize/bias", (channels,)))
            stage["conv"] = self.declare(f"conv_{s}/kernel", (3, 3, channels, fusion))
            self.stages.append(stage)
        self.fusions = [dict(
            projection=(self.declare(f"fusion_{s}/projection/kernel", (1, 1, fusion, fusion)),
                        self.declare(f"fusion_{s}/projection/bias", (fusion,))),
            residual={r: [(self.declare(f"fusion_{s}/residual_{r}/conv_{c}/kernel", (3, 3, fusion, fusion)),
                           self.declare(f"fusion_{s}/residual_{r}/conv_{c}/bias", (fusion,)))
                          for c in (1, 2)] for r in (1, 2)},
        ) for s in range(len(self.neck_hidden_sizes))]

    def _reassemble(self, stage, x):
        x = conv2d(x, *stage["projection"])
        if "upsample" in stage:
            x = conv_transpose2d(x, *stage["resize"], strides=stage["upsample"])
        elif "downsample" in stage:
            x = conv2d(x, *stage["resize"], strides=stage["downsample"], padding=1)
        return conv2d(x, stage["conv"], padding=1)

    @staticmethod
    def _residual_unit(convs, x):
        y = x
        for kernel, bias in convs:
            y = conv2d(ops.relu(y), kernel, bias, padding=1)
        return x + y

    def call(self, maps):
        features = [self._reassemble(stage, x) for stage, x in zip(self.stages, maps)][::-1]
        fused = None
        for index, (feature, fusion) in enumerate(zip(features, self.fusions)):
            if fused is None:
                fused = feature
            else:
                residual = feature
                if _may_differ(residual.shape[1:3], fused.shape[1:3]):
                    residual = resize_bilinear(residual, ops.shape(fused)[1:3], align_corners=False)
                fused = fused + self._residual_unit(fusion["residual"][1], residual)
            fused = self._residual_unit(fusion["residual"][2], fused)
            size = ops.shape(features[index + 1])[1:3] if index + 1 < len(features) else \
                [2 * side for side in ops.shape(fused)[1:3]]
            fused = conv2d(resize_bilinear(fused, size, align_corners=True), *fusion["projection"])
        return fused

    def get_config(self):
        return {**super().get_config(), "neck_hidden_sizes": self.neck_hidden_sizes,
                "reassemble_factors": self.reassemble_factors, "fusion_hidden_size": self.fusion_hidden_size}


@keras.saving.register_keras_serializable(package="vit_keras")
class DepthHead(DeclaredLayer):
    """Depth Anything's head on the last fused map: 3x3 conv to half the width, bilinear align_corners=True to
    the images' patch grid times `patch_size` (called with the images), 3x3 conv, ReLU, 1x1 conv to one channel,
    then ReLU (`"relative"`) or sigmoid (`"metric"`) times `max_depth`. Returns `(B, H, W)`."""

    def __init__(self, head_hidden_size: int, patch_size: int, depth_estimation_type: str = "relative",
                 max_depth: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.head_hidden_size = int(head_hidden_size)
        self.patch_size = int(patch_size)
        self.depth_estimation_type = depth_estimation_type
        self.max_depth = float(max_depth)

    def build(self, x_shape, images_shape=None):
        width, hidden = x_shape[-1], self.head_hidden_size
        shapes = {1: (3, 3, width, width // 2), 2: (3, 3, width // 2, hidden), 3: (1, 1, hidden, 1)}
        self.convs = {c: (self.declare(f"conv_{c}/kernel", shape), self.declare(f"conv_{c}/bias", shape[-1:]))
                      for c, shape in shapes.items()}

    def call(self, x, images):
        size = [ops.shape(images)[axis] // self.patch_size * self.patch_size for axis in (1, 2)]
        x = conv2d(x, *self.convs[1], padding=1)
        x = resize_bilinear(x, size, align_corners=True)
        x = ops.relu(conv2d(x, *self.convs[2], padding=1))
        x = conv2d(x, *self.convs[3])
        x = ops.relu(x) if self.depth_estimation_type == "relative" else ops.sigmoid(x)
        return (x * self.max_depth)[..., 0]

    def compute_output_shape(self, x_shape, images_shape):
        return (x_shape[0], *[None if side is None else side // self.patch_size * self.patch_size
                                  for side in images_shape[1:3]])

    def get_config(self):
        return {**super().get_config(), "head_hidden_size": self.head_hidden_size, "patch_size": self.patch_size,
                "depth_estimation_type": self.depth_estimation_type,
                "max_depth": self.max_depth}


@keras.saving.register_keras_serializable(package="vit_keras")
class PatchPadding(keras.layers.Layer):
    """The image shifted down and right by `padding` zero pixels, its last `padding` rows and columns dropped: a
    patch convolution on it is ViTPose's `Conv2d(kernel = stride = patch, padding=padding)` on the image (the same
    grid when the sides are multiples of the patch and `padding` is smaller than it).

    Example:
        >>> x = keras.ops.reshape(keras.ops.arange(16, dtype="float32"), (1, 4, 4, 1))
        >>> keras.ops.convert_to_numpy(PatchPadding(1)(x))[0, :2, :2, 0].tolist()
        [[0.0, 0.0], [0.0, 0.0]]
    """

    def __init__(self, padding: int, **kwargs):
        super().__init__(**kwargs)
        self.padding = int(padding)

    def call(self, images):
        p = self.padding
        padded = ops.pad(images, [[0, 0], [p, 0], [p, 0], [0, 0]])
        return padded[:, : ops.shape(images)[1], : ops.shape(images)[2], :]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "padding": self.padding}


@keras.saving.register_keras_serializable(package="vit_keras")
class VitPoseSimpleDecoder(DeclaredLayer):
    """ViTPose's simple decoder: ReLU, bilinear x`scale_factor` (align_corners=False), 3x3 conv to the keypoints'
    heatmaps `(B, h·s, w·s, K)`."""

    def __init__(self, num_keypoints: int, scale_factor: int = 4, **kwargs):
        super().__init__(**kwargs)
        self.num_keypoints, self.scale_factor = int(num_keypoints), int(scale_factor)

    def build(self, input_shape):
        self.conv = (self.declare("conv/kernel", (3, 3, input_shape[-1], self.num_keypoints)),
                     self.declare("conv/bias", (self.num_keypoints,)))

    def call(self, x):
        size = (x.shape[1] * self.scale_factor, x.shape[2] * self.scale_factor)
        return conv2d(resize_bilinear(ops.relu(x), size, align_corners=False), *self.conv, padding=1)

    def get_config(self):
        return {**super().get_config(), "num_keypoints": self.num_keypoints, "scale_factor": self.scale_factor}


@keras.saving.register_keras_serializable(package="vit_keras")
class VitPoseClassicDecoder(DeclaredLayer):
    """ViTPose's classic decoder: twice ConvTranspose 4x4/2 (padding 1, no bias) -> BatchNorm (inference: running
    statistics) -> ReLU, then a 1x1 conv to the heatmaps `(B, 4h, 4w, K)`."""

    def __init__(self, num_keypoints: int, **kwargs):
        super().__init__(**kwargs)
        self.num_keypoints = int(num_keypoints)

    def build(self, input_shape):
        width, inner = input_shape[-1], CLASSIC_DECODER_WIDTH
        self.stages = []
        for d, channels in ((1, width), (2, inner)):
            self.stages.append((self.declare(f"deconv_{d}/kernel", (4, 4, inner, channels)),
                                [self.declare(f"norm_{d}/{name}", (inner,), init) for name, init in
                                 (("scale", "ones"), ("bias", "zeros"), ("mean", "zeros"), ("variance", "ones"))]))
        self.conv = (self.declare("conv/kernel", (1, 1, inner, self.num_keypoints)),
                     self.declare("conv/bias", (self.num_keypoints,)))

    def call(self, x):
        for kernel, (scale, bias, mean, variance) in self.stages:
            x = conv_transpose2d(x, kernel, strides=2, padding=1)
            x = ops.relu((x - mean) * ops.rsqrt(variance + BATCH_NORM_EPSILON) * scale + bias)
        return conv2d(x, *self.conv)

    def get_config(self):
        return {**super().get_config(), "num_keypoints": self.num_keypoints}
