"""Export from every Keras backend: a model built under JAX exports to a SavedModel (through jax2tf) and TFLite;
under PyTorch, SavedModel/TFLite stop with an error naming the fix.

The JAX model is built in its own process (tests/export_backend_worker.py); this TensorFlow process then serves the
files (TF's SavedModel loader, LiteRT) and compares them with JAX's own probabilities. ONNX from JAX or PyTorch goes
through a TensorFlow-backend process from the .keras file (tested in tests/test_onnx_export.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.tiny import TINY
from vit_keras import export

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "export_backend_worker.py")
# float32 against the backend's own kernels: the same tolerances as the TensorFlow-backend export tests.
SAVED_MODEL_TOL = 1e-5
TFLITE_TOL = 1e-4


def _export_under(backend, out, formats):
    pytest.importorskip(backend)
    env = dict(os.environ, PYTHONPATH=ROOT, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    command = [sys.executable, WORKER, str(out), *formats]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out / "results.json") as f:
        results = json.load(f)
    assert results["backend"] == backend
    reference = np.load(out / "reference.npz")
    return results, reference["images"], reference["probabilities"]


def _assert_agrees(got, expected, tol):
    assert float(np.abs(got - expected).max()) <= tol, float(np.abs(got - expected).max())
    np.testing.assert_array_equal(got.argmax(-1), expected.argmax(-1))


@pytest.mark.slow
def test_jax_model_exports_saved_model_and_tflite(tmp_path):
    results, images, expected = _export_under("jax", tmp_path, ["saved_model", "tflite"])
    assert float(np.abs(expected - expected.mean(0)).max()) > 0.01, "the classes must have distinct scores"

    signatures = tf.saved_model.load(results["saved_model"]["path"]).signatures
    served = signatures["serving_default"](images=tf.constant(images))
    _assert_agrees(served["probabilities"].numpy(), expected, SAVED_MODEL_TOL)
    assert served["top_k_classes"].shape == (len(images), 3)
    png = [tf.io.encode_png(image).numpy() for image in images[:2].round().astype(np.uint8)]
    from_bytes = signatures["serve_bytes"](image_bytes=tf.constant(png))["probabilities"].numpy()
    assert from_bytes.shape == (2, 10)

    tflite_path = results["tflite"]["path"]
    assert export.non_builtin_operators(tflite_path) == []
    _assert_agrees(export.tflite_predict(tflite_path, images)["probabilities"], expected, TFLITE_TOL)


def test_torch_backend_saved_model_and_tflite_name_the_fix(tmp_path, monkeypatch):
    """Keras exports a PyTorch model's SavedModel only through torch_xla; the error says to export from TensorFlow."""
    import vit_keras

    model = vit_keras.ViT(image_size=32, classes=4, **{**TINY, "num_layers": 1})
    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    for write in (lambda: export.saved_model(model, tmp_path / "serving"),
                  lambda: export.tflite(model, tmp_path / "vit.tflite")):
        with pytest.raises(ValueError, match="not 'torch'.*KERAS_BACKEND=tensorflow.*load_model") as error:
            write()
        assert "export.to_onnx does that by itself" in str(error.value)
    assert os.listdir(tmp_path) == []  # nothing half-written
