"""Feature models and dense heads to TF Serving SavedModels and TFLite files.

Both take float32 images `(batch, H, W, 3)` as the model does (RGB in [0, 255] when the backbone was built with
`include_preprocessing=True`) and return one output per model output, named by the model's output layers.
"""

from __future__ import annotations

import os

from vit_keras.files import atomic_directory

SERVING_DEFAULT = "serving_default"


def _serving_module(model, batch_size=None):
    import tensorflow as tf

    names = list(model.output_names)
    module = tf.Module(name="vit_dense")
    # Track the variables, not the model: a compiled model would drag its optimizer state along.
    module.model_variables = list(model.variables)
    shape = (batch_size, *model.input_shape[1:])

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="images")], autograph=False)
    def serve(images):
        outputs = model(images, training=False)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        return {name: tf.cast(output, tf.float32) for name, output in zip(names, outputs, strict=True)}

    module.serve = serve
    return module, serve


def _check_tensorflow_backend(what):
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(f"{what} traces the model with TensorFlow: build it under KERAS_BACKEND=tensorflow (save it "
                         f"with model.save and load it there), not {keras.backend.backend()}.")


def dense_saved_model(model, export_dir, overwrite: bool = False) -> str:
    """Write `model` (a feature model or a dense model) as a SavedModel whose `serving_default` takes `images` and
    returns the model's outputs by name; the directory is written beside and renamed into place.

    Example:
        >>> from vit_keras import dense, features
        >>> path = dense_saved_model(features.intermediate_model(tiny_model, 1), "features_savedmodel")
        >>> import tensorflow as tf
        >>> sorted(tf.saved_model.load(path).signatures["serving_default"].structured_outputs)
        ['block1_map']
    """
    import tensorflow as tf

    _check_tensorflow_backend("dense_saved_model")
    module, serve = _serving_module(model)
    export_dir = os.fspath(export_dir)
    with atomic_directory(export_dir, overwrite=overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures={SERVING_DEFAULT: serve})
    return export_dir


def dense_tflite(model, path, overwrite: bool = False) -> str:
    """Write `model` as a float32 TFLite file with builtin ops only (batch 1, images as the model takes them),
    written to a temporary name and renamed into place.

    Example:
        >>> from vit_keras import features
        >>> dense_tflite(features.intermediate_model(tiny_model, 1), "features.tflite")
        'features.tflite'
    """
    from vit_keras.export.lite import write_tflite

    _check_tensorflow_backend("dense_tflite")
    module, serve = _serving_module(model, batch_size=1)
    return write_tflite(module, serve, os.fspath(path), overwrite=overwrite)
