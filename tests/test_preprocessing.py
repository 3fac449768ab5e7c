"""`preprocess_input` against keras.applications' own "tf" mode: NumPy, tf tensors, inside functional models."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import vit_keras
from vit_keras.preprocessing import preprocess_input


def keras_tf_mode(x, data_format=None):
    # keras.applications divides in place and keeps float64; give it its own float32 copy.
    return keras.applications.imagenet_utils.preprocess_input(np.array(x, np.float32), data_format=data_format,
                                                              mode="tf")


@pytest.fixture
def images():
    return np.random.default_rng(0).integers(0, 256, (2, 8, 8, 3)).astype(np.uint8)


def test_one_function_under_both_names():
    assert vit_keras.preprocess_input is preprocess_input
    assert vit_keras.models.preprocess_input is preprocess_input


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64, np.int64])
def test_numpy_matches_keras_tf_mode(images, dtype):
    x = images.astype(dtype)
    before = x.copy()
    out = preprocess_input(x, include_preprocessing=False)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    # x / 127.5 - 1 in float32 against Keras' own: values in [-1, 1], float32 ulp 1.2e-7; the rest of this file's
    # 1e-6 bounds are the same computation in another graph.
    np.testing.assert_allclose(out, keras_tf_mode(images), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(x, before)  # the caller's array is left alone
    assert out.min() >= -1.0 and out.max() <= 1.0


def test_models_that_rescale_inside_get_the_images_unchanged_as_float32(images):
    out = preprocess_input(images)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, images.astype(np.float32))
    np.testing.assert_array_equal(preprocess_input([[0, 255]], include_preprocessing=False), [[-1.0, 1.0]])


def test_tf_tensors_stay_tensors(images):
    out = preprocess_input(tf.constant(images), include_preprocessing=False)
    assert tf.is_tensor(out) and out.dtype == tf.float32
    np.testing.assert_allclose(out.numpy(), keras_tf_mode(images), rtol=0, atol=1e-6)
    same = preprocess_input(tf.constant(images))
    assert tf.is_tensor(same) and same.dtype == tf.float32
    np.testing.assert_array_equal(same.numpy(), images.astype(np.float32))


@pytest.mark.parametrize("include_preprocessing", [False, True])
def test_symbolic_inside_a_functional_model(images, include_preprocessing, tmp_path):
    inputs = keras.Input((8, 8, 3))
    outputs = preprocess_input(inputs, include_preprocessing=include_preprocessing)
    assert keras.backend.is_keras_tensor(outputs) and outputs.shape == (None, 8, 8, 3)
    model = keras.Model(inputs, outputs)
    expected = keras_tf_mode(images) if not include_preprocessing else images.astype(np.float32)
    np.testing.assert_allclose(model.predict(images.astype(np.float32), verbose=0), expected, rtol=0, atol=1e-6)
    path = str(tmp_path / "pre.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(reloaded.predict(images.astype(np.float32), verbose=0), expected, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_in_graph_preprocessing_equals_the_built_in_rescaling(images, tiny_kwargs):
    inside = vit_keras.ViT(image_size=16, classes=5, **tiny_kwargs)
    bare = vit_keras.ViT(image_size=16, classes=5, include_preprocessing=False, **tiny_kwargs)
    bare.set_weights(inside.get_weights())
    inputs = keras.Input((16, 16, 3))
    wrapped = keras.Model(inputs, bare(preprocess_input(inputs, include_preprocessing=False)))
    x = np.random.default_rng(1).uniform(0, 255, (2, 16, 16, 3)).astype(np.float32)
    np.testing.assert_allclose(wrapped.predict(x, verbose=0), inside.predict(x, verbose=0), rtol=0, atol=1e-6)


def test_data_format(images):
    channels_first = np.transpose(images, (0, 3, 1, 2))
    out = preprocess_input(channels_first, include_preprocessing=False, data_format="channels_first")
    np.testing.assert_allclose(out, keras_tf_mode(channels_first, "channels_first"), rtol=0, atol=1e-6)
    previous = keras.config.image_data_format()
    try:
        keras.config.set_image_data_format("channels_first")
        default = preprocess_input(channels_first, include_preprocessing=False)  # None: the global setting
        np.testing.assert_allclose(default, keras_tf_mode(channels_first), rtol=0, atol=1e-6)
    finally:
        keras.config.set_image_data_format(previous)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"data_format": "NHWC"}, "`data_format` must be 'channels_last', 'channels_first' or None"),
        ({"include_preprocessing": "no"}, "`include_preprocessing` must be True or False"),
    ],
)
def test_bad_arguments_are_named(images, kwargs, match):
    with pytest.raises(ValueError, match=match):
        preprocess_input(images, **kwargs)


def test_non_numeric_images_are_refused():
    with pytest.raises(ValueError, match="`images` must be a numeric array"):
        preprocess_input([["a", "b"]], include_preprocessing=False)
