"""Every mistake a user can make when building a model gets a ValueError that names the argument and the fix."""

import json
import os
import re
import shutil

import keras
import pytest

import vit_keras
from tests.tiny import TINY
from vit_keras.models import build_vit


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(image_size=100), r"Image height 100 is not divisible by patch_size 8; use 96 or 104"),
        (dict(image_size=(64, 60)), r"Image width 60 is not divisible by patch_size 8; use 56 or 64"),
        (dict(hidden_size=50), r"`hidden_size` 50 is not divisible by `num_heads` 3; pick num_heads from"),
        (dict(image_size=64, input_shape=(32, 32, 3)), r"`input_shape` gives height 32 but `image_size` gives 64"),
        (dict(input_shape=(32, 32)), r"`input_shape` must be \(height, width, channels\)"),
        (dict(input_shape=(32, 32, 0)), r"number of channels must be a positive int"),
        (dict(pooling="min", include_top=False), r"`pooling` must be one of \('token', 'avg', 'max', 'map'\) or None"),
        (dict(classifier="cls"), r"`classifier` must be 'token', 'gap' or 'map', got 'cls'"),
        (dict(classifier="gap", pooling="token", include_top=False),
         r"pooling='token' needs a class token.*use pooling='avg'"),
        (dict(pooling="avg"), r"`pooling='avg'` applies to include_top=False only"),
        (dict(pooling="map", include_top=False), r"pooling='map' is the checkpoint's own attention-pooling head"),
        (dict(classes=0), r"`classes` must be a positive integer"),
        (dict(classes=2.5), r"`classes` must be a positive integer"),
        (dict(patch_size=0), r"`patch_size` must be a positive integer"),
        (dict(num_layers=-1), r"`num_layers` must be a positive integer"),
        (dict(dropout_rate=1.5), r"`dropout_rate` must be a float in \[0, 1\)"),
        (dict(classifier_activation="softmaxx"), r"Unknown `classifier_activation` 'softmaxx'"),
        (dict(position_embedding="relative"), r"`position_embedding` must be one of"),
        (dict(image_size=(32, 32, 3)), r"`image_size` must be an int or a \(height, width\) pair"),
        (dict(resnet={"num_layers": [1]}, patch_size=1, image_size=30), r"hybrid's total stride 4.*use 28 or 32"),
        (dict(weights="imagenet2012.pth"), r"is a PyTorch pickle file.*safetensors twin"),
        (dict(weights=3), r"Unsupported `weights` value 3: pass None, a registered name"),
        (dict(weights="imagenet21k+imagenett2012"), r"imagenet21k\+imagenet2012"),
        (dict(weights="missing.weights.h5"), r"does not exist"),
    ],
)
def test_bad_argument_raises_value_error(tiny_kwargs, kwargs, message):
    options = {**tiny_kwargs, "image_size": 32, **kwargs}
    with pytest.raises(ValueError, match=message):
        vit_keras.ViT(**options)


def test_wrong_channel_count_with_pretrained_weights(tiny_kwargs, tmp_path):
    model = vit_keras.ViT(image_size=32, classes=2, **tiny_kwargs)
    path = str(tmp_path / "tiny.weights.h5")
    model.save_weights(path)
    with pytest.raises(ValueError, match=r"RGB images \(3 channels\), got 1"):
        vit_keras.ViT(input_shape=(32, 32, 1), classes=2, weights=path, **tiny_kwargs)


def test_input_tensor_must_be_a_keras_tensor(tiny_kwargs):
    with pytest.raises(ValueError, match="Keras tensor"):
        vit_keras.ViT(input_tensor=keras.ops.zeros((1, 32, 32, 3)), **tiny_kwargs)


def test_grayscale_without_weights_is_allowed(tiny_kwargs):
    model = vit_keras.ViT(input_shape=(32, 32, 1), classes=2, **tiny_kwargs)
    assert model.output_shape == (None, 2)


def test_weights_that_do_not_fit_name_the_fix(tiny_kwargs, tmp_path):
    path = str(tmp_path / "other.weights.h5")
    vit_keras.ViT(image_size=32, classes=2, **{**tiny_kwargs, "hidden_size": 24}).save_weights(path)
    with pytest.raises(ValueError, match="same arguments"):
        vit_keras.ViT(image_size=32, classes=2, weights=path, **tiny_kwargs)


def test_weights_file_of_unknown_format_names_the_supported_ones(tiny_kwargs, tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"Cannot tell the format of .*model.onnx.*Google .npz, a timm .safetensors"):
        vit_keras.ViT(image_size=32, weights=str(path), **tiny_kwargs)


def test_decode_predictions_rejects_bad_top():
    with pytest.raises(ValueError, match="`top` must be a positive integer"):
        vit_keras.decode_predictions(keras.ops.zeros((1, 1000)), top=0)


TIMM_DIR = os.path.join(os.path.dirname(__file__), "fixtures", "family", "timm_deit_distilled", "checkpoint")


@pytest.mark.parametrize(
    "field, values, message",
    [
        ("mean", [0.485, float("nan"), 0.406], r"pretrained_cfg mean\[1\] \(channel 1\) is nan; each channel's mean "
                                               r"must be a finite number"),
        ("mean", [float("inf"), 0.456, 0.406], r"pretrained_cfg mean\[0\] \(channel 0\) is inf"),
        ("std", [0.229, 0.224, float("inf")], r"pretrained_cfg std\[2\] \(channel 2\) is inf; each channel's std "
                                              r"must be a finite number > 0"),
        ("std", [0.229, float("nan"), 0.225], r"pretrained_cfg std"),  # refused by the timm reader itself
        ("std", [0.0, 0.224, 0.225], r"pretrained_cfg std must be positive"),
    ],
)
def test_a_timm_config_with_a_normalisation_that_is_not_finite_is_refused(tmp_path, field, values, message):
    """A NaN mean or an infinite std would make every output NaN or wrong, silently."""
    directory = tmp_path / "timm"
    shutil.copytree(TIMM_DIR, directory)
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    config["pretrained_cfg"][field] = values
    config_path.write_text(json.dumps(config))  # NaN and Infinity, as Python's json (and so timm) writes them
    where = re.escape(repr(str(config_path)))
    with pytest.raises(ValueError, match=where + ":? " + message):
        vit_keras.from_pretrained(str(directory))
    with pytest.raises(ValueError, match=where + ":? " + message):
        vit_keras.ViT(image_size=32, classes=7, distilled=True, weights=str(directory), **TINY)


def test_build_vit_refuses_a_normalisation_that_is_not_finite():
    config = vit_keras.configs.ViTConfig(image_size=(32, 32), **TINY)
    with pytest.raises(ValueError, match=r"`normalization` std\[1\] \(channel 1\) is -1.0; each channel's std must be "
                                         r"a finite number > 0"):
        build_vit(config, normalization=((0.5,) * 3, (0.5, -1.0, 0.5)))
    assert build_vit(config, normalization=((0.5,) * 3, (0.25,) * 3), classes=2).output_shape == (None, 2)
