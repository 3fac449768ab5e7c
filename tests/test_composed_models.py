"""Whole models composed from the block's parts by `ViTConfig` fields (`mlp`, `norm`, `rope`, ...): built by the one
builder, saved and reloaded in safe mode, inspected, and identical whichever way the same function is computed.

Bounds: the same float32 graph evaluated twice (a reload, a fixed- vs any-size model at the same grid) is compared
exactly or to 1e-6 (the any-size model computes its RoPE tables in the graph with the same float32 operations as the
numpy constants; the tables agree to a few ulps, `test_rope.py`). `head_tokens_only` drops work, not arithmetic:
the class token's logits agree to 1e-5 (the attention's softmax normalises over the same keys, in a different
matmul shape; measured differences are ~1e-7 on unit-scale logits).
"""

import keras
import numpy as np
import pytest

import vit_keras
from vit_keras.configs import ViTConfig
from vit_keras.inspection.probe import attention_weights
from vit_keras.vision_transformer import config_of
from vit_keras.weights.assign import model_slots

TINY = dict(patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)
PARTS = {
    "dinov3": dict(rope="rotate_half", position_embedding="none", num_register_tokens=4,
                   layer_scale=True),
    "eva02": dict(rope="interleaved", rope_ref_grid_size=(2, 2), mlp="swiglu", mlp_norm="layernorm"),
    "pe": dict(rope="interleaved", rope_grid_offset=1.0, rope_grid_indexing="xy", pre_norm=True, global_pool="map"),
    "rope_mixed": dict(rope="mixed", position_embedding="none"),
    "aimv2_like": dict(norm="rmsnorm", mlp="swiglu_packed", mlp_bias=False, class_token=False, global_pool="avg"),
}


def _images(size=(32, 32), n=2, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, (n, *size, 3)).astype("float32")


def _randomised(model, seed=1):
    """Random weights everywhere (a zero head or unit norms would hide a part that is ignored)."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype("float32"))
    return model


@pytest.mark.slow  # builds and runs models: over 1.5 s
@pytest.mark.parametrize("family", sorted(PARTS))
def test_a_composed_model_saves_reloads_and_keeps_its_config(tmp_path, family):
    model = _randomised(vit_keras.ViT(image_size=32, classes=5, classifier_activation=None, **TINY, **PARTS[family]))
    images = _images()
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(loaded.predict(images, verbose=0), model.predict(images, verbose=0))
    assert config_of(loaded) == config_of(model)
    for field, value in PARTS[family].items():
        expected = tuple(value) if isinstance(value, list) else value
        assert getattr(config_of(loaded), field) == expected


@pytest.mark.slow  # builds and runs models: over 1.5 s
@pytest.mark.parametrize("family", ["dinov3", "eva02", "rope_mixed"])
def test_a_model_of_any_size_equals_the_fixed_size_model_at_its_size(family):
    fixed = _randomised(vit_keras.ViT(image_size=(32, 48), classes=5, classifier_activation=None, **TINY,
                                      **PARTS[family]))
    dynamic = vit_keras.ViT(image_size=None, classes=5, classifier_activation=None, **TINY, **PARTS[family],
                            pos_grid=(4, 6))
    dynamic.set_weights(fixed.get_weights())
    images = _images((32, 48))
    np.testing.assert_allclose(dynamic.predict(images, verbose=0), fixed.predict(images, verbose=0), atol=1e-6,
                               rtol=1e-6)


@pytest.mark.slow  # builds and runs models: over 1.5 s
def test_rope_changes_the_function_and_its_grid_order_matters():
    """A model that ignored RoPE, or swapped its axes, would not be caught by a square image."""
    plain = _randomised(vit_keras.ViT(image_size=(32, 48), classes=5, classifier_activation=None, **TINY,
                                      position_embedding="none"))
    outputs = {}
    for indexing in ("ij", "xy"):
        model = vit_keras.ViT(image_size=(32, 48), classes=5, classifier_activation=None, **TINY,
                              position_embedding="none", rope="interleaved", rope_grid_indexing=indexing)
        model.set_weights(plain.get_weights())
        outputs[indexing] = model.predict(_images((32, 48)), verbose=0)
    reference = plain.predict(_images((32, 48)), verbose=0)
    assert np.abs(outputs["ij"] - reference).max() > 1e-3
    assert np.abs(outputs["ij"] - outputs["xy"]).max() > 1e-3


@pytest.mark.slow  # builds and runs models: over 1.5 s
@pytest.mark.parametrize("family", ["dinov3", "rope_mixed"])
def test_head_tokens_only_gives_the_same_logits_with_rope(family):
    full = _randomised(vit_keras.ViT(image_size=32, classes=5, classifier_activation=None, **TINY, **PARTS[family]))
    fast = vit_keras.ViT(image_size=32, classes=5, classifier_activation=None, head_tokens_only=True, **TINY,
                         **PARTS[family])
    fast.set_weights(full.get_weights())
    np.testing.assert_allclose(fast.predict(_images(), verbose=0), full.predict(_images(), verbose=0), atol=1e-5)


@pytest.mark.slow  # builds and runs models: over 1.5 s
@pytest.mark.parametrize("size", [32, None])
def test_attention_maps_of_a_rope_model_with_registers(size):
    model = _randomised(vit_keras.ViT(image_size=size, classes=5, **TINY, **PARTS["dinov3"]))
    maps = attention_weights(model, _images((32, 48) if size is None else (32, 32)))
    tokens = 1 + 4 + (4 * 6 if size is None else 16)
    assert maps.shape == (2, 2, 3, tokens, tokens)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)


def test_the_parts_name_their_checkpoint_variables():
    slots = model_slots(vit_keras.ViT(image_size=32, classes=5, **TINY, **PARTS["rope_mixed"], mlp="swiglu",
                                      mlp_norm="rmsnorm", norm="rmsnorm"))
    assert "rope/freqs" in slots and tuple(slots["rope/freqs"].shape) == (2, 2, 3, 8)
    block = "Transformer/encoderblock_0"
    assert {f"{block}/MlpBlock_3/Dense_0_gate/kernel", f"{block}/MlpBlock_3/Dense_0_value/kernel",
            f"{block}/MlpBlock_3/norm/scale"} <= set(slots)
    # RMSNorm has a scale and no shift.
    assert f"{block}/LayerNorm_0/scale" in slots and f"{block}/LayerNorm_0/bias" not in slots


@pytest.mark.parametrize(("fields", "message"), [
    (dict(rope="spiral"), "`rope` must be None or one of"),
    (dict(rope="interleaved", hidden_size=30, num_heads=3), "divisible by 4"),
    (dict(rope_temperature=100.0), "`rope` is None"),
    (dict(rope="mixed", rope_ref_grid_size=(2, 2)), "integer patch positions"),
    (dict(mlp="geglu"), "`mlp` must be one of"),
    (dict(mlp_norm="layernorm"), "apply to the SwiGLU MLPs only"),
    (dict(norm="batchnorm"), "`norm` must be one of"),
    (dict(rope="interleaved", rope_grid_indexing="yx"), "`rope_grid_indexing` must be one of"),
])
def test_bad_part_fields_are_refused_by_name(fields, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**{**TINY, **fields})


def test_saving_a_composed_model_to_timm_is_refused(tmp_path):
    model = vit_keras.ViT(image_size=32, classes=5, **TINY, **PARTS["eva02"])
    with pytest.raises(ValueError, match="plain ViT block"):
        vit_keras.save_pretrained(model, str(tmp_path / "out"), format="timm")
    assert not (tmp_path / "out").exists()
