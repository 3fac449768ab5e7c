"""Quantized models (`model.quantize("int8" | "float8" | "int4")`) predict, save, reload and rebuild exactly.

Keras rewrites each `Dense` / `EinsumDense` in place; the vit_keras layers that own them (PatchEncoder,
TransformerBlock, MlpBlock, MAPHead) keep the quantized policies in their config, so a `.keras` file reloads with
`safe_mode=True` into the same quantized model, and constructors take `dtype=` (a `DTypePolicyMap` by layer path)
to rebuild one for its `.weights.h5`.
"""

import gc
import json
import os

import keras
import numpy as np
import pytest

import vit_keras
from tests.model_kinds import KINDS, build, images
from vit_keras.layers.dtypes import policy_map, quantized_layers
from vit_keras.models import build_vit, config_of

MODES = ("int8", "float8", "int4")
FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "vitjax_token_raw")


@pytest.fixture(scope="module", autouse=True)
def _quick_quantize():
    """Keras runs `gc.collect()` for every variable `quantize` replaces (0.4 s each with TensorFlow loaded); the
    result does not depend on it, so these tests skip it to stay fast."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gc, "collect", lambda *args: 0)
        yield


def _predict(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


def _quantized(kind, mode):
    model = build(kind)
    model.quantize(mode)
    return model


def _quantize_in_three_modes(model):
    """int8 for the patch projection, the first block and the heads, float8 for the last block's attention, int4
    for the rest (the last MLP, the MAP head): every mode in one model, saved and reloaded once."""

    def in_group(*prefixes):
        return lambda layer: layer.quantization_mode is None and (layer.path or "").startswith(prefixes)

    model.quantize("int8", filters=in_group("patch_encoder/", "Transformer_encoderblock_0/", "head", "pre_logits"))
    model.quantize("float8", filters=in_group("Transformer_encoderblock_1/MultiHeadDotProductAttention_1/"))
    model.quantize("int4", filters=in_group(""))
    return model


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_quantized_model_reloads_from_keras_file_and_from_config_identically(tmp_path, kind):
    model = _quantize_in_three_modes(build(kind))
    quantized = quantized_layers(model)
    assert quantized["patch_encoder/embedding"] == quantized["head"] == "int8"
    assert quantized["Transformer_encoderblock_1/MultiHeadDotProductAttention_1/query"] == "float8"
    assert quantized["Transformer_encoderblock_1/MlpBlock_3/Dense_0"] == "int4"
    x = images()
    expected = _predict(model, x)

    path = str(tmp_path / "quantized.keras")
    model.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    assert quantized_layers(reloaded) == quantized
    np.testing.assert_array_equal(_predict(reloaded, x), expected)

    # The config alone rebuilds the quantized variables; the weights file fills them.
    weights = str(tmp_path / "quantized.weights.h5")
    model.save_weights(weights)
    rebuilt = keras.Model.from_config(model.get_config())
    assert quantized_layers(rebuilt) == quantized
    rebuilt.load_weights(weights)
    np.testing.assert_array_equal(_predict(rebuilt, x), expected)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_model_quantize_saves_reloads_and_saves_again_identically(tmp_path, mode):
    model = build("vit")
    model.quantize(mode)
    quantized = quantized_layers(model)
    # Every Dense / EinsumDense: the patch projection, q/k/v/out and both MLP layers of each block, the head.
    assert len(quantized) == 1 + 2 * 6 + 1 and set(quantized.values()) == {mode}
    x = images()
    expected = _predict(model, x)
    model.save(str(tmp_path / "first.keras"))
    reloaded = keras.models.load_model(str(tmp_path / "first.keras"), safe_mode=True)
    np.testing.assert_array_equal(_predict(reloaded, x), expected)
    reloaded.save(str(tmp_path / "second.keras"))  # a reloaded quantized model writes its scales too
    again = keras.models.load_model(str(tmp_path / "second.keras"), safe_mode=True)
    np.testing.assert_array_equal(_predict(again, x), expected)


@pytest.mark.numerics
def test_int8_kernels_are_int8_and_follow_the_float_model(record_property):
    model = build("vit")
    # A zero-initialised head would give exactly uniform probabilities, whatever the quantised blocks compute.
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.5, head.kernel.shape).astype("float32"))
    x = images()
    float_out = _predict(model, x)
    model.quantize("int8")
    dense_0 = model.get_layer("Transformer_encoderblock_0").mlp.dense_0
    assert keras.backend.standardize_dtype(dense_0._kernel.dtype) == "int8"
    # Per-channel int8 weights err by up to scale/2 = max|w|/254 and Keras quantises each row of activations the
    # same way, so every layer's output moves by under 1% of its range; which step a value rounds to depends on
    # the float kernels before it: 0.008 to 0.0385 across the 7 settings `make test-numerics` runs on an AVX2
    # EPYC. Bound: 2.1x that worst; a wrong scale or zero point moves these probabilities by tenths.
    diff = float(np.abs(_predict(model, x) - float_out).max())
    record_property("max_abs_diff", float(f"{diff:.3g}"))
    record_property("bound:max_abs_diff", "< 0.08")
    np.testing.assert_allclose(_predict(model, x), float_out, atol=0.08)


@pytest.mark.slow
@pytest.mark.numerics
@pytest.mark.parametrize("mode, tolerance", [("int8", 0.05), ("float8", 0.25), ("int4", 0.45)])
def test_quantize_after_loading_a_checkpoint_stays_near_the_reference_logits(tmp_path, mode, tolerance,
                                                                              record_property):
    """Order: build with the float checkpoint, then quantize. vit_jax's logits (max |logit| 1.21) are matched to
    6.6e-7 in float32; the quantized model's worst logit error stays within `tolerance` and is not zero (the
    quantized path is the one that runs). Each tolerance is about 2x the worst measured across the arithmetic
    settings of `make test-numerics` (int8 0.0229, float8 0.117, int4 0.207, the same at all 7 settings on an
    AVX2 EPYC: the quantisation steps set the error, not the float kernels)."""
    with open(os.path.join(FIXTURE, "meta.json")) as f:
        kwargs = json.load(f)["kwargs"]
    x, reference = np.load(os.path.join(FIXTURE, "input.npy")), np.load(os.path.join(FIXTURE, "expected.npy"))
    model = vit_keras.ViT(**kwargs, weights=os.path.join(FIXTURE, "checkpoint.npz"), classifier_activation=None)
    model.quantize(mode)
    logits = _predict(model, x)
    error = np.abs(logits - reference).max()
    record_property("max_abs_logit_error", float(f"{error:.3g}"))
    record_property("bound:max_abs_logit_error", f"< {tolerance}")
    assert 1e-4 < error < tolerance
    path = str(tmp_path / "checkpoint_quantized.keras")
    model.save(path)
    np.testing.assert_array_equal(_predict(keras.models.load_model(path, safe_mode=True), x), logits)


def test_a_float_checkpoint_is_refused_by_a_quantized_model_and_nothing_changes():
    model = vit_keras.ViT(image_size=64, classes=7, **KINDS["vit"])
    model.quantize("int8")
    before = [np.array(v) for v in model.weights]
    with pytest.raises(ValueError, match=r"quantized layers .*load_weights\(model, \.\.\.\); model.quantize\('int8'\)"):
        vit_keras.load_weights(model, os.path.join(FIXTURE, "checkpoint.npz"))
    for old, new in zip(before, model.weights):
        np.testing.assert_array_equal(old, np.array(new))


def test_every_path_between_checkpoints_and_variables_refuses_a_quantized_layer(tmp_path):
    """The refusal sits where each layer declares its checkpoint arrays, so it holds for a model whose only
    quantized layer is the patch projection (read by the encoder itself), for `assign_params` called directly, and
    for saving in a library's format; nothing is assigned or written."""
    from vit_keras.weights.assign import assign_params
    from vit_keras.weights.google import read_npz

    model = vit_keras.ViT(image_size=64, classes=7, **KINDS["vit"])
    model.quantize("int8", filters=lambda layer: layer.path == "patch_encoder/embedding")
    before = [np.array(v) for v in model.weights]
    with pytest.raises(ValueError, match=r"'patch_encoder/embedding' is quantized \(int8\)"):
        vit_keras.load_weights(model, os.path.join(FIXTURE, "checkpoint.npz"))
    with pytest.raises(ValueError, match=r"is quantized \(int8\)"):
        assign_params(model, read_npz(os.path.join(FIXTURE, "checkpoint.npz")))
    for old, new in zip(before, model.weights):
        np.testing.assert_array_equal(old, np.array(new))
    with pytest.raises(ValueError, match=r"save or convert the float model, before model.quantize"):
        vit_keras.save_pretrained(model, str(tmp_path / "out"), format="timm")
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.slow
def test_constructors_take_a_dtype_policy_map_and_revive_a_quantized_model(tmp_path):
    mode = "int4"  # the mode with the most extra variables (packed kernel, scale, zero point, group index)
    model = _quantized("deit_distilled", mode)
    x = images()
    expected = _predict(model, x)
    weights = str(tmp_path / "quantized.weights.h5")
    model.save_weights(weights)
    policies = policy_map(model)  # keras-hub's form: {layer path: policy}, float32 by default
    assert policies.default_policy.name == "float32" and policies["head"].quantization_mode == mode

    revived = build("deit_distilled", dtype=policies, weights=weights)
    np.testing.assert_array_equal(_predict(revived, x), expected)
    from_config = build_vit(config_of(model), classes=5, dtype=keras.dtype_policies.serialize(policies))
    vit_keras.load_weights(from_config, weights)
    np.testing.assert_array_equal(_predict(from_config, x), expected)
    assert not any(policies[path].quantization_mode for path in ("patch_encoder", "encoder_norm"))


def test_named_constructors_pass_dtype_to_every_layer_and_keep_the_head_float32():
    model = vit_keras.ViTTi16(image_size=32, classes=3, dtype="mixed_bfloat16")
    block = model.get_layer("Transformer_encoderblock_11")
    assert block.dtype_policy.name == block.mlp.dense_1.dtype_policy.name == "mixed_bfloat16"
    assert model.get_layer("encoder_norm").dtype_policy.name == "mixed_bfloat16"
    assert model.get_layer("head").dtype_policy.name == "float32"
    assert model.output.dtype == "float32"


@pytest.mark.slow
@pytest.mark.half_precision("bfloat16")
def test_mixed_precision_quantized_model_round_trips(tmp_path):
    model = build("siglip_map_head", dtype="mixed_bfloat16")
    model.quantize("int8")
    assert model.get_layer("MAPHead_0").mlp.dense_0.dtype_policy.name == "int8_from_mixed_bfloat16"
    x = images()
    path = str(tmp_path / "bf16_int8.keras")
    model.save(path)
    np.testing.assert_array_equal(_predict(keras.models.load_model(path, safe_mode=True), x), _predict(model, x))


def test_a_quantized_vit_inside_the_users_model_round_trips(tmp_path):
    base = vit_keras.ViT(image_size=32, include_top=False, pooling="avg", **KINDS["vit"])
    inputs = keras.Input((32, 32, 3))
    outer = keras.Model(inputs, keras.layers.Dense(3, name="my_head")(base(inputs)))
    outer.quantize("int8")
    x = images()
    path = str(tmp_path / "outer.keras")
    outer.save(path)
    np.testing.assert_array_equal(_predict(keras.models.load_model(path, safe_mode=True), x), _predict(outer, x))


@pytest.mark.parametrize("dtype, message", [
    ("int8_from_float32", r"would quantize every layer, LayerNorm included.*model.quantize\('int8'\)"),
    (keras.dtype_policies.DTypePolicyMap("float8_from_float32"), "would quantize every layer"),
    ("float31", "`dtype` must be a dtype policy name"),
])
def test_bad_dtype_is_refused_with_the_fix(dtype, message):
    with pytest.raises(ValueError, match=message):
        build("vit", dtype=dtype)


def test_a_quantized_dtype_with_a_float_checkpoint_is_refused_before_loading():
    policies = keras.dtype_policies.DTypePolicyMap("float32", {"patch_encoder/embedding": "int8_from_float32"})
    with pytest.raises(ValueError, match=r"float checkpoint.*then call model.quantize\('int8'\)"):
        build("vit", dtype=policies, weights="imagenet21k")


def test_the_callers_policy_map_is_left_as_given():
    policies = keras.dtype_policies.DTypePolicyMap("float32")
    model = build("vit", dtype=policies)
    model.quantize("int8")
    assert len(policies) == 0
    assert quantized_layers(model)


def test_weights_files_that_do_not_match_the_quantization_say_so(tmp_path):
    float_model = build("vit")
    float_weights = str(tmp_path / "float.weights.h5")
    float_model.save_weights(float_weights)
    quantized = _quantized("vit", "int8")
    with pytest.raises(ValueError, match=r"this model is quantized .*load them into the float model, then call"):
        vit_keras.load_weights(quantized, float_weights)
    quantized_weights = str(tmp_path / "int8.weights.h5")
    quantized.save_weights(quantized_weights)
    with pytest.raises(ValueError, match=r"if they come from a quantized model: build this one with `dtype=`"):
        vit_keras.load_weights(float_model, quantized_weights)
