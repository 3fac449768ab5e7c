"""The zero-shot reference cases (tests/fixtures/zeroshot/: CLIP, SigLIP, SigLIP 2 made by transformers 5.23 with
real tokenizers; see its README.md) and how a `ZeroShotModel`'s outputs are compared with them.

Tolerance (the fixtures' README): max |diff| ≤ 5e-5 × max(1, max |expected|) on each output; the smallest mistake
the README measures (tanh GELU taken as exact erf) moves an output by 1.0e-4, twice that.
"""

from __future__ import annotations

import json
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "zeroshot")
CASES = ("clip", "siglip", "siglip2")
RELATIVE_TOLERANCE = 5e-5
OUTPUTS = ("image_features", "text_features", "image_embeds", "text_embeds", "logits_per_image", "logits_per_text")


def case_dir(case: str) -> str:
    return os.path.join(FIXTURES, case)


def meta(case: str) -> dict:
    with open(os.path.join(case_dir(case), "meta.json")) as f:
        return json.load(f)


def texts(case: str) -> list[str]:
    with open(os.path.join(case_dir(case), "texts.json")) as f:
        return json.load(f)


def normalised_images(case: str) -> np.ndarray:
    """input.npy as the reference fed it: x/255, then (x - mean)/std (NHWC)."""
    pre = meta(case)["preprocess"]
    images = np.load(os.path.join(case_dir(case), "input.npy")).astype(np.float64) / 255.0
    return ((images - np.array(pre["mean"])) / np.array(pre["std"])).astype(np.float32)


def token_inputs(case: str) -> tuple[np.ndarray, np.ndarray | None]:
    """token_ids.npy, and attention_mask.npy where the reference passed it to the model."""
    ids = np.load(os.path.join(case_dir(case), "token_ids.npy"))
    passed = meta(case)["call"]["attention_mask_passed_to_model"]
    mask = np.load(os.path.join(case_dir(case), "attention_mask.npy")) if passed else None
    return ids, mask


def outputs(model, images, ids, mask) -> dict:
    """Every output the fixtures hold, from the public API."""
    from vit_keras.zeroshot import l2_normalize

    image_features = model.encode_image(images)
    text_features = model.encode_text(ids, mask)
    logits = model.logits(image_features, text_features)
    return {"image_features": image_features, "text_features": text_features,
            "image_embeds": np.asarray(l2_normalize(image_features)),
            "text_embeds": np.asarray(l2_normalize(text_features)),
            "logits_per_image": logits, "logits_per_text": logits.T}


def relative_differences(found: dict, expected) -> dict:
    """max |diff| / max(1, max |expected|) per output."""
    return {name: float(np.abs(np.asarray(found[name], np.float64) - expected[name]).max()
                        / max(1.0, float(np.abs(expected[name]).max()))) for name in OUTPUTS}


def expected(case: str) -> dict:
    with np.load(os.path.join(case_dir(case), "expected.npz")) as data:
        return {name: data[name] for name in data.files}
