"""`ViT()` and the paper's named variants as keras.applications-style functional models."""

from __future__ import annotations

import functools
import importlib.resources
import numbers
import os

import keras
import numpy as np

from vit_keras import weights as weights_lib
from vit_keras.configs import (
    ARCHITECTURAL_POS_INTERPOLATIONS,
    DEFAULT_IMAGE_SIZE,
    VARIANTS,
    ViTConfig,
    check_hw,
    check_positive_int,
    config_fields,
    translate_aliases,
)
from vit_keras.layers import ImageSizeCheck, MAPHead, PatchEncoder, Patches, ResNetStem, TokenPooling, TransformerBlock
from vit_keras.layers.dtypes import check_model_dtype, policy_for
from vit_keras.layers.flexible import FlexiblePatchEncoder, TokenMask, flexible_inputs
from vit_keras.layers.norms import norm_layer
from vit_keras.layers.pooling import POOLINGS, AttentionPoolingHead
from vit_keras.layers.rope import RotaryEmbedding2D
from vit_keras.model_class import VisionTransformer
from vit_keras.model_config import config_of  # noqa: F401 (re-exported: vit_keras.models.config_of)
from vit_keras.preprocessing import preprocess_input  # noqa: F401 (re-exported: vit_keras.models.preprocess_input)

DEFAULT_LAYER_NORM_EPSILON = ViTConfig.layer_norm_epsilon
INPUT_NAME = "images"


class _DefaultSize:
    """The `image_size` a constructor gets when none is passed: `input_shape`'s, or 224x224 (None means any size)."""

    def __repr__(self):
        return "224"


DEFAULT_SIZE = _DefaultSize()
def _refuse_channels_first(label, shape):
    """vit_keras models take channels-last images whatever `keras.config.image_data_format()` says (every layer
    inside is channels-last); a (channels, height, width) shape gets an error, not a model of 3-row images."""
    shape = tuple(shape)
    if len(shape) == 3 and shape[0] in (1, 3) and shape[-1] not in (1, 3):
        channels, height, width = shape
        raise ValueError(
            f"`{label}` gives the shape {shape}, which looks channels-first (channels, height, width). vit_keras "
            f"models take channels-last images (height, width, channels) whatever keras.config.image_data_format() "
            f"says (now {keras.config.image_data_format()!r}): pass {(height, width, channels)} and feed NHWC "
            "images, e.g. np.transpose(images, (0, 2, 3, 1)), or keras.layers.Permute((2, 3, 1)) in front of the "
            "model."
        )


def _resolve_input_shape(image_size, input_shape, input_tensor, default=(DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)):
    """One (height, width, channels) from the three ways keras.applications users describe the input.

    A height or width of None (`image_size=None`, `input_shape=(None, None, 3)`, or an `input_tensor` of unknown
    size) that no other argument fixes means a model that takes any image size.
    """
    candidates = []
    any_size = image_size is None
    if image_size is not None and image_size is not DEFAULT_SIZE:
        candidates.append(("image_size", (*check_hw("image_size", image_size), None)))
    if input_shape is not None:
        if not isinstance(input_shape, list | tuple) or len(input_shape) != 3:
            raise ValueError(
                f"`input_shape` must be (height, width, channels), e.g. (224, 224, 3), got {input_shape!r}."
            )
        _refuse_channels_first("input_shape", input_shape)
        candidates.append(("input_shape", tuple(input_shape)))
        any_size = any_size or input_shape[0] is None or input_shape[1] is None
    if input_tensor is not None:
        shape = tuple(input_tensor.shape)
        if len(shape) != 4:
            raise ValueError(
                f"`input_tensor` must be a 4-D (batch, height, width, channels) tensor, got shape {shape}."
            )
        _refuse_channels_first("input_tensor", shape[1:])
        candidates.append(("input_tensor", shape[1:]))
        any_size = any_size or shape[1] is None or shape[2] is None
    height = width = channels = None
    for label, (h, w, c) in candidates:
        for dim, value, current in (("height", h, height), ("width", w, width), ("channels", c, channels)):
            if value is not None and current is not None and value != current[1]:
                raise ValueError(
                    f"`{label}` gives {dim} {value} but `{current[0]}` gives {current[1]}; pass only one of "
                    "`image_size`, `input_shape` and `input_tensor`, or make them agree."
                )
        height = (label, h) if h is not None and height is None else height
        width = (label, w) if w is not None and width is None else width
        channels = (label, c) if c is not None and channels is None else channels
    channels = channels[1] if channels else 3
    if isinstance(channels, bool) or not isinstance(channels, numbers.Integral) or channels < 1:
        raise ValueError(f"The number of channels must be a positive int, got {channels!r}.")
    if any_size and (height is None or width is None):
        sides = [None if side is None else check_positive_int("image size", side[1]) for side in (height, width)]
        return sides[0], sides[1], int(channels)
    height = height[1] if height else default[0]
    width = width[1] if width else default[1]
    check_hw("image size", (height, width))
    return int(height), int(width), int(channels)


def _check_head_options(include_top, pooling, classes, classifier_activation, config: ViTConfig):
    if include_top:
        if pooling is not None:
            raise ValueError(
                f"`pooling={pooling!r}` applies to include_top=False only (as in keras.applications); with "
                f"include_top=True the head reads what the architecture pools ({config.global_pool!r}). Drop "
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
    if pooling == "token" and not config.class_token:
        raise ValueError("pooling='token' needs a class token, but classifier='gap' has none; use pooling='avg'.")
    if pooling == "map" and config.global_pool != "map":
        raise ValueError("pooling='map' is the checkpoint's own attention-pooling head, which this architecture does "
                         "not have (global_pool is not 'map'); use 'token', 'avg' or 'max'.")


def _head_tokens(config: ViTConfig, include_top, pooling) -> int:
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


def _attention_pooling_head(config: ViTConfig, dtype):
    """The architecture's attention-pooling head (`config.map_head`), named `MAPHead_0` whichever it is."""
    if config.map_head == "aimv2":
        return AttentionPoolingHead(config.num_heads, qkv_bias=config.qkv_bias, dtype=dtype, name="MAPHead_0")
    return MAPHead(config.map_num_heads or config.num_heads, config.map_mlp_dim or config.mlp_dim,
                   layer_norm_epsilon=config.layer_norm_epsilon, activation=config.activation, dtype=dtype,
                   name="MAPHead_0")


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
    is stored in the `patch_encoder` layer's config, so a saved model carries its architecture (`config_of`).

    `dtype` (see `ViT`) reaches every layer: a `DTypePolicyMap` is read by layer path, so the layers it names as
    quantized build their quantized variables; the head stays float32 unless the map names it.

    `head_tokens_only=True` (see `ViT`) runs the last block for the class (and distillation) token only.

    `flexible=True` (see `ViT`) gives a native-aspect-ratio ("NaFlex") model whose input is a dict of `patches`,
    `grid` and `mask` (`vit_keras.layers.flexible`).

    Example:
        >>> model = build_vit(VARIANTS["Ti/16"].replace(image_size=32), classes=10)
        >>> model.output_shape
        (None, 10)
        >>> build_vit(VARIANTS["Ti/16"].replace(image_size=None), include_top=False).output_shape
        (None, None, 192)
    """
    _check_head_options(include_top, pooling, classes, classifier_activation, config)
    head_tokens = _head_tokens(config, include_top, pooling) if head_tokens_only else None
    dtype = check_model_dtype(dtype)
    token_mask = None
    if flexible:
        inputs, x, token_mask, rope = _flexible_stem(config, input_tensor, input_size, channels, include_preprocessing,
                                               normalization, dtype)
    else:
        inputs, x, rope = _image_stem(config, input_tensor, input_size, channels, include_preprocessing,
                                      normalization, dtype)

    def norm(name):
        return norm_layer(config.norm, config.layer_norm_epsilon, dtype=policy_for(dtype, name), name=name)

    if config.pre_norm:
        x = norm(name="pre_norm")(x)
    for i in range(config.num_layers):
        x = TransformerBlock(
            config.num_heads,
            config.mlp_dim,
            dropout_rate=config.dropout_rate,
            attention_dropout_rate=config.attention_dropout_rate,
            layer_norm_epsilon=config.layer_norm_epsilon,
            activation=config.activation,
            layer_scale=config.layer_scale,
            qkv_bias=config.qkv_bias,
            mlp=config.mlp,
            mlp_norm=config.mlp_norm,
            mlp_bias=config.mlp_bias,
            norm=config.norm,
            rope=config.rope,
            num_prefix_tokens=config.num_prefix_tokens,
            query_tokens=head_tokens if i == config.num_layers - 1 else None,
            dtype=dtype,
            name=f"Transformer_encoderblock_{i}",
        )(x, **({} if token_mask is None else {"token_mask": token_mask}),
          **({} if rope is None else {"rope": rope[i] if isinstance(rope, list) else rope}))
    if config.final_norm and not config.fc_norm:
        x = norm(name="encoder_norm")(x)

    if include_top:
        pooling = config.global_pool
    masked = {} if token_mask is None else {"token_mask": token_mask}
    if pooling is not None:
        if pooling == "map":
            x = _attention_pooling_head(config, dtype)(x, **masked)
        elif pooling == "token" and config.distilled and not include_top:
            x = TokenPooling("distilled", num_prefix_tokens=config.num_prefix_tokens,
                             dtype=policy_for(dtype, "pool"), name="pool")(x)
        else:
            tokens = x
            # Several class tokens (RADIO) pool to their concatenation: RADIO's summary.
            x = TokenPooling(pooling, num_prefix_tokens=config.num_prefix_tokens,
                             num_tokens=config.num_class_tokens if pooling == "token" else 1,
                             dtype=policy_for(dtype, "pool"), name="pool")(tokens, **masked)
        if config.fc_norm:
            x = norm(name="fc_norm")(x)
        if config.representation_size is not None:
            x = keras.layers.Dense(config.representation_size, activation="tanh",
                                   dtype=policy_for(dtype, "pre_logits"), name="pre_logits")(x)
    if include_top:
        float32 = functools.partial(policy_for, dtype, fallback="float32")
        head = keras.layers.Dense(classes, kernel_initializer="zeros", dtype=float32("head"), name="head")
        if config.distilled:
            distilled = TokenPooling("token", num_prefix_tokens=config.num_prefix_tokens, token_index=1,
                                     dtype=policy_for(dtype, "pool_dist"), name="pool_dist")(tokens)
            if config.fc_norm:
                raise ValueError("A distilled model with fc_norm is not a published architecture.")
            head_dist = keras.layers.Dense(classes, kernel_initializer="zeros", dtype=float32("head_dist"),
                                           name="head_dist")
            # DeiT at inference: the mean of the class-token and distillation-token heads.
            x = keras.layers.Average(dtype=float32("head_average"), name="head_average")([head(x),
                                                                                          head_dist(distilled)])
        else:
            x = head(x)
        if classifier_activation not in (None, "linear"):
            x = keras.layers.Activation(classifier_activation, dtype=float32("predictions"), name="predictions")(x)
    return VisionTransformer(inputs, x, name=name or "vit")


def _encoder_arguments(config: ViTConfig, dtype) -> dict:
    """The `patch_encoder` layer's arguments (`PatchEncoder`, or `FlexiblePatchEncoder` for a NaFlex model)."""
    return dict(
        hidden_size=config.hidden_size,
        grid_size=config.grid_size,
        classifier="token" if config.class_token else "gap",
        position_embedding=config.position_embedding,
        dropout_rate=config.dropout_rate,
        patch_size=config.patch_size,
        distilled=config.distilled,
        num_register_tokens=config.num_register_tokens,
        no_embed_class=config.no_embed_class,
        patch_bias=config.patch_bias,
        architecture=config.to_dict(),
        pos_interpolation=config.pos_interpolation,
        patch_norm=config.patch_norm,
        norm_epsilon=config.layer_norm_epsilon,
        num_class_tokens=config.num_class_tokens,
        dtype=dtype,
        name="patch_encoder",
    )


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
    token_mask = TokenMask(config.num_prefix_tokens, name="token_mask")(inputs["mask"])
    return inputs, x, token_mask, _rope_tables(config, inputs["mask"], inputs["grid"])


def ViT(
    image_size=DEFAULT_SIZE,
    *,
    include_top=True,
    include_preprocessing=True,
    weights=None,
    input_shape=None,
    input_tensor=None,
    pooling=None,
    classes=1000,
    classifier_activation="softmax",
    name=None,
    interpolation="linear",
    source_grid=None,
    dtype=None,
    head_tokens_only=False,
    flexible=False,
    **architecture,
):
    """Build a Vision Transformer (Dosovitskiy et al., 2020) as a Keras functional model.

    Args:
        image_size: int or (height, width); defaults to `input_shape`'s or 224. None: any size whose sides are
            multiples of the patch size (of the ResNet stride x patch size for hybrids), given at call time;
            the position embeddings are stored at `pos_grid` (a checkpoint's own grid, or the 224x224 grid) and
            resampled inside the graph with the same interpolation as `interpolation` at load time.
        patch_size: side of the square patches (on the ResNet feature map for hybrids).
        hidden_size, num_layers, num_heads, mlp_dim: the Transformer's width D, depth L, heads and
            MLP width M.
        classifier: `"token"` (class token), `"gap"` (mean of the patch tokens, no class token) or `"map"`
            (attention pooling, no class token).
        representation_size: width of the tanh "pre_logits" layer of the ImageNet-21k checkpoints. Left out, it is
            the checkpoint's when the model keeps the checkpoint's own head (include_top, same classes); None: no
            such layer.
        resnet: None, or `{"num_layers": [3, 4, 9], "width_factor": 1}` for an R+ViT hybrid.
        layer_norm_epsilon: None means what the weights were trained with (1e-6 without weights).
        gelu_approximate: None means what the weights were trained with (tanh GELU without weights,
            like Google's checkpoints); False is the exact erf GELU of timm and Hugging Face.
        dropout_rate, attention_dropout_rate: dropout after the position embeddings, attention and
            MLP; dropout on the attention weights.
        include_top: whether to add the classification head.
        include_preprocessing: True: the model takes RGB in [0, 255] (normalised to [-1, 1], or with the mean/std
            a timm checkpoint directory's `pretrained_cfg` gives); False: it takes the normalised images.
        weights: None; a registered name such as "imagenet21k", "imagenet21k+imagenet2012" or "imagenet" (see
            `vit_keras.list_weights()`, for the variant this model matches); a Google `.npz`, timm
            `.safetensors`, Hugging Face directory or `.weights.h5` path; or an http(s)/file URL. Position
            embeddings are resampled to this model's grid; a `classes` different from the checkpoint's gives a
            fresh zero-initialised head (with a warning); `include_top=False` drops the head. To get whatever
            architecture a checkpoint describes, use `vit_keras.from_pretrained`.
        input_shape: (height, width, channels), as in keras.applications; `(None, None, 3)` is any size. Always
            channels-last, whatever `keras.config.image_data_format()` says (every layer inside is pinned to
            channels-last); a channels-first shape such as (3, 224, 224) raises a `ValueError` that says how to
            transpose.
        input_tensor: a Keras tensor to use as the model's input; as in keras.applications, the model starts at
            its source inputs (`keras.utils.get_source_inputs`), so layers before it are part of the model.
        pooling: with `include_top=False` only: None (the token sequence), `"token"`, `"avg"`, `"max"` or
            `"map"` (the architecture's attention-pooling head).
        classes: number of classes of the head.
        classifier_activation: activation of the head (None for logits); runs in float32.
        name: the model's name.
        position_embedding: `"learned_1d"` (the paper's), `"learned_2d"`, `"sincos_2d"` or `"none"`.
        interpolation: how `weights`' position embeddings are resampled when their grid differs from this
            model's: `"linear"` (vit_jax's `interpolate_posembed`: corner-aligned bilinear, the default) or
            `"bicubic"` (the checkpoint's own library's bicubic). Same as `vit_keras.load_weights`'s.
        source_grid: the checkpoint's stored patch grid as (rows, cols), needed only when it is not square
            (a token count alone cannot tell 4x16 from 8x8); None reads it off the checkpoint.
        dtype: None (the global policy), a policy name such as `"mixed_bfloat16"`, a `keras.DTypePolicy`, or a
            `keras.dtype_policies.DTypePolicyMap` keyed by layer path, as keras-hub takes it: the layers the map
            names as quantized (`"patch_encoder/embedding": "int8_from_float32"`, as
            `vit_keras.layers.dtypes.policy_map(quantized_model)` returns) are built with their quantized variables,
            ready for `load_weights` of a quantized model's `.weights.h5`. Float checkpoints (`weights=`) load only
            into a float model: load, then `model.quantize(...)`.
        head_tokens_only: run the last Transformer block for the tokens the head reads only (the class token, and
            DeiT's distillation token), attending to every token as before. Same outputs (to float rounding) with
            about 7% fewer FLOPs for ViT-B/16 at 224, in inference and training; the last block's layer output is
            then `(batch, 1, D)` instead of every token, so leave it off to read patch features or attention maps of
            the last block. Needs `classifier="token"` with the head, or `pooling="token"` without it.
        flexible: a native-aspect-ratio ("NaFlex", SigLIP 2) model: its input is a dict of `patches` (batch, N,
            P·P·C), `grid` (batch, 2) int32 and `mask` (batch, N) for a batch of images of different sizes, each cut
            into its own grid of patches and padded (`vit_keras.images.naflex_patches`,
            `vit_keras.naflex_data.naflex_map`); the position embeddings are stored at `pos_grid` and resized to each
            image's grid with `pos_interpolation` (RADIO's `bilinear_crop`: to a square of its longer side, then
            cropped), a RoPE model's tables are computed from each image's own grid, and the padding is masked out of
            attention and pooling (AIMv2's head included). Not for hybrids (their ResNet stem needs whole images).
        **architecture: the fields of `vit_keras.configs.ViTConfig` (`ViT(**kw)` builds `ViTConfig(**kw)`;
            `vit_keras.configs.config_fields()` lists them), e.g. `layer_scale`, `num_register_tokens`,
            `no_embed_class`, `pre_norm`, `fc_norm`, `distilled`, `qkv_bias`, `patch_bias`, `global_pool`,
            `class_token`, `activation` ("gelu_tanh", "gelu", "quick_gelu"; overrides `gelu_approximate`); for a
            model of any size, `pos_grid` (the stored grid; default the checkpoint's, or 224 / stride) and
            `pos_interpolation` ("linear", "bicubic", "bicubic_antialias"; default `interpolation`, antialiased
            for timm weights; "bilinear_crop", RADIO's, also with a fixed size: its table is part of the
            architecture, kept at `pos_grid` and resampled in the graph). RADIO's other fields: `num_class_tokens`,
            `final_norm`, `input_normalization`. `classifier` and `gelu_approximate` are accepted as the older names of
            `global_pool` / `class_token` and `activation` (`vit_keras.configs.translate_aliases`). Any other
            keyword is refused with the list of fields.

    Returns:
        A `keras.Model` whose input is named `"images"`.

    Example:
        >>> model = ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...             mlp_dim=96, classes=10)
        >>> model.output_shape
        (None, 10)
        >>> any_size = ViT(image_size=None, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)
        >>> any_size(np.zeros((1, 40, 64, 3), np.float32)).shape
        TensorShape([1, 1000])
        >>> model = ViT(image_size=(64, 128), patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
        ...             classes=7, weights="tests/fixtures/vitjax_token_raw/checkpoint.npz",  # trained at 64x64
        ...             interpolation="bicubic")  # its 8x8 position grid resampled to 8x16
        >>> model.output_shape
        (None, 7)
    """
    architecture = translate_aliases(architecture)
    unknown = sorted(set(architecture) - set(config_fields()) - {"image_size"})
    if unknown:
        raise TypeError(
            f"ViT() got unknown arguments {unknown}. The architecture arguments are the ViTConfig fields "
            f"{sorted(set(config_fields()) - {'image_size'})} (and the older names `classifier`, `gelu_approximate`); "
            "the model arguments are include_top, include_preprocessing, weights, input_shape, input_tensor, "
            "pooling, classes, classifier_activation, name, interpolation, source_grid, dtype, head_tokens_only, "
            "flexible."
        )
    interpolation = weights_lib.check_interpolation(interpolation)
    source_grid = weights_lib.check_source_grid(source_grid)
    if source_grid is not None and weights is None:
        raise ValueError("`source_grid` describes the stored grid of a checkpoint's position embeddings; pass it "
                         "with `weights=`, or drop it.")
    if input_tensor is not None and not keras.backend.is_keras_tensor(input_tensor):
        raise ValueError("`input_tensor` must be a Keras tensor, e.g. the output of `keras.Input(...)`.")
    if flexible and (input_shape is not None or input_tensor is not None or image_size is not DEFAULT_SIZE):
        raise ValueError("A flexible (NaFlex) model takes a dict of `patches`, `grid` and `mask`, not images of one "
                         "size: drop `image_size`, `input_shape` and `input_tensor` (pos_grid= sets the stored "
                         "position grid).")
    height, width, channels = _resolve_input_shape(None if flexible else image_size, input_shape, input_tensor)
    any_size = height is None or width is None
    architectural = architecture.get("pos_interpolation") in ARCHITECTURAL_POS_INTERPOLATIONS
    if not any_size and not architectural and (architecture.get("pos_grid") is not None
                                               or architecture.get("pos_interpolation") is not None):
        raise ValueError("`pos_grid` and `pos_interpolation` describe the position embeddings of a model that takes "
                         "any image size (image_size=None); a fixed-size model stores them at its own grid. Drop "
                         "them, or pass image_size=None.")
    dtype = check_model_dtype(dtype)
    _check_quantized_weights(weights, dtype)
    # ViT() states the whole architecture (the ViTConfig defaults for what the caller leaves out); only the numerics
    # left open (None) and the representation layer, unless passed, follow the checkpoint (`resolve_config`).
    overrides = {**architecture, "image_size": None if any_size else (height, width)}
    config = resolve_config(None, overrides, interpolation=interpolation)
    overrides = {**{field: getattr(config, field) for field in config_fields()
                    if field not in (*OPEN_FIELDS, "representation_size")}, **overrides}
    _check_head_options(include_top, pooling, classes, classifier_activation, config)
    info = weights_lib.describe(weights, architecture=config.to_dict(), image_size=config.reference_image_size)
    return build_from_checkpoint(
        info, overrides, interpolation=interpolation, source_grid=source_grid, include_top=include_top, pooling=pooling,
        classes=classes, classifier_activation=classifier_activation, include_preprocessing=include_preprocessing,
        input_tensor=input_tensor, channels=channels, name=name,
        input_size=(height, width) if any_size and not flexible else None,
        dtype=dtype, head_tokens_only=head_tokens_only, headless_representation=False, flexible=flexible,
    )


# Numerics a caller may leave open (None): they follow the checkpoint, or take the ViTConfig default without one.
OPEN_FIELDS = ("activation", "layer_norm_epsilon", "pos_grid", "pos_interpolation")


def resolve_config(info, overrides: dict, *, include_top: bool = True, classes=None, interpolation=None,
                   source_grid=None, headless_representation: bool = True) -> ViTConfig:
    """The config of the model a checkpoint and a caller's overrides describe: one set of rules for `ViT(weights=)`,
    `from_pretrained` and `vit-keras convert`.

    `info` is a `vit_keras.weights.CheckpointInfo` (None: no checkpoint) whose `architecture` holds the fields the
    source determines; `overrides` are `ViTConfig` fields the caller chose, and win. Then:

    - `activation`, `layer_norm_epsilon` (`OPEN_FIELDS`) left out or None follow the checkpoint.
    - `image_size` left out is the checkpoint's stored size (224 when it does not say); `None` is any size, with
      `pos_grid` the checkpoint's stored grid and `pos_interpolation` the in-graph form of `interpolation`.
    - `representation_size` left out is the checkpoint's, dropped when a fresh head replaces the checkpoint's
      (`include_top` with other `classes`), as vit_jax's `load_pretrained` fine-tunes, and without a head
      (`include_top=False`) unless `headless_representation` (True: the checkpoint's own model without its
      classifier, e.g. transformers' pooler output; `ViT()` passes False: the backbone's features); an explicit
      value (None: no representation layer) wins.
    - `interpolation` None is the source's own (`CheckpointInfo.default_interpolation`: vit_jax's linear for Google
      files, bicubic for timm and transformers).

    Example:
        >>> resolve_config(None, {"patch_size": 8, "hidden_size": 48, "num_heads": 3, "image_size": 32}).grid_size
        (4, 4)
    """
    overrides = {k: v for k, v in overrides.items() if not (k in OPEN_FIELDS and v is None)}
    unknown = sorted(set(overrides) - set(config_fields()))
    if unknown:
        raise ValueError(f"Unknown ViTConfig fields {unknown}; the fields are {list(config_fields())}.")
    interpolation = weights_lib.check_interpolation(
        interpolation or (info.default_interpolation if info is not None else "linear"))
    fields = {} if info is None else _checkpoint_fields(info, overrides, source_grid)
    fields = {k: v for k, v in fields.items() if k in config_fields()}
    if info is not None:
        for field in ("activation", "layer_norm_epsilon"):
            if fields.get(field) is None and getattr(info, field) is not None:
                fields[field] = getattr(info, field)
        if fields.get("representation_size") is None:
            fields["representation_size"] = info.representation_size
        fresh_head = include_top and classes is not None and classes != info.classes
        if fresh_head or (not include_top and not headless_representation):
            fields["representation_size"] = None
    fields = {k: v for k, v in fields.items() if v is not None or k in ("image_size", "representation_size")}
    if fields.get("image_size") is None:
        fields["image_size"] = (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)
    fields.update(overrides)
    # A table that is part of the architecture (bilinear_crop) stays at its stored grid and keeps its own resampling.
    architectural = fields.get("pos_interpolation") in ARCHITECTURAL_POS_INTERPOLATIONS
    if fields["image_size"] is None and info is not None:
        config = ViTConfig.from_dict({**fields, "image_size": (DEFAULT_IMAGE_SIZE,) * 2, "pos_grid": None})
        if "pos_grid" not in overrides:
            # Kept at the checkpoint's own grid: every call resamples from the stored table, as timm's
            # dynamic_img_size and transformers' interpolate_pos_encoding do.
            fields["pos_grid"] = weights_lib.stored_grid(
                info, num_heads=config.num_heads, num_embedded_prefix_tokens=config.num_embedded_prefix_tokens,
                source_grid=source_grid)
        if "pos_interpolation" not in overrides and not architectural:
            fields["pos_interpolation"] = weights_lib.grid_interpolation(info, interpolation)
    elif fields["image_size"] is None and "pos_interpolation" not in overrides and not architectural:
        fields["pos_interpolation"] = interpolation
    if fields["image_size"] is not None and not architectural:
        fields["pos_grid"] = None
    return ViTConfig.from_dict(fields)


def _checkpoint_fields(info, overrides: dict, source_grid) -> dict:
    """The fields a checkpoint determines: its config's, or read off its arrays (a Google `.npz`, whose stored grid
    `source_grid` may state; a bare timm state dict, which needs `num_heads`)."""
    if info.format == "keras":
        return {}
    fields = dict(info.architecture or {})
    if info.reader is not None and (not fields or (source_grid is not None and info.format == "google_npz")):
        num_heads = overrides.get("num_heads")
        if info.format == "timm" and num_heads is None:
            raise ValueError(f"{info.path!r} is a bare timm state dict, which does not say its number of heads; "
                             "pass num_heads, or the directory timm's save_for_hf writes (config.json + "
                             "model.safetensors).")
        fields = weights_lib.infer_config_fields(info.read(num_heads), source_grid=source_grid)
    return fields


def build_from_checkpoint(info, overrides: dict, *, interpolation=None, source_grid=None, include_top=True,
                          pooling=None, classes=None, classifier_activation="softmax", include_preprocessing=True,
                          input_tensor=None, channels=3, name=None, input_size=None, dtype=None,
                          head_tokens_only=False, headless_representation=True, flexible=False):
    """The factory behind `ViT(weights=)`, `from_pretrained` and `vit-keras convert`: resolve the config
    (`resolve_config`: the checkpoint's fields, the caller's `overrides` winning), build it (`build_vit`) and
    assign the checkpoint's parameters (`vit_keras.weights.load_into`).

    `info` is what `vit_keras.weights.describe` returns (None: random weights); `classes=None` is the checkpoint's;
    `headless_representation`: see `resolve_config`; `flexible`: a NaFlex model (see `ViT`).

    Example:
        >>> model = build_from_checkpoint(None, {"patch_size": 8, "hidden_size": 48, "num_heads": 3,
        ...                                      "num_layers": 1, "image_size": 32}, classes=10)
        >>> model.output_shape
        (None, 10)
    """
    if info is not None and channels != 3:
        raise ValueError(
            f"Pretrained weights expect RGB images (3 channels), got {channels}; pass input_shape=(H, W, 3) "
            "or weights=None."
        )
    if include_top and classes is None:
        if info is None or info.classes is None:
            where = "the checkpoint" if info is None else repr(info.path)
            raise ValueError(f"{where} has no classification head; pass include_top=False (and pooling=...) "
                             "for its embeddings, or classes=N for a fresh head.")
        classes = info.classes
    interpolation = interpolation or (info.default_interpolation if info is not None else "linear")
    config = resolve_config(info, overrides, include_top=include_top, classes=classes, interpolation=interpolation,
                            source_grid=source_grid, headless_representation=headless_representation)
    model = build_vit(
        config, include_top=include_top, pooling=pooling, classes=classes if classes is not None else 1000,
        classifier_activation=classifier_activation, include_preprocessing=include_preprocessing,
        normalization=None if info is None else check_normalization(info.normalization, source=info.path),
        input_tensor=input_tensor, channels=channels, name=name, input_size=input_size, dtype=dtype,
        head_tokens_only=head_tokens_only, flexible=flexible,
    )
    if info is not None:
        weights_lib.load_into(model, info, interpolation=interpolation, source_grid=source_grid)
    return model


def _check_quantized_weights(weights, dtype) -> None:
    """Refuse a float checkpoint for a model born quantized before anything is downloaded."""
    if weights is None or not isinstance(dtype, keras.dtype_policies.DTypePolicyMap):
        return
    quantized = {path: dtype[path].quantization_mode for path in dtype if dtype[path].quantization_mode}
    if quantized and not str(weights).endswith(weights_lib.KERAS_WEIGHTS_SUFFIX):
        path, mode = next(iter(quantized.items()))
        raise ValueError(
            f"`dtype` quantizes {len(quantized)} layers (e.g. {path!r}: {mode}) but `weights={weights!r}` is a float "
            f"checkpoint. Build the model without the quantized map, with weights={weights!r}, then call "
            f"model.quantize({mode!r}); a quantized model's own .weights.h5 loads into a model built with `dtype`."
        )


def _variant_function_name(variant: str) -> str:
    # "R50+B/16" -> "ViTR50B16", "R+Ti/16" -> "ViTRTi16", "B/16" -> "ViTB16"
    return "ViT" + variant.replace("+", "").replace("/", "")


def _make_constructor(variant: str):
    config = VARIANTS[variant]
    function_name = _variant_function_name(variant)

    def constructor(
        include_top=True,
        weights=None,
        input_tensor=None,
        input_shape=None,
        pooling=None,
        classes=1000,
        classifier_activation="softmax",
        image_size=DEFAULT_SIZE,
        include_preprocessing=True,
        name=None,
        **kwargs,
    ):
        options = {**config.model_kwargs(), **kwargs}
        return ViT(
            image_size=image_size,
            include_top=include_top,
            include_preprocessing=include_preprocessing,
            weights=weights,
            input_shape=input_shape,
            input_tensor=input_tensor,
            pooling=pooling,
            classes=classes,
            classifier_activation=classifier_activation,
            name=name or function_name.lower().replace("vit", "vit-", 1),
            **options,
        )

    hybrid = f", ResNet stem {list(config.resnet.num_layers)}" if config.resnet else ""
    names = weights_lib.registry.names_for(variant)
    if any("imagenet2012" in n for n in names):
        names.append("imagenet")
    published = ", ".join(f'"{n}"' for n in names) or "none published"
    constructor.__name__ = constructor.__qualname__ = function_name
    constructor.__doc__ = f"""ViT-{variant}: patch {config.patch_size}, D={config.hidden_size}, \
M={config.mlp_dim}, {config.num_heads} heads, {config.num_layers} layers{hybrid}.

    Takes the keras.applications arguments (`include_top`, `weights`, `input_tensor`, `input_shape`,
    `pooling`, `classes`, `classifier_activation`) plus `image_size`, `include_preprocessing`, `name`;
    any other `vit_keras.ViT` argument (e.g. `dropout_rate`) overrides the variant's value.
    `image_size=None` or `input_shape=(None, None, 3)` gives a model that takes any image size.
    `weights`: None (random), a published checkpoint ({published}), or a checkpoint path or URL;
    `interpolation` ("linear", vit_jax's, or "bicubic", Hugging Face's) and `source_grid` ((rows, cols) of a
    non-square stored grid) say how its position embeddings are resampled, as in `vit_keras.load_weights`.
    `dtype`: a policy name, `keras.DTypePolicy` or `DTypePolicyMap` of layer paths (quantized layers), as in `ViT`.

    For example `vit_keras.{function_name}(image_size=224, classes=10)` for a 10-class head, or
    `vit_keras.{function_name}(image_size=448, weights=..., interpolation="bicubic")` to fine-tune a checkpoint at a
    higher resolution. A variant with fewer blocks (a quick test model) is one override away:

    Example:
        >>> model = vit_keras.{function_name}(image_size=224, classes=10, num_layers=1)
        >>> model.output_shape
        (None, 10)
    """
    return constructor


_CONSTRUCTORS = {variant: _make_constructor(variant) for variant in VARIANTS}
ViTTi16 = _CONSTRUCTORS["Ti/16"]
ViTS16 = _CONSTRUCTORS["S/16"]
ViTS32 = _CONSTRUCTORS["S/32"]
ViTB8 = _CONSTRUCTORS["B/8"]
ViTB16 = _CONSTRUCTORS["B/16"]
ViTB32 = _CONSTRUCTORS["B/32"]
ViTL16 = _CONSTRUCTORS["L/16"]
ViTL32 = _CONSTRUCTORS["L/32"]
ViTH14 = _CONSTRUCTORS["H/14"]
ViTRTi16 = _CONSTRUCTORS["R+Ti/16"]
ViTR26S32 = _CONSTRUCTORS["R26+S/32"]
ViTR50B16 = _CONSTRUCTORS["R50+B/16"]
ViTR26B32 = _CONSTRUCTORS["R26+B/32"]
ViTR50L32 = _CONSTRUCTORS["R50+L/32"]


@functools.cache
def imagenet_classes() -> tuple[tuple[str, str], ...]:
    """The 1,000 ImageNet-1k classes as (WordNet id, name), in the order of the checkpoints' heads.

    Example:
        >>> imagenet_classes()[285]
        ('n02124075', 'Egyptian_cat')
    """
    text = importlib.resources.files("vit_keras.resources").joinpath("imagenet1k_classes.tsv").read_text()
    return tuple(tuple(line.split("\t")) for line in text.splitlines() if line)


def decode_predictions(preds, top=5):
    """Turn ImageNet-1k scores into `[(wnid, class_name, score), ...]` per image, best first.

    Example:
        >>> decode_predictions(np.eye(1000)[[285]], top=1)
        [[('n02124075', 'Egyptian_cat', 1.0)]]
    """
    preds = np.asarray(keras.ops.convert_to_numpy(preds))
    classes = imagenet_classes()
    if preds.ndim != 2 or preds.shape[1] != len(classes):
        raise ValueError(
            f"decode_predictions expects a (batch, {len(classes)}) array of ImageNet-1k scores, got shape "
            f"{preds.shape}; use a model with classes=1000."
        )
    top = check_positive_int("top", top)
    results = []
    for row in preds:
        best = np.argsort(-row, kind="stable")[:top]
        results.append([(*classes[i], float(row[i])) for i in best])
    return results
