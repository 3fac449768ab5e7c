"""The weights API: registry, head semantics (vit_jax load_pretrained), all-or-nothing loading with named
errors, refusals, and `vit-keras convert`. Logit checks use the vit_jax fixtures (tolerance 2e-5)."""

import json
import os

import keras
import numpy as np
import pytest

import vit_keras
from vit_keras.cli import main as cli_main
from vit_keras.configs import VARIANTS
from vit_keras.weights import registry

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
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
        vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96,
                      weights="imagenet")


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
        vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96,
                      weights=str(path))


def test_map_head_checkpoints_are_refused(tmp_path):
    path = tmp_path / "siglip.npz"
    np.savez(path, **{"params/MAPHead_0/probe": np.zeros((1, 1, 4), np.float32)})
    with pytest.raises(ValueError, match="MAP"):
        vit_keras.load_weights(vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1,
                                             num_heads=3, mlp_dim=96), str(path))


# ---------------------------------------------------------------- vit-keras convert


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
