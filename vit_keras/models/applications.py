"""`ViT()` and the paper's named variants (`ViTB16`, ...) as keras.applications-style functional models, and
ImageNet's class names for their predictions."""

from __future__ import annotations

import functools
import importlib.resources

import keras
import numpy as np

from vit_keras import weights as weights_lib
from vit_keras.configs import (
    VARIANTS,
    check_positive_int,
    config_fields,
)
from vit_keras.layers.dtypes import check_model_dtype
from vit_keras.models.build import check_head_options
from vit_keras.models.factory import OPEN_FIELDS, build_from_checkpoint, resolve_config
from vit_keras.models.inputs import DEFAULT_SIZE, check_architecture_arguments, resolve_image_arguments


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
    architecture = check_architecture_arguments(architecture)
    interpolation = weights_lib.check_interpolation(interpolation)
    source_grid = weights_lib.check_source_grid(source_grid)
    if source_grid is not None and weights is None:
        raise ValueError("`source_grid` describes the stored grid of a checkpoint's position embeddings; pass it "
                         "with `weights=`, or drop it.")
    height, width, channels = resolve_image_arguments(image_size, input_shape, input_tensor, flexible, architecture)
    any_size = height is None or width is None
    dtype = check_model_dtype(dtype)
    _check_quantized_weights(weights, dtype)
    # ViT() states the whole architecture (the ViTConfig defaults for what the caller leaves out): without weights
    # that is the model's config; with weights, only the numerics left open (None) and the representation layer,
    # unless passed, follow the checkpoint (`resolve_config`, in the factory).
    overrides = {**architecture, "image_size": None if any_size else (height, width)}
    stated = resolve_config(None, overrides, interpolation=interpolation)
    check_head_options(include_top, pooling, classes, classifier_activation, stated)
    info = weights_lib.describe(weights, architecture=stated.to_dict(), image_size=stated.reference_image_size)
    if info is not None:
        overrides = {**{field: getattr(stated, field) for field in config_fields()
                        if field not in (*OPEN_FIELDS, "representation_size")}, **overrides}
    return build_from_checkpoint(
        info, overrides, config=None if info is not None else stated, interpolation=interpolation,
        source_grid=source_grid, include_top=include_top, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation, include_preprocessing=include_preprocessing,
        input_tensor=input_tensor, channels=channels, name=name,
        input_size=(height, width) if any_size and not flexible else None,
        dtype=dtype, head_tokens_only=head_tokens_only, headless_representation=False, flexible=flexible,
    )


# Numerics a caller may leave open (None): they follow the checkpoint, or take the ViTConfig default without one.


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
