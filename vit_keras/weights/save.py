"""Write a vit_keras model as timm or transformers write theirs, so that their users load a Keras fine-tune with
their own library: `save_pretrained(model, directory, format="timm" | "transformers")`.

The tensors are the readers' rule tables run backwards (`rules.invert_table` over `timm.TABLE` /
`hf.TABLES[model_type]`): each table is written once and read both ways. The canonical arrays come from the
model's declared checkpoint variables (`model_slots`, each undone to the checkpoint layout); the architecture
comes from the model's `ViTConfig`, mapped onto timm's `model_args` or a transformers `config.json`. What a target
library cannot express (a LayerNorm epsilon timm does not build, a family transformers does not have) is refused
by name, with the format that can hold it; before anything is written the tensors are read back with the same
table and must give the model's arrays exactly.

- timm: `config.json` (`architecture`, `model_args`, `pretrained_cfg` with the model's mean/std) and
  `model.safetensors`, as `timm.models.save_for_hf` writes them: `timm.create_model(architecture,
  pretrained=False, **model_args)` + `load_state_dict(..., strict=True)`, and timm's `hf-hub:` loader, take it.
- transformers: `config.json` + `model.safetensors` for `AutoModel.from_pretrained(directory)`: `vit`
  (`ViTForImageClassification` with a head, `ViTModel` with a pooler = vit_jax's `pre_logits`), `dinov2`
  (`Dinov2Model`), `clip_vision_model` (`CLIPVisionModel`), `siglip_vision_model` (`SiglipVisionModel`).

Example:
    >>> import vit_keras
    >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
    ...                       mlp_dim=96, classes=10)
    >>> save_pretrained(model, "my-vit-timm", format="timm")
    'my-vit-timm'
"""

from __future__ import annotations

import json
import logging
import os

import keras
import numpy as np

from vit_keras.files import atomic_directory
from vit_keras.weights import hf, hf_family_rows, rules, timm
from vit_keras.weights.assign import model_slots

logger = logging.getLogger("vit_keras.weights")

FORMATS = ("timm", "transformers")
# ViTConfig.activation -> timm `act_layer` (inverse of `timm.ACT_LAYERS`) and transformers `hidden_act`.
TIMM_ACT_LAYERS = {activation: name for name, activation in timm.ACT_LAYERS.items()}
HIDDEN_ACTS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "quick_gelu": "quick_gelu"}
# The registered timm names the writer uses; `model_args` sets every size and switch, so the name only chooses
# what model_args cannot: the class (DeiT's distilled one) and the LayerNorm epsilon (timm's CLIP towers: 1e-5).
TIMM_PLAIN = "vit_base_patch16_224"
TIMM_CLIP = "vit_base_patch16_clip_224"
TIMM_DISTILLED = "deit_base_distilled_patch16_224"
_TIMM_EPSILON = {timm.LAYER_NORM_EPSILON: TIMM_PLAIN, timm.SWITCHES["clip"]["layer_norm_epsilon"]: TIMM_CLIP}
_TIMM_FALLBACK = "use format='transformers' where the family allows, or keep the .keras file"
_USE_TIMM = "use format='timm'"


def model_params(model) -> dict[str, np.ndarray]:
    """The canonical (vit_jax raw-name) float32 arrays of a built vit_keras model, in the checkpoint layouts.

    Example:
        >>> import vit_keras
        >>> tiny = dict(patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)
        >>> sorted(model_params(vit_keras.ViT(image_size=32, **tiny)))[:2]
        ['Transformer/encoder_norm/bias', 'Transformer/encoder_norm/scale']
    """
    return {name: slot.checkpoint_value() for name, slot in model_slots(model).items()}


def model_normalization(model):
    """The (mean, std) of [0, 1] images that the model's own preprocessing applies (its `rescaling` layer), or
    None when the model takes normalised input (include_preprocessing=False).

    Example:
        >>> import vit_keras
        >>> tiny = dict(patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)
        >>> model_normalization(vit_keras.ViT(image_size=32, **tiny))
        ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    """
    try:
        layer = model.get_layer("rescaling")
    except ValueError:
        return None
    config = layer.get_config()
    scale, offset = np.broadcast_arrays(np.asarray(config["scale"], np.float64),
                                        np.asarray(config["offset"], np.float64))
    scale, offset = np.broadcast_to(scale, (3,)), np.broadcast_to(offset, (3,))
    std = 1.0 / (255.0 * scale)
    mean = -offset * std
    return tuple(round(float(m), 8) for m in mean), tuple(round(float(s), 8) for s in std)


def _refuse(what: str, fix: str):
    raise ValueError(f"{what}; {fix}.")


def _label_names(label_names, classes: int) -> list[str]:
    names = [str(name) for name in label_names]
    if len(names) != classes:
        _refuse(f"label_names has {len(names)} names for the model's {classes} classes", "pass one name per class")
    return names


def _mlp_ratio(config) -> float:
    ratio = config.mlp_dim / config.hidden_size
    if int(config.hidden_size * ratio) != config.mlp_dim:
        _refuse(f"mlp_dim {config.mlp_dim} is not a ratio of hidden_size {config.hidden_size} that the target "
                "library reproduces (int(hidden_size * mlp_ratio))", _TIMM_FALLBACK)
    return float(ratio)


def _check_complete(config, params):
    """The parts the architecture computes with must be in the model (a model built without its head's parts
    cannot be written as the whole architecture)."""
    if config.global_pool == "map" and "MAPHead_0/probe" not in params:
        _refuse("The model's config pools with an attention-pooling head (global_pool='map') that this model was "
                "built without (include_top=False and pooling other than 'map')", "rebuild it with pooling='map'")
    norm = "fc_norm/scale" if config.fc_norm else "Transformer/encoder_norm/scale"
    if norm not in params:
        _refuse(f"The model has no {norm.rsplit('/', 1)[0]} (built without the layers after pooling)",
                "rebuild it with include_top=True or pooling set to the checkpoint's pooling")


def _common_refusals(config, target: str, fix: str):
    if config.resnet is not None:
        _refuse(f"{target} has no ResNet-hybrid ViT layout that vit_keras writes", "keep the .keras file")
    plain_parts = (("rope", None), ("mlp", "gelu"), ("norm", "layernorm"), ("map_num_heads", None),
                   ("map_mlp_dim", None), ("patch_norm", None), ("map_head", "big_vision"))
    parts = {field: getattr(config, field) for field, plain in plain_parts if getattr(config, field) != plain}
    if parts:
        # The plain ViT layouts written here would drop these parts and give another function.
        _refuse(f"vit_keras writes {target} files for the plain ViT block; this model has {parts}",
                "keep the .keras file")
    radio = {field: getattr(config, field) for field, plain in (
        ("num_class_tokens", 1), ("final_norm", True), ("input_normalization", None))
        if getattr(config, field) != plain}
    if config.pos_interpolation == "bilinear_crop":
        radio["pos_interpolation"] = config.pos_interpolation
    if radio:
        # RADIO's parts: the plain ViT layouts written here have none of them.
        _refuse(f"vit_keras writes {target} files for the plain ViT; this model has RADIO's {radio}",
                "keep the .keras file")
    if config.position_embedding != "learned_1d":
        _refuse(f"{target} stores learned 1-D position embeddings; this model has "
                f"position_embedding={config.position_embedding!r}", fix)


# ---- timm


def timm_files(config, params, normalization, label_names=None) -> tuple[dict, dict[str, np.ndarray]]:
    """(config.json, state dict) of the timm `VisionTransformer` that computes what a model of `config` with
    `params` computes; `normalization` is the (mean, std) its inputs are normalised with.

    Example:
        >>> import vit_keras
        >>> from vit_keras.vision_transformer import config_of
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> cfg, tensors = timm_files(config_of(model), model_params(model), ((0.5,) * 3, (0.5,) * 3))
        >>> cfg["architecture"]
        'vit_base_patch16_224'
    """
    _common_refusals(config, "timm", _TIMM_FALLBACK)
    _check_complete(config, params)
    if config.representation_size is not None or "pre_logits/kernel" in params:
        _refuse("timm's VisionTransformer has no pre-logits (representation) layer", "use format='transformers' "
                "(a ViTModel's pooler) or rebuild the model without representation_size")
    if config.patch_bias == config.pre_norm:
        _refuse(f"timm's patch projection has a bias exactly when there is no pre-norm; this model has "
                f"patch_bias={config.patch_bias} and pre_norm={config.pre_norm}", _TIMM_FALLBACK)
    architecture = _TIMM_EPSILON.get(config.layer_norm_epsilon)
    if architecture is None:
        _refuse(f"timm builds its ViT LayerNorms with eps {sorted(_TIMM_EPSILON)}; this model has "
                f"layer_norm_epsilon={config.layer_norm_epsilon}", _TIMM_FALLBACK)
    if config.distilled:
        if architecture != TIMM_PLAIN or config.num_register_tokens or config.no_embed_class:
            _refuse("timm's distilled DeiT has LayerNorm eps 1e-6, no register tokens and position embeddings on "
                    "its class and distillation tokens", _TIMM_FALLBACK)
        architecture = TIMM_DISTILLED
    if normalization is None:
        _refuse("The model takes normalised input (include_preprocessing=False), so it does not say its "
                "normalisation", "pass normalization=(mean, std) of [0, 1] images, e.g. ((0.5,) * 3, (0.5,) * 3)")
    mean, std = (list(map(float, values)) for values in normalization)
    classes = int(params["head/bias"].shape[0]) if "head/bias" in params else 0
    size = list(config.reference_image_size)
    model_args = {
        "img_size": size, "patch_size": config.patch_size, "embed_dim": config.hidden_size,
        "depth": config.num_layers, "num_heads": config.num_heads, "mlp_ratio": _mlp_ratio(config),
        "num_classes": classes, "global_pool": config.global_pool, "class_token": config.class_token,
        "reg_tokens": config.num_register_tokens, "no_embed_class": config.no_embed_class,
        "pre_norm": config.pre_norm, "fc_norm": config.fc_norm, "qkv_bias": config.qkv_bias,
        "init_values": 1e-5 if config.layer_scale else None, "act_layer": TIMM_ACT_LAYERS[config.activation],
        "pos_drop_rate": config.dropout_rate, "proj_drop_rate": config.dropout_rate,
        "attn_drop_rate": config.attention_dropout_rate, "in_chans": 3,
    }
    if config.dynamic:
        if config.pos_interpolation == "bicubic_antialias":
            model_args["dynamic_img_size"] = True  # timm resamples at each call as this model does
        else:
            logger.warning("This model resamples its position embeddings with %r at other image sizes; timm would "
                           "use antialiased bicubic, so the timm model is written for the stored size %s only.",
                           config.pos_interpolation, size)
    pretrained_cfg = {
        "input_size": [3, *size], "fixed_input_size": not config.dynamic, "interpolation": "bicubic",
        "crop_pct": 1.0, "crop_mode": "center", "mean": mean, "std": std, "num_classes": classes,
        "first_conv": "patch_embed.proj", "classifier": ["head", "head_dist"] if config.distilled else "head",
    }
    out = {"architecture": architecture, "num_classes": classes, "num_features": config.hidden_size,
           "global_pool": config.global_pool, "model_args": model_args, "pretrained_cfg": pretrained_cfg}
    if label_names is not None:
        out["label_names"] = _label_names(label_names, classes)
    tensors = rules.invert_table(timm.TABLE, params, num_heads=config.num_heads)
    _read_back(timm.TABLE, tensors, params, config)
    return out, tensors


# ---- transformers

# What each transformers model type computes, as the ViTConfig fields it fixes (transformers 5.x).
_HF_FIXED = {
    "vit": dict(class_token=True, global_pool="token", layer_scale=False, pre_norm=False, fc_norm=False,
                patch_bias=True),
    "dinov2": dict(class_token=True, global_pool="token", layer_scale=True, pre_norm=False, fc_norm=False,
                   patch_bias=True),
    "clip_vision_model": dict(class_token=True, global_pool="token", layer_scale=False, pre_norm=True, fc_norm=True,
                              patch_bias=False, qkv_bias=True),
    "siglip_vision_model": dict(class_token=False, layer_scale=False, pre_norm=False, fc_norm=False,
                                patch_bias=True, qkv_bias=True),
}
_HF_ALL = dict(distilled=False, num_register_tokens=0, no_embed_class=False)
# The base model class of each: the first class its reader's Family row names.
_HF_CLASSES = {kind: hf_family_rows.FAMILIES[kind].classes.split(", ")[0] for kind in _HF_FIXED}


def transformers_model_type(config) -> str:
    """The transformers model type that computes what `config` computes, or a `ValueError` naming what none has.

    Example:
        >>> from vit_keras.configs import ViTConfig
        >>> transformers_model_type(ViTConfig(layer_scale=True))
        'dinov2'
    """
    _common_refusals(config, "transformers", _USE_TIMM)
    model_type = ("dinov2" if config.layer_scale else "clip_vision_model" if config.pre_norm else
                  "siglip_vision_model" if not config.class_token else "vit")
    wanted = {**_HF_ALL, **_HF_FIXED[model_type]}
    if model_type == "siglip_vision_model" and config.global_pool not in ("map", "avg"):
        wanted["global_pool"] = "map"
    wrong = [f"{field}={getattr(config, field)!r}" for field, value in wanted.items()
             if getattr(config, field) != value]
    if wrong:
        needs = ", ".join(f"{field}={value!r}" for field, value in wanted.items())
        _refuse(f"transformers has no ViT family with this model's {', '.join(wrong)} (the closest, "
                f"{model_type}, needs {needs}; DeiT distillation, register tokens and LayerScale outside DINOv2 "
                "are not written to transformers)", _USE_TIMM)
    return model_type


def transformers_files(config, params, label_names=None) -> tuple[dict, dict[str, np.ndarray]]:
    """(config.json, tensors) of the transformers model that computes what a model of `config` with `params`
    computes.

    Example:
        >>> import vit_keras
        >>> from vit_keras.vision_transformer import config_of
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, include_top=False, layer_scale=True)  # a DINOv2 backbone
        >>> cfg, tensors = transformers_files(config_of(model), model_params(model))
        >>> cfg["model_type"]
        'dinov2'
    """
    out = transformers_config(config, params, label_names)
    table = hf.TABLES[out["model_type"]]
    # A task model keeps the base model under its prefix (`vit.`) and the classifier at the root.
    prefix = table.prefixes[0] if "head/kernel" in params else ""
    tensors = rules.invert_table(table, params, num_heads=config.num_heads, prefix=prefix, unprefixed=("head",))
    _read_back(table, tensors, params, config)
    return out, tensors


def transformers_config(config, params, label_names=None) -> dict:
    """The transformers config.json of a model of `config` with `params` (`transformers_files`' config), or a
    `ValueError` naming what transformers cannot hold.

    Example:
        >>> import vit_keras
        >>> from vit_keras.vision_transformer import config_of
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> transformers_config(config_of(model), model_params(model))["architectures"]
        ['ViTForImageClassification']
    """
    model_type = transformers_model_type(config)
    _check_complete(config, params)
    has_head = "head/kernel" in params
    has_pooler = "pre_logits/kernel" in params
    if has_head and model_type != "vit":
        _refuse(f"transformers' {model_type} classifiers do not read the pooled token the way this model's head "
                "does", "use format='timm', or save the backbone: rebuild with include_top=False")
    if model_type == "vit" and has_head == has_pooler:
        _refuse("transformers' ViTForImageClassification has a classifier without a pooler and ViTModel a pooler "
                "(vit_jax's pre_logits) without a classifier; this model has "
                + ("both" if has_head else "neither"), _USE_TIMM)
    size = config.reference_image_size
    if size[0] != size[1] and model_type in ("clip_vision_model", "siglip_vision_model"):
        _refuse(f"transformers' {model_type} takes square images; this model's are {size[0]}x{size[1]}", _USE_TIMM)
    out = {
        "architectures": ["ViTForImageClassification" if has_head else _HF_CLASSES[model_type]],
        "model_type": model_type, "hidden_size": config.hidden_size, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "hidden_act": HIDDEN_ACTS[config.activation],
        "layer_norm_eps": config.layer_norm_epsilon, "image_size": size[0] if size[0] == size[1] else list(size),
        "patch_size": config.patch_size, "num_channels": 3, "dtype": "float32",
    }
    if model_type == "dinov2":
        if config.mlp_dim % config.hidden_size:  # transformers 5 types Dinov2Config.mlp_ratio as an int
            _refuse(f"transformers' dinov2 takes an integer mlp_ratio; this model's mlp_dim {config.mlp_dim} is not "
                    f"a multiple of hidden_size {config.hidden_size}", _USE_TIMM)
        out.update(mlp_ratio=config.mlp_dim // config.hidden_size, layerscale_value=1.0, use_swiglu_ffn=False,
                   use_mask_token=False, qkv_bias=config.qkv_bias, hidden_dropout_prob=config.dropout_rate,
                   attention_probs_dropout_prob=config.attention_dropout_rate)
    else:
        out["intermediate_size"] = config.mlp_dim
    if model_type == "vit":
        out.update(qkv_bias=config.qkv_bias, hidden_dropout_prob=config.dropout_rate,
                   attention_probs_dropout_prob=config.attention_dropout_rate, pooler_act="tanh",
                   pooler_output_size=int(params["pre_logits/bias"].shape[0]) if has_pooler else config.hidden_size)
    if model_type in ("clip_vision_model", "siglip_vision_model"):
        out["attention_dropout"] = config.attention_dropout_rate
    if model_type == "siglip_vision_model":
        out["vision_use_head"] = config.global_pool == "map"
    if has_head:
        classes = int(params["head/bias"].shape[0])
        names = (_label_names(label_names, classes) if label_names is not None else
                 [f"LABEL_{i}" for i in range(classes)])
        out["id2label"] = {str(i): name for i, name in enumerate(names)}
        out["label2id"] = {name: i for i, name in enumerate(names)}
    return out


def _read_back(table, tensors, params, config):
    """The tensors read with the same table must give the model's arrays exactly (the table is one fact)."""
    back = rules.apply_table(table, tensors, num_heads=config.num_heads, source="the written tensors",
                             switches=rules.config_switches(config.to_dict()))
    differ = sorted(name for name in set(back) | set(params)
                    if name not in back or name not in params or not np.array_equal(back[name], params[name]))
    if differ:
        raise AssertionError(f"{table.family}: the written tensors read back differently for {differ}.")


# ---- the directory


def refuse_link(directory) -> None:
    """Refuse a `directory` that is a symbolic link: the directory is replaced as a whole, which would replace the
    link itself (breaking whatever else uses it) rather than write where it points."""
    path = os.path.abspath(os.fspath(directory))  # "link/" names the link too
    if os.path.islink(path):
        target = os.path.realpath(path)
        raise ValueError(f"{os.fspath(directory)!r} is a symbolic link to {os.readlink(path)!r} ({target}); "
                         "save_pretrained replaces a directory as a whole and would replace the link, not write "
                         f"where it points. Pass the target path ({target!r}) to save there, or remove the link.")


def is_empty_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path)


def save_pretrained(model, directory, format: str | None = None, *, overwrite: bool = False, normalization=None,
                    label_names=None) -> str:
    """Write `model` as a timm or transformers directory (`config.json` + `model.safetensors`) and return its path.

    `format` None is `"timm"` for a vision model; a zero-shot model (`vit_keras.zeroshot.ZeroShotModel`) is written
    as `"transformers"` (its default) or `"open_clip"` by its own `save_pretrained`, which these arguments reach.
    `format="timm"`: `timm.create_model(config["architecture"], pretrained=False, **config["model_args"])` loads
    the state dict with `strict=True` (and timm's `hf-hub:` loader, once uploaded); `pretrained_cfg` holds the
    model's normalisation (its preprocessing layer's, or `normalization=(mean, std)` for a model built with
    include_preprocessing=False). `format="transformers"`: `AutoModel.from_pretrained(directory)` (with a head:
    `ViTForImageClassification`) loads it with no missing or unexpected keys. The classifier's activation is not
    part of either: both libraries return logits. `label_names` (one per class) go into the config.

    The directory is written under a temporary name and renamed into place; an existing non-empty `directory` is
    refused unless `overwrite=True`, and a symbolic link always (pass the path it points to). A model the target
    cannot express is refused with a `ValueError` naming the field and the format that holds it.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> vit_keras.save_pretrained(model, "vit-ft", format="timm")
        'vit-ft'
        >>> vit_keras.from_pretrained("vit-ft").output_shape
        (None, 10)
    """
    writer = getattr(model, "save_pretrained", None)
    if callable(writer) and not isinstance(model, keras.Model):
        # A model of several towers (a `vit_keras.zeroshot.ZeroShotModel`) writes itself with its own formats.
        if normalization is not None or label_names is not None:
            raise ValueError("normalization= and label_names= describe a vision model's input and classes; a "
                             "zero-shot model keeps its normalisation in its image model and takes its classes as "
                             "texts: leave them out.")
        return writer(directory, format=format, overwrite=overwrite)
    format = "timm" if format is None else format
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}.")
    refuse_link(directory)
    from vit_keras.weights import model_config  # the package imports the readers this module builds on

    config = model_config(model)
    params = model_params(model)
    if format == "timm":
        normalization = normalization if normalization is not None else model_normalization(model)
        contents, tensors = timm_files(config, params, normalization, label_names)
    else:
        contents, tensors = transformers_files(config, params, label_names)
    directory = os.fspath(directory)
    with atomic_directory(directory, overwrite=overwrite or is_empty_dir(directory)) as tmp:
        write_directory(tmp, contents, tensors)
    return directory


def write_json(path: str, contents: dict) -> None:
    """`contents` as indented JSON at `path` (the config files every writer puts beside the weights)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(contents, f, indent=2)
        f.write("\n")


def write_directory(directory: str, contents: dict, tensors: dict[str, np.ndarray], *,
                    config_name: str = timm.CONFIG_NAME, weights_name: str = timm.WEIGHTS_NAME) -> None:
    """`config.json` and `model.safetensors` (torch's `format: pt` metadata) into `directory`, or the file names
    given: float arrays as float32 with their shape (a 0-d logit scale stays 0-d), other arrays (BatchNorm's int64
    `num_batches_tracked`) as stored, as torch's readers load them.

    Example:
        >>> import os
        >>> os.makedirs("vit-dir")
        >>> write_directory("vit-dir", {"architecture": "vit_base_patch16_224"}, {"cls_token": np.zeros((1, 1, 48))})
        >>> sorted(os.listdir("vit-dir"))
        ['config.json', 'model.safetensors']
    """
    from safetensors.numpy import save_file

    write_json(os.path.join(directory, config_name), contents)
    # np.array, not np.ascontiguousarray, which makes a 0-d array 1-d.
    arrays = {key: np.array(value, np.float32 if np.issubdtype(np.asarray(value).dtype, np.floating) else None,
                            order="C") for key, value in tensors.items()}
    save_file(arrays, os.path.join(directory, weights_name), metadata={"format": "pt"})
