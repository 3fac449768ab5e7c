"""The image tower of an image-text checkpoint, built by `vit_keras.from_pretrained` from the vision tower's own
checkpoint (its `vision_config` and `vision_model.*` tensors, written as the vision tower's directory), with the
family's pooler and CLIP's `visual_projection` after it.

Example:
    >>> from vit_keras.zeroshot.hf_reader import read_checkpoint
    >>> model = image_model(read_checkpoint("tests/fixtures/zeroshot/clip/checkpoint"), include_preprocessing=False)
    >>> model.output_shape
    (None, 24)
"""

from __future__ import annotations

import json
import os
import tempfile

import keras

import vit_keras
from vit_keras.zeroshot.hf_reader import CONFIG_NAME, PREPROCESSOR_NAME, WEIGHTS_NAME, Checkpoint

IMAGE_MODEL_NAME = "image_model"


def _write_vision_directory(checkpoint: Checkpoint, directory: str) -> None:
    """The vision tower as transformers' `save_pretrained` would write it alone: config.json (model_type the
    vision tower's), its tensors, and the image processor's normalisation (the checkpoint's own, else the family's
    default)."""
    from safetensors.numpy import save_file

    config = {**checkpoint.vision_config, "model_type": checkpoint.family.vision_model_type}
    with open(os.path.join(directory, CONFIG_NAME), "w", encoding="utf-8") as f:
        json.dump(config, f)
    save_file(checkpoint.vision_tensors, os.path.join(directory, WEIGHTS_NAME))
    preprocessor = checkpoint.preprocessor or {"do_normalize": True, "image_mean": list(checkpoint.family.mean),
                                               "image_std": list(checkpoint.family.std)}
    with open(os.path.join(directory, PREPROCESSOR_NAME), "w", encoding="utf-8") as f:
        json.dump(preprocessor, f)


def image_model(checkpoint: Checkpoint, *, include_preprocessing: bool = True, image_size=None,
                flexible: bool = False) -> keras.Model:
    """The image tower: images as `vit_keras.from_pretrained` models take them (RGB [0, 255] with
    `include_preprocessing`, else normalised with the checkpoint's mean/std; the NaFlex dict with `flexible` for
    SigLIP 2) → projected image features (batch, E), not normalised.
    """
    with tempfile.TemporaryDirectory(prefix="vit_keras_vision_") as directory:
        _write_vision_directory(checkpoint, directory)
        kwargs = {"flexible": True} if flexible else {"image_size": image_size}
        vision = vit_keras.from_pretrained(directory, include_top=False, pooling=checkpoint.family.vision_pooling,
                                           include_preprocessing=include_preprocessing, **kwargs)
    features = vision.output
    projection = checkpoint.family.visual_projection
    if projection is not None:
        params = checkpoint.head_params
        dense = keras.layers.Dense(params[f"{projection}/kernel"].shape[1], use_bias=False, name=projection)
        features = dense(features)
        dense.kernel.assign(params[f"{projection}/kernel"])
    return keras.Model(vision.input, features, name=IMAGE_MODEL_NAME)
