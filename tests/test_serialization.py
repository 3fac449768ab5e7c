"""Models and layers survive `.keras` (safe_mode=True), `.weights.h5` and get_config/from_config round trips."""

import keras
import numpy as np
import pytest

import vit_keras
from tests.reference_numpy import randomize_weights
from vit_keras import layers

HYBRID = dict(patch_size=1, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96, resnet={"num_layers": [1, 1]})


def _assert_keras_file_round_trip(model, path, seed):
    """Save with random weights, reload in safe mode, and get bit-identical outputs."""
    randomize_weights(model, seed=seed)
    model.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    x = np.random.default_rng(seed).uniform(0, 255, (2, *model.input_shape[1:])).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(reloaded(x)))


@pytest.mark.parametrize(
    "extra",
    [
        dict(),
        dict(classifier="gap", position_embedding="learned_2d"),
        dict(position_embedding="sincos_2d", representation_size=16),
        dict(include_top=False, pooling="avg"),
    ],
)
def test_keras_file_round_trip_in_safe_mode(tiny_kwargs, tmp_path, extra):
    model = vit_keras.ViT(image_size=(16, 32), classes=4, **{**tiny_kwargs, **extra})
    _assert_keras_file_round_trip(model, str(tmp_path / "model.keras"), seed=7)


def test_hybrid_keras_file_round_trip(tmp_path):
    model = vit_keras.ViT(image_size=32, classes=3, **HYBRID)
    _assert_keras_file_round_trip(model, str(tmp_path / "hybrid.keras"), seed=8)


def test_weights_file_round_trip_through_the_constructor(tiny_kwargs, tmp_path):
    model = vit_keras.ViT(image_size=32, classes=3, **tiny_kwargs)
    randomize_weights(model, seed=9)
    path = str(tmp_path / "tiny.weights.h5")
    model.save_weights(path)
    loaded = vit_keras.ViT(image_size=32, classes=3, weights=path, **tiny_kwargs)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


LAYERS = [
    (layers.Patches(4), (2, 8, 12, 3)),
    (layers.PatchEncoder(16, (2, 3)), (2, 6, 48)),
    (layers.PatchEncoder(16, (2, 3), class_token=False, position_embedding="learned_2d"), (2, 6, 48)),
    (layers.PatchEncoder(16, (2, 3), position_embedding="sincos_2d", dropout_rate=0.1), (2, 6, 48)),
    (layers.PatchEncoder(16, (2, 3), position_embedding="none"), (2, 6, 48)),
    (layers.TransformerBlock(2, 32, dropout_rate=0.1, layer_norm_epsilon=1e-12, gelu_approximate=False), (2, 5, 16)),
    (layers.MlpBlock(32, activation="gelu"), (2, 5, 16)),
    (layers.TokenPooling("avg", num_prefix_tokens=1), (2, 5, 16)),
    (layers.StdConv2D(4, 3, padding="same"), (1, 8, 8, 2)),
    (layers.BottleneckUnit(32, strides=2), (1, 8, 8, 64)),
    (layers.ResNetStem((1, 1), width_factor=1), (1, 32, 32, 3)),
]


@pytest.mark.parametrize("layer, input_shape", LAYERS, ids=lambda v: type(v).__name__ if hasattr(v, "name") else "")
def test_layer_config_round_trip(layer, input_shape):
    x = np.random.default_rng(0).standard_normal(input_shape).astype(np.float32)
    out = layer(x)
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    clone_out = clone(x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(np.asarray(clone(x)), np.asarray(out), atol=1e-6)  # same weights, same float32 ops
    assert tuple(clone_out.shape) == tuple(out.shape)
    assert tuple(layer.compute_output_shape(input_shape)) == tuple(out.shape)
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"].startswith("vit_keras>")
