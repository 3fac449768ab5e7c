"""The weights API: registry, head semantics (vit_jax load_pretrained), all-or-nothing loading with named
errors, refusals, and `vit-keras convert`. Logit checks use the vit_jax fixtures (tolerance 2e-5)."""

import json
import os

import keras
import numpy as np
import pytest

import vit_keras
from tests.reference_numpy import randomize_weights
from tests.tiny import TINY
from vit_keras.cli import main as cli_main
from vit_keras.configs import VARIANTS
from vit_keras.weights import registry
from vit_keras.weights.assign import model_slots

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
# Reference: the float32 forward against the source framework's output (float64 NumPy, JAX or PyTorch) on O(1)
# logits. float32 rounding (2^-24 relative per op) accumulated over a few-layer chain of sums of at most a few
# hundred terms, under any summation order (oneDNN ISA, thread count), stays near 1e-6; 2e-5 keeps >= 10x over
# that.
TOLERANCE = 2e-5


def _fixture(case):
    directory = os.path.join(FIXTURES, case)
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    return (meta, os.path.join(directory, meta["checkpoint"]), np.load(os.path.join(directory, "input.npy")),
            np.load(os.path.join(directory, "expected.npy")))


def _run(model, x):
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)), np.float32)


def _kwargs(meta, **changes):
    kwargs = {**meta["kwargs"], "classifier_activation": None, **changes}
    return {k: v for k, v in kwargs.items() if v != "drop"}


# ---------------------------------------------------------------- registry


def test_registry_covers_the_published_checkpoints():
    entries = vit_keras.list_weights()
    assert len({e.filename for e in entries}) == len(entries)  # no two share a cache file
    for entry in entries:
        assert entry.url.startswith("https://storage.googleapis.com/vit_models/") and entry.url.endswith(".npz")
        assert entry.variant in VARIANTS and entry.resolution in (224, 384)
        assert entry.classes == (21843 if "imagenet2012" not in entry.name else 1000)
    paper_i21k = {e.variant for e in entries if e.name == "imagenet21k"}
    assert paper_i21k == {"B/8", "B/16", "B/32", "L/16", "L/32", "H/14", "R50+B/16", "R26+B/32", "R50+L/32"}
    assert registry.find("B/16", "imagenet21k").representation_size == 768  # i21k files carry pre_logits
    assert registry.find("B/16", "imagenet21k").size_mib == 393.7
    augreg = {e.variant for e in entries if e.name == "augreg-imagenet21k+imagenet2012"}
    assert augreg == {"Ti/16", "S/16", "S/32", "B/16", "B/32", "L/16", "R+Ti/16", "R26+S/32", "R50+L/32"}
    assert registry.find("L/16", "augreg-imagenet21k+imagenet2012").top1 == 85.59
    assert registry.find("B/16", "imagenet21k+imagenet2012").top1 == 83.97
    assert registry.find("B/16", "imagenet21k+imagenet2012-224").url.endswith("imagenet2012/ViT-B_16-224.npz")


def test_imagenet_is_the_best_fine_tune_at_the_models_size():
    assert registry.find("B/16", "imagenet", (224, 224)).name == "augreg-imagenet21k+imagenet2012-224"
    assert registry.find("B/16", "imagenet", (384, 384)).name == "augreg-imagenet21k+imagenet2012"
    assert registry.find("L/32", "imagenet", (224, 224)).name == "imagenet21k+imagenet2012"  # only one published
    assert registry.find("R50+B/16", "imagenet").resolution == 384
    with pytest.raises(ValueError, match="No ImageNet-1k fine-tune is published for ViT-H/14"):
        registry.find("H/14", "imagenet")


def test_unknown_names_list_close_matches():
    with pytest.raises(ValueError, match="Unknown weights 'imagenet21' for ViT-B/16. Did you mean 'imagenet21k'"):
        vit_keras.ViTB16(weights="imagenet21")
    with pytest.raises(ValueError, match="Did you mean.*'B/16:imagenet21k'"):
        registry.find(None, "B/16:imagenet21")


def test_registered_names_need_a_paper_architecture():
    with pytest.raises(ValueError, match="matches none of them; use a named constructor"):
        vit_keras.ViT(image_size=32, weights="imagenet", **{**TINY, "num_layers": 1})


def test_registered_name_of_another_variant_is_refused():
    with pytest.raises(ValueError, match="ViT-B/32 checkpoint but this model is ViT-B/16"):
        vit_keras.ViTB16(weights="B/32:imagenet21k")


# ---------------------------------------------------------------- heads (vit_jax load_pretrained)


def test_representation_layer_is_kept_for_the_checkpoints_own_classes():
    meta, path, x, expected = _fixture("vitjax_prelogits")
    model = vit_keras.ViT(**_kwargs(meta, representation_size="drop"), weights=path)
    assert model.get_layer("pre_logits").units == 24
    assert np.abs(_run(model, x) - expected).max() <= TOLERANCE


def test_other_classes_give_a_fresh_zero_head_and_drop_pre_logits():
    meta, path, x, _ = _fixture("vitjax_prelogits")
    with pytest.warns(UserWarning, match="has 7 classes but the model asks for 3.*zero-initialised"):
        model = vit_keras.ViT(**_kwargs(meta, classes=3, representation_size="drop"), weights=path)
    assert "pre_logits" not in [layer.name for layer in model.layers]
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), 0.0)
    np.testing.assert_array_equal(_run(model, x), 0.0)


def test_include_top_false_drops_the_head_and_keeps_pre_logits_only_on_request():
    meta, path, x, expected = _fixture("vitjax_prelogits")
    npz = dict(np.load(path))
    rep = vit_keras.ViT(**_kwargs(meta, include_top=False), pooling="token", weights=path)
    features = _run(rep, x)
    assert features.shape == (2, 24)
    logits = features @ npz["head/kernel"] + npz["head/bias"]  # the dropped head, applied by hand
    assert np.abs(logits - expected).max() <= TOLERANCE
    plain = vit_keras.ViT(**_kwargs(meta, include_top=False, representation_size=None), pooling="token",
                          weights=path)
    assert _run(plain, x).shape == (2, 48)


# ---------------------------------------------------------------- all or nothing, named errors


def test_shape_mismatch_names_keys_and_shapes():
    meta, path, _, _ = _fixture("vitjax_token_raw")
    with pytest.raises(ValueError) as error:
        vit_keras.ViT(**_kwargs(meta, mlp_dim=64), weights=path)
    message = str(error.value)
    assert "nothing was loaded" in message and "Shape mismatches (6)" in message
    assert "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel: model expects (48, 64), checkpoint has (48, 96)" \
        in message


def test_missing_and_unexpected_keys_are_listed(tmp_path):
    meta, path, _, _ = _fixture("vitjax_token_raw")
    params = dict(np.load(path))
    del params["Transformer/encoderblock_1/LayerNorm_2/scale"]
    params["Transformer/encoderblock_1/extra/kernel"] = np.zeros((2, 2), np.float32)
    broken = tmp_path / "broken.npz"
    np.savez(broken, **params)
    with pytest.raises(ValueError) as error:
        vit_keras.ViT(**_kwargs(meta), weights=str(broken))
    message = str(error.value)
    assert "Missing from the checkpoint (1): Transformer/encoderblock_1/LayerNorm_2/scale" in message
    assert "Not used by the model (1): Transformer/encoderblock_1/extra/kernel" in message
    with pytest.raises(ValueError, match="Not used by the model \\(1\\): cls"):
        vit_keras.ViT(**_kwargs(meta, classifier="gap"), weights=path)


def test_failed_load_leaves_the_model_untouched():
    meta, path, _, _ = _fixture("vitjax_token_raw")
    model = vit_keras.ViT(**_kwargs(meta, num_layers=1))
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(ValueError, match="Not used by the model"):
        vit_keras.load_weights(model, path)
    for old, new in zip(before, model.get_weights()):
        np.testing.assert_array_equal(old, new)


def test_load_weights_into_a_built_model_matches_the_reference():
    meta, path, x, expected = _fixture("vitjax_token_linen")
    model = vit_keras.ViT(**_kwargs(meta))
    assert vit_keras.load_weights(model, path) is model
    assert np.abs(_run(model, x) - expected).max() <= TOLERANCE


@pytest.mark.parametrize("name,match", [
    ("model.pth", "pickle"), ("pytorch_model.bin", "pickle"), ("model.keras", "keras.saving.load_model"),
    ("missing.npz", "does not exist"), ("weights.txt", "Cannot tell the format"),
])
def test_unsupported_sources_are_explained(tmp_path, name, match):
    path = tmp_path / name
    if name != "missing.npz":
        path.write_bytes(b"x")
    with pytest.raises(ValueError, match=match):
        vit_keras.ViT(image_size=32, weights=str(path), **{**TINY, "num_layers": 1})


def test_map_head_checkpoint_needs_a_map_model(tmp_path):
    """A big_vision MAP-head checkpoint loaded into a class-token model lists what does not fit, loading nothing."""
    model = vit_keras.ViT(image_size=32, classifier="map", classes=4, **{**TINY, "num_layers": 1})
    randomize_weights(model, seed=3)
    path = tmp_path / "siglip.npz"
    arrays = {f"params/{k}": np.asarray(v.variable).reshape(v.shape) for k, v in model_slots(model).items()}
    arrays["params/pos_embedding"] = arrays.pop("params/Transformer/posembed_input/pos_embedding")
    np.savez(path, **arrays)
    token_model = vit_keras.ViT(image_size=32, classes=4, **{**TINY, "num_layers": 1})
    with pytest.raises(ValueError, match="MAPHead_0/probe"):
        vit_keras.load_weights(token_model, str(path))
    reloaded = vit_keras.from_pretrained(str(path))
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(reloaded(x)), np.asarray(model(x)), atol=1e-5)


# ---------------------------------------------------------------- vit-keras convert


@pytest.mark.slow
def test_convert_to_keras_and_weights_h5(tmp_path, capsys):
    meta, path, x, expected = _fixture("vitjax_hybrid_r2")
    keras_file = str(tmp_path / "hybrid.keras")
    assert cli_main(["convert", path, keras_file]) == 0
    reloaded = keras.saving.load_model(keras_file)  # safe_mode: no Lambda layers
    assert np.abs(_run(reloaded, x * 127.5 + 127.5) - expected).max() <= TOLERANCE

    meta, path, x, expected = _fixture("hf_dir")
    h5 = str(tmp_path / "hf.weights.h5")
    assert cli_main(["convert", path, h5]) == 0
    assert "layer_norm_epsilon=1e-12" in capsys.readouterr().out
    model = vit_keras.ViT(**_kwargs(meta, include_preprocessing=True), weights=h5)
    assert np.abs(_run(model, x * 127.5 + 127.5) - expected).max() <= TOLERANCE


def test_convert_reports_bad_destinations(tmp_path, capsys):
    _, path, _, _ = _fixture("vitjax_gap")
    assert cli_main(["convert", path, str(tmp_path / "out.h5")]) == 2
    assert "must end in .weights.h5 or .keras" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"garbage that is no zip", b"truncated"])
def test_corrupt_npz_files_are_explained(tmp_path, content):
    _, path, _, _ = _fixture("vitjax_token_raw")
    broken = tmp_path / "broken.npz"
    broken.write_bytes(open(path, "rb").read()[:5000] if content == b"truncated" else content)
    with pytest.raises(ValueError, match="not an .npz archive|not a readable .npz|corrupt or truncated"):
        vit_keras.ViT(image_size=64, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
                      classes=7, weights=str(broken))


def test_head_after_pre_logits_needs_the_representation_layer():
    meta, path, _, _ = _fixture("vitjax_prelogits")
    model = vit_keras.ViT(**_kwargs(meta, representation_size=None))
    with pytest.warns(UserWarning, match="head on 24 features.*representation_size=24"):
        vit_keras.load_weights(model, path)


# ---------------------------------------------------------------- interpolation= and source_grid= at construction


def _rectangular_checkpoint(tmp_path, grid=(4, 16)):
    """The vitjax_token_raw weights with the 8x8 position grid read as `grid` (same 64 tokens, other geometry)."""
    _, path, _, _ = _fixture("vitjax_token_raw")
    params = dict(np.load(path))
    out = tmp_path / f"rect_{grid[0]}x{grid[1]}.npz"
    np.savez(out, **params)
    return str(out), params


def test_vit_passes_interpolation_to_the_loader(tmp_path):
    """ViT(weights=..., interpolation=...) == load_weights(model, ..., interpolation=...), for both methods; the
    default stays vit_jax's (the vitjax_resample fixture's logits, 2e-5)."""
    from vit_keras.weights.resample import resample_position_embeddings

    meta, path, x, expected = _fixture("vitjax_resample")
    table = np.load(path)["Transformer/posembed_input/pos_embedding"]
    tables = {}
    for interpolation in ("linear", "bicubic"):
        model = vit_keras.ViT(**_kwargs(meta), weights=path, interpolation=interpolation)
        tables[interpolation] = model.get_layer("patch_encoder").pos_embedding.numpy()
        later = vit_keras.load_weights(vit_keras.ViT(**_kwargs(meta)), path, interpolation=interpolation)
        np.testing.assert_array_equal(later.get_layer("patch_encoder").pos_embedding.numpy(), tables[interpolation])
        # float32 storage of the same resampling: 1e-6.
        reference = resample_position_embeddings(table, (12, 12), interpolation=interpolation)
        assert np.abs(tables[interpolation] - reference).max() <= 1e-6
        if interpolation == "linear":
            assert np.abs(_run(model, x) - expected).max() <= TOLERANCE
    assert np.abs(tables["linear"] - tables["bicubic"]).max() > 1e-2  # the option really changed something


def test_vit_passes_source_grid_to_the_loader(tmp_path):
    """A 4x16 stored grid loaded at 48x80 (6x10) through ViT(source_grid=...) agrees with the float64 NumPy ViT
    (tests/reference_numpy.py) within 2e-5; without source_grid the 64 tokens are read as 8x8 and differ."""
    from tests import reference_numpy

    meta, _, _, _ = _fixture("vitjax_token_raw")
    path, params = _rectangular_checkpoint(tmp_path)
    kwargs = _kwargs(meta, image_size=[48, 80])
    model = vit_keras.ViT(**kwargs, weights=path, source_grid=(4, 16))
    x = np.random.default_rng(3).uniform(-1, 1, (2, 48, 80, 3)).astype(np.float32)
    reference = reference_numpy.vit_forward(x, params, patch_size=8, source_grid=(4, 16))
    assert np.abs(_run(model, x) - reference).max() <= TOLERANCE
    square = vit_keras.ViT(**kwargs, weights=path)
    assert np.abs(_run(square, x) - reference).max() > 1e-3


@pytest.mark.slow
def test_named_constructors_pass_interpolation_and_source_grid(tmp_path):
    """ViTTi16(weights=..., source_grid=..., interpolation=...) resamples a stored 1x4 grid to its 2x2 (32x32)."""
    from vit_keras.weights.assign import model_slots
    from vit_keras.weights.resample import resample_position_embeddings

    source = vit_keras.ViTTi16(image_size=(16, 64), weights=None)
    rng = np.random.default_rng(4)
    params = {key: rng.normal(size=slot.shape).astype(np.float32) for key, slot in model_slots(source).items()}
    path = tmp_path / "ti16_1x4.npz"
    np.savez(path, **params)
    table = params["Transformer/posembed_input/pos_embedding"]
    for interpolation in ("linear", "bicubic"):
        model = vit_keras.ViTTi16(image_size=32, weights=str(path), source_grid=(1, 4), interpolation=interpolation)
        expected = resample_position_embeddings(table, (2, 2), source_grid=(1, 4), interpolation=interpolation)
        assert np.abs(model.get_layer("patch_encoder").pos_embedding.numpy() - expected).max() <= 1e-6


@pytest.mark.parametrize("changes,match", [
    (dict(interpolation="cubic"), "`interpolation` must be one of \\('linear', 'bicubic', 'bilinear_antialias'\\)"),
    (dict(interpolation=None), "`interpolation` must be one of"),
    (dict(source_grid=(4,)), "`source_grid` must be .*\\(rows, cols\\)"),
    (dict(source_grid="4,16"), "`source_grid` must be"),
    (dict(source_grid=(4, 0)), "`source_grid` must be"),
    (dict(source_grid=(4, 16), weights=None), "pass it with `weights=`"),
])
def test_bad_interpolation_and_source_grid_are_explained(changes, match):
    meta, path, _, _ = _fixture("vitjax_token_raw")
    with pytest.raises(ValueError, match=match):
        vit_keras.ViT(**_kwargs(meta), **{"weights": path, **changes})
    if "weights" not in changes:
        with pytest.raises(ValueError, match=match):
            vit_keras.load_weights(vit_keras.ViT(**_kwargs(meta)), path, **changes)


def test_source_grid_with_a_keras_weights_file_is_refused(tmp_path):
    meta, _, _, _ = _fixture("vitjax_token_raw")
    h5 = str(tmp_path / "m.weights.h5")
    vit_keras.ViT(**_kwargs(meta)).save_weights(h5)
    with pytest.raises(ValueError, match="Keras weights file, loaded as saved"):
        vit_keras.ViT(**_kwargs(meta), weights=h5, source_grid=(8, 8))


@pytest.mark.parametrize("content", [b"not hdf5", "truncated"])
def test_corrupt_keras_weights_file_is_a_value_error(tmp_path, content):
    meta, _, _, _ = _fixture("vitjax_token_raw")
    h5 = tmp_path / "m.weights.h5"
    vit_keras.ViT(**_kwargs(meta)).save_weights(str(h5))
    data = h5.read_bytes()
    h5.write_bytes(data[: len(data) // 2] if content == "truncated" else content)
    with pytest.raises(ValueError, match="not a readable Keras weights file"):
        vit_keras.ViT(**_kwargs(meta), weights=str(h5))


# ---------------------------------------------------------------- vit-keras convert: --source-grid, --interpolation


def test_convert_with_source_grid_keeps_the_native_rectangular_size(tmp_path):
    """--source-grid 4,16 builds the checkpoint's own 32x128 model (no resampling): the NumPy ViT on the stored
    values, 2e-5. Without it the 64 tokens would be read as a square 8x8 grid (64x64)."""
    from tests import reference_numpy

    path, params = _rectangular_checkpoint(tmp_path)
    out = str(tmp_path / "rect.keras")
    assert cli_main(["convert", path, out, "--source-grid", "4,16"]) == 0
    model = keras.saving.load_model(out)
    assert model.input_shape[1:3] == (32, 128)
    x = np.random.default_rng(5).uniform(0, 255, (2, 32, 128, 3)).astype(np.float32)
    reference = reference_numpy.vit_forward(x, params, patch_size=8, include_preprocessing=True)
    assert np.abs(_run(model, x) - reference).max() <= TOLERANCE


@pytest.mark.slow
def test_convert_with_interpolation_and_image_size(tmp_path):
    from vit_keras.weights.resample import resample_position_embeddings

    _, path, _, _ = _fixture("vitjax_token_raw")
    table = np.load(path)["Transformer/posembed_input/pos_embedding"]
    for interpolation in ("linear", "bicubic"):
        out = str(tmp_path / f"{interpolation}.keras")
        assert cli_main(["convert", path, out, "--image-size", "96", "--interpolation", interpolation]) == 0
        stored = keras.saving.load_model(out).get_layer("patch_encoder").pos_embedding.numpy()
        expected = resample_position_embeddings(table, (12, 12), interpolation=interpolation)
        assert np.abs(stored - expected).max() <= 1e-6, interpolation


@pytest.mark.parametrize("value", ["4", "4,16,2", "a,b", "0,4"])
def test_convert_rejects_a_bad_source_grid(tmp_path, capsys, value):
    _, path, _, _ = _fixture("vitjax_token_raw")
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["convert", path, str(tmp_path / "x.keras"), "--source-grid", value])
    assert exit_info.value.code == 2
    assert "ROWS,COLS of positive ints" in capsys.readouterr().err
