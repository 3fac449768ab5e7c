"""The flexible (NaFlex) form of the 2025-26 ViTs: RoPE models (each image's tables from its own grid), AIMv2's
attention-pooling head and RADIO's cropped position table, on the reference fixtures of tests/fixtures/family2.

Bounds:
- `check` (tests/family2_cases.py): the fixtures' own tolerance against timm / transformers.
- SAME_MATHS_TOLERANCE, for the flexible model against the fixed-size (or any-size) model on the same image, and for
  an image in a padded batch against the image alone: the same float32 functions summed in another order. The RoPE
  tables come from TensorFlow's sin/cos instead of NumPy's (each within an ulp or two), the position table is resized
  per token instead of per grid, and the masked keys (weight exactly 0) change the blocking of the softmax and matmul
  sums. Each of these moves an O(1) value by a few ulps (2^-24 relative); through these 3-block models the error
  model gives a few 1e-7 relative to max(1, |output|), which is what was measured: 3e-8 .. 5.6e-7 over the 7
  `make test-numerics` settings of a 2-CPU AVX2 EPYC (oneDNN at AVX2 / AVX / SSE4.1 or off, TFLite with and without
  XNNPACK, 1 and 2 threads). 1e-5 keeps >= 17x over that, while the mistakes it guards against move the
  outputs far more: an image's grid read as its transpose (its RoPE tables and position table at the wrong cells)
  moves them >= 2.5e-2 (asserted below as a control), and RoPE left out >= 1.5e-2 (the fixtures' README).
"""

import json
import os

import numpy as np
import pytest

import vit_keras
from tests.bounds import Bound, relative_diff
from tests.family2_cases import FAMILY2, check, fixture_input, run
from vit_keras.images import naflex_patches
from vit_keras.vision_transformer import config_of

SAME_MATHS_TOLERANCE = 1e-5
# The smallest move of the outputs measured when an image's 2x5 grid is given as 5x2 (timm_pe_core, 2.5e-2); the
# control asserts at least a tenth of that, still 250x the bound.
WRONG_GRID_MOVES = 2.5e-3

# Every RoPE layout and option: rotate_half with registers (DINOv3), interleaved with a reference grid and a learned
# table with a class token (EVA-02), learned mixed frequencies (RoPE-Mixed), xy indexing with grid offset 1 and a
# MAP head (PE).
ROPE_CASES = ("timm_dinov3", "timm_eva02", "timm_rope_mixed", "timm_pe_core")
# AIMv2's attention-pooling head; RADIO's cropped position table and input conditioner (its output: the tokens).
OTHER_CASES = ("hf_aimv2", "hf_radio")
GRIDS = ((2, 5), (5, 2), (3, 3))


def _case(case):
    with open(os.path.join(FAMILY2, case, "meta.json")) as f:
        meta = json.load(f)
    checkpoint = os.path.join(FAMILY2, case, meta["checkpoint"])
    call = {k: v for k, v in meta["call"].items() if k != "image_size"}
    return checkpoint, meta, call


def _same_maths(record_property):
    return Bound(SAME_MATHS_TOLERANCE, "relative_diff_same_maths", record_property)


def _real(out, tokens):
    """A model's output for one image: pooled as it is, a token sequence without its padding."""
    return out if out.ndim == 1 else out[:tokens]


def _images(meta, call, patch_size, rng):
    """Random RGB images of GRIDS' sizes, prepared as the fixture's input is (normalised for transformers' cases)."""
    images = [rng.uniform(0, 255, (rows * patch_size, cols * patch_size, 3)).astype(np.float32)
              for rows, cols in GRIDS]
    if call.get("include_preprocessing") is False:
        mean, std = np.asarray(meta["preprocess"]["mean"]), np.asarray(meta["preprocess"]["std"])
        images = [((image / 255.0 - mean) / std).astype(np.float32) for image in images]
    return images


@pytest.mark.slow
@pytest.mark.numerics
@pytest.mark.parametrize("case", ROPE_CASES + OTHER_CASES)
def test_flexible_form_equals_the_fixed_model_and_each_image_equals_it_alone(case, record_property):
    close = _same_maths(record_property)
    checkpoint, meta, call = _case(case)
    fixed = vit_keras.from_pretrained(checkpoint, **meta["call"])
    flexible = vit_keras.from_pretrained(checkpoint, flexible=True, **call)
    patch_size = config_of(flexible).patch_size
    x = fixture_input(case, meta)
    expected = run(fixed, x)
    check(expected, np.load(os.path.join(FAMILY2, case, "expected.npy")))
    rows, cols = x.shape[1] // patch_size, x.shape[2] // patch_size

    # The fixture's images at the fixed model's grid: every patch real, then with 5 masked patches of padding.
    for padding in (0, 5):
        out = run(flexible, naflex_patches(list(x), patch_size, rows * cols + padding, resize=False))
        close(np.stack([_real(o, expected.shape[1]) for o in out]), expected, f"fixture, {padding} padding")

    # Three images of different grids in one padded batch: each as it is alone, and as the model of any image size
    # (its tables and position table computed for the whole grid) gives it.
    images = _images(meta, call, patch_size, np.random.default_rng(0))
    batch = naflex_patches(images, patch_size, 12, resize=False)
    assert batch["grid"].tolist() == [list(grid) for grid in GRIDS]
    out = run(flexible, batch)
    any_size = vit_keras.from_pretrained(checkpoint, any_image_size=True, **call)
    prefix = config_of(flexible).num_prefix_tokens
    for index, image in enumerate(images):
        tokens = prefix + int(batch["mask"][index].sum())
        alone = run(flexible, naflex_patches([image], patch_size, tokens - prefix, resize=False))[0]
        close(_real(out[index], tokens), _real(alone, tokens), f"image {index} in the batch vs alone")
        close(_real(out[index], tokens), run(any_size, image[None])[0], f"image {index} vs the any-size model")

    # Control: the first image's 2x5 grid given as 5x2 (the mask still fits) moves its output.
    transposed = {**batch, "grid": batch["grid"].copy()}
    transposed["grid"][0] = transposed["grid"][0][::-1]
    moved = relative_diff(run(flexible, transposed)[0], out[0])
    record_property("relative_move_grid_transposed", float(f"{moved:.3g}"))
    assert moved > WRONG_GRID_MOVES, moved


@pytest.mark.slow
def test_padding_values_do_not_reach_a_rope_model_with_the_aimv2_head(tmp_path):
    """A NaN in the padding patches (and in the cells past the grid, where RoPE tables are finite but meaningless)
    reaches neither the blocks nor AIMv2's pooling; the model (learned mixed RoPE frequencies) saves and loads."""
    import keras

    tiny = dict(patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96, class_token=False,
                global_pool="map", map_head="aimv2", rope="mixed", position_embedding="none", norm="rmsnorm",
                mlp="swiglu", include_preprocessing=False, classes=4, classifier_activation=None)
    model = vit_keras.ViT(flexible=True, **tiny)
    rng = np.random.default_rng(3)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype(np.float32))
    batch = naflex_patches([rng.uniform(-1, 1, (16, 24, 3)).astype(np.float32)], 8, 10, resize=False)
    noisy = {**batch, "patches": batch["patches"].copy()}
    noisy["patches"][0, 6:] = np.nan
    clean = run(model, batch)
    assert np.isfinite(clean).all()
    np.testing.assert_array_equal(run(model, noisy), clean)
    model.save(tmp_path / "flexible.keras")
    reloaded = keras.models.load_model(tmp_path / "flexible.keras", safe_mode=True)
    np.testing.assert_array_equal(run(reloaded, batch), clean)


def test_a_rope_model_checks_its_inputs_as_any_flexible_model():
    model = vit_keras.ViT(flexible=True, patch_size=8, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96,
                          rope="interleaved", rope_ref_grid_size=(4, 4), classes=3, include_preprocessing=False)
    batch = naflex_patches([np.zeros((16, 24, 3), np.float32)], 8, 8, resize=False)
    with pytest.raises(ValueError, match=r"image 0: `grid` \(3, 3\) is 9 patches, more than the sequence length N=8"):
        model({**batch, "grid": np.array([[3, 3]], np.int32)})
    with pytest.raises(ValueError, match=r"image 0: `grid` \(2, 3\) says 6 real patches, but its `mask` marks 7"):
        model({**batch, "mask": (np.arange(8) < 7).astype(np.int32)[None]})
    with pytest.raises(ValueError, match=r"image 0: `grid` \(0, 3\) must have at least one patch row"):
        model({**batch, "grid": np.array([[0, 3]], np.int32), "mask": np.zeros((1, 8), np.int32)})


# ---- TFLite of a fixed sequence length N, through `vit-keras export`

# TFLite against Keras: tests/test_family2_export.py's bound for these RoPE families, 1e-3 x max(1, |output|) (10x
# tests/test_export.py's float32 TFLite bound, whose spread was measured over the `make test-numerics` settings on the
# paper ViT, for RoPE's sin/cos and the other kernels TFLite computes its own way); measured here 2.7e-7 .. 4.1e-7
# over the 7 `make test-numerics` settings (AVX2 EPYC). The padding adds nothing: its keys get weight exactly 0 in
# TFLite's softmax as in Keras'.
TFLITE_TOL = 1e-3


@pytest.fixture(scope="module")
def rope_keras_file(tmp_path_factory):
    """The DINOv3 fixture (rotate-half RoPE, 4 registers) as a flexible classifier, saved as .keras."""
    checkpoint, meta, call = _case("timm_dinov3")
    model = vit_keras.from_pretrained(checkpoint, flexible=True, **call)
    path = tmp_path_factory.mktemp("naflex") / "dinov3_naflex.keras"
    model.save(path)
    return str(path)


@pytest.mark.slow
@pytest.mark.numerics
@pytest.mark.tf_only
def test_cli_exports_a_flexible_rope_model_to_tflite_that_agrees_with_keras(rope_keras_file, tmp_path, capsys,
                                                                           record_property):
    import keras

    from vit_keras import export
    from vit_keras.cli import main

    path = str(tmp_path / "dinov3.tflite")
    assert main(["export", path, "--format", "tflite", "--keras-model", rope_keras_file, "--max-num-patches", "16",
                 "--num-check-images", "3"]) == 0
    out = capsys.readouterr().out
    assert "wrote NaFlex TFLite (float32)" in out and "patches float32[1, 16, 192]" in out
    assert "agreement with the Keras model on 3 random images of 3 aspect ratios" in out
    model = keras.models.load_model(rope_keras_file, safe_mode=True)
    rng = np.random.default_rng(5)
    images = [rng.uniform(0, 255, shape).astype(np.float32) for shape in ((16, 40, 3), (32, 24, 3))]
    batch = naflex_patches(images, 8, 16, resize=False)
    assert batch["mask"].sum(1).tolist() == [10, 12]
    expected = run(model, batch)
    got = export.naflex_tflite_predict(path, batch)
    Bound(TFLITE_TOL, "relative_diff_tflite_float32", record_property)(got, expected)
    assert export.non_builtin_operators(path) == []

    longer = naflex_patches(images, 8, 20, resize=False)
    with pytest.raises(ValueError, match=r"takes NaFlex `patches` of shape \(batch, 16, 192\).*got \(2, 20, 192\)"):
        export.naflex_tflite_predict(path, longer)
    with pytest.raises(ValueError, match=r"image 1: `grid` \(4, 4\) says 16 real patches, but its `mask` marks 12"):
        export.naflex_tflite_predict(path, {**batch, "grid": np.array([[2, 5], [4, 4]], np.int32)})


# SavedModel against Keras: tests/test_family2_export.py's SAVED_MODEL_TOL (the same kernels in a graph); measured
# here 2.3e-7 .. 4.1e-7 over the 7 `make test-numerics` settings (AVX2 EPYC), >= 24x under it.
SAVED_MODEL_TOL = 1e-5


@pytest.mark.slow
@pytest.mark.numerics
@pytest.mark.tf_only
def test_cli_exports_a_flexible_rope_model_to_a_saved_model_serving_patches_and_jpegs(rope_keras_file, tmp_path,
                                                                                     capsys, record_property):
    import keras
    import tensorflow as tf

    from vit_keras import export
    from vit_keras.cli import main

    export_dir = str(tmp_path / "served")
    assert main(["export", export_dir, "--format", "saved_model", "--keras-model", rope_keras_file,
                 "--max-num-patches", "16", "--num-check-images", "3"]) == 0
    out = capsys.readouterr().out
    assert "wrote NaFlex SavedModel version 1" in out and "serve_bytes (encoded images, at most 16 patches" in out
    model = keras.models.load_model(rope_keras_file, safe_mode=True)
    served = tf.saved_model.load(os.path.join(export_dir, "1")).signatures
    close = Bound(SAVED_MODEL_TOL, "relative_diff_saved_model", record_property)
    rng = np.random.default_rng(6)
    images = [rng.integers(0, 256, shape).astype(np.uint8) for shape in ((16, 40, 3), (32, 24, 3))]
    batch = naflex_patches([image.astype(np.float32) for image in images], 8, 16, resize=False)
    got = served[export.SERVING_DEFAULT](**{key: tf.constant(value) for key, value in batch.items()})["outputs"]
    close(got.numpy(), run(model, batch), "serving_default (patches, grid, mask)")
    # Encoded images of two aspect ratios in one request: each fit to at most 16 patches inside the graph, as
    # naflex_patches fits the decoded pixels (PNG: lossless, so both sides read the same pixels).
    encoded = [tf.io.encode_png(image).numpy() for image in images]
    got = served["serve_bytes"](image_bytes=tf.constant(encoded))["outputs"].numpy()
    close(got, run(model, naflex_patches([image.astype(np.float32) for image in images], 8, 16)), "serve_bytes")


@pytest.mark.slow
@pytest.mark.tf_only
def test_flexible_exports_refuse_what_they_cannot_do(rope_keras_file, tmp_path, capsys):
    import keras

    from vit_keras import export
    from vit_keras.cli import main

    model = keras.models.load_model(rope_keras_file, safe_mode=True)
    with pytest.raises(ValueError, match="is a flexible \\(NaFlex\\) model.*naflex_tflite"):
        export.tflite(model, str(tmp_path / "x.tflite"))
    with pytest.raises(ValueError, match="quantization.*must be one of.*int8 needs representative NaFlex batches"):
        export.naflex_tflite(model, str(tmp_path / "x.tflite"), 16, quantization="int8")
    assert main(["export", str(tmp_path / "x.onnx"), "--format", "onnx", "--keras-model", rope_keras_file]) == 2
    assert "ONNX export of a flexible (NaFlex) model is not available" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "x.tflite"), "--format", "tflite", "--keras-model", rope_keras_file]) == 2
    assert "pass --max-num-patches N" in capsys.readouterr().err
    assert not os.listdir(tmp_path)


# ---- attention maps at each image's own grid


@pytest.mark.slow
@pytest.mark.numerics
def test_flexible_attention_maps_of_a_2x5_image_equal_the_fixed_models(record_property):
    """DINOv3 (RoPE, 4 registers): a 16x40 image (2x5 patches) beside a 3x3 one, padded to 12 patches, gives 2x5
    maps equal to those of the model built for 16x40 images (bound: SAME_MATHS_TOLERANCE, on weights <= 1)."""
    from vit_keras.inspection import attention_maps, flexible_attention_maps

    checkpoint, _, call = _case("timm_dinov3")
    flexible = vit_keras.from_pretrained(checkpoint, flexible=True, **call)
    fixed = vit_keras.from_pretrained(checkpoint, image_size=(16, 40), **call)
    rng = np.random.default_rng(8)
    images = [rng.uniform(0, 255, shape).astype(np.float32) for shape in ((16, 40, 3), (24, 24, 3))]
    # Measured 3e-8 apart (AVX2 EPYC).
    maps = flexible_attention_maps(flexible, naflex_patches(images, 8, 12, resize=False), layer=1)
    expected = attention_maps(fixed, images[0][None], layer=1)
    assert maps[0].rollout.shape == (1, 2, 5) and maps[0].heads.shape == (1, 3, 2, 5)
    assert maps[1].rollout.shape == (1, 3, 3) and maps[0].image_size == (16, 40)
    close = _same_maths(record_property)  # attention weights <= 1: an absolute bound
    close(maps[0].rollout, expected.rollout, "rollout")
    close(maps[0].heads, expected.heads, "heads")
    for image_maps in maps:  # distributions over the image's patches, renormalised in float64
        np.testing.assert_allclose(image_maps.rollout.sum(axis=(-2, -1)), 1.0, atol=1e-6)
        np.testing.assert_allclose(image_maps.heads.sum(axis=(-2, -1)), 1.0, atol=1e-6)
    assert maps[0].rollout_image.shape == (1, 16, 40)
    with pytest.raises(ValueError, match="Expected a flexible \\(NaFlex\\) vit_keras model"):
        flexible_attention_maps(fixed, {})
