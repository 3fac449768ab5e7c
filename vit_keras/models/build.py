"""`build_vit(config)`: the one builder, a `VisionTransformer` of the architecture a `ViTConfig` describes."""

from __future__ import annotations

import functools
import numbers
import os

import keras
import numpy as np

from vit_keras import weights as weights_lib
from vit_keras.configs import (
    ViTConfig,
)
from vit_keras.layers import ImageSizeCheck, MAPHead, PatchEncoder, Patches, ResNetStem, TokenPooling, TransformerBlock
from vit_keras.layers.dtypes import check_model_dtype, policy_for
from vit_keras.layers.flexible import FlexiblePatchEncoder, TokenMask, flexible_inputs
from vit_keras.layers.norms import norm_layer
from vit_keras.layers.pooling import POOLINGS, AttentionPoolingHead
from vit_keras.layers.rope import RotaryEmbedding2D
from vit_keras.models.inputs import INPUT_NAME
from vit_keras.vision_transformer import FINAL_NORM_LAYER, VisionTransformer

DEFAULT_LAYER_NORM_EPSILON = ViTConfig.layer_norm_epsilon


def check_head_options(include_top, pooling, classes, classifier_activation, config: ViTConfig | None):
    """Refuse head options that cannot make a model; `config` None leaves the checks that need the architecture
    (whether it has a class token, an attention-pooling head) to a later call with it."""
    if include_top:
        if pooling is not None:
            raise ValueError(
                f"`pooling={pooling!r}` applies to include_top=False only (as in keras.applications); with "
                f"include_top=True the head reads what the architecture pools"
                f"{'' if config is None else f' ({config.global_pool!r})'}. Drop "
                "`pooling`, or pass include_top=False."
            )
        if isinstance(classes, bool) or not isinstance(classes, numbers.Integral) or classes < 1:
            raise ValueError(f"`classes` must be a positive integer when include_top=True, got {classes!r}.")
        try:
            keras.activations.get(classifier_activation)
        except (ValueError, TypeError) as error:
            raise ValueError(
                f"Unknown `classifier_activation` {classifier_activation!r}; use 'softmax', 'sigmoid', "
                "None (logits) or a callable."
            ) from error
        return
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(f"`pooling` must be one of {POOLINGS} or None, got {pooling!r}.")
    if config is None:
        return
    if pooling == "token" and not config.class_token:
        raise ValueError("pooling='token' needs a class token, but classifier='gap' has none; use pooling='avg'.")
    if pooling == "map" and config.global_pool != "map":
        raise ValueError("pooling='map' is the checkpoint's own attention-pooling head, which this architecture does "
                         "not have (global_pool is not 'map'); use 'token', 'avg' or 'max'.")


def head_token_count(config: ViTConfig, include_top, pooling) -> int:
    """How many leading tokens the head reads: the class token, and the distillation token of DeiT."""
    reads = config.global_pool if include_top else pooling
    if reads != "token":
        what = f"include_top=True with classifier {config.global_pool!r}" if include_top else f"pooling={pooling!r}"
        raise ValueError(
            f"head_tokens_only=True needs a head that reads the class token alone, but {what} reads every token. "
            "Use it with a class-token classifier (classifier='token', or include_top=False with pooling='token'), "
            "or drop it."
        )
    return config.num_class_tokens + int(config.distilled)


def check_normalization(normalization, source=None):
    """None (the paper's [-1, 1]), or per-channel `(mean, std)` of [0, 1] images, as timm's `pretrained_cfg`, with
    finite means and finite positive stds: a NaN or infinite value would make every output NaN or wrong, silently.

    `source`: the checkpoint directory whose config.json `pretrained_cfg` gave the values, named in the error.

    Example:
        >>> check_normalization(((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))
        ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
        >>> check_normalization(((0.5, float("nan"), 0.5), (0.5,) * 3))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `normalization` mean[1] (channel 1) is nan; each channel's mean must be a finite number. ...
    """
    if normalization is None:
        return None
    if source is None:
        where, fix = "`normalization`", "pass finite means and finite positive stds, e.g. ((0.5,)*3, (0.5,)*3)"
    else:
        where = f"{os.path.join(source, weights_lib.timm.CONFIG_NAME)!r} pretrained_cfg"
        fix = ("correct it in that file (timm's ImageNet values are mean (0.485, 0.456, 0.406), std (0.229, 0.224, "
               "0.225))")
    try:
        mean, std = normalization
        mean, std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where} must be (mean, std) per channel, e.g. ((0.5,)*3, (0.5,)*3), got "
                         f"{normalization!r}.") from error
    if len(mean) != len(std) or not mean:
        raise ValueError(f"{where} needs as many means as stds, got {normalization!r}.")
    for name, values, valid, rule in (("mean", mean, np.isfinite, "a finite number"),
                                      ("std", std, lambda s: np.isfinite(s) and s > 0, "a finite number > 0")):
        for channel, value in enumerate(values):
            if not valid(value):
                raise ValueError(f"{where} {name}[{channel}] (channel {channel}) is {value}; each channel's {name} "
                                 f"must be {rule}. Got {name} {values}; {fix}.")
    return mean, std


def _preprocessing_layer(normalization, channels, dtype=None):
    normalization = check_normalization(normalization)
    dtype = policy_for(dtype, "rescaling")
    if normalization is None or (set(normalization[0]) == {0.5} and set(normalization[1]) == {0.5}):
        return keras.layers.Rescaling(1.0 / 127.5, offset=-1.0, dtype=dtype, name="rescaling")
    mean, std = normalization
    if len(mean) != channels:
        raise ValueError(f"The checkpoint's normalisation has {len(mean)} channels but the input has {channels}.")
    # (x / 255 - mean) / std as one multiply-add per channel.
    return keras.layers.Rescaling([1.0 / (255.0 * s) for s in std], offset=[-m / s for m, s in zip(mean, std)],
                                  dtype=dtype, name="rescaling")


def _input_conditioner(input_normalization, channels, dtype=None):
    """`(x - mean) / std` of [0, 1] images, part of the architecture (RADIO's input conditioner), as one
    multiply-add per channel."""
    mean, std = input_normalization
    if len(mean) != channels:
        raise ValueError(f"`input_normalization` has {len(mean)} channels but the input has {channels}.")
    return keras.layers.Rescaling([1.0 / s for s in std], offset=[-m / s for m, s in zip(mean, std)],
                                  dtype=policy_for(dtype, "input_conditioner"), name="input_conditioner")


def _rope_tables(config: ViTConfig, patches, grid=None):
    """The RoPE tables every block takes (None without RoPE), from a `RotaryEmbedding2D` layer named `rope`.

    A fixed-size model's tables are constants of its grid; a model of any size computes them from the patch grid
    `patches` (batch, H, W, C) at run time; a flexible model, from each image's `grid` (batch, 2) at the tokens of
    its `patches` (batch, N, ...). `"mixed"` gives one table per block (its learned per-layer frequencies).
    """
    if config.rope is None:
        return None
    layer = RotaryEmbedding2D(
        config.hidden_size // config.num_heads,
        config.rope,
        grid_size=config.image_grid,  # the images' grid (the position table's may differ: bilinear_crop)
        temperature=config.rope_temperature,
        grid_offset=config.rope_grid_offset,
        ref_grid_size=config.rope_ref_grid_size,
        grid_indexing=config.rope_grid_indexing,
        depth=config.num_layers if config.rope == "mixed" else None,
        num_heads=config.num_heads if config.rope == "mixed" else None,
        name="rope",
    )
    return layer(patches) if grid is None else layer(patches, grid=grid)


# The layer of each attention-pooling head kind (`ViTConfig.map_head`).
POOLING_HEAD_LAYERS = {"big_vision": MAPHead, "aimv2": AttentionPoolingHead}


def _attention_pooling_head(config: ViTConfig, dtype):
    """The architecture's attention-pooling head, taking its `PoolingHeadConfig` whole; named `MAPHead_0` whichever
    it is."""
    head = config.pooling_head
    return POOLING_HEAD_LAYERS[head.kind](head=head, dtype=dtype, name="MAPHead_0")


def build_vit(
    config: ViTConfig,
    *,
    include_top: bool = True,
    pooling=None,
    classes: int = 1000,
    classifier_activation="softmax",
    include_preprocessing: bool = True,
    normalization=None,
    input_tensor=None,
    channels: int = 3,
    name: str | None = None,
    input_size=None,
    dtype=None,
    head_tokens_only: bool = False,
    flexible: bool = False,
):
    """The one builder: a Keras functional model of the architecture `config` describes.

    A config with `image_size=None` gives a model that takes any image size whose sides are multiples of
    `config.stride` (`input_size`, e.g. `(224, None)`, may pin one side of its input).

    Layers are named as vit_jax's parameters (`patch_encoder`, `Transformer_encoderblock_{i}`, `encoder_norm`,
    `head`); the family's extra layers are `pre_norm`, `fc_norm`, `MAPHead_0` and `head_dist`. The config itself
    is the model's own (`VisionTransformer.vit_config`, saved with it), so a saved model carries its architecture.

    `dtype` (see `ViT`) reaches every layer: a `DTypePolicyMap` is read by layer path, so the layers it names as
    quantized build their quantized variables; the head stays float32 unless the map names it.

    `head_tokens_only=True` (see `ViT`) runs the last block for the class (and distillation) token only.

    `flexible=True` (see `ViT`) gives a native-aspect-ratio ("NaFlex") model whose input is a dict of `patches`,
    `grid` and `mask` (`vit_keras.layers.flexible`).

    Example:
        >>> from vit_keras.configs import VARIANTS
        >>> model = build_vit(VARIANTS["Ti/16"].replace(image_size=32), classes=10)
        >>> model.output_shape
        (None, 10)
        >>> build_vit(VARIANTS["Ti/16"].replace(image_size=None), include_top=False).output_shape
        (None, None, 192)
    """
    check_head_options(include_top, pooling, classes, classifier_activation, config)
    head_tokens = head_token_count(config, include_top, pooling) if head_tokens_only else None
    dtype = check_model_dtype(dtype)
    token_mask = None
    if flexible:
        inputs, x, token_mask, rope = _flexible_stem(config, input_tensor, input_size, channels, include_preprocessing,
                                               normalization, dtype)
    else:
        inputs, x, rope = _image_stem(config, input_tensor, input_size, channels, include_preprocessing,
                                      normalization, dtype)

    x = _encoder(config, x, dtype, head_tokens, token_mask, rope)
    pooling = config.global_pool if include_top else pooling
    distilled = None
    if pooling is not None:
        x, distilled = _pooled(config, x, pooling, include_top, dtype, token_mask)
    if include_top:
        x = _head(config, x, distilled, classes, classifier_activation, dtype)
    model = VisionTransformer(inputs, x, name=name or "vit")
    model.vit_config = config
    return model


def _norm(config: ViTConfig, dtype, name):
    return norm_layer(config.norm, config.layer_norm_epsilon, dtype=policy_for(dtype, name), name=name)


def _encoder(config: ViTConfig, x, dtype, head_tokens, token_mask, rope):
    """The pre-norm (if any), the blocks (the last one for `head_tokens` only, if given) and the final norm."""
    if config.pre_norm:
        x = _norm(config, dtype, "pre_norm")(x)
    block = config.block
    for i in range(config.num_layers):
        x = TransformerBlock(
            block=block,
            query_tokens=head_tokens if i == config.num_layers - 1 else None,
            dtype=dtype,
            name=f"Transformer_encoderblock_{i}",
        )(x, **({} if token_mask is None else {"token_mask": token_mask}),
          **({} if rope is None else {"rope": rope[i] if isinstance(rope, list) else rope}))
    if config.final_norm and not config.fc_norm:
        x = _norm(config, dtype, FINAL_NORM_LAYER)(x)
    return x


def _pooled(config: ViTConfig, x, pooling, include_top, dtype, token_mask):
    """One vector per image: the MAP head, or token / mean / max pooling; then fc_norm and pre_logits. With a DeiT
    head, also its second input: the distillation token (else None)."""
    masked = {} if token_mask is None else {"token_mask": token_mask}
    tokens = x
    if pooling == "map":
        x = _attention_pooling_head(config, dtype)(x, **masked)
    elif pooling == "token" and config.distilled and not include_top:
        x = TokenPooling("distilled", num_prefix_tokens=config.num_prefix_tokens,
                         dtype=policy_for(dtype, "pool"), name="pool")(x)
    else:
        # Several class tokens (RADIO) pool to their concatenation: RADIO's summary.
        x = TokenPooling(pooling, num_prefix_tokens=config.num_prefix_tokens,
                         num_tokens=config.num_class_tokens if pooling == "token" else 1,
                         dtype=policy_for(dtype, "pool"), name="pool")(x, **masked)
    distilled = None
    if include_top and config.distilled:
        distilled = TokenPooling("token", num_prefix_tokens=config.num_prefix_tokens, token_index=1,
                                 dtype=policy_for(dtype, "pool_dist"), name="pool_dist")(tokens)
        if config.fc_norm:
            raise ValueError("A distilled model with fc_norm is not a published architecture.")
    if config.fc_norm:
        x = _norm(config, dtype, "fc_norm")(x)
    if config.representation_size is not None:
        x = keras.layers.Dense(config.representation_size, activation="tanh",
                               dtype=policy_for(dtype, "pre_logits"), name="pre_logits")(x)
    return x, distilled


def _head(config: ViTConfig, x, distilled, classes, classifier_activation, dtype):
    """The classifier (float32 unless `dtype` names it): DeiT's averages its class- and distillation-token heads
    (`distilled`: the distillation token, else None)."""
    float32 = functools.partial(policy_for, dtype, fallback="float32")
    head = keras.layers.Dense(classes, kernel_initializer="zeros", dtype=float32("head"), name="head")
    if distilled is not None:
        head_dist = keras.layers.Dense(classes, kernel_initializer="zeros", dtype=float32("head_dist"),
                                       name="head_dist")
        # DeiT at inference: the mean of the class-token and distillation-token heads.
        x = keras.layers.Average(dtype=float32("head_average"), name="head_average")([head(x),
                                                                                      head_dist(distilled)])
    else:
        x = head(x)
    if classifier_activation not in (None, "linear"):
        x = keras.layers.Activation(classifier_activation, dtype=float32("predictions"), name="predictions")(x)
    return x


def _encoder_arguments(config: ViTConfig, dtype) -> dict:
    """The `patch_encoder` layer's arguments (`PatchEncoder`, or `FlexiblePatchEncoder` for a NaFlex model): its
    `PatchConfig`, whole."""
    return dict(patch=config.patch, dtype=dtype, name="patch_encoder")


def _image_stem(config: ViTConfig, input_tensor, input_size, channels, include_preprocessing, normalization, dtype):
    """An image model's input, its embedded tokens (normalisation, the hybrid's ResNet stem, patches, encoder) and
    the RoPE tables of its patch grid (None without RoPE)."""
    height, width = (None, None) if config.dynamic else config.image_size
    if input_tensor is None:
        inputs = keras.Input(shape=(*(input_size or (height, width)), channels), name=INPUT_NAME)
        x = inputs
    else:
        inputs = keras.utils.get_source_inputs(input_tensor)
        x = input_tensor
    if include_preprocessing:
        x = _preprocessing_layer(normalization, channels, dtype)(x)
    if config.input_normalization is not None:
        x = _input_conditioner(config.input_normalization, channels, dtype)(x)
    if config.resnet is not None:
        if config.dynamic:
            # The stem's SAME padding would round an odd size up; the whole stride must divide the image.
            x = ImageSizeCheck(config.stride, f"the hybrid's total stride {config.stride} (ResNet stem stride x "
                               f"patch_size)", name="image_size_check")(x)
        x = ResNetStem(config.resnet.num_layers, config.resnet.width_factor, dtype=dtype, name="resnet")(x)
    # A table kept at its own grid (pos_grid: any image size, or bilinear_crop) is resampled to the patch grid.
    x = Patches(config.patch_size, flatten=config.pos_grid is None, dtype=policy_for(dtype, "patches"),
                name="patches")(x)
    rope = _rope_tables(config, x)
    x = PatchEncoder(**_encoder_arguments(config, dtype))(x)
    return inputs, x, rope


def _flexible_stem(config: ViTConfig, input_tensor, input_size, channels, include_preprocessing, normalization,
                   dtype):
    """A NaFlex model's inputs (`patches`, `grid`, `mask`), its embedded tokens, their validity (`TokenMask`) and
    each image's RoPE tables (None without RoPE)."""
    if input_tensor is not None or input_size is not None:
        raise ValueError("A flexible (NaFlex) model takes a dict of `patches`, `grid` and `mask`, not images: drop "
                         "`input_tensor`, `input_shape` and `image_size`.")
    if config.resnet is not None:
        raise ValueError("flexible=True cuts the images into patches outside the model; a hybrid's ResNet stem needs "
                         "whole images. Use a plain ViT, or flexible=False.")
    inputs = flexible_inputs(config.patch_size * config.patch_size * channels)
    token_mask = TokenMask(config.num_prefix_tokens, name="token_mask")(inputs["mask"])
    patches = inputs["patches"]
    if include_preprocessing:
        # Each patch holds P·P pixels of `channels` values, (row, column, channel) order: the per-channel
        # normalisation repeats along the flattened patch.
        mean, std = check_normalization(normalization) or ((0.5,) * channels, (0.5,) * channels)
        repeat = config.patch_size * config.patch_size
        patches = _preprocessing_layer((tuple(mean) * repeat, tuple(std) * repeat), len(mean) * repeat, dtype)(patches)
    if config.input_normalization is not None:
        mean, std = config.input_normalization
        repeat = config.patch_size * config.patch_size
        patches = _input_conditioner((tuple(mean) * repeat, tuple(std) * repeat), len(mean) * repeat, dtype)(patches)
    x = FlexiblePatchEncoder(**_encoder_arguments(config, dtype))([patches, inputs["grid"], inputs["mask"]])
    return inputs, x, token_mask, _rope_tables(config, inputs["mask"], inputs["grid"])
