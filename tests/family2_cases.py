"""The reference cases of tests/fixtures/family2 (its README: made by timm 1.0.31 and transformers 5.23.0), run as
the README says: `vit_keras.from_pretrained(<case>/checkpoint, **meta["call"])` alone, then a `.keras` round trip
loaded with safe_mode=True; shared by the family test modules.

Tolerance (the fixtures' README): max |diff| <= 5e-5 * max(1, max |reference|), and the same argmax. Its origin:
float32 against PyTorch's float32 forward on O(1) outputs; rounding (2^-24 relative per op) over these few-layer
chains of sums of at most a few hundred terms stays at a few 1e-6 whatever the summation order (measured <= 1.5e-6 on
the fixtures); 5e-5 keeps >= 10x over that, while the mistakes the README measured move the outputs >= 1e-2.
"""

import json
import os

import keras
import numpy as np

import vit_keras

FAMILY2 = os.path.join(os.path.dirname(__file__), "fixtures", "family2")
TOLERANCE = 5e-5


def check(out, reference, tolerance=TOLERANCE):
    """`out` equals `reference` within `tolerance` (default the fixtures') relative to max(1, max |reference|), with
    the same argmax. Returns the relative difference measured."""
    out, reference = np.asarray(out, np.float32), np.asarray(reference, np.float32)
    assert out.shape == reference.shape
    scale = max(1.0, float(np.abs(reference).max()))
    assert np.abs(out - reference).max() <= tolerance * scale, np.abs(out - reference).max()
    np.testing.assert_array_equal(out.argmax(-1), reference.argmax(-1))
    return float(np.abs(out - reference).max()) / scale


def run(model, x):
    """The model's output on `x` in inference mode, as float32 NumPy."""
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)), np.float32)


def fixture_input(case, meta, root=FAMILY2):
    """The case's input (a case directory under `root`: family2 or the earlier family fixtures) as its README says
    it is fed: as it is (timm), or normalised with meta["preprocess"]."""
    x = np.load(os.path.join(root, case, "input.npy")).astype(np.float32)
    if meta["call"].get("include_preprocessing") is False:
        mean, std = np.asarray(meta["preprocess"]["mean"]), np.asarray(meta["preprocess"]["std"])
        x = ((x / 255.0 - mean) / std).astype(np.float32)
    return x


def run_case(case, tmp_path, record_property=None):
    """A fixture case through `from_pretrained(<case>/checkpoint, **meta["call"])` alone, then a `.keras` round
    trip loaded with safe_mode=True: both give the reference output. Returns the model. With pytest's
    `record_property`, the measured difference and its bound go to the report `make test-numerics` tabulates."""
    with open(os.path.join(FAMILY2, case, "meta.json")) as f:
        meta = json.load(f)
    model = vit_keras.from_pretrained(os.path.join(FAMILY2, case, meta["checkpoint"]), **meta["call"])
    x = fixture_input(case, meta)
    out = run(model, x)
    difference = check(out, np.load(os.path.join(FAMILY2, case, "expected.npy")))
    if record_property is not None:
        record_property("relative_diff_reference", float(f"{difference:.3g}"))
        record_property("bound:relative_diff_reference", f"<= {TOLERANCE}")
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(run(reloaded, x), out)
    assert vit_keras.weights.model_config(reloaded) == vit_keras.weights.model_config(model)
    return model
