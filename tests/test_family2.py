"""The 2025-26 ViT families through `vit_keras.from_pretrained`: the reference fixtures (tests/fixtures/family2/
README.md: timm 1.0.31, transformers 5.23.0), parity with timm models built here with random weights at a second
image size and a non-square one (RoPE's xy/ij order only shows there), refusals of checkpoints whose config and
tensors disagree, and `vit-keras convert`.

Tolerance (the fixtures' README): max |diff| <= 5e-5 * max(1, max |reference|), and the same argmax. Its origin:
float32 rounding (2^-24 relative per op) accumulated over a few-layer chain of sums of at most a few hundred terms,
under any summation order, stays at a few 1e-6 on these O(1) logits (measured here: at most 1e-6 on the fixtures);
5e-5 keeps >= 10x over that, while a left-out part moves the logits by >= 1.5e-2 (README: RoPE left out).
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import timm
import torch
from safetensors.numpy import load_file, save_file

import vit_keras
from tests.family2_cases import FAMILY2, check, run, run_case
from tests.torch_compat import randomise_parameters

# Slow tier (tests/tiny.py's rule: over 1.5 s on 2 cores): each case builds, loads and runs a model, some with torch.
pytestmark = pytest.mark.slow


# timm's eva.py models (EVA-02, DINOv3, Perception Encoder, RoPE-Mixed).
EVA_CASES = ["timm_dinov3", "timm_dinov3_swiglu", "timm_eva02", "timm_pe_core", "timm_rope_mixed"]


@pytest.mark.numerics
@pytest.mark.parametrize("case", EVA_CASES)
def test_fixture_case_through_from_pretrained_and_keras_round_trip(case, tmp_path, record_property):
    run_case(case, tmp_path, record_property)


@pytest.mark.parametrize("case, size", [("timm_pe_core", (48, 24)), ("timm_eva02", (70, 42))])
def test_any_image_size_model_equals_the_fixed_size_one(case, size):
    """any_image_size=True: RoPE tables (rescaled to the reference grid) and the resampled position table computed
    in the graph for each call's grid give the fixed-size model's outputs (same arithmetic, same tolerance)."""
    directory = os.path.join(FAMILY2, case, "checkpoint")
    x = np.random.default_rng(1).uniform(0, 255, (2, *size, 3)).astype(np.float32)
    fixed = vit_keras.from_pretrained(directory, image_size=size, classifier_activation=None)
    any_size = vit_keras.from_pretrained(directory, any_image_size=True, classifier_activation=None)
    check(run(any_size, x), run(fixed, x))


# ---- timm eva.py parity: a randomised tiny model of each layout, saved with save_for_hf, against timm itself at a
# second square size and a non-square one (timm with dynamic_img_size=True: RoPE tables for the new grid, absolute
# position embeddings resampled with antialiased bicubic, as from_pretrained does).
TINY_EVA = dict(patch_size=8, embed_dim=48, depth=2, num_heads=3, num_classes=5, img_size=32)
EVA_ARCHITECTURES = {
    # name: (extra model_args, second size, non-square size)
    "vit_small_patch16_dinov3": ({}, (48, 48), (24, 40)),
    "vit_small_plus_patch16_dinov3_qkvb": ({}, (40, 40), (40, 24)),  # SwiGLU, q/v bias + zero k bias
    "eva02_tiny_patch14_224": (dict(ref_feat_shape=(4, 4)), (48, 48), (24, 40)),  # packed SwiGLU, q/v bias
    "eva02_base_patch14_224": (dict(ref_feat_shape=(4, 4)), (40, 40), (40, 24)),  # split q/k/v, MLP norm
    "eva_giant_patch14_224": ({}, (40, 40), (24, 40)),  # no RoPE, avg + fc_norm
    "vit_pe_core_tiny_patch16_384": (dict(ref_feat_shape=(4, 4)), (48, 48), (24, 40)),  # MAP with 8 heads
    "vit_small_patch16_rope_mixed_224": ({}, (48, 48), (40, 24)),
    "vit_small_patch16_rope_ape_224": ({}, (40, 40), (24, 40)),  # axial RoPE + position table without the class
    "vit_medium_patch16_rope_reg1_gap_256": (dict(embed_dim=64, num_heads=4), (40, 40), (24, 40)),  # 1 register
}


def timm_eva_dir(tmp_path, name, extra, seed):
    args = {**TINY_EVA, **extra}
    reference = randomise_parameters(timm.create_model(name, pretrained=False, **args), seed=seed)
    directory = str(tmp_path / "timm")
    timm.models.save_for_hf(reference, directory, model_args=args, safe_serialization=True)
    return reference, directory, args


@pytest.mark.parametrize("name", sorted(EVA_ARCHITECTURES))
def test_timm_eva_parity_at_a_second_and_a_non_square_size(name, tmp_path):
    extra, square, oblong = EVA_ARCHITECTURES[name]
    reference, directory, args = timm_eva_dir(tmp_path, name, extra, seed=len(name))
    dynamic = timm.create_model(name, pretrained=False, **{**args, "dynamic_img_size": True}).eval()
    dynamic.load_state_dict(reference.state_dict())
    rng = np.random.default_rng(7)
    for size in (square, oblong):
        x = rng.uniform(-1, 1, (2, *size, 3)).astype(np.float32)
        with torch.no_grad():
            expected = dynamic(torch.from_numpy(x.transpose(0, 3, 1, 2))).numpy()
        model = vit_keras.from_pretrained(directory, image_size=size, include_preprocessing=False,
                                          classifier_activation=None)
        check(run(model, x), expected)


def test_timm_eva_architecture_rows_follow_timm_model_functions():
    """Each family's row gives the arguments timm's own model function passes to Eva (read off a built model)."""
    from vit_keras.weights import timm_eva

    for name, expected in (
        ("vit_huge_plus_patch16_dinov3", dict(mlp="swiglu", mlp_dim=5120, num_heads=20, qkv_bias=False,
                                              num_register_tokens=4, rope="rotate_half", layer_norm_epsilon=1e-5)),
        ("vit_7b_patch16_dinov3", dict(mlp="swiglu", mlp_dim=8192, hidden_size=4096, num_layers=40)),
        ("eva02_large_patch14_448", dict(mlp="swiglu", mlp_norm="layernorm", mlp_dim=2730, image_size=(448, 448),
                                         rope_ref_grid_size=(16, 16), fc_norm=True)),
        ("eva02_small_patch14_224", dict(mlp="swiglu_packed", mlp_dim=1024, mlp_norm=None)),
        ("vit_pe_core_large_patch14_336", dict(map_num_heads=8, map_mlp_dim=None, rope_grid_offset=1.0,
                                               rope_grid_indexing="xy", pre_norm=True, patch_bias=False)),
        ("vit_pe_core_gigantic_patch14_448", dict(class_token=False, map_mlp_dim=6144, mlp_dim=8960)),
        ("vit_base_patch16_rope_mixed_ape_224", dict(rope="mixed", position_embedding="learned_1d",
                                                     no_embed_class=True, rope_grid_indexing="xy")),
        ("vit_betwixt_patch16_rope_reg4_gap_256", dict(num_register_tokens=4, class_token=False,
                                                       global_pool="avg", hidden_size=640)),
    ):
        fields, _ = timm_eva.eva_fields(timm_eva.architecture_args(name))
        assert {key: fields.get(key) for key in expected} == expected, name
    # Against timm itself: the model function's block sizes for two of them.
    with torch.device("meta"):
        model = timm.create_model("vit_huge_plus_patch16_dinov3", pretrained=False)
    assert model.blocks[0].mlp.fc1_g.out_features == 5120 and model.blocks[0].attn.num_heads == 20
    with torch.device("meta"):
        model = timm.create_model("vit_pe_core_gigantic_patch14_448", pretrained=False)
    assert model.attn_pool.num_heads == 8 and model.attn_pool.mlp.fc1.out_features == 6144


# ---- refusals: config and tensors disagree, or a part vit_keras does not implement; named, nothing loaded.
def _copy_case(case, tmp_path):
    directory = str(tmp_path / case)
    shutil.copytree(os.path.join(FAMILY2, case, "checkpoint"), directory)
    os.chmod(directory, 0o755)
    for name in os.listdir(directory):
        os.chmod(os.path.join(directory, name), 0o644)
    return directory


def _edit_config(directory, change):
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        config = json.load(f)
    change(config)
    with open(path, "w") as f:
        json.dump(config, f)


def _edit_tensors(directory, change):
    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path)


def test_rope_mixed_frequencies_of_the_wrong_shape_are_refused(tmp_path):
    directory = _copy_case("timm_rope_mixed", tmp_path)
    _edit_tensors(directory, lambda t: t.update({"rope.freqs": t["rope.freqs"][:, :, :2].copy()}))
    with pytest.raises(ValueError, match=r"rope\.freqs has shape \(2, 3, 2, 8\) .* needs \(2, 3, 3, 8\)"):
        vit_keras.from_pretrained(directory)


def test_miscounted_registers_are_refused(tmp_path):
    directory = _copy_case("timm_dinov3", tmp_path)
    _edit_tensors(directory, lambda t: t.update({"reg_token": np.concatenate([t["reg_token"]] * 2, axis=1)}))
    with pytest.raises(ValueError, match=r"reg_token has shape \(1, 8, 48\) .*4 registers.* \(1, 4, 48\)"):
        vit_keras.from_pretrained(directory)


def test_a_swiglu_checkpoint_named_as_a_gelu_architecture_is_refused(tmp_path):
    directory = _copy_case("timm_dinov3_swiglu", tmp_path)
    _edit_config(directory, lambda c: c.update(architecture="vit_small_patch16_dinov3"))
    with pytest.raises(ValueError, match=r"(?s)Missing.*blocks\.0\.mlp\.fc1\.weight.*Unknown.*blocks\.0\.mlp\.fc1_g"):
        vit_keras.from_pretrained(directory)


def test_a_qkv_bias_architecture_without_q_and_v_biases_is_refused(tmp_path):
    """`_qkvb` promises EvaAttention's q/v biases (the k bias is the zero one): their absence is not read as 0."""
    directory = _copy_case("timm_dinov3", tmp_path)
    _edit_config(directory, lambda c: c.update(architecture="vit_small_patch16_dinov3_qkvb"))
    with pytest.raises(ValueError, match=r"Missing.*blocks\.0\.attn\.q_bias.*blocks\.0\.attn\.v_bias"):
        vit_keras.from_pretrained(directory)


@pytest.mark.parametrize("change, match", [
    (lambda c: c.update(architecture="eva02_base_patch16_clip_224"), r"scale_attn_inner=True selects a LayerNorm"),
    (lambda c: c["model_args"].update(qk_norm=True), r"qk_norm=True selects a norm on q and k"),
    (lambda c: c["model_args"].update(use_fc_norm=True, use_post_transformer_norm=True),
     r"use_fc_norm=True with use_post_transformer_norm=True"),
    (lambda c: c["model_args"].update(use_fc_norm=True), r"(?s)Missing.*fc_norm\.weight \(every timm "
     r"vit_small_patch16_dinov3 model has it\).*Unknown.*norm\.bias, norm\.weight"),
    (lambda c: c["model_args"].update(rope_type="mrope"), r"rope_type='mrope'.*does not implement"),
    (lambda c: c["model_args"].update(window_size=4), r"model_args \['window_size'\] are not timm Eva options"),
    (lambda c: c.update(architecture="vit_gigantic_patch16_dinov3"), r"DINOv3 has no size 'gigantic'"),
])
def test_eva_parts_vit_keras_does_not_implement_are_refused_by_name(tmp_path, change, match):
    directory = _copy_case("timm_dinov3", tmp_path)
    _edit_config(directory, change)
    with pytest.raises(ValueError, match=match):
        vit_keras.from_pretrained(directory)


def test_convert_a_timm_eva_directory(tmp_path):
    """`vit-keras convert` of an EVA-02 directory gives a .keras file with its logits (the normalisation inside)."""
    from vit_keras.cli import main as cli_main

    destination = str(tmp_path / "eva02.keras")
    assert cli_main(["convert", os.path.join(FAMILY2, "timm_eva02", "checkpoint"), destination]) == 0
    model = keras.saving.load_model(destination, safe_mode=True)
    x = np.load(os.path.join(FAMILY2, "timm_eva02", "input.npy")).astype(np.float32)
    check(run(model, x), np.load(os.path.join(FAMILY2, "timm_eva02", "expected.npy")))
