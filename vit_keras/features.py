"""Dense features: the patch tokens of chosen encoder blocks as feature maps, for segmentation, depth, detection
and correspondence heads (what timm's `forward_intermediates` and transformers' `Dinov2Backbone` /
`DINOv3ViTBackbone` return).

`intermediate_model(model, indices)` returns a Keras model on the same inputs (and the same weights) whose outputs
are the chosen blocks' patch tokens, prefix tokens (class token, registers) dropped, reshaped to the patch grid:

- `indices` takes timm's forms — an int n: the last n blocks; a list of 0-based block indices, negatives counted
  from the end — or transformers' stage names: `"stem"` (the tokens that enter the first block: the embeddings, after
  the pre-norm where the model has one) and `"stageK"` (the output of block K, 1-based: `"stage1"` is block 0).
- `norm=True` puts each map through the model's final norm (timm's `norm=True`, the backbones' `apply_layernorm`).
- `output_format`: `"NHWC"` (Keras' convention), `"NCHW"` (timm's and transformers'), or `"NLC"` (tokens, not
  reshaped).
- Blocks after the last one asked for are not part of the new model, so they are not computed.

A flexible (NaFlex) model's images each have their own grid: its feature model returns `"NLC"` tokens in the
order of the `patches` input (padding included, as its `mask` says); `naflex_maps` cuts them into one map per image.

Example:
    >>> model = vit_keras.ViT(image_size=(32, 48), patch_size=8, hidden_size=48, num_layers=3, num_heads=3,
    ...                       mlp_dim=96, include_top=False)
    >>> features = intermediate_model(model, [0, -1], norm=True)
    >>> [tuple(x.shape) for x in features(np.zeros((2, 32, 48, 3), "float32"))]
    [(2, 4, 6, 48), (2, 4, 6, 48)]
    >>> feature_names(model, ["stem", "stage2"])
    ['stem', 'block1']
"""

from __future__ import annotations

import re

import keras
import numpy as np
from keras import ops

from vit_keras.vision_transformer import VisionTransformer, config_of

OUTPUT_FORMATS = ("NHWC", "NCHW", "NLC")
STEM = "stem"
_STAGE = re.compile(r"stage([0-9]+)\Z")


def _is_flexible(model) -> bool:
    return isinstance(model.input, dict)


def resolve_indices(indices, num_layers: int) -> list[int]:
    """The sorted 0-based block indices `indices` asks for; -1 stands for the stem.

    Example:
        >>> resolve_indices(2, 12), resolve_indices([0, -1], 12), resolve_indices(["stem", "stage12"], 12)
        ([10, 11], [0, 11], [-1, 11])
    """
    valid = (f"this model has {num_layers} blocks: an int n in 1..{num_layers} (the last n), block indices "
             f"0..{num_layers - 1} (or -{num_layers}..-1 from the end), or stage names 'stem', 'stage1'..'stage"
             f"{num_layers}'")
    if isinstance(indices, (bool, np.bool_)) or indices is None:
        raise ValueError(f"indices={indices!r}: {valid}.")
    if isinstance(indices, (int, np.integer)):
        if not 1 <= int(indices) <= num_layers:
            raise ValueError(f"indices={int(indices)} asks for the last {int(indices)} blocks; {valid}.")
        return list(range(num_layers - int(indices), num_layers))
    if isinstance(indices, str):
        indices = [indices]
    if isinstance(indices, (set, frozenset, dict)):
        raise ValueError(f"indices={indices!r} is a {type(indices).__name__}, whose order is not defined; pass a list "
                         f"such as {sorted(indices, key=str)!r}.")
    indices = list(indices)
    if not indices:
        raise ValueError(f"indices is empty; {valid}.")
    kinds = {isinstance(i, str) for i in indices}
    if len(kinds) > 1:
        raise ValueError(f"indices={indices!r} mixes block indices and stage names; use one form: {valid}.")
    resolved = [_stage_index(i, num_layers, valid) if isinstance(i, str) else _block_index(i, num_layers, valid)
                for i in indices]
    duplicated = sorted({i for i in resolved if resolved.count(i) > 1})
    if duplicated:
        raise ValueError(f"indices={indices!r} names block(s) {duplicated} more than once; give each once.")
    return sorted(resolved)


def _block_index(index, num_layers: int, valid: str) -> int:
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
        raise ValueError(f"Block index {index!r} is not an integer; {valid}.")
    if not -num_layers <= int(index) < num_layers:
        raise ValueError(f"Block index {int(index)} is out of range; {valid}.")
    return int(index) % num_layers


def _stage_index(name: str, num_layers: int, valid: str) -> int:
    if name == STEM:
        return -1
    match = _STAGE.match(name)
    if match is None or not 1 <= int(match.group(1)) <= num_layers:
        raise ValueError(f"Stage {name!r} does not exist; {valid}.")
    return int(match.group(1)) - 1


def feature_names(model, indices) -> list[str]:
    """The names of the maps `intermediate_model(model, indices)` returns, in its order: `"stem"` or `"block<i>"`
    (0-based, as timm numbers `model.blocks`).

    Example:
        >>> feature_names(vit_keras.ViTTi16(image_size=32, include_top=False), 3)
        ['block9', 'block10', 'block11']
    """
    return [STEM if i < 0 else f"block{i}" for i in resolve_indices(indices, config_of(model).num_layers)]


@keras.saving.register_keras_serializable(package="vit_keras")
class TokensToMap(keras.layers.Layer):
    """Drop the first `num_prefix_tokens` tokens and lay the rest out on the patch grid: `(B, 1 + H·W, C)` ->
    `(B, H, W, C)` (row-major, as the patches were cut), `(B, C, H, W)` or `(B, H·W, C)`.

    The grid is read from the images the model was given (`rows = height // stride`), so any image size works.

    Example:
        >>> layer = TokensToMap(num_prefix_tokens=1, stride=8, output_format="NCHW")
        >>> tuple(layer(np.zeros((2, 7, 5), "float32"), np.zeros((2, 16, 24, 3), "float32")).shape)
        (2, 5, 2, 3)
    """

    def __init__(self, num_prefix_tokens: int, stride: int, output_format: str = "NHWC", **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.stride = int(stride)
        self.output_format = output_format

    def call(self, tokens, images=None):
        patches = tokens[:, self.num_prefix_tokens:]
        if self.output_format == "NLC":
            return patches
        rows, cols = ops.shape(images)[1] // self.stride, ops.shape(images)[2] // self.stride
        maps = ops.reshape(patches, (ops.shape(patches)[0], rows, cols, ops.shape(patches)[-1]))
        return ops.transpose(maps, (0, 3, 1, 2)) if self.output_format == "NCHW" else maps

    def compute_output_shape(self, tokens_shape, images_shape=None):
        batch, count, channels = tokens_shape
        if self.output_format == "NLC":
            return (batch, None if count is None else count - self.num_prefix_tokens, channels)
        rows, cols = (None if side is None else side // self.stride for side in images_shape[1:3])
        return (batch, channels, rows, cols) if self.output_format == "NCHW" else (batch, rows, cols, channels)

    def get_config(self):
        return {**super().get_config(), "num_prefix_tokens": self.num_prefix_tokens, "stride": self.stride,
                "output_format": self.output_format}


@keras.saving.register_keras_serializable(package="vit_keras")
class PrefixTokens(keras.layers.Layer):
    """The first `num_prefix_tokens` tokens (class token, distillation token, registers): `(B, T, C)` -> `(B, n, C)`.

    Example:
        >>> tuple(PrefixTokens(5)(np.zeros((2, 21, 8), "float32")).shape)
        (2, 5, 8)
    """

    def __init__(self, num_prefix_tokens: int, **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, tokens):
        return tokens[:, :self.num_prefix_tokens]

    def compute_output_shape(self, tokens_shape):
        return (tokens_shape[0], self.num_prefix_tokens, tokens_shape[2])

    def get_config(self):
        return {**super().get_config(), "num_prefix_tokens": self.num_prefix_tokens}


def _block_output(model, index: int):
    """The symbolic tokens after block `index` (-1: the tokens entering block 0)."""
    blocks = _vision_transformer(model).blocks
    if index < 0:
        inputs = blocks[0].input  # the tokens, then a RoPE model's tables or a NaFlex model's token mask
        return inputs[0] if isinstance(inputs, (list, tuple)) else inputs
    block = blocks[index]
    if block.query_tokens is not None:
        raise ValueError(f"{model.name!r} computes its last block for its head tokens only (head_tokens_only=True), "
                         f"so block {index} has no patch tokens; rebuild it with head_tokens_only=False.")
    return block.output


def _final_norm(model):
    norm = _vision_transformer(model).final_norm_layer
    if norm is None:
        config = config_of(model)
        where = ("its final norm is applied after pooling (fc_norm)" if config.fc_norm
                 else "it has no norm after the blocks (final_norm=False)")
        raise ValueError(f"norm=True puts each map through the model's final norm over the tokens, and "
                         f"{model.name!r} has none: {where}. Pass norm=False.")
    return norm


def _vision_transformer(model) -> VisionTransformer:
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"{getattr(model, 'name', model)!r} is not a vit_keras model; build it with vit_keras.ViT "
                         "or vit_keras.from_pretrained.")
    return model


def intermediate_model(model, indices=1, *, norm: bool = False, output_format: str = "NHWC",
                       return_prefix_tokens: bool = False, name: str | None = None) -> keras.Model:
    """A Keras model on `model`'s inputs whose outputs are the chosen blocks' patch tokens as feature maps.

    Args:
        model: a model built by vit_keras (`vit_keras.ViT`, a variant, `from_pretrained`), with or without its head.
        indices: an int n (the last n blocks), a list of 0-based block indices (negatives count from the end), or
            stage names (`"stem"`, `"stage1"`..`"stageN"`, transformers' numbering: stage K is block K-1).
        norm: put each map through the model's final norm (`encoder_norm`), as timm's `norm=True` and the
            transformers backbones' `apply_layernorm=True` do.
        output_format: `"NHWC"`, `"NCHW"` or `"NLC"` (the patch tokens unreshaped; the only form for a flexible
            model, whose images each have their own grid: see `naflex_maps`).
        return_prefix_tokens: each output is `(map, prefix_tokens)` with the prefix tokens `(B, n, C)` (class
            token, distillation token, registers) instead of the map alone.
        name: the new model's name (default: `<model name>_features`).

    Returns a `keras.Model` sharing `model`'s layers and weights, with one output per requested block in block
    order (`feature_names(model, indices)` names them). Blocks after the last one asked for are not computed.

    Example:
        >>> model = vit_keras.ViTTi16(image_size=32, include_top=False)
        >>> features = intermediate_model(model, ["stem", "stage12"], output_format="NCHW")
        >>> [tuple(x.shape) for x in features.outputs]
        [(None, 192, 2, 2), (None, 192, 2, 2)]
        >>> intermediate_model(model, [12])
        Traceback (most recent call last):
        ValueError: Block index 12 is out of range; this model has 12 blocks: ...
    """
    config = config_of(model)
    for flag, value in (("norm", norm), ("return_prefix_tokens", return_prefix_tokens)):
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{flag}={value!r}: pass True or False.")
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format={output_format!r}: use one of {OUTPUT_FORMATS}.")
    flexible = _is_flexible(model)
    if flexible and output_format != "NLC":
        raise ValueError(f"{model.name!r} is a flexible (NaFlex) model: its images each have their own grid, so its "
                         "features come as tokens (output_format='NLC'); cut them into maps per image with "
                         "vit_keras.features.naflex_maps(tokens, grid).")
    chosen = resolve_indices(indices, config.num_layers)
    final_norm = _final_norm(model) if norm else None
    images = None if flexible else model.input
    outputs = []
    for index in chosen:
        tokens = _block_output(model, index)
        if final_norm is not None:
            tokens = final_norm(tokens)
        label = STEM if index < 0 else f"block{index}"
        feature_map = TokensToMap(config.num_prefix_tokens, config.stride, output_format,
                                  name=f"{label}_map")(tokens, images)
        if return_prefix_tokens:
            outputs.append((feature_map, PrefixTokens(config.num_prefix_tokens, name=f"{label}_prefix")(tokens)))
        else:
            outputs.append(feature_map)
    return keras.Model(model.inputs if flexible else model.input, outputs, name=name or f"{model.name}_features")


def naflex_maps(tokens, grid) -> list[np.ndarray]:
    """Cut a flexible model's `"NLC"` features `(B, N, C)` into one `(rows, cols, C)` map per image, by its grid.

    Example:
        >>> maps = naflex_maps(np.zeros((2, 6, 4)), [[2, 3], [1, 2]])
        >>> [m.shape for m in maps]
        [(2, 3, 4), (1, 2, 4)]
    """
    tokens, grid = np.asarray(tokens), np.asarray(grid)
    if tokens.ndim != 3 or grid.shape != (tokens.shape[0], 2):
        raise ValueError(f"naflex_maps takes tokens (B, N, C) and their grid (B, 2); got {tokens.shape} and "
                         f"{grid.shape}.")
    maps = []
    for image, (rows, cols) in enumerate(grid.tolist()):
        if rows * cols > tokens.shape[1]:
            raise ValueError(f"Image {image}'s grid {rows}x{cols} holds more patches than the {tokens.shape[1]} "
                             "tokens given.")
        maps.append(tokens[image, :rows * cols].reshape(rows, cols, tokens.shape[2]))
    return maps
