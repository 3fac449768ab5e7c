"""`save_pretrained` for the task models `vit_keras.dense.from_pretrained` loads: the transformers directory back
(`config.json` + `model.safetensors`), each array written by running the model type's rule table backwards
(`vit_keras.weights.rules.invert_table`), so that `<Model>.from_pretrained(directory)` reloads it with no missing or
unexpected keys and computes the same outputs.

Example:
    >>> from vit_keras import dense
    >>> model = dense.from_pretrained("tests/fixtures/tasks/vitpose_simple/checkpoint")
    >>> save_pretrained(model, "vitpose-copy")
    'vitpose-copy'
    >>> sorted(os.listdir("vitpose-copy"))
    ['config.json', 'model.safetensors']
"""

from __future__ import annotations

import copy
import os

from vit_keras.dense.tasks.families import TASK_FAMILIES, read_backbone
from vit_keras.files import atomic_directory
from vit_keras.weights import rules
from vit_keras.weights.save import model_params, write_directory


def _fixed_size_config(model, family, config: dict) -> dict:
    """The config with the backbone's `image_size` the model's own where it was built for one size (Depth
    Anything's position table was resized to it at load)."""
    size = tuple(model.input_shape[1:3])
    if family.model_type != "depth_anything" or None in size:
        return config
    if size[0] != size[1]:
        raise ValueError(f"{model.name!r} was built for {size[0]}x{size[1]} images, which a Dinov2Config (one "
                         "square image_size) cannot state; load the checkpoint without image_size (any size) and "
                         "save that model.")
    config["backbone_config"]["image_size"] = size[0]
    return config


def save_pretrained(model, directory, *, overwrite: bool = False) -> str:
    """Write a task model loaded by `vit_keras.dense.from_pretrained` as a transformers directory and return its
    path: the loaded config (with a fixed-size Depth Anything's image size), every weight as the model holds it,
    and the tensors the model does not hold (buffers, DINOv2's mask token, the blocks after the last stage it reads)
    as the checkpoint had them.

    The directory is written under a temporary name and renamed into place; an existing non-empty `directory` is
    refused unless `overwrite=True`.
    """
    config = getattr(model, "transformers_config", None)
    if config is None:
        raise ValueError(f"{getattr(model, 'name', model)!r} was not loaded by vit_keras.dense.from_pretrained, so "
                         "its transformers config is unknown; load the checkpoint with it, then save.")
    config = copy.deepcopy(config)
    family = TASK_FAMILIES[config["model_type"]]
    if config.get("backbone_config", {}).get("num_experts", 1) > 1:
        raise ValueError(f"{model.name!r} is a ViTPose++ model folded for one dataset (its expert joined to the shared "
                         "MLP), which transformers' ViTPose++ (all experts, chosen per image) cannot hold; save the "
                         "original checkpoint instead.")
    fields, _ = read_backbone(family, config, "config.json")
    params = model_params(model)
    config = _fixed_size_config(model, family, config)
    tensors = rules.invert_table(family.table, params, num_heads=fields["num_heads"])
    tensors.update(getattr(model, "transformers_extra_tensors", {}))
    directory = os.fspath(directory)
    with atomic_directory(directory, overwrite=overwrite) as tmp:
        write_directory(tmp, config, tensors)
    return directory


