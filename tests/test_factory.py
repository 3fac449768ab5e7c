"""`ViT(**kw)` builds `ViTConfig(**kw)`: one vocabulary for the architecture, the older names translated at the
edge, anything else refused by name; and the model carries the config it was built from."""

import json
import os

import keras
import numpy as np
import pytest

import vit_keras
from tests.tiny import TINY
from vit_keras.cli import main as cli_main
from vit_keras.configs import VARIANTS, ViTConfig, config_fields, translate_aliases
from vit_keras.models import resolve_config
from vit_keras.vision_transformer import config_of
from vit_keras.weights.registry import variant_of

ARCHITECTURES = [
    dict(image_size=(32, 32), **TINY),
    dict(image_size=(32, 48), global_pool="avg", class_token=False, activation="gelu", layer_norm_epsilon=1e-5,
         **TINY),
    dict(image_size=(32, 32), layer_scale=True, num_register_tokens=2, no_embed_class=True, pre_norm=True,
         fc_norm=True, global_pool="avg", qkv_bias=False, patch_bias=False, activation="quick_gelu", **TINY),
    dict(image_size=(32, 32), global_pool="map", class_token=False, representation_size=24, **TINY),
    dict(image_size=(32, 32), distilled=True, position_embedding="sincos_2d", dropout_rate=0.1,
         attention_dropout_rate=0.1, **TINY),
    dict(image_size=None, pos_grid=(3, 5), pos_interpolation="bicubic_antialias", **TINY),
]


@pytest.mark.parametrize("kwargs", ARCHITECTURES, ids=range(len(ARCHITECTURES)))
def test_vit_of_config_fields_carries_that_config(kwargs):
    model = vit_keras.ViT(**kwargs, classes=5)
    assert config_of(model) == ViTConfig(**kwargs)
    assert config_of(vit_keras.models.build_vit(ViTConfig(**kwargs), classes=5)) == config_of(model)


def test_model_kwargs_rebuild_the_config():
    config = ViTConfig(image_size=(32, 32), layer_scale=True, num_register_tokens=1, **TINY)
    assert config_of(vit_keras.ViT(**config.model_kwargs())) == config
    assert set(VARIANTS["R50+B/16"].model_kwargs()) <= set(config_fields())


def test_older_names_are_translated_to_config_fields():
    old = vit_keras.ViT(image_size=32, classifier="gap", gelu_approximate=False, **TINY)
    new = vit_keras.ViT(image_size=32, global_pool="avg", class_token=False, activation="gelu", **TINY)
    assert config_of(old) == config_of(new)
    assert translate_aliases({"classifier": "map"}) == {"global_pool": "map", "class_token": False}
    # An explicit activation wins over gelu_approximate (as ViT() documents).
    assert translate_aliases({"gelu_approximate": True, "activation": "quick_gelu"}) == {"activation": "quick_gelu"}


def test_contradicting_older_name_is_refused():
    with pytest.raises(ValueError, match="classifier='gap'.*global_pool='avg'.*'map'"):
        vit_keras.ViT(image_size=32, classifier="gap", global_pool="map", **TINY)
    with pytest.raises(ValueError, match="`classifier` must be 'token', 'gap' or 'map'"):
        vit_keras.ViT(image_size=32, classifier="cls", **TINY)


def test_unknown_argument_is_refused_naming_the_config_fields():
    with pytest.raises(TypeError) as error:
        vit_keras.ViT(image_size=32, layerscale=True, **TINY)
    message = str(error.value)
    assert "['layerscale']" in message
    for field in ("layer_scale", "num_register_tokens", "global_pool", "activation", "pos_interpolation"):
        assert field in message
    with pytest.raises(TypeError, match="unknown arguments \\['hidden'\\]"):
        vit_keras.ViTTi16(image_size=32, hidden=48)


def test_variant_of_reads_defaults_for_missing_fields():
    assert variant_of(VARIANTS["L/32"].model_kwargs()) == "L/32"
    assert variant_of({}) == "B/16"
    assert variant_of(VARIANTS["R26+S/32"]) == "R26+S/32"
    assert variant_of(ViTConfig(**TINY)) is None


# ---------------------------------------------------------------- one factory behind the three entry points

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
SHAPE = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


@pytest.mark.slow
@pytest.mark.parametrize("case, interpolation", [("vitjax_token_raw", "linear"), ("hf_dir", "bicubic")])
def test_vit_from_pretrained_and_convert_build_the_same_model(case, interpolation, tmp_path):
    """The same checkpoint with the same overrides (a new image size, the source's own interpolation) gives the
    same config and the same logits through `ViT(weights=)`, `from_pretrained` and `vit-keras convert`."""
    with open(os.path.join(FIXTURES, case, "meta.json")) as f:
        meta = json.load(f)
    path = os.path.join(FIXTURES, case, meta["checkpoint"])
    shape = {k: meta["kwargs"][k] for k in SHAPE}
    built = vit_keras.ViT(image_size=96, **shape, classes=7, classifier_activation=None, weights=path,
                          interpolation=interpolation)
    pretrained = vit_keras.from_pretrained(path, image_size=96, classifier_activation=None)
    out = str(tmp_path / "converted.keras")
    assert cli_main(["convert", path, out, "--image-size", "96"]) == 0
    converted = keras.saving.load_model(out)

    config = config_of(built)
    assert config.image_size == (96, 96) and config.layer_norm_epsilon == meta["kwargs"]["layer_norm_epsilon"]
    assert config_of(pretrained) == config
    assert config_of(converted) == config
    x = np.random.default_rng(3).uniform(0, 255, (2, 96, 96, 3)).astype(np.float32)
    logits = [np.asarray(model(x, training=False)) for model in (built, pretrained, converted)]
    # The same graph with the same (resampled) weights: equal up to float32 rounding of reordered ops.
    np.testing.assert_allclose(logits[1], logits[0], rtol=0, atol=1e-5)
    np.testing.assert_allclose(logits[2], logits[0], rtol=0, atol=1e-5)


def test_checkpoint_stored_size_is_the_default_and_overrides_win():
    meta_path = os.path.join(FIXTURES, "vitjax_prelogits", "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    info = vit_keras.weights.describe(os.path.join(FIXTURES, "vitjax_prelogits", meta["checkpoint"]))
    stored = resolve_config(info, {})
    assert stored.image_size == tuple(meta["kwargs"]["image_size"]) and stored.representation_size == 24
    # A fresh head (other classes) drops the representation layer; an explicit value wins.
    assert resolve_config(info, {}, classes=3).representation_size is None
    assert resolve_config(info, {"representation_size": None}).representation_size is None
    # Without a head: from_pretrained and convert keep the checkpoint's model; ViT() gives the backbone's features.
    assert resolve_config(info, {}, include_top=False).representation_size == 24
    assert resolve_config(info, {}, include_top=False, headless_representation=False).representation_size is None
    assert resolve_config(info, {"image_size": (48, 48), "layer_norm_epsilon": 1e-5}).layer_norm_epsilon == 1e-5
    # Left open (None), the numerics are the checkpoint's.
    assert resolve_config(info, {"activation": None}).activation == "gelu_tanh"
    with pytest.raises(ValueError, match="Unknown ViTConfig fields \\['classifier'\\]"):
        resolve_config(info, {"classifier": "token"})
    # Any image size: the table stays at the checkpoint's grid, or at the grid of an `image_size` the caller gives.
    any_size = resolve_config(info, {}, any_image_size=True)
    assert any_size.image_size is None and any_size.pos_grid == stored.grid_size
    stored_at_48 = resolve_config(info, {"image_size": (48, 48)}, any_image_size=True)
    assert stored_at_48.image_size is None and stored_at_48.pos_grid == (48 // stored.patch_size,) * 2


@pytest.fixture
def config_count(monkeypatch):
    """How many `ViTConfig`s are made while the test runs."""
    made = []
    post_init = ViTConfig.__post_init__

    def counting(self):
        made.append(self)
        post_init(self)

    monkeypatch.setattr(ViTConfig, "__post_init__", counting)
    return made


def test_vit_and_from_pretrained_resolve_the_config_once(config_count):
    npz = os.path.join(FIXTURES, "vitjax_token_raw", "checkpoint.npz")
    model = vit_keras.ViT(image_size=32, classes=7, weights=npz, **TINY)
    assert len(config_count) == 1 and config_count[0] is config_of(model)
    config_count.clear()
    model = vit_keras.from_pretrained(npz, image_size=32)
    assert len(config_count) == 1 and config_count[0] is config_of(model)


def test_a_checkpoint_without_a_head_loads_as_its_backbone():
    directory = os.path.join(FIXTURES, "family", "hf_dinov2", "checkpoint")  # a transformers Dinov2Model
    backbone = vit_keras.from_pretrained(directory)
    assert "head" not in [layer.name for layer in backbone.layers]
    assert backbone.output_shape == vit_keras.from_pretrained(directory, include_top=False).output_shape
    with pytest.raises(ValueError, match=r"hf_dinov2/checkpoint' has no classification head.*include_top=False.*"
                                         r"classes=N"):
        vit_keras.from_pretrained(directory, include_top=True)
    assert vit_keras.from_pretrained(directory, classes=3).output_shape == (None, 3)  # a fresh head on request
    # A checkpoint with a head keeps it by default.
    with_head = os.path.join(FIXTURES, "family", "timm_deit_distilled", "checkpoint")
    assert vit_keras.from_pretrained(with_head).output_shape == (None, 7)


def test_a_model_without_a_position_table_takes_any_grid_its_patches_divide():
    """DINOv3 (RoPE only) runs at any grid, as transformers runs it; a learned table keeps the stored size unless
    asked. Bound: the any-size model and one built for the size compute the same float32 graph but for the RoPE
    tables, computed in the graph from the grid instead of stored: float32 rounding over two blocks, ~1e-6 of the
    output's scale; 1e-5 with margin, where a wrong position rotates by O(0.1)."""
    directory = os.path.join(FIXTURES, "family2", "timm_dinov3", "checkpoint")
    model = vit_keras.from_pretrained(directory, classifier_activation=None)
    assert model.input_shape == (None, None, None, 3) and config_of(model).position_embedding == "none"
    images = np.random.default_rng(0).uniform(0, 255, (1, 48, 64, 3)).astype("float32")
    fixed = vit_keras.from_pretrained(directory, image_size=(48, 64), classifier_activation=None)
    assert fixed.input_shape == (None, 48, 64, 3)
    assert vit_keras.from_pretrained(directory, any_image_size=False).input_shape == (None, 32, 32, 3)  # stored
    out, expected = np.asarray(model(images)), np.asarray(fixed(images))
    assert np.abs(out - expected).max() <= 1e-5 * max(1.0, np.abs(expected).max())
    learned = vit_keras.from_pretrained(os.path.join(FIXTURES, "family", "timm_deit_distilled", "checkpoint"))
    assert None not in learned.input_shape[1:3] and config_of(learned).position_embedding == "learned_1d"
