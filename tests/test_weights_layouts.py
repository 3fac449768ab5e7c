"""Google checkpoint layouts the reference fixtures do not cover, built by re-keying the fixture checkpoints.

Re-keyed files hold the same values, so they must give the fixtures' reference logits (vit_jax) within the
fixtures' tolerance, 2e-5. Resolution changes (224->384 style, rectangular) are compared with an independent
float64 NumPy ViT (tests/reference_numpy.py) within 2e-5 as well.

big_vision files are built in big_vision's real layout: its ViT adds `pos_embedding` to the N patch tokens before
it concatenates the class token (models/vit.py), so a class-token file stores a (1, N, D) table and the class token
has no position embedding. Such files are checked against the NumPy ViT run in big_vision's order
(`posemb_before_class_token=True`), within 2e-5.
"""

import json
import os

import keras
import ml_dtypes
import numpy as np
import pytest

import vit_keras
from tests import reference_numpy  # noqa: E402
from vit_keras.weights import google

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
# Reference: the float32 forward against the source framework's output (float64 NumPy, JAX or PyTorch) on O(1)
# logits. float32 rounding (2^-24 relative per op) accumulated over a few-layer chain of sums of at most a few
# hundred terms, under any summation order (oneDNN ISA, thread count), stays near 1e-6; 2e-5 keeps >= 10x over
# that.
TOLERANCE = 2e-5
LINEN = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0", "LayerNorm_2": "LayerNorm_1",
         "MlpBlock_3": "MlpBlock_0"}


def _fixture(case):
    directory = os.path.join(FIXTURES, case)
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    with np.load(os.path.join(directory, meta["checkpoint"]), allow_pickle=False) as npz:
        params = {k: npz[k] for k in npz.files}
    return meta, params, np.load(os.path.join(directory, "input.npy")), np.load(
        os.path.join(directory, "expected.npy"))


def _to_linen(name):
    for raw, linen in LINEN.items():
        name = name.replace(f"/{raw}/", f"/{linen}/")
    return name


def _scan(params):
    """big_vision style: blocks stacked on a leading layer axis under Transformer/encoderblock/ (Linen names)."""
    out, stacked = {}, {}
    for name, value in params.items():
        if name.startswith("Transformer/encoderblock_"):
            index, rest = name[len("Transformer/encoderblock_"):].split("/", 1)
            stacked.setdefault(_to_linen("/" + rest)[1:], {})[int(index)] = value
        else:
            out[name] = value
    for rest, values in stacked.items():
        out[f"Transformer/encoderblock/{rest}"] = np.stack([values[i] for i in sorted(values)])
    return out


POSEMB = "Transformer/posembed_input/pos_embedding"


def _big_vision(params, prefix="params/", fold_class_posemb=True):
    """big_vision's layout: `params/` prefix, scanned Linen blocks, top-level `pos_embedding` of the grid tokens only.

    The fixtures are vit_jax models, whose class token has a position-embedding row. `fold_class_posemb=True` moves
    that row into `cls` (a float32 add, as vit_jax does it in its forward pass), so the file computes the fixture's
    function and the vit_jax logits still apply. False drops the row: another model, which only the NumPy
    big_vision-order forward can check (its values stay bfloat16-representable).
    """
    params = dict(params)
    if "cls" in params:
        table = params[POSEMB]
        if fold_class_posemb:
            params["cls"] = params["cls"] + table[:, :1]
        params[POSEMB] = table[:, 1:]
    out = {}
    for name, value in _scan(params).items():
        if name == POSEMB:
            name = "pos_embedding"
        out[prefix + name] = value
    return out


def _without_class_posemb(params):
    """The raw-name parameters a big_vision file written with `fold_class_posemb=False` holds."""
    return {**params, POSEMB: params[POSEMB][:, 1:]}


def _bf16(params):
    # The fixture values are bfloat16-representable, so this is lossless (the fixture README says so).
    out = {k: v.astype(ml_dtypes.bfloat16) for k, v in params.items()}
    assert all(np.array_equal(out[k].astype(np.float32), params[k]) for k in params)
    return out


def _gn_vectors(params):
    return {k: (v.reshape(-1) if "/gn" in f"/{k}" and v.ndim == 4 else v) for k, v in params.items()}


# layout -> (the file's arrays, what gives the expected logits: the fixture's vit_jax output or the NumPy ViT in
# big_vision's order on the file's own values).
LAYOUTS = {
    # Optimizer-state files also hold the optimizer's own arrays (here a step counter and a momentum).
    "opt_target": (lambda p: {**{f"opt/target/{k}": v for k, v in p.items()}, "opt/state/step": np.array(5),
                              "opt/state/param_states/cls/momentum": np.ones((1, 1, 48), np.float32)}, "fixture"),
    "big_vision_scanned": (_big_vision, "fixture"),
    "big_vision_img_scanned_bf16": (lambda p: _bf16(_big_vision(p, "params/img/", fold_class_posemb=False)),
                                    "big_vision"),
    "linen_bf16": (lambda p: _bf16({_to_linen(k): v for k, v in p.items()}), "fixture"),
}


def _logits(model, x):
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)), np.float32)


def _save(tmp_path, name, params):
    path = str(tmp_path / f"{name}.npz")
    np.savez(path, **params)
    return path


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_rekeyed_token_checkpoint_gives_reference_logits(tmp_path, layout):
    meta, params, x, expected = _fixture("vitjax_token_raw")
    build, reference = LAYOUTS[layout]
    path = _save(tmp_path, layout, build(params))
    if reference == "big_vision":
        expected = reference_numpy.vit_forward(x, _without_class_posemb(params), patch_size=8,
                                               posemb_before_class_token=True)
    model = vit_keras.ViT(**meta["kwargs"], weights=path, classifier_activation=None)
    assert np.abs(_logits(model, x) - expected).max() <= TOLERANCE


def test_big_vision_class_token_gets_a_zero_position_embedding(tmp_path):
    """The stored (1, 64, D) table fills rows 1..64 of the model's (1, 65, D) one; the class token's row is 0."""
    meta, params, x, _ = _fixture("vitjax_token_raw")
    stored = _big_vision(params, fold_class_posemb=False)
    assert stored["params/pos_embedding"].shape == (1, 64, 48)
    model = vit_keras.ViT(**meta["kwargs"], weights=_save(tmp_path, "bv", stored), classifier_activation=None)
    encoder = model.get_layer("patch_encoder")
    table = encoder.pos_embedding.numpy()
    np.testing.assert_array_equal(table[:, 0], 0.0)
    np.testing.assert_array_equal(table[:, 1:], params[POSEMB][:, 1:])
    np.testing.assert_array_equal(encoder.cls.numpy(), params["cls"])
    # vit_jax files keep their class-token row: the rule applies to big_vision's top-level table only.
    np.testing.assert_array_equal(
        google.canonicalize({f"params/{k}": v for k, v in params.items()})[POSEMB], params[POSEMB])


def test_numpy_big_vision_order_reproduces_the_fixture_when_the_class_posemb_is_folded():
    """Validates the NumPy big_vision-order forward: cls + pos[0] with no class posemb is vit_jax's model. 2e-6."""
    meta, params, x, expected = _fixture("vitjax_token_raw")
    folded = {**_without_class_posemb(params), "cls": params["cls"] + params[POSEMB][:, :1]}
    out = reference_numpy.vit_forward(x, folded, patch_size=8, posemb_before_class_token=True)
    assert np.abs(out - expected).max() <= 2e-6


def test_gap_and_prelogits_in_big_vision_layout(tmp_path):
    for case in ("vitjax_gap", "vitjax_prelogits"):
        meta, params, x, expected = _fixture(case)
        # A gap model has no class token, so its table is the same in both layouts and bfloat16 is lossless.
        stored = _bf16(_big_vision(params)) if case == "vitjax_gap" else _big_vision(params)
        path = _save(tmp_path, case, stored)
        model = vit_keras.ViT(**meta["kwargs"], weights=path, classifier_activation=None)
        assert np.abs(_logits(model, x) - expected).max() <= TOLERANCE, case


def test_hybrid_with_gn_vectors_prefix_and_bf16(tmp_path):
    """Hybrid keys with (C,) GroupNorm params (flax >= 0.3.6 files), under opt/target/, stored as bf16."""
    meta, params, x, expected = _fixture("vitjax_hybrid_r2")
    rekeyed = {f"opt/target/{_to_linen(k)}": v for k, v in _bf16(_gn_vectors(params)).items()}
    path = _save(tmp_path, "hybrid", rekeyed)
    model = vit_keras.ViT(**meta["kwargs"], weights=path, classifier_activation=None)
    assert np.abs(_logits(model, x) - expected).max() <= TOLERANCE


@pytest.mark.parametrize("image_size", [(112, 112), (64, 96), (40, 104)])
@pytest.mark.parametrize("fold_class_posemb", [True, False])
def test_resolution_change_matches_numpy_vit(tmp_path, image_size, fold_class_posemb):
    """8x8 grid -> 14x14 (a 224->384-like factor of 1.75) and rectangular grids, with vit_jax's resampling, from a
    big_vision file: only the grid is resampled (big_vision's `resample_posemb` zooms the grid-only table too)."""
    meta, params, _, _ = _fixture("vitjax_token_raw")
    path = _save(tmp_path, "token", _big_vision(params, fold_class_posemb=fold_class_posemb))
    kwargs = {**meta["kwargs"], "image_size": list(image_size)}
    model = vit_keras.ViT(**kwargs, weights=path, classifier_activation=None)
    x = np.random.default_rng(0).uniform(-1, 1, (2, *image_size, 3)).astype(np.float32)
    if fold_class_posemb:
        reference = reference_numpy.vit_forward(x, params, patch_size=8)
    else:
        reference = reference_numpy.vit_forward(x, _without_class_posemb(params), patch_size=8,
                                                posemb_before_class_token=True)
    out = _logits(model, x)
    assert np.abs(out - reference).max() <= TOLERANCE
    assert (out.argmax(-1) == reference.argmax(-1)).all()


def test_numpy_vit_reproduces_the_fixtures():
    """The float64 NumPy ViT itself agrees with vit_jax (so the comparisons above are meaningful)."""
    for case in ("vitjax_token_raw", "vitjax_gap", "vitjax_prelogits", "vitjax_resample"):
        meta, params, x, expected = _fixture(case)
        out = reference_numpy.vit_forward(x, params, patch_size=8, classifier=meta["kwargs"]["classifier"])
        assert np.abs(out - expected).max() <= 2e-6, case


def test_rectangular_source_grid_needs_to_be_stated(tmp_path):
    """A stored 4x16 grid cannot be told from 8x8 by its token count; load_weights takes source_grid."""
    meta, params, _, _ = _fixture("vitjax_token_raw")
    path = _save(tmp_path, "token", params)
    kwargs = {**meta["kwargs"], "image_size": [48, 80]}
    model = vit_keras.ViT(**kwargs, weights=None, classifier_activation=None)
    vit_keras.load_weights(model, path, source_grid=(4, 16))
    x = np.random.default_rng(1).uniform(-1, 1, (2, 48, 80, 3)).astype(np.float32)
    reference = reference_numpy.vit_forward(x, params, patch_size=8, source_grid=(4, 16))
    assert np.abs(_logits(model, x) - reference).max() <= TOLERANCE


def test_numpy_vit_reproduces_the_hybrid_fixture():
    """The NumPy ResNet stem (StdConv, GroupNorm on (1,1,1,C) params, TF SAME padding) agrees with vit_jax too."""
    meta, params, x, expected = _fixture("vitjax_hybrid_r2")
    out = reference_numpy.vit_forward(x, params, patch_size=1, resnet_layers=(1, 1))
    assert np.abs(out - expected).max() <= 2e-6


@pytest.mark.slow
@pytest.mark.parametrize("image_size", [(96, 96), (64, 128)])
def test_hybrid_resolution_change_matches_numpy_vit(tmp_path, image_size):
    """The R+ViT hybrid stored at 64x64 (an 8x8 grid after the /8 stem) evaluated at 96x96 (12x12) and 64x128
    (8x16): the float64 NumPy stem + ViT with vit_jax's resampling agrees within 2e-5."""
    meta, params, _, _ = _fixture("vitjax_hybrid_r2")
    path = _save(tmp_path, "hybrid", params)
    model = vit_keras.ViT(**{**meta["kwargs"], "image_size": list(image_size)}, weights=path,
                          classifier_activation=None)
    assert model.get_layer("patch_encoder").grid_size == (image_size[0] // 8, image_size[1] // 8)
    x = np.random.default_rng(2).uniform(-1, 1, (2, *image_size, 3)).astype(np.float32)
    reference = reference_numpy.vit_forward(x, params, patch_size=1, resnet_layers=(1, 1))
    assert np.abs(_logits(model, x) - reference).max() <= TOLERANCE
