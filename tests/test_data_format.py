"""Under a global `channels_first` image data format every model builds and computes as under `channels_last`.

Every layer inside is channels-last (the ResNet stem's convolutions and pooling are pinned); the models take
(batch, height, width, channels) images whatever the global setting, and a channels-first shape is refused with
the transpose to use.
"""

import keras
import numpy as np
import pytest

import vit_keras
from tests.model_kinds import KINDS, build, images
from tests.tiny import TINY


@pytest.fixture
def channels_first():
    previous = keras.config.image_data_format()
    keras.config.set_image_data_format("channels_first")
    try:
        yield
    finally:
        keras.config.set_image_data_format(previous)


def _predict(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


@pytest.fixture(scope="module")
def channels_last_models():
    assert keras.config.image_data_format() == "channels_last"
    return {kind: build(kind, classifier_activation=None) for kind in KINDS}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_model_computes_the_same_under_channels_first(channels_last_models, channels_first, kind):
    reference = channels_last_models[kind]
    model = build(kind, classifier_activation=None)
    assert model.input_shape == reference.input_shape == (None, 32, 32, 3)
    model.set_weights(reference.get_weights())
    x = images()
    # The same layers, weights and input layout: the same operations, bit for bit.
    np.testing.assert_array_equal(_predict(model, x), _predict(reference, x))


def test_the_resnet_stem_is_pinned_to_channels_last(channels_first, tmp_path):
    model = build("hybrid_r+vit")
    stem = model.get_layer("resnet")
    formats = {layer.name: layer.data_format for layer in stem._flatten_layers() if hasattr(layer, "data_format")}
    assert formats and set(formats.values()) == {"channels_last"}, formats
    x = images()
    expected = _predict(model, x)
    path = str(tmp_path / "hybrid.keras")
    model.save(path)
    keras.config.set_image_data_format("channels_last")  # a file written under channels_first loads anywhere
    np.testing.assert_array_equal(_predict(keras.models.load_model(path, safe_mode=True), x), expected)


@pytest.mark.parametrize("global_format", ["channels_first", "channels_last"])
def test_a_channels_first_input_shape_is_refused_with_the_transpose(global_format):
    previous = keras.config.image_data_format()
    keras.config.set_image_data_format(global_format)
    try:
        with pytest.raises(ValueError, match=(
            rf"`input_shape` gives the shape \(3, 64, 64\), which looks channels-first .*now '{global_format}'.*"
            r"pass \(64, 64, 3\).*np.transpose\(images, \(0, 2, 3, 1\)\)")):
            vit_keras.ViT(input_shape=(3, 64, 64), **TINY)
        with pytest.raises(ValueError, match=r"`input_tensor` gives the shape \(1, 32, 32\), which looks channels"):
            vit_keras.ViT(input_tensor=keras.Input((1, 32, 32)), **TINY)
        with pytest.raises(ValueError, match="looks channels-first"):
            vit_keras.ViTRTi16(input_shape=(3, 64, 64))
    finally:
        keras.config.set_image_data_format(previous)


def test_channels_last_input_shapes_are_read_as_height_width_channels(channels_first):
    model = vit_keras.ViT(input_shape=(64, 32, 3), classes=2, **TINY)
    assert model.input_shape == (None, 64, 32, 3)
    assert model.get_layer("patch_encoder").grid_size == (8, 4)
    grey = vit_keras.ViT(input_shape=(32, 32, 1), classes=2, include_preprocessing=False, **TINY)
    assert grey.input_shape == (None, 32, 32, 1)
