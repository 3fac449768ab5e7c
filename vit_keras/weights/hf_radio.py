"""RadioModel's hooks (`vit_keras.weights.hf_family_rows`' `radio` row): the parts of its config.json that are not one
key per field, and the buffers and combined token tensor its file holds.

RadioModel has several class tokens and registers (no position embeddings on either), a bias-free linear patch
embedding, the (max_img_size / patch)² position table cropped per image, the input conditioner inside the model and
no final norm.

Example:
    >>> fields = radio_fields({"max_img_size": 64, "norm_mean": [0.5] * 3, "norm_std": [0.5] * 3, "num_cls_tokens": 2},
    ...                       "config.json", {"patch_size": 8}, {})
    >>> fields["pos_grid"], fields["num_class_tokens"]
    ((8, 8), 2)
"""

from __future__ import annotations

import numpy as np

from vit_keras.configs import check_input_normalization
from vit_keras.weights import json_config

# RadioModel's buffers that are not weights: its input conditioner (config.json's norm_mean / norm_std, as (3, 1, 1))
# and which class tokens its summary reads. Checked against config.json (`finish`), never loaded.
BUFFERS = ("input_conditioner.norm_mean", "input_conditioner.norm_std", "summary_idxs")
# The class tokens, then the registers, in one (num_cls_tokens + num_registers, D) tensor, split by `finish`.
TOKENS = "patch_generator.cls_token.token"


def radio_fields(config: dict, file: str, fields: dict, biases: dict) -> dict:
    """The `ViTConfig` fields of RadioModel's parts (the `derive` hook)."""
    patch = fields["patch_size"]
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
        "pos_grid": (max_size // patch, max_size // patch), "input_normalization": conditioner,
    }


def finish(params: dict, tensors, config: dict, fields: dict, source: str) -> dict:
    """The `finish` hook: the buffers checked against config.json, the combined tokens split."""
    _check_buffers(tensors, config, fields, source)
    return _split_tokens(params, tensors, fields, source)


def _check_buffers(tensors, config: dict, fields: dict, source: str) -> None:
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


def _split_tokens(params: dict, tensors, fields: dict, source: str) -> dict:
    """The combined (class tokens + registers) tensor as `cls` (1, n_cls, D) and `reg` (1, n_reg, D)."""
    tokens = params.pop("cls")
    n_cls, n_reg = fields["num_class_tokens"], fields["num_register_tokens"]
    if tokens.shape[1] != n_cls + n_reg:
        key = next((k for k in tensors if k.endswith(TOKENS)), TOKENS)
        raise ValueError(f"{source}: {key} has shape {tuple(np.shape(tensors[key]))} ({tokens.shape[1]} tokens) but "
                         f"config.json says num_cls_tokens {n_cls} + num_registers {n_reg} = {n_cls + n_reg}, i.e. "
                         f"shape ({n_cls + n_reg}, {tokens.shape[2]}); nothing was loaded. Check that the file and "
                         "its config.json describe the same model.")
    params["cls"] = tokens[:, :n_cls]
    if n_reg:
        params["reg"] = tokens[:, n_cls:]
    return params
