"""Damaged checkpoints are refused by name: NaN or infinite values in a tensor, and tensors of the wrong shape in
every family reader, name the checkpoint key, the file and (for shapes) the shape found and the shape expected."""

import os
import re
import shutil

import numpy as np
import pytest
from safetensors.numpy import save_file

import vit_keras
from vit_keras.weights.safetensors_io import read_safetensors

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
TINY = dict(image_size=64, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96, classes=7)


def _copy_checkpoint(case_dir, tmp_path):
    """A copy of a fixture case's checkpoint directory, and the path of its model.safetensors."""
    copy = tmp_path / "checkpoint"
    shutil.copytree(os.path.join(case_dir, "checkpoint"), copy)
    return copy, copy / "model.safetensors"


def _rewrite(path, change):
    """Rewrite the safetensors file `path` with `change(tensors)` applied (it edits the dict in place)."""
    tensors = dict(read_safetensors(str(path)))
    change(tensors)
    save_file({key: np.ascontiguousarray(value) for key, value in tensors.items()}, str(path),
              metadata={"format": "pt"})


def _poison(tensors, key, nan=2, inf=1):
    value = tensors[key].copy()
    flat = value.reshape(-1)
    flat[:nan] = np.nan
    flat[nan:nan + inf] = np.inf
    tensors[key] = value


@pytest.mark.parametrize("case, key", [
    ("family/timm_deit_distilled", "blocks.0.attn.qkv.weight"),  # a timm directory
    ("family/hf_dinov2", "encoder.layer.1.mlp.fc1.bias"),  # a transformers directory
])
def test_non_finite_weights_are_refused_by_key_and_file(case, key, tmp_path):
    directory, weights = _copy_checkpoint(os.path.join(FIXTURES, case), tmp_path)
    _rewrite(weights, lambda tensors: _poison(tensors, key))
    with pytest.raises(ValueError, match=rf"model\.safetensors.*tensor '{re.escape(key)}' has 2 NaN / 1 infinite "
                                         "values; the file is corrupt or was saved after training diverged"):
        vit_keras.from_pretrained(str(directory))


def test_non_finite_weights_in_a_bare_timm_file_are_refused(tmp_path):
    _, weights = _copy_checkpoint(os.path.join(FIXTURES, "family", "timm_deit_distilled"), tmp_path)
    bare = tmp_path / "deit.safetensors"
    shutil.copy(weights, bare)
    _rewrite(bare, lambda tensors: _poison(tensors, "pos_embed", nan=0, inf=4))
    with pytest.raises(ValueError, match=r"deit\.safetensors: tensor 'pos_embed' has 0 NaN / 4 infinite values"):
        vit_keras.weights.describe(str(bare))


def test_non_finite_weights_in_a_google_npz_are_refused(tmp_path):
    arrays = dict(np.load(os.path.join(FIXTURES, "vitjax_token_raw", "checkpoint.npz")))
    key = "Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel"
    arrays[key] = arrays[key].copy()
    arrays[key][0, 0] = np.nan
    path = tmp_path / "checkpoint.npz"
    np.savez(path, **{f"params/{name}": value for name, value in arrays.items()})
    with pytest.raises(ValueError, match=rf"checkpoint\.npz: tensor 'params/{key}' has 1 NaN / 0 infinite values"):
        vit_keras.ViT(**TINY, weights=str(path))


def test_non_finite_weights_in_a_keras_weights_file_are_refused(tmp_path):
    small = dict(TINY, image_size=32, num_layers=1)
    model = vit_keras.ViT(**small)
    kernel = model.get_layer("head").kernel
    kernel.assign(np.full(kernel.shape, np.inf, np.float32))
    path = str(tmp_path / "diverged.weights.h5")
    model.save_weights(path)
    with pytest.raises(ValueError, match=r"diverged\.weights\.h5'?: tensor '[^']+' has 0 NaN / 336 infinite values"):
        vit_keras.load_weights(vit_keras.ViT(**small), path)


def _reader_cases():
    """Every fixture checkpoint directory a family reader takes: (id, case directory, checkpoint directory)."""
    cases = [("hf_dir", os.path.join(FIXTURES, "hf_dir"), "hf_model")]
    for family in ("family", "family2"):
        root = os.path.join(FIXTURES, family)
        cases += [(f"{family}/{case}", os.path.join(root, case), "checkpoint") for case in sorted(os.listdir(root))
                  if os.path.isdir(os.path.join(root, case, "checkpoint"))]
    return cases


READER_CASES = _reader_cases()
_BLOCK_1 = re.compile(r"(^|\.)(blocks|layers?)\.1\.")


def _block_weight(tensors, hidden, square_ok):
    """The key of a 2-D weight of the second encoder block with `hidden` inputs: the fused q/k/v when the file has
    one, else the query (`square_ok`) or another projection whose two sides differ (so a transpose shows)."""
    candidates = sorted(key for key, value in tensors.items() if _BLOCK_1.search(key) and key.endswith("weight")
                        and value.ndim == 2 and value.shape[1] == hidden and (square_ok or value.shape[0] != hidden))
    ranked = sorted(candidates, key=lambda key: (
        "qkv" not in key, not re.search(r"(q_proj|query)\.weight$", key), "attn" not in key and "attention" not in key))
    return ranked[0]


@pytest.mark.parametrize("damage", ["truncated", "transposed"])
@pytest.mark.parametrize("case, case_dir, checkpoint", READER_CASES, ids=[case for case, _, _ in READER_CASES])
def test_a_weight_of_the_wrong_shape_is_named_with_both_shapes(case, case_dir, checkpoint, damage, tmp_path):
    copy = tmp_path / "checkpoint"
    shutil.copytree(os.path.join(case_dir, checkpoint), copy)
    weights = copy / "model.safetensors"
    hidden = vit_keras.weights.describe(str(copy)).architecture["hidden_size"]
    tensors = read_safetensors(str(weights))
    key = _block_weight(tensors, hidden, square_ok=damage == "truncated")
    original = tuple(tensors[key].shape)
    damaged = (original[0], original[1] - 1) if damage == "truncated" else original[::-1]

    def change(tensors):
        tensors[key] = tensors[key][:, :-1] if damage == "truncated" else tensors[key].T

    _rewrite(weights, change)
    with pytest.raises(ValueError) as caught:
        vit_keras.weights.describe(str(copy))
    message = str(caught.value)
    assert "model.safetensors" in message and key in message, message
    assert f"{key}: found {damaged}, expected {original}" in message, message


def test_a_transposed_qkv_in_a_bare_timm_file_is_named_against_the_model(tmp_path):
    """A state dict without a config is checked against the model it is loaded into."""
    source = os.path.join(FIXTURES, "family", "timm_deit_distilled", "checkpoint", "model.safetensors")
    bare = tmp_path / "deit.safetensors"
    shutil.copy(source, bare)
    _rewrite(bare, lambda tensors: tensors.update({"blocks.0.attn.qkv.weight": tensors["blocks.0.attn.qkv.weight"].T}))
    info = vit_keras.weights.describe(str(bare))
    depth = 1 + max(int(key.split(".")[1]) for key in read_safetensors(str(bare)) if key.startswith("blocks."))
    model = vit_keras.ViT(image_size=64, patch_size=8, hidden_size=48, num_layers=depth, num_heads=3, mlp_dim=192,
                          classes=info.classes, distilled=True, gelu_approximate=False)
    with pytest.raises(ValueError, match=r"deit\.safetensors: 1 tensors .*\n  blocks\.0\.attn\.qkv\.weight: found "
                                         r"\(48, 144\), expected \(144, 48\)"):
        vit_keras.weights.load_into(model, info)
