"""Subprocess entry for the export-from-a-backend tests: `python tests/export_backend_worker.py OUT FORMAT...`.

Run with KERAS_BACKEND set (jax or torch). Builds a tiny ViT with random weights under that backend, writes
`OUT/reference.npz` (images and the backend's own probabilities) and tries each FORMAT: saved_model, tflite
(float32), onnx. What each returned (a path, or the error's message) goes to `OUT/results.json`, so the test,
under TensorFlow, checks the files against the backend's outputs.
"""

import json
import os
import sys

import numpy as np


def main(out, formats):
    import keras

    import vit_keras
    from tests.tiny import TINY
    from vit_keras import export

    keras.utils.set_random_seed(0)
    model = vit_keras.ViT(image_size=32, classes=10, name="tiny", **TINY)
    rng = np.random.default_rng(0)
    # The head is zero-initialised: N(0, 0.1) on every weight gives the classes distinct scores.
    model.set_weights([w + rng.normal(0, 0.1, w.shape).astype(w.dtype) for w in model.get_weights()])
    images = np.random.default_rng(1).uniform(0, 255, (6, 32, 32, 3)).astype(np.float32)
    probabilities = keras.ops.convert_to_numpy(model(images, training=False))
    np.savez(os.path.join(out, "reference.npz"), images=images, probabilities=probabilities)

    results = {"backend": keras.backend.backend()}
    exports = {
        "saved_model": lambda: export.saved_model(model, os.path.join(out, "serving"), version=1, top_k=3),
        "tflite": lambda: export.tflite(model, os.path.join(out, "vit.tflite")),
        "onnx": lambda: export.to_onnx(model, os.path.join(out, "vit.onnx")),
    }
    for name in formats:
        write = exports[name]
        try:
            results[name] = {"path": write()}
        except ValueError as error:
            results[name] = {"error": str(error)}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
