"""timm parity: its state-dict layout (saved as .safetensors) and its own Google-npz reader (`_load_weights`).

timm needs torchvision, installed with --no-deps beside the CPU torch (see the Makefile and tests/conftest.py).
Tolerance: max |diff| <= 2e-5 * max(1, max |reference|), float32.
"""

import functools
import json
import os

import keras
import numpy as np
import pytest
import safetensors.torch as safetensors_torch
import torch

# Imported directly (installed by `make test`): a broken install must fail these tests, not skip them. timm imports
# torchvision, whose ops need tests/torch_compat.py's shim: conftest.py runs it before this module is collected.
from timm.models.vision_transformer import VisionTransformer, _load_weights

import vit_keras
from tests.tiny import TINY
from tests.torch_compat import randomise_parameters
from vit_keras.weights.assign import model_slots

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
# Reference: the float32 forward against the source framework's output (float64 NumPy, JAX or PyTorch) on O(1)
# logits. float32 rounding (2^-24 relative per op) accumulated over a few-layer chain of sums of at most a few
# hundred terms, under any summation order (oneDNN ISA, thread count), stays near 1e-6; 2e-5 keeps >= 10x over
# that.
# Scaled by max(1, max |logit|): the error is relative.
TOLERANCE = 2e-5
ARCH = dict(TINY, include_preprocessing=False, classifier_activation=None)
# The same model in timm's argument names.
TIMM_TINY = dict(patch_size=TINY["patch_size"], embed_dim=TINY["hidden_size"], depth=TINY["num_layers"],
                 num_heads=TINY["num_heads"], mlp_ratio=TINY["mlp_dim"] / TINY["hidden_size"])


def _timm_model(image=32, classes=5, **kwargs):
    return VisionTransformer(img_size=image, num_classes=classes, **TIMM_TINY, **kwargs)


def _save(model, path):
    safetensors_torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return str(path)


def _torch_logits(model, x):
    with torch.no_grad():
        return model(torch.from_numpy(x.transpose(0, 3, 1, 2))).numpy()


def _logits(model, x):
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)), np.float32)


def _check(out, reference):
    assert out.shape == reference.shape
    assert np.abs(out - reference).max() <= TOLERANCE * max(1.0, np.abs(reference).max())


def test_timm_state_dict_token(tmp_path):
    reference_model = randomise_parameters(_timm_model(), seed=1)
    path = _save(reference_model, tmp_path / "vit.safetensors")
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    model = vit_keras.ViT(image_size=32, classes=5, weights=path, **ARCH)
    block = model.get_layer("Transformer_encoderblock_0")
    assert block.mlp.activation == "gelu" and block.norm_1.epsilon == 1e-6  # timm: erf GELU, eps 1e-6
    _check(_logits(model, x), _torch_logits(reference_model, x))


def test_timm_state_dict_gap_without_fc_norm(tmp_path):
    """timm's avg pooling after `norm` (fc_norm=False) is vit_jax's gap."""
    reference_model = randomise_parameters(_timm_model(class_token=False, global_pool="avg", fc_norm=False), seed=2)
    path = _save(reference_model, tmp_path / "vit.safetensors")
    x = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    model = vit_keras.ViT(image_size=32, classes=5, classifier="gap", weights=path, **ARCH)
    _check(_logits(model, x), _torch_logits(reference_model, x))


def test_timm_without_qkv_bias_builds_no_bias_and_matches_timm(tmp_path, monkeypatch):
    """timm `qkv_bias=False` has no q/k/v biases: the model is built without them (nothing is invented), from the
    bare state dict and from a directory whose config.json says so."""
    reference_model = randomise_parameters(_timm_model(qkv_bias=False), seed=5)
    path = _save(reference_model, tmp_path / "vit.safetensors")
    x = np.random.default_rng(3).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    reference = _torch_logits(reference_model, x)
    with pytest.raises(ValueError, match=r"(?s)query/bias.*build the model with qkv_bias=False"):
        vit_keras.ViT(image_size=32, classes=5, weights=path, **ARCH)
    model = vit_keras.ViT(image_size=32, classes=5, weights=path, qkv_bias=False, **ARCH)
    assert not any(name.endswith(("query/bias", "key/bias", "value/bias")) for name in model_slots(model))
    assert "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/out/bias" in model_slots(model)
    _check(_logits(model, x), reference)

    directory = tmp_path / "timm_dir"
    directory.mkdir()
    os.replace(path, directory / "model.safetensors")
    (directory / "config.json").write_text(json.dumps({
        "architecture": "vit_small_patch8_224",
        "model_args": {"img_size": 32, **TIMM_TINY, "num_classes": 5, "qkv_bias": False}}))
    model = vit_keras.from_pretrained(str(directory), include_preprocessing=False, classifier_activation=None)
    assert vit_keras.weights.model_config(model).qkv_bias is False
    _check(_logits(model, x), reference)


def test_timm_fc_norm_is_refused(tmp_path):
    path = _save(_timm_model(class_token=False, global_pool="avg"), tmp_path / "vit.safetensors")
    with pytest.raises(ValueError, match="fc_norm"):
        vit_keras.ViT(image_size=32, classes=5, classifier="gap", weights=path, **ARCH)


def test_timm_load_weights_of_a_google_npz_agrees(tmp_path):
    """timm's own `_load_weights` reads the vit_jax fixture; its state dict, loaded through our timm path, gives
    the vit_jax reference logits (tanh GELU as the checkpoint was trained)."""
    with open(os.path.join(FIXTURES, "vitjax_token_raw", "meta.json")) as f:
        meta = json.load(f)
    npz = os.path.join(FIXTURES, "vitjax_token_raw", "checkpoint.npz")
    x = np.load(os.path.join(FIXTURES, "vitjax_token_raw", "input.npy"))
    expected = np.load(os.path.join(FIXTURES, "vitjax_token_raw", "expected.npy"))
    reference_model = _timm_model(image=64, classes=7, act_layer=functools.partial(torch.nn.GELU, approximate="tanh"))
    _load_weights(reference_model, npz)
    reference_model.eval()
    _check(_torch_logits(reference_model, x), expected)  # timm reads the npz as vit_jax means it
    path = _save(reference_model, tmp_path / "from_npz.safetensors")
    # A timm file says "erf GELU"; this one was trained with tanh, so we ask for it and are warned.
    with pytest.warns(UserWarning, match="gelu_approximate=True but the checkpoint was trained with False"):
        model = vit_keras.ViT(**meta["kwargs"], weights=path, classifier_activation=None)
    _check(_logits(model, x), expected)


def test_convert_a_timm_file(tmp_path):
    """`vit-keras convert` reads the architecture off a timm file (heads from the variant table / width 64)."""
    from vit_keras.cli import main as cli_main

    reference_model = VisionTransformer(img_size=32, patch_size=16, embed_dim=192, depth=1, num_heads=3,
                                        mlp_ratio=4.0, num_classes=4)
    randomise_parameters(reference_model, seed=4)
    path = _save(reference_model, tmp_path / "ti.safetensors")
    destination = str(tmp_path / "ti.keras")
    assert cli_main(["convert", path, destination]) == 0
    model = keras.saving.load_model(destination)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    _check(_logits(model, x * 127.5 + 127.5), _torch_logits(reference_model, x))
