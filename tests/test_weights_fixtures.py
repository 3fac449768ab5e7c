"""Reference logits from google-research/vision_transformer and transformers (tests/fixtures, see its README).

Pass criterion (the fixtures' own): max |logits - expected| <= 2e-5 (absolute, float32) and the same argmax.
"""

import json
import os

import keras
import numpy as np
import pytest

import vit_keras

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
CASES = sorted(c for c in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, c, "meta.json")))
# Reference: the float32 forward against the source framework's output (float64 NumPy, JAX or PyTorch) on O(1)
# logits. float32 rounding (2^-24 relative per op) accumulated over a few-layer chain of sums of at most a few
# hundred terms, under any summation order (oneDNN ISA, thread count), stays near 1e-6; 2e-5 keeps >= 10x over
# that.
TOLERANCE = 2e-5


def _case(case):
    directory = os.path.join(FIXTURES, case)
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    x = np.load(os.path.join(directory, "input.npy"))
    expected = np.load(os.path.join(directory, "expected.npy"))
    return directory, meta, x, expected


def _logits(model, x):
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)), np.float32)


def test_all_seven_cases_are_present():
    assert CASES == ["hf_dir", "vitjax_gap", "vitjax_hybrid_r2", "vitjax_prelogits", "vitjax_resample",
                     "vitjax_token_linen", "vitjax_token_raw"]


@pytest.mark.parametrize("case", CASES)
def test_reference_logits(case):
    directory, meta, x, expected = _case(case)
    model = vit_keras.ViT(**meta["kwargs"], weights=os.path.join(directory, meta["checkpoint"]),
                          classifier_activation=None)
    out = _logits(model, x)
    assert out.shape == expected.shape
    assert np.abs(out - expected).max() <= TOLERANCE
    assert (out.argmax(-1) == expected.argmax(-1)).all()


@pytest.mark.parametrize("case", ["hf_dir", "vitjax_token_raw"])
def test_gelu_and_epsilon_default_to_the_checkpoints(case):
    """gelu_approximate=None / layer_norm_epsilon=None follow the source (tanh + 1e-6 Google; HF config)."""
    directory, meta, x, expected = _case(case)
    kwargs = dict(meta["kwargs"])
    want_eps, want_gelu = kwargs.pop("layer_norm_epsilon"), kwargs.pop("gelu_approximate")
    model = vit_keras.ViT(**kwargs, weights=os.path.join(directory, meta["checkpoint"]), classifier_activation=None)
    assert model.get_layer("encoder_norm").epsilon == want_eps
    block = model.get_layer("Transformer_encoderblock_0")
    assert block.norm_1.epsilon == want_eps and block.mlp.activation == ("gelu_tanh" if want_gelu else "gelu")
    assert np.abs(_logits(model, x) - expected).max() <= TOLERANCE


def test_wrong_gelu_flavour_is_warned_and_visible():
    """A model built against the checkpoint's GELU gets a warning, and its logits leave the tolerance."""
    directory, meta, x, expected = _case("vitjax_prelogits")
    kwargs = {**meta["kwargs"], "gelu_approximate": False}
    with pytest.warns(UserWarning, match="gelu_approximate=False"):
        model = vit_keras.ViT(**kwargs, weights=os.path.join(directory, meta["checkpoint"]),
                              classifier_activation=None)
    assert np.abs(_logits(model, x) - expected).max() > TOLERANCE
