"""Models of any image size (`image_size=None`, `input_shape=(None, None, 3)`): the position embeddings stay at the
checkpoint's grid and are resampled inside the graph with the checkpoint library's own interpolation, so that the
output at a size equals a fixed-size model built at that size from the same checkpoint (whose table the NumPy
load-time path resamples) to 1e-5, for vit_jax (linear), transformers (bicubic) and timm (antialiased bicubic)
checkpoints, a hybrid, and a DINOv2 with register tokens and `no_embed_class`."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import vit_keras
from tests.tiny import TINY
from vit_keras import export, inspection
from vit_keras.configs import ViTConfig
from vit_keras.layers.interpolation import resample_grid
from vit_keras.models import config_of
from vit_keras.weights.resample import resample_grid as numpy_resample_grid

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
# Reference: the same float32 model at a fixed size, or NumPy's resampling: equal but for float32 summation order
# in the resampling and attention (~1e-6 on O(1) values under any oneDNN ISA or thread count); 1e-5 keeps 10x.
TOLERANCE = 1e-5
# name: (checkpoint, from_pretrained arguments, the in-graph interpolation its library uses)
CHECKPOINTS = {
    "vit_jax": ("vitjax_token_raw/checkpoint.npz", {"include_preprocessing": False}, "linear"),
    "hybrid": ("vitjax_hybrid_r2/checkpoint.npz", {"include_preprocessing": False}, "linear"),
    "transformers": ("hf_dir/hf_model", {"include_preprocessing": False}, "bicubic"),
    "timm_dinov2_reg4": ("family/timm_dinov2_reg4/checkpoint", {"classifier_activation": None}, "bicubic_antialias"),
}
# Patch grids of the call-time images: stored 8x8 (DINOv2: 2x2) -> smaller square, non-square, larger non-square.
GRIDS = [(5, 5), (3, 7), (12, 10)]


def _source(name):
    path, kwargs, _ = CHECKPOINTS[name]
    return os.path.join(FIXTURES, path), kwargs


@pytest.fixture(scope="module")
def any_size_models():
    cache = {}

    def get(name, **overrides):
        key = (name, tuple(sorted(overrides.items())))
        if key not in cache:
            path, kwargs = _source(name)
            cache[key] = vit_keras.from_pretrained(path, any_image_size=True, **kwargs, **overrides)
        return cache[key]

    return get


def _images(size, seed=0, batch=2):
    return np.random.default_rng(seed).uniform(0, 255, (batch, *size, 3)).astype(np.float32)


def _run(model, x):
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)))


# --- the interpolation itself -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, interpolation, antialias", [
    ("linear", "linear", False), ("bicubic", "bicubic", False), ("bicubic_antialias", "bicubic", True)])
@pytest.mark.parametrize("grid, new_grid", [((8, 8), (5, 5)), ((8, 8), (3, 7)), ((7, 5), (15, 8)), ((4, 4), (1, 1))])
def test_in_graph_resampling_equals_the_load_time_numpy_path(mode, interpolation, antialias, grid, new_grid):
    table = np.random.default_rng(1).normal(size=(*grid, 16)).astype(np.float32)
    expected = numpy_resample_grid(table, new_grid, interpolation, antialias=antialias)
    got = keras.ops.convert_to_numpy(resample_grid(keras.ops.convert_to_tensor(table), new_grid, mode))
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOLERANCE)


def test_in_graph_resampling_at_the_stored_grid_is_no_op():
    table = keras.ops.ones((4, 6, 8))
    assert resample_grid(table, (4, 6), "bicubic") is table


def test_keras_image_resize_is_not_the_libraries_bicubic():
    """Why the graph builds its own matrices: keras.ops.image.resize's bicubic (Keys a = -0.5) is not torch's
    (a = -0.75, transformers), and it has no corner-aligned linear mode (vit_jax)."""
    table = np.random.default_rng(2).normal(size=(4, 4, 8)).astype(np.float32)
    expected = numpy_resample_grid(table, (6, 6), "bicubic")
    resized = keras.ops.convert_to_numpy(keras.ops.image.resize(table[None], (6, 6), interpolation="bicubic"))[0]
    assert np.abs(resized - expected).max() > 0.01


# --- a model of any size equals fixed-size models from the same checkpoint -------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_any_size_model_equals_fixed_size_models_from_the_same_checkpoint(any_size_models, name):
    model = any_size_models(name)
    config = config_of(model)
    assert config.image_size is None and config.pos_interpolation == CHECKPOINTS[name][2]
    path, kwargs = _source(name)
    for seed, grid in enumerate(GRIDS):
        size = (grid[0] * config.stride, grid[1] * config.stride)
        fixed = vit_keras.from_pretrained(path, image_size=size, **kwargs)
        x = _images(size, seed)
        expected = _run(fixed, x)
        np.testing.assert_allclose(_run(model, x), expected, rtol=0, atol=TOLERANCE, err_msg=f"{name} at {size}")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit_jax", "timm_dinov2_reg4"])
def test_any_size_tokens_equal_fixed_size_tokens(any_size_models, name):
    model = any_size_models(name, include_top=False)
    assert model.output_shape == (None, None, 48)
    config = config_of(model)
    path, kwargs = _source(name)
    for grid in GRIDS:
        size = (grid[0] * config.stride, grid[1] * config.stride)
        fixed = vit_keras.from_pretrained(path, image_size=size, include_top=False, **kwargs)
        x = _images(size)
        got = _run(model, x)
        assert got.shape == (2, config.num_prefix_tokens + grid[0] * grid[1], 48)
        np.testing.assert_allclose(got, _run(fixed, x), rtol=0, atol=TOLERANCE)


def test_at_the_stored_grid_the_output_is_the_fixed_models_exactly(any_size_models):
    model = any_size_models("timm_dinov2_reg4")
    path, kwargs = _source("timm_dinov2_reg4")
    fixed = vit_keras.from_pretrained(path, **kwargs)
    x = _images(config_of(fixed).image_size)
    np.testing.assert_array_equal(_run(model, x), _run(fixed, x))


def test_sincos_and_gap_model_of_any_size_equals_fixed_size_models():
    kwargs = dict(TINY, classifier="gap", position_embedding="sincos_2d", classes=5)
    model = vit_keras.ViT(image_size=None, **kwargs)
    for size in [(32, 32), (24, 56)]:
        fixed = vit_keras.ViT(image_size=size, **kwargs)
        fixed.set_weights(model.get_weights())
        x = _images(size)
        np.testing.assert_allclose(_run(model, x), _run(fixed, x), rtol=0, atol=TOLERANCE)


# --- how such a model is asked for -----------------------------------------------------------------------------


def test_fixed_size_stays_the_default_and_its_graph_unchanged():
    model = vit_keras.ViT(**TINY)
    assert model.input_shape == (None, 224, 224, 3)
    assert model.get_layer("patches").flatten
    assert config_of(model).pos_grid is None
    assert not any(isinstance(layer, vit_keras.layers.ImageSizeCheck) for layer in model.layers)


@pytest.mark.parametrize("how", [dict(image_size=None), dict(input_shape=(None, None, 3)),
                                 dict(input_tensor=keras.Input((None, None, 3)))])
def test_image_size_none_input_shape_and_input_tensor_give_a_model_of_any_size(how):
    model = vit_keras.ViT(**TINY, include_top=False, pooling="avg", **how)
    assert config_of(model).image_size is None and config_of(model).pos_grid == (28, 28)
    assert model.input_shape == (None, None, None, 3)
    for size in [(16, 16), (40, 24)]:
        assert _run(model, _images(size)).shape == (2, 48)


def test_named_constructor_of_any_size():
    model = vit_keras.ViTTi16(image_size=None, include_top=False, pooling="token", num_layers=1)
    assert _run(model, _images((48, 80), batch=1)).shape == (1, 192)
    assert config_of(model).pos_grid == (14, 14)


def test_weights_keep_the_checkpoints_grid(any_size_models):
    path, _ = _source("vit_jax")
    kwargs = dict(TINY, classes=7, gelu_approximate=True, include_preprocessing=False)
    model = vit_keras.ViT(image_size=None, weights=path, **kwargs)
    config = config_of(model)
    assert config.pos_grid == (8, 8) and config.pos_interpolation == "linear"
    x = _images((24, 56))
    np.testing.assert_allclose(_run(model, x), _run(any_size_models("vit_jax"), x), rtol=0, atol=1e-6)


def test_config_of_any_size_round_trips():
    config = ViTConfig(image_size=None, pos_grid=(24, 24), pos_interpolation="bicubic_antialias")
    assert config.dynamic and config.grid_size == (24, 24) and config.reference_image_size == (384, 384)
    assert ViTConfig.from_dict(config.to_dict()) == config
    assert config.replace(image_size=384).pos_grid is None
    with pytest.raises(ValueError, match="pos_interpolation"):
        ViTConfig(image_size=None, pos_interpolation="nearest")
    with pytest.raises(ValueError, match="pos_grid.*image_size=None"):
        vit_keras.ViT(image_size=32, pos_grid=(4, 4), **TINY)


# --- sizes the model cannot cut --------------------------------------------------------------------------------


def test_a_size_not_divisible_by_the_patch_is_refused_naming_both():
    model = vit_keras.ViT(image_size=None, classes=5, **TINY)
    with pytest.raises(ValueError, match="Image height 30 is not divisible by patch_size 8; use 24 or 32"):
        model(np.zeros((1, 30, 32, 3), np.float32))
    run = tf.function(lambda x: model(x), input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)])
    assert run(tf.zeros((1, 16, 24, 3))).shape == (1, 5)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"multiples of 8 \(patch_size 8\).*\[36 48\]"):
        run(tf.zeros((1, 36, 48, 3)))


def test_a_hybrid_refuses_sizes_not_divisible_by_its_total_stride(any_size_models):
    model = any_size_models("hybrid")
    with pytest.raises(ValueError, match="Image width 36 is not divisible by the hybrid's total stride 8"):
        model(np.zeros((1, 32, 36, 3), np.float32))


# --- compiled, saved, exported, inspected ----------------------------------------------------------------------


@pytest.mark.slow
def test_jit_compile_traces_once_per_shape(any_size_models):
    model = any_size_models("vit_jax")
    compiled = tf.function(lambda x: model(x, training=False), jit_compile=True)
    for size in [(24, 56), (40, 40), (24, 56), (40, 40)]:
        x = _images(size)
        np.testing.assert_allclose(compiled(x).numpy(), _run(model, x), rtol=0, atol=TOLERANCE)
    assert compiled.experimental_get_tracing_count() == 2
    # Traced with unknown sizes, XLA drops run-time assertions: a wrong size still fails (in the patch reshape),
    # it never comes back as a different number of tokens.
    relaxed = tf.function(lambda x: model(x, training=False), jit_compile=True,
                          input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="reshape"):
        relaxed(tf.zeros((1, 30, 56, 3)))


def test_keras_file_round_trips_with_safe_mode(any_size_models, tmp_path):
    model = any_size_models("transformers")
    model.save(tmp_path / "any.keras")
    loaded = keras.models.load_model(tmp_path / "any.keras", safe_mode=True)
    assert config_of(loaded) == config_of(model)
    for size in [(40, 40), (24, 96)]:
        x = _images(size)
        np.testing.assert_array_equal(_run(loaded, x), _run(model, x))


@pytest.mark.slow
def test_saved_model_takes_any_multiple_of_the_patch_stride(tmp_path):
    model = vit_keras.ViT(image_size=None, classes=5, **TINY)
    path = export.saved_model(model, tmp_path / "vit")
    summary = export.signature_summary(path)
    assert summary[export.SERVING_DEFAULT]["inputs"]["images"] == ("float32", (None, None, None, 3))
    signature = tf.saved_model.load(path).signatures[export.SERVING_DEFAULT]
    for size in [(32, 32), (24, 40)]:
        x = _images(size)
        np.testing.assert_allclose(signature(images=tf.constant(x))["probabilities"].numpy(), _run(model, x),
                                   rtol=0, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"multiples of 8.*\[1 30 32 3\]"):
        signature(images=tf.zeros((1, 30, 32, 3)))
    with pytest.raises(ValueError, match="undefined image size"):
        export.tflite(model, tmp_path / "vit.tflite")


def test_attention_maps_at_the_call_time_grid(any_size_models):
    model = any_size_models("vit_jax")
    path, kwargs = _source("vit_jax")
    size = (24, 56)
    fixed = vit_keras.from_pretrained(path, image_size=size, **kwargs)
    x = _images(size)
    maps, expected = inspection.attention_maps(model, x), inspection.attention_maps(fixed, x)
    assert maps.rollout.shape == (2, 3, 7) and maps.image_size == size
    np.testing.assert_allclose(maps.rollout, expected.rollout, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(maps.heads, expected.heads, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(inspection.attention_distances(model, x), inspection.attention_distances(fixed, x),
                               rtol=0, atol=1e-4)


def test_masked_patch_prediction_asks_for_a_fixed_size():
    from vit_keras.training.masked_patch import MaskedPatchModel

    encoder = vit_keras.ViT(image_size=None, include_top=False, **TINY)
    with pytest.raises(ValueError, match="fixed image_size"):
        MaskedPatchModel(encoder)


def test_a_size_given_elsewhere_fixes_the_model():
    model = vit_keras.ViT(image_size=None, input_shape=(32, 48, 3), **TINY)
    assert config_of(model).image_size == (32, 48) and model.input_shape == (None, 32, 48, 3)
    partly = vit_keras.ViT(input_shape=(32, None, 3), include_top=False, **TINY)
    assert config_of(partly).image_size is None and partly.input_shape == (None, 32, None, 3)
    assert _run(partly, _images((32, 24))).shape == (2, 1 + 4 * 3, 48)


def test_inspect_command_draws_a_model_of_any_size(tmp_path, capsys):
    from vit_keras.cli import main

    model = vit_keras.ViT(image_size=None, patch_size=4, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=64,
                          classes=4, pos_grid=(4, 4))
    model.save(tmp_path / "any.keras")
    image_path = tmp_path / "photo.png"
    keras.utils.save_img(image_path, np.random.default_rng(0).integers(0, 256, (20, 24, 3), dtype=np.uint8))
    out = tmp_path / "figures"
    assert main(["inspect", str(image_path), "--model", str(tmp_path / "any.keras"), "--image-size", "24",
                 "--out", str(out)]) == 0
    assert len(capsys.readouterr().out.split()) == 4
