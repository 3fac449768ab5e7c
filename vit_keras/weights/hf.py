"""Read Hugging Face `transformers` vision towers (`config.json` + `model.safetensors`) without torch.

Supported `model_type`s: `vit` (`ViTModel`, `ViTForImageClassification`: the pooler `tanh(dense(token))` is vit_jax's
`pre_logits`), `dinov2` (`Dinov2Model`: LayerScale), `clip_vision_model` (`CLIPVisionModel`: `pre_layrnorm`,
quick-GELU, `post_layernorm` on the class token only) and `siglip_vision_model` (`SiglipVisionModel`: no class
token, `post_layernorm` on every token, the attention-pooling `head`), `radio` (`RadioModel`: several class
tokens and registers, a bias-free linear patch embedding, the cropped position table, the input conditioner inside
the model, no final norm); and the 2025-26 towers `dinov3_vit`, `ijepa`, `aimv2_vision_model` and the vision tower
of `aimv2` (`vit_keras.weights.hf_families`). Each is a table
of rules (`TABLES`, see `vit_keras.weights.rules`) onto the canonical vit_jax names, plus a partial `ViTConfig` read
off `config.json`; errors name the file and the key, and a tensor the config promises but the file lacks is refused,
never invented.

Example:
    >>> params, config = read_hf_dir("tests/fixtures/hf_dir/hf_model")  # a tiny transformers ViT directory
    >>> params["cls"].shape, config["hidden_size"]
    ((1, 1, 48), 48)
"""

from __future__ import annotations

import os

import numpy as np

from vit_keras.configs import check_input_normalization
from vit_keras.weights import hf_families, hub, json_config, rules, schema
from vit_keras.weights.safetensors_io import read_safetensors

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = hub.INDEX_NAME
PICKLE_NAMES = ("pytorch_model.bin", "model.bin", "pytorch_model.pt")
# hidden_act values -> ViTConfig.activation (HF's "gelu" is exact erf; the tanh forms are the approximations).
_HIDDEN_ACTS = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "gelu_fast": "gelu_tanh", "quick_gelu": "quick_gelu"}
# The model types this module reads itself -> the transformers classes that write them (the docs' families tables).
MODEL_CLASSES = {"vit": "ViTModel, ViTForImageClassification", "dinov2": "Dinov2Model",
                 "clip_vision_model": "CLIPVisionModel", "siglip_vision_model": "SiglipVisionModel",
                 "siglip2_vision_model": "Siglip2VisionModel", "radio": "RadioModel"}
MODEL_TYPES = (*MODEL_CLASSES, *hf_families.MODEL_TYPES)
# SigLIP 2 NaFlex: no fixed image size; the position grid is resized per image with torch's antialiased bilinear.
NAFLEX_MODEL_TYPES = ("siglip2_vision_model",)
# RadioModel's buffers that are not weights: its input conditioner (config.json's norm_mean / norm_std, as (3, 1, 1))
# and which class tokens its summary reads. Checked against config.json (`_radio_buffers`), never loaded.
RADIO_BUFFERS = ("input_conditioner.norm_mean", "input_conditioner.norm_std", "summary_idxs")
RADIO_TOKENS = "patch_generator.cls_token.token"


# The tables of the supported model types (transformers 5.x modeling_vit / _dinov2 / _clip / _siglip; see `rules`).
def _embeddings(cls: str, pos: tuple[str, rules.Transform], patch: str, cls_rank: int = 3) -> tuple:
    return (
        rules.Rule(patch, "embedding", rules.PATCH, required=True, bias="patch_bias"),
        rules.Rule(cls, "cls", rules.tokens(rank=cls_rank)),
        rules.Rule(pos[0], schema.POS_EMBEDDING, pos[1]),
    )


def _block(layer: str, norm_1: str, norm_2: str, qkv: tuple[str, str, str], out: str, mlp: tuple[str, str]):
    block = f"{layer}.{{i}}"
    return (
        rules.Rule(f"{block}.{norm_1}", schema.BLOCK_NORM_1, rules.NORM, required=True),
        *[rules.Rule(f"{block}.{source}", f"{schema.BLOCK_ATTENTION}/{target}", rules.HEADS_IN, required=True,
                     bias="qkv_bias") for source, target in zip(qkv, ("query", "key", "value"))],
        rules.Rule(f"{block}.{out}", f"{schema.BLOCK_ATTENTION}/out", rules.HEADS_OUT, required=True),
        rules.Rule(f"{block}.{norm_2}", schema.BLOCK_NORM_2, rules.NORM, required=True),
        rules.Rule(f"{block}.{mlp[0]}", schema.BLOCK_MLP_IN, rules.LINEAR, required=True),
        rules.Rule(f"{block}.{mlp[1]}", schema.BLOCK_MLP_OUT, rules.LINEAR, required=True),
    )


_VIT_EMBEDDINGS = _embeddings("embeddings.cls_token", ("embeddings.position_embeddings", rules.TOKENS),
                              "embeddings.patch_embeddings.projection")
_VIT_QKV = ("attention.attention.query", "attention.attention.key", "attention.attention.value")
_CLIP_EMBEDDINGS = _embeddings("embeddings.class_embedding",
                               ("embeddings.position_embedding", rules.tokens("weight", rank=2)),
                               "embeddings.patch_embedding", cls_rank=1)
_CLIP_BLOCKS = _block("encoder.layers", "layer_norm1", "layer_norm2",
                      ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "self_attn.out_proj",
                      ("mlp.fc1", "mlp.fc2"))
_MAP = "attention-pooling head"
_SIGLIP_TOP = (
    # SigLIP normalises every token: its post_layernorm is the final norm.
    rules.Rule("post_layernorm", schema.ENCODER_NORM, rules.NORM, required=True),
    rules.Rule("head.probe", f"{schema.MAP_HEAD}/probe", rules.TOKENS, part=_MAP),
    rules.Rule("head.attention.in_proj", schema.MAP_ATTENTION, rules.fused("query", "key", "value", sep="_"),
               part=_MAP),
    rules.Rule("head.attention.out_proj", f"{schema.MAP_ATTENTION}/out", rules.HEADS_OUT, part=_MAP),
    rules.Rule("head.layernorm", schema.MAP_NORM, rules.NORM, part=_MAP),
    rules.Rule("head.mlp.fc1", schema.MAP_MLP_IN, rules.LINEAR, part=_MAP),
    rules.Rule("head.mlp.fc2", schema.MAP_MLP_OUT, rules.LINEAR, part=_MAP),
)
TABLES = {
    "vit": rules.Table("Hugging Face vit", (
        *_VIT_EMBEDDINGS,
        *_block("encoder.layer", "layernorm_before", "layernorm_after", _VIT_QKV, "attention.output.dense",
                ("intermediate.dense", "output.dense")),
        rules.Rule("layernorm", schema.ENCODER_NORM, rules.NORM),
        # ViTModel's pooler, tanh(dense(token)), is vit_jax's pre_logits.
        rules.Rule("pooler.dense", "pre_logits", rules.LINEAR),
        rules.Rule("classifier", "head", rules.LINEAR),
    ), prefixes=("vit.",), ignored=("embeddings.mask_token",)),
    "dinov2": rules.Table("Hugging Face dinov2", (
        *_VIT_EMBEDDINGS,
        *_block("encoder.layer", "norm1", "norm2", _VIT_QKV, "attention.output.dense", ("mlp.fc1", "mlp.fc2")),
        rules.Rule("encoder.layer.{i}.layer_scale1", schema.BLOCK_SCALE_1, rules.scale("lambda1"), required=True),
        rules.Rule("encoder.layer.{i}.layer_scale2", schema.BLOCK_SCALE_2, rules.scale("lambda1"), required=True),
        rules.Rule("layernorm", schema.ENCODER_NORM, rules.NORM),
        rules.Rule("classifier", "head", rules.LINEAR),
    ), prefixes=("dinov2.",), ignored=("embeddings.mask_token",)),
    "clip_vision_model": rules.Table("Hugging Face clip_vision_model", (
        *_CLIP_EMBEDDINGS,
        rules.Rule("pre_layrnorm", "pre_norm", rules.NORM, required=True),
        *_CLIP_BLOCKS,
        # CLIP normalises the pooled class token only: its post_layernorm is fc_norm.
        rules.Rule("post_layernorm", "fc_norm", rules.NORM, required=True),
    ), prefixes=("vision_model.",)),
    "siglip_vision_model": rules.Table("Hugging Face siglip_vision_model", (
        *_CLIP_EMBEDDINGS,
        *_CLIP_BLOCKS,
        *_SIGLIP_TOP,
    ), prefixes=("vision_model.",)),
    # Siglip2VisionModel: a Linear on (row, column, channel)-flattened patches, a square position grid.
    "siglip2_vision_model": rules.Table("Hugging Face siglip2_vision_model", (
        rules.Rule("embeddings.patch_embedding", "embedding", rules.LINEAR_PATCH, required=True, bias="patch_bias"),
        rules.Rule("embeddings.position_embedding", schema.POS_EMBEDDING, rules.tokens("weight", rank=2),
                   required=True),
        *_CLIP_BLOCKS,
        *_SIGLIP_TOP,
    ), prefixes=("vision_model.",)),
    # transformers' RadioModel writes the original RADIO names (radio_model.model.*); the timm-style block.
    "radio": rules.Table("Hugging Face radio", (
        rules.Rule("patch_generator.embedder", "embedding", rules.LINEAR_PATCH_CHW, required=True),
        # The class tokens, then the registers, in one (num_cls_tokens + num_registers, D) tensor: `canonicalize`
        # splits it by config.json's counts (`_split_radio_tokens`).
        rules.Rule(RADIO_TOKENS, "cls", rules.TOKENS, required=True),
        rules.Rule("patch_generator.pos_embed", schema.POS_EMBEDDING, rules.TOKENS, required=True),
        rules.Rule("blocks.{i}.norm1", schema.BLOCK_NORM_1, rules.NORM, required=True),
        rules.Rule("blocks.{i}.attn.qkv", schema.BLOCK_ATTENTION, rules.fused("query", "key", "value"),
                   required=True, bias="qkv_bias"),
        rules.Rule("blocks.{i}.attn.proj", f"{schema.BLOCK_ATTENTION}/out", rules.HEADS_OUT, required=True),
        rules.Rule("blocks.{i}.layer_scale1", schema.BLOCK_SCALE_1, rules.scale("lambda1"), required=True),
        rules.Rule("blocks.{i}.norm2", schema.BLOCK_NORM_2, rules.NORM, required=True),
        rules.Rule("blocks.{i}.mlp.fc1", schema.BLOCK_MLP_IN, rules.LINEAR, required=True),
        rules.Rule("blocks.{i}.mlp.fc2", schema.BLOCK_MLP_OUT, rules.LINEAR, required=True),
        rules.Rule("blocks.{i}.layer_scale2", schema.BLOCK_SCALE_2, rules.scale("lambda1"), required=True),
    ), prefixes=("radio_model.model.", "radio_model."), ignored=RADIO_BUFFERS,
        refused=(("video_embedder", "a video patch embedding"), ("mlp.w12", "a SwiGLU MLP (use_swiglu_ffn)"))),
}


def is_hf_dir(path: str) -> bool:
    """Whether `path` is a `save_pretrained` directory (it has a config.json).

    Example:
        >>> is_hf_dir("/nonexistent")
        False
    """
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG_NAME))


def read_config(path: str) -> dict:
    """The `config.json` of an HF directory, checked for what vit_keras can run.

    Example:
        >>> read_config("tests/fixtures/hf_dir/hf_model")["hidden_size"]
        48
    """
    file = os.path.join(path, CONFIG_NAME)
    config = json_config.load(file)
    model_type = json_config.require(config, "model_type", str, file, default="vit")
    if model_type in ("clip", "siglip", "siglip2") and isinstance(config.get("vision_config"), dict):
        tower = {"clip": "CLIP", "siglip": "Siglip", "siglip2": "Siglip2"}[model_type]
        raise ValueError(f"{path!r} holds a whole {model_type} model (text and vision); save its vision tower "
                         f"({tower}VisionModel) and load that directory.")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"{path!r} holds a {model_type!r} model; vit_keras reads Hugging Face {MODEL_TYPES}.")
    if model_type in hf_families.MODEL_TYPES:  # checked by its own keys (architecture)
        hf_families.architecture(config, file)
        return config
    act = json_config.require(config, "hidden_act", str, file, default="gelu")
    if act not in _HIDDEN_ACTS:
        raise ValueError(f"{file!r}: hidden_act {act!r} is not a GELU; vit_keras supports {sorted(_HIDDEN_ACTS)}.")
    if json_config.require(config, "num_channels", int, file, default=3) != 3:
        raise ValueError(f"{file!r}: num_channels {config['num_channels']} (vit_keras checkpoints take RGB).")
    if config.get("use_swiglu_ffn"):
        raise ValueError(f"{file!r}: use_swiglu_ffn (a SwiGLU MLP, as in DINOv2 giant) is not implemented for "
                         f"Hugging Face {model_type!r} checkpoints in vit_keras.")
    if model_type == "radio":
        video = sorted(key for key in ("video_patch_dim", "video_temporal_patch_size") if config.get(key) is not None)
        if video:
            raise ValueError(f"{file!r}: {video} describe RADIO's video patch embedding, which vit_keras does not "
                             "implement (it reads image-only RadioModel checkpoints).")
    return config


def architecture(config: dict, path: str) -> dict:
    """The `ViTConfig` fields an HF config.json gives (the rest is read off the weights).

    Example:
        >>> architecture({"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3,
        ...               "intermediate_size": 96, "patch_size": 8, "image_size": 32}, "x")["mlp_dim"]
        96
    """
    file = os.path.join(path, CONFIG_NAME)
    model_type = config.get("model_type", "vit")
    if model_type in hf_families.MODEL_TYPES:
        return hf_families.architecture(config, file)
    # save_pretrained always writes the sizes; a config without them is refused by name rather than given
    # transformers' class defaults, which would only surface later as shape mismatches.
    hidden = json_config.require(config, "hidden_size", int, file, positive=True)
    fields = {
        "hidden_size": hidden,
        "num_layers": json_config.require(config, "num_hidden_layers", int, file, positive=True),
        "num_heads": json_config.require(config, "num_attention_heads", int, file, positive=True),
        "patch_size": json_config.require(config, "patch_size", int, file, positive=True),
        "image_size": (_naflex_image_size(config, file) if model_type in NAFLEX_MODEL_TYPES
                       else json_config.size_pair(config, "image_size", file)),
        "activation": _HIDDEN_ACTS[config.get("hidden_act", "gelu")],
        "layer_norm_epsilon": float(json_config.require(config, "layer_norm_eps", float, file, positive=True,
                                                        default=1e-12 if model_type == "vit" else 1e-6)),
        "qkv_bias": json_config.require(config, "qkv_bias", bool, file, default=True),
    }
    if model_type in ("dinov2", "radio"):
        ratio = json_config.require(config, "mlp_ratio", float, file, default=4, positive=True)
        fields.update(mlp_dim=int(hidden * ratio), layer_scale=True)
    else:
        fields["mlp_dim"] = json_config.require(config, "intermediate_size", int, file, default=4 * hidden,
                                                positive=True)
    if model_type == "clip_vision_model":
        fields.update(pre_norm=True, fc_norm=True, patch_bias=False)
    if model_type in ("siglip_vision_model", *NAFLEX_MODEL_TYPES):
        use_head = json_config.require(config, "vision_use_head", bool, file, default=True)
        fields.update(class_token=False, global_pool="map" if use_head else "avg")
    if model_type == "radio":
        fields.update(_radio_fields(config, file, fields["patch_size"]))
    return fields


def _naflex_image_size(config: dict, file: str) -> tuple[int, int]:
    """The image size of a SigLIP 2 NaFlex position grid: `num_patches` (a square grid) times the patch size."""
    num_patches = json_config.require(config, "num_patches", int, file, positive=True)
    side = int(round(num_patches ** 0.5))
    if side * side != num_patches:
        raise ValueError(f"{file!r}: num_patches {num_patches} is not a square grid, which Siglip2VisionModel "
                         "stores; check the config.")
    patch = json_config.require(config, "patch_size", int, file, positive=True)
    return side * patch, side * patch


def preprocessor_normalization(path: str) -> tuple | None:
    """The (mean, std) of a transformers directory's `preprocessor_config.json` (the normalisation its model was
    trained with, on [0, 1] images), None when there is no such file. `do_normalize: false` is mean 0, std 1.

    Example:
        >>> preprocessor_normalization("/nonexistent") is None
        True
    """
    file = os.path.join(path, hub.PREPROCESSOR_NAME)
    if not os.path.isfile(file):
        return None
    config = json_config.load(file)
    if config.get("do_normalize", True) is False:
        return (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    rescale = config.get("rescale_factor", 1 / 255)
    if not isinstance(rescale, int | float) or abs(rescale * 255 - 1) > 1e-6:
        raise ValueError(f"{file!r}: rescale_factor {rescale!r} is not 1/255; vit_keras models take [0, 255] images "
                         "and scale them by 1/255 before the normalisation.")
    mean = json_config.require(config, "image_mean", list, file)
    std = json_config.require(config, "image_std", list, file)
    if len(mean) != 3 or len(std) != 3 or not all(isinstance(v, int | float) for v in mean + std):
        raise ValueError(f"{file!r}: image_mean and image_std must be 3 numbers each, got {mean!r}, {std!r}.")
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


def _radio_fields(config: dict, file: str, patch: int) -> dict:
    """RadioModel's parts: its class tokens and registers (no position embeddings on either), the bias-free patch
    embedding, the (max_img_size / patch)² position table cropped per image, the input conditioner, no final norm."""
    max_size = json_config.require(config, "max_img_size", int, file, positive=True)
    if max_size % patch:
        raise ValueError(f"{file!r}: max_img_size {max_size} is not a multiple of patch_size {patch}.")
    mean = json_config.require(config, "norm_mean", list, file)
    std = json_config.require(config, "norm_std", list, file)
    try:
        conditioner = check_input_normalization((mean, std))
    except ValueError as error:
        raise ValueError(f"{file!r}: norm_mean / norm_std: {error}") from error
    if len(conditioner[0]) != 3:
        raise ValueError(f"{file!r}: norm_mean / norm_std must have 3 values (RGB), got {mean!r}, {std!r}.")
    return {
        "num_class_tokens": json_config.require(config, "num_cls_tokens", int, file, positive=True),
        "num_register_tokens": json_config.require(config, "num_registers", int, file, default=0),
        "no_embed_class": True, "patch_bias": False, "final_norm": False, "fc_norm": False, "global_pool": "token",
        "pos_interpolation": "bilinear_crop", "pos_grid": (max_size // patch, max_size // patch),
        "input_normalization": conditioner,
    }


def _radio_buffers(tensors, config: dict, fields: dict, source: str) -> None:
    """RadioModel's buffers must say what its config.json says: the conditioner's mean and std (float32 copies of
    the config's values), and a summary of all its class tokens in order (the summary vit_keras pools)."""
    mean, std = fields["input_normalization"]
    for name, values in (("norm_mean", mean), ("norm_std", std)):
        key = next((k for k in tensors if k.endswith(f"input_conditioner.{name}")), None)
        if key is None:
            continue
        found = np.asarray(tensors[key], np.float64).reshape(-1)
        expected = np.asarray(values, np.float32).astype(np.float64)
        if found.shape != expected.shape or not np.allclose(found, expected, rtol=1e-6, atol=0.0):
            raise ValueError(f"{source}: {key} is {found.tolist()} but config.json's {name} is {list(values)}; "
                             "nothing was loaded. Check that the file and its config.json describe the same model.")
    key = next((k for k in tensors if k.endswith("summary_idxs")), None)
    indices = config.get("summary_idxs") if key is None else np.asarray(tensors[key]).reshape(-1).tolist()
    wanted = list(range(fields["num_class_tokens"]))
    if indices is not None and list(indices) != wanted:
        raise ValueError(f"{source}: summary_idxs {list(indices)} (in {key or 'config.json'}) picks some of the "
                         f"{fields['num_class_tokens']} class tokens; vit_keras pools all of them in order ({wanted}). "
                         "Read the tokens (pooling=None) and pick the summary's class tokens yourself.")


def _split_radio_tokens(params: dict, tensors, fields: dict, source: str) -> dict:
    """The combined (class tokens + registers) tensor as `cls` (1, n_cls, D) and `reg` (1, n_reg, D)."""
    tokens = params.pop("cls")
    n_cls, n_reg = fields["num_class_tokens"], fields["num_register_tokens"]
    if tokens.shape[1] != n_cls + n_reg:
        key = next((k for k in tensors if k.endswith(RADIO_TOKENS)), RADIO_TOKENS)
        raise ValueError(f"{source}: {key} has shape {tuple(np.shape(tensors[key]))} ({tokens.shape[1]} tokens) but "
                         f"config.json says num_cls_tokens {n_cls} + num_registers {n_reg} = {n_cls + n_reg}, i.e. "
                         f"shape ({n_cls + n_reg}, {tokens.shape[2]}); nothing was loaded. Check that the file and "
                         "its config.json describe the same model.")
    params["cls"] = tokens[:, :n_cls]
    if n_reg:
        params["reg"] = tokens[:, n_cls:]
    return params


def read_tensors(path: str) -> dict:
    """The tensors of an HF directory: its `model.safetensors`, or every shard a `model.safetensors.index.json`
    names (large transformers checkpoints are sharded); pickle-only directories are refused.

    Example:
        >>> tensors = read_tensors("tests/fixtures/hf_dir/hf_model")
        >>> tensors["vit.embeddings.cls_token"].shape
        (1, 1, 48)
    """
    if not os.path.isfile(os.path.join(path, WEIGHTS_NAME)) and os.path.isfile(os.path.join(path, INDEX_NAME)):
        return hub.read_shards(path)
    return read_safetensors(weights_file(path))


def weights_file(path: str) -> str:
    """The safetensors file of an HF directory; pickle-only directories are refused.

    Example:
        >>> weights_file("tests/fixtures/hf_dir/hf_model")
        'tests/fixtures/hf_dir/hf_model/model.safetensors'
    """
    candidate = os.path.join(path, WEIGHTS_NAME)
    if os.path.isfile(candidate):
        return candidate
    if os.path.isfile(os.path.join(path, INDEX_NAME)):
        raise ValueError(f"{path!r} is a sharded checkpoint; read it with read_tensors (one file was asked for).")
    pickles = [name for name in PICKLE_NAMES if os.path.isfile(os.path.join(path, name))]
    if pickles:
        raise ValueError(
            f"{path!r} only has {pickles[0]}, a pickle file, which vit_keras does not load (unpickling can run "
            "code). Use the model's model.safetensors twin (on the Hub: the same repo, or "
            "`save_pretrained(..., safe_serialization=True)`)."
        )
    raise ValueError(f"{path!r} has no {WEIGHTS_NAME}.")


def gelu_approximate(config: dict) -> bool | None:
    """Whether the config's activation is the tanh GELU (False: exact erf; None: quick-GELU).

    Example:
        >>> gelu_approximate({"hidden_act": "gelu"})
        False
    """
    return {"gelu_tanh": True, "gelu": False}.get(_HIDDEN_ACTS[config.get("hidden_act", "gelu")])


def canonicalize(tensors: dict[str, np.ndarray], config: dict, *, source: str | None = None) -> dict[str, np.ndarray]:
    """HF tensors -> the canonical vit_jax raw-name dict, by the model type's table (`TABLES`).

    A tensor the architecture in `config` needs and the file lacks (a projection's weight; a q/k/v bias when the
    config says `qkv_bias`) is refused, naming its transformers key and `source` (default: the file the tensors
    were read from).

    Example:
        >>> config = read_config("tests/fixtures/hf_dir/hf_model")
        >>> params = canonicalize(read_safetensors("tests/fixtures/hf_dir/hf_model/model.safetensors"), config)
        >>> params["Transformer/encoder_norm/scale"].shape
        (48,)
    """
    source = rules.source_name(tensors, source)
    model_type = config.get("model_type", "vit")
    if model_type in hf_families.MODEL_TYPES:
        return hf_families.canonicalize(tensors, config, source, os.path.join(os.path.dirname(source), CONFIG_NAME))
    if model_type not in TABLES:
        raise ValueError(f"{source}: a {model_type!r} model; vit_keras reads Hugging Face {MODEL_TYPES}.")
    fields = architecture(config, os.path.dirname(source))
    if model_type == "radio":
        _radio_buffers(tensors, config, fields, source)
    params = rules.apply_table(TABLES[model_type], tensors, num_heads=fields["num_heads"], source=source,
                               switches=rules.config_switches(fields), fields=fields)
    if model_type == "radio":
        params = _split_radio_tokens(params, tensors, fields, source)
    return params


def read_hf_dir(path: str) -> tuple[dict[str, np.ndarray], dict]:
    """Read an HF directory into (canonical params, config.json).

    Example:
        >>> params, config = read_hf_dir("tests/fixtures/hf_dir/hf_model")
        >>> config["model_type"], params["head/kernel"].shape
        ('vit', (48, 7))
    """
    config = read_config(path)
    return canonicalize(read_tensors(path), config), config
