"""The image tower of an image-text checkpoint, built by `vit_keras.from_pretrained` from the vision tower's
config (`vision_config`) and tensors (`vision_model.*`) as they were read, with the family's pooler and CLIP's
`visual_projection` after it.

Example:
    >>> from vit_keras.zeroshot.hf_reader import read_checkpoint
    >>> model = image_model(read_checkpoint("tests/fixtures/zeroshot/clip/checkpoint"), include_preprocessing=False)
    >>> model.output_shape
    (None, 24)
"""

from __future__ import annotations

import os

import keras

from vit_keras import weights
from vit_keras.configs import ViTConfig
from vit_keras.layers.checkpoint import nested, plain
from vit_keras.pretrained import from_pretrained
from vit_keras.vision_transformer import config_of
from vit_keras.weights import hf
from vit_keras.weights.schema import LOGIT_BIAS, LOGIT_SCALE, VISUAL_PROJECTION
from vit_keras.zeroshot.hf_reader import PREPROCESSOR_NAME, Checkpoint
from vit_keras.zeroshot.logits import ContrastiveLogits

IMAGE_MODEL_NAME = "image_model"


def vision_tower(checkpoint: Checkpoint) -> weights.CheckpointInfo:
    """The vision tower as `vit_keras.from_pretrained` reads a transformers directory of it alone (config.json with
    the tower's `model_type`, its tensors, and the image processor's normalisation: the checkpoint's own, else the
    family's default), taken from the checkpoint already in memory.

    Example:
        >>> from vit_keras.zeroshot.hf_reader import read_checkpoint
        >>> vision_tower(read_checkpoint("tests/fixtures/zeroshot/siglip/checkpoint")).architecture["hidden_size"]
        32
    """
    config = {**checkpoint.vision_config, "model_type": checkpoint.family.vision_model_type}
    preprocessor = checkpoint.preprocessor or {"do_normalize": True, "image_mean": list(checkpoint.family.mean),
                                               "image_std": list(checkpoint.family.std)}
    normalization = hf.normalization_of(preprocessor, os.path.join(checkpoint.path, PREPROCESSOR_NAME))
    return weights.hf_checkpoint_info(config, checkpoint.vision_tensors, path=checkpoint.path,
                                      normalization=normalization)


def image_model(checkpoint: Checkpoint, *, include_preprocessing: bool = True, image_size=None,
                flexible: bool = False) -> keras.Model:
    """The image tower: images as `vit_keras.from_pretrained` models take them (RGB [0, 255] with
    `include_preprocessing`, else normalised with the checkpoint's mean/std; the NaFlex dict with `flexible` for
    SigLIP 2) → projected image features (batch, E), not normalised.
    """
    return image_model_and_config(checkpoint, include_preprocessing=include_preprocessing, image_size=image_size,
                                  flexible=flexible)[0]


def image_model_and_config(checkpoint: Checkpoint, *, include_preprocessing: bool = True, image_size=None,
                           flexible: bool = False) -> tuple[keras.Model, ViTConfig]:
    """`image_model(...)` and the vision tower's `ViTConfig` (what `save_pretrained` writes the tower as)."""
    kwargs = {"flexible": True} if flexible else {"image_size": image_size}
    vision = from_pretrained(vision_tower(checkpoint), include_top=False, pooling=checkpoint.family.vision_pooling,
                             include_preprocessing=include_preprocessing, **kwargs)
    features = vision.output
    projection = checkpoint.family.visual_projection
    if projection is not None:
        # Its kernel is assigned with the other heads (`head_slots`).
        width = checkpoint.head_params[f"{projection}/kernel"].shape[1]
        features = keras.layers.Dense(width, use_bias=False, name=projection)(features)
    return keras.Model(vision.input, features, name=IMAGE_MODEL_NAME), config_of(vision)


def head_slots(image_model: keras.Model, logits: ContrastiveLogits) -> dict:
    """`{canonical name: CheckpointVariable}` of what joins the towers: the logit scale (and bias), and CLIP's
    `visual_projection` at the end of the image model.

    Example:
        >>> logits = ContrastiveLogits(logit_bias=True); logits.build()
        >>> sorted(head_slots(keras.Sequential([keras.Input((2,))]), logits))
        ['logit_bias', 'logit_scale']
    """
    slots = {LOGIT_SCALE: plain(logits.logit_scale)}
    if logits.logit_bias is not None:
        slots[LOGIT_BIAS] = plain(logits.logit_bias)
    projection = [layer for layer in image_model.layers if layer.name == VISUAL_PROJECTION]
    if projection:
        slots.update(nested(VISUAL_PROJECTION, projection[0]))
    return slots
