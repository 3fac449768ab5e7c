"""Images of another size than the model was built for fail with an error that says both sizes, at every entry
point (Keras calls, predict retraces, tf.function, SavedModel signatures, TFLite files): never a different number
of rows than images."""

from __future__ import annotations

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.tiny import TINY
from vit_keras import ViT, export
from vit_keras.layers import Patches

WRONG_SIZES = [(1, 64, 64, 3), (4, 16, 16, 3)]  # the first was answered with 4 rows, the second with 1


@pytest.fixture(scope="module")
def model():
    return ViT(image_size=32, classes=5, **TINY)


@pytest.mark.slow
@pytest.mark.parametrize("shape", WRONG_SIZES)
def test_predict_after_a_first_call_refuses_another_size(model, shape):
    assert model.predict(np.zeros((2, 32, 32, 3), np.float32), verbose=0).shape == (2, 5)
    # The second size makes Keras retrace with unknown height and width; the layer checks them at run time.
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=r"built for 32x32 images") as caught:
        model.predict(np.zeros(shape, np.float32), verbose=0)
    assert f"[{shape[1]} {shape[2]}]" in str(caught.value)  # the received height and width
    assert model.predict(np.zeros((3, 32, 32, 3), np.float32), verbose=0).shape == (3, 5)


@pytest.mark.parametrize("shape", WRONG_SIZES)
def test_tf_function_with_unknown_image_size_refuses_another_size(model, shape):
    run = tf.function(lambda x: model(x), input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)])
    assert run(tf.zeros((2, 32, 32, 3))).shape == (2, 5)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"built for 32x32 images .* resize the images to 32x32"):
        run(tf.zeros(shape))


@pytest.mark.parametrize("shape", WRONG_SIZES)
def test_patches_layer_refuses_another_static_size(shape):
    layer = Patches(8)
    layer.build((None, 32, 32, 3))
    with pytest.raises(ValueError, match=rf"built for 32x32 images with 3 channels, but received images of shape "
                                         rf"\(None, {shape[1]}, {shape[2]}, 3\)"):
        layer(np.zeros(shape, np.float32))
    with pytest.raises(ValueError, match="with 3 channels"):
        layer(np.zeros((1, 32, 32, 1), np.float32))
    assert tuple(layer(np.zeros((3, 32, 32, 3), np.float32)).shape) == (3, 16, 192)


def test_patches_still_cut_the_reference_order():
    images = np.arange(2 * 16 * 16 * 3, dtype=np.float32).reshape(2, 16, 16, 3)
    expected = images.reshape(2, 2, 8, 2, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, 4, 192)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(Patches(8)(images)), expected)


@pytest.fixture(scope="module")
def serving_signature(model, tmp_path_factory):
    path = export.saved_model(model, tmp_path_factory.mktemp("serving") / "vit")
    return tf.saved_model.load(path).signatures[export.SERVING_DEFAULT]


@pytest.mark.slow
@pytest.mark.parametrize("shape", WRONG_SIZES)
def test_saved_model_signature_fails_the_request_for_another_size(serving_signature, shape):
    # A loaded signature (and TF Serving) feeds any shape into the graph; the request must fail, saying the size.
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\(batch, 32, 32, 3\).*resize them to 32x32"):
        serving_signature(images=tf.zeros(shape))
    assert serving_signature(images=tf.zeros((3, 32, 32, 3)))["probabilities"].shape == (3, 5)


@pytest.fixture(scope="module")
def tflite_file(model, tmp_path_factory):
    return export.tflite(model, tmp_path_factory.mktemp("tflite") / "vit.tflite")


@pytest.mark.slow
@pytest.mark.parametrize("shape", WRONG_SIZES)
def test_tflite_helpers_refuse_another_size(tflite_file, shape):
    expected = r"vit.tflite takes images of shape \(batch, 32, 32, 3\), got " + re.escape(str(shape))
    with pytest.raises(ValueError, match=expected):
        export.tflite_predict(tflite_file, np.zeros(shape, np.float32))
    with pytest.raises(ValueError, match="vit.tflite takes images"):
        export.measure_latency(tflite_file, np.zeros(shape[1:], np.float32), runs=1)
    assert export.tflite_predict(tflite_file, np.zeros((3, 32, 32, 3)))["probabilities"].shape == (3, 5)


@pytest.mark.slow
@pytest.mark.parametrize("shape", WRONG_SIZES)
def test_tflite_file_itself_never_answers_with_another_number_of_rows(tflite_file, shape):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=os.fspath(tflite_file))
    interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], list(shape))
    try:
        interpreter.allocate_tensors()
        runner = interpreter.get_signature_runner(export.SERVING_DEFAULT)
        rows = runner(images=np.zeros(shape, np.float32))["probabilities"].shape[0]
    except (RuntimeError, ValueError):
        return  # refused by the interpreter: fine
    assert rows == shape[0]
