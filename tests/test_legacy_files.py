"""Files saved by an earlier version still load (Keras safe mode) and give the outputs they gave when saved: a vision
ViT as `.keras` and as a SavedModel, a dense segmentation model and the two towers of a SigLIP zero-shot model
(`tests/fixtures/legacy/`, written by `tests/make_legacy_fixtures.py`).

Bound: the same float32 computation, at most reordered by a changed layer structure: float32 rounding over two
blocks (~1e-6 relative to the output's scale); 1e-5 is that with margin, and a wrong weight or part moves the
outputs by O(0.1).
"""

import os

import keras
import numpy as np
import pytest

import vit_keras.dense  # noqa: F401 (registers the layers the files name)
import vit_keras.zeroshot  # noqa: F401

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "legacy")
BOUND = 1e-5  # see the module docstring


def _saved(name):
    with np.load(os.path.join(FIXTURES, f"{name}.npz")) as saved:
        x = saved["input"] if "input" in saved else {
            key[len("input_"):]: saved[key] for key in saved.files if key.startswith("input_")}
        return x, saved["output"]


def _close(out, expected):
    out = np.asarray(out)
    assert out.shape == expected.shape
    assert np.abs(out - expected).max() / max(1.0, np.abs(expected).max()) <= BOUND


@pytest.mark.parametrize("name", ["vision", "dense_segmentation", "zeroshot_siglip_image", "zeroshot_siglip_text"])
def test_a_keras_file_saved_before_loads_and_gives_its_outputs(name):
    model = keras.saving.load_model(os.path.join(FIXTURES, f"{name}.keras"), safe_mode=True)
    x, expected = _saved(name)
    _close(keras.ops.convert_to_numpy(model(x, training=False)), expected)


def test_a_saved_model_written_before_loads_and_gives_its_outputs():
    import tensorflow as tf

    loaded = tf.saved_model.load(os.path.join(FIXTURES, "vision_saved_model"))
    x, expected = _saved("vision")
    _close(loaded.serve(tf.constant(x)).numpy(), expected)
