"""`ViT()` and the paper's named variants (`ViTB16`, ...) as keras.applications-style functional models, and
ImageNet's class names for their predictions.

The keras.applications arguments, as `ViT()` and every named variant take them:

- `include_top`: whether to add the classification head; `classes`: its number of classes;
  `classifier_activation`: its activation (None for logits), run in float32.
- `include_preprocessing`: True: the model takes RGB in [0, 255] (normalised to [-1, 1], or with the mean/std a
  timm checkpoint directory's `pretrained_cfg` gives); False: it takes the normalised images.
- `weights`: None; a registered name such as "imagenet21k", "imagenet21k+imagenet2012" or "imagenet" (see
  `vit_keras.list_weights()`, for the variant the model matches); a Google `.npz`, timm `.safetensors`, Hugging
  Face directory or `.weights.h5` path; or an http(s)/file URL. Position embeddings are resampled to the model's
  grid; a `classes` other than the checkpoint's gives a fresh zero-initialised head (with a warning);
  `include_top=False` drops the head. For whatever architecture a checkpoint describes, use
  `vit_keras.from_pretrained`.
- `input_shape`: (height, width, channels); `(None, None, 3)` is any size. Always channels-last, whatever
  `keras.config.image_data_format()` says (every layer inside is pinned to channels-last); a channels-first shape
  such as (3, 224, 224) raises a `ValueError` that says how to transpose.
- `input_tensor`: a Keras tensor to use as the model's input; the model starts at its source inputs
  (`keras.utils.get_source_inputs`), so layers before it are part of the model.
- `pooling`: with `include_top=False` only: None (the token sequence), `"token"`, `"avg"`, `"max"` or `"map"`
  (the architecture's attention-pooling head).
- `name`: the model's name.

The architecture keywords of `ViT()` are the fields of `vit_keras.configs.ViTConfig` (`ViT(**kw)` builds
`ViTConfig(**kw)`; `vit_keras.configs.config_fields()` lists them), among them: `patch_size` (on the ResNet feature
map for hybrids); `hidden_size`, `num_layers`, `num_heads`, `mlp_dim` (the width D, depth L, heads and MLP width M);
`global_pool` (`"token"`, `"avg"` or `"map"`) and `class_token`; `representation_size` (the tanh "pre_logits"
layer of the ImageNet-21k checkpoints; left out, the checkpoint's when the model keeps the checkpoint's own head;
None: no such layer); `resnet` (None, or `{"num_layers": [3, 4, 9], "width_factor": 1}` for an R+ViT hybrid);
`layer_norm_epsilon` and `activation` ("gelu_tanh", "gelu", "quick_gelu"; None: what the weights were trained
with, else 1e-6 and Google's tanh GELU); `dropout_rate`, `attention_dropout_rate`; `position_embedding`
(`"learned_1d"`, the paper's, `"learned_2d"`, `"sincos_2d"` or `"none"`); `layer_scale`, `num_register_tokens`,
`no_embed_class`, `pre_norm`, `fc_norm`, `distilled`, `qkv_bias`, `patch_bias`; for a model of any size `pos_grid`
(the stored grid; default the checkpoint's, or 224 / stride) and `pos_interpolation` ("linear", "bicubic",
"bicubic_antialias"; default `interpolation`, antialiased for timm weights; RADIO's "bilinear_crop", also with a
fixed size: its table is part of the architecture, kept at `pos_grid` and resampled in the graph); RADIO's
`num_class_tokens`, `final_norm`, `input_normalization`. `classifier` (`"token"`, `"gap"`, `"map"`) and
`gelu_approximate` are accepted as the older names of `global_pool` / `class_token` and `activation`
(`vit_keras.configs.translate_aliases`). Any other keyword is refused with the list of fields.
"""

from __future__ import annotations

import functools
import importlib.resources

import keras
import numpy as np

from vit_keras import weights as weights_lib
from vit_keras.configs import (
    VARIANTS,
    check_positive_int,
)
from vit_keras.layers.dtypes import check_model_dtype
from vit_keras.models.build import check_head_options
from vit_keras.models.factory import build_from_checkpoint, check_channels
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
    """Build a Vision Transformer (Dosovitskiy et al., 2020) as a Keras functional model whose input is named
    `"images"`. The keras.applications arguments (`include_top`, `weights`, ...) and the architecture keywords
    (`**architecture`: the `ViTConfig` fields) are described in this module's docstring.

    Args:
        image_size: int or (height, width); defaults to `input_shape`'s or 224. None: any size whose sides are
            multiples of the patch size (of the ResNet stride x patch size for hybrids); the position embeddings
            are stored at `pos_grid` and resampled in the graph as `interpolation` resamples them at load time.
        interpolation: how `weights`' position embeddings are resampled to this model's grid: `"linear"`
            (vit_jax's corner-aligned bilinear) or `"bicubic"` (the checkpoint library's), as `load_weights`.
        source_grid: the checkpoint's stored (rows, cols) grid when it is not square; None reads it off.
        dtype: None (the global policy), a policy name (`"mixed_bfloat16"`), a `keras.DTypePolicy`, or a
            `DTypePolicyMap` by layer path: layers it names as quantized are built quantized, ready for a quantized
            model's `.weights.h5` (`vit_keras.layers.dtypes.policy_map`). Float checkpoints load into a float
            model only: load, then `model.quantize(...)`.
        head_tokens_only: the last block computes only the tokens the head reads (class, distillation): the same
            outputs, ~7% fewer FLOPs for ViT-B/16, the last block's output `(batch, 1, D)`. Needs `"token"` pooling.
        flexible: a native-aspect-ratio ("NaFlex") model: its input is a dict of `patches` (batch, N, P·P·C), `grid`
            (batch, 2) int32 and `mask` (batch, N) (`vit_keras.images.naflex_patches`); the table is resized to each
            image's grid with `pos_interpolation`, RoPE tables follow it, and padding is masked out. Not for hybrids.

    Example:
        >>> ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
        ...     classes=10).output_shape
        (None, 10)
        >>> any_size = ViT(image_size=None, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)
        >>> any_size(np.zeros((1, 40, 64, 3), np.float32)).shape
        TensorShape([1, 1000])
        >>> ViT(image_size=(64, 128), patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96, classes=7,
        ...     weights="tests/fixtures/vitjax_token_raw/checkpoint.npz",  # 8x8 position grid resampled to 8x16
        ...     interpolation="bicubic").output_shape
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
    # ViT() states the whole architecture (the ViTConfig defaults for what the caller leaves out): with weights, only
    # the numerics left open (None), the stored grid and the representation layer, unless passed, follow the
    # checkpoint. The factory resolves this partial config once; the head options that need no architecture are
    # checked before `describe`, which may download.
    # A Keras weights file says nothing to resolve against: the model is built as stated, then loads it as saved.
    partial = {**architecture, "image_size": None if any_size else (height, width)}
    check_head_options(include_top, pooling, classes, classifier_activation, None)
    info = weights_lib.loading.describe(weights, architecture=partial, image_size=None if any_size else (height, width))
    keras_file = info if info is not None and info.format == "keras" else None
    check_channels(keras_file, channels)
    model = build_from_checkpoint(
        None if keras_file else info, partial, architecture_from="defaults", interpolation=interpolation,
        source_grid=source_grid, include_top=include_top, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation, include_preprocessing=include_preprocessing,
        input_tensor=input_tensor, channels=channels, name=name,
        input_size=(height, width) if any_size and not flexible else None,
        dtype=dtype, head_tokens_only=head_tokens_only, headless_representation=False, flexible=flexible,
    )
    if keras_file is not None:
        weights_lib.loading.load_into(model, keras_file, source_grid=source_grid)
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
