"""Read Hugging Face `transformers` vision towers (`config.json` + `model.safetensors`) without torch.

Every model type is one `Family` row of `vit_keras.weights.hf_family_rows` (`FAMILIES`, looked up by config.json's
`model_type`): the `ViTConfig` fields it fixes, the config.json keys it reads or refuses, its rule table onto the
canonical vit_jax names (`vit_keras.weights.rules`) and, where a family needs code, its hooks. This module reads a
directory with that row; errors name the file and the key, and a tensor the config promises but the file lacks is
refused, never invented.

Example:
    >>> params, config = read_hf_dir("tests/fixtures/hf_dir/hf_model")  # a tiny transformers ViT directory
    >>> params["cls"].shape, config["hidden_size"]
    ((1, 1, 48), 48)
"""

from __future__ import annotations

import os

import numpy as np

from vit_keras.weights import hf_family_rows, hub, json_config, rules
from vit_keras.weights.hf_family_record import HIDDEN_ACTS, Family
from vit_keras.weights.safetensors_io import read_safetensors

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = hub.INDEX_NAME
PICKLE_NAMES = ("pytorch_model.bin", "model.bin", "pytorch_model.pt")
MODEL_TYPES = hf_family_rows.MODEL_TYPES
NAFLEX_MODEL_TYPES = hf_family_rows.NAFLEX_MODEL_TYPES
TABLES = hf_family_rows.TABLES


def family_of(config: dict, file: str) -> tuple[Family, dict]:
    """The `Family` row that reads `config` (config.json's `model_type`, "vit" when absent) and the tower config it
    reads: `config` itself, or a whole image-text model's `vision_config`.

    Example:
        >>> family, tower = family_of({"model_type": "aimv2", "vision_config": {"hidden_size": 48}}, "config.json")
        >>> family.classes, tower["hidden_size"]
        ('Aimv2VisionModel', 48)
    """
    model_type = json_config.require(config, "model_type", str, file, default="vit")
    if model_type in hf_family_rows.REFUSED_WHOLE_MODELS:
        tower = hf_family_rows.REFUSED_WHOLE_MODELS[model_type].classes
        raise ValueError(f"{os.path.dirname(file) or file!r} holds a whole {model_type} model (text and vision); save "
                         f"its vision tower ({tower}) and load that directory.")
    if model_type in hf_family_rows.WHOLE_MODELS:
        tower_type = hf_family_rows.WHOLE_MODELS[model_type][0]
        config = {**json_config.require(config, "vision_config", dict, file), "model_type": tower_type}
        model_type = tower_type
    family = hf_family_rows.FAMILIES.get(model_type)
    if family is None:
        raise ValueError(f"{file!r} holds a {model_type!r} model; vit_keras reads Hugging Face {MODEL_TYPES}.")
    return family, config


def is_hf_dir(path: str) -> bool:
    """Whether `path` is a `save_pretrained` directory (it has a config.json).

    Example:
        >>> is_hf_dir("/nonexistent")
        False
    """
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG_NAME))


def read_config(path: str) -> dict:
    """The `config.json` of an HF directory, checked for what vit_keras can run (`Family.check`).

    Example:
        >>> read_config("tests/fixtures/hf_dir/hf_model")["hidden_size"]
        48
    """
    file = os.path.join(path, CONFIG_NAME)
    config = json_config.load(file)
    family, tower = family_of(config, file)
    family.check(tower, file)
    return config


def architecture(config: dict, path: str) -> dict:
    """The `ViTConfig` fields an HF config.json (in the directory `path`) gives; the rest is read off the weights.

    Example:
        >>> architecture({"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3,
        ...               "intermediate_size": 96, "patch_size": 8, "image_size": 32}, "x")["mlp_dim"]
        96
    """
    file = os.path.join(path, CONFIG_NAME)
    family, tower = family_of(config, file)
    return family.read(tower, file)[0]


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
    return normalization_of(json_config.load(file), file)


def normalization_of(config: dict, file: str) -> tuple:
    """The (mean, std) an image processor's config (a `preprocessor_config.json`, named by `file` in messages)
    normalises [0, 1] images with.

    Example:
        >>> normalization_of({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}, "preprocessor.json")
        ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    """
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
    return {"gelu_tanh": True, "gelu": False}.get(HIDDEN_ACTS[config.get("hidden_act", "gelu")])


def canonicalize(tensors: dict[str, np.ndarray], config: dict, *, source: str | None = None) -> dict[str, np.ndarray]:
    """HF tensors -> the canonical vit_jax raw-name dict, by the rule table of the model type's `Family`.

    A tensor the architecture in `config` needs and the file lacks (a projection's weight; a q/k/v bias when the
    config says `qkv_bias`), one the config rules out, or registers of another count are refused, naming its
    transformers key and `source` (default: the file the tensors were read from).

    Example:
        >>> config = read_config("tests/fixtures/hf_dir/hf_model")
        >>> params = canonicalize(read_safetensors("tests/fixtures/hf_dir/hf_model/model.safetensors"), config)
        >>> params["Transformer/encoder_norm/scale"].shape
        (48,)
    """
    source = rules.source_name(tensors, source)
    file = os.path.join(os.path.dirname(source), CONFIG_NAME)
    family, tower = family_of(config, file)
    if tower is not config:  # a whole image-text model read as its vision tower: the other towers are not read
        tensors = {key: value for key, value in tensors.items() if not key.startswith(family.whole.others)}
    fields, switches = family.read(tower, file)
    params = rules.apply_table(family.rule_table(fields, switches), tensors, num_heads=fields["num_heads"],
                               source=source, switches=switches, fields=fields)
    if family.finish is not None:
        params = family.finish(params, tensors, tower, fields, source)
    _check_registers(params, tensors, fields, source, file)
    return params


def _check_registers(params, tensors, fields: dict, source: str, file: str) -> None:
    """The file's register tokens must be as many as the config says (a table reads whatever count it finds)."""
    registers, expected = (params["reg"].shape[1] if "reg" in params else 0), fields.get("num_register_tokens", 0)
    if registers != expected:
        found = [key for key in tensors if key.endswith("register_tokens")]
        what = f"{found[0]} has shape {tuple(tensors[found[0]].shape)}" if found else "the file has no register tokens"
        raise ValueError(f"{source}: {what}, but {file!r} says num_register_tokens={expected} (shape (1, {expected}, "
                         f"{fields['hidden_size']})); nothing was loaded. Check that the file and its config describe "
                         "the same model.")


def read_hf_dir(path: str) -> tuple[dict[str, np.ndarray], dict]:
    """Read an HF directory into (canonical params, config.json).

    Example:
        >>> params, config = read_hf_dir("tests/fixtures/hf_dir/hf_model")
        >>> config["model_type"], params["head/kernel"].shape
        ('vit', (48, 7))
    """
    config = read_config(path)
    return canonicalize(read_tensors(path), config), config
