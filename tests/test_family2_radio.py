"""The 2025-26 ViT families through `vit_keras.from_pretrained`: the reference fixtures (tests/fixtures/family2/
README.md: timm 1.0.31, transformers 5.23.0), parity with timm / transformers models built here with random weights
at a second image size and a non-square one, refusals of checkpoints whose config and tensors disagree, and
`vit-keras convert`.

Tolerance (the fixtures' README): max |diff| <= 5e-5 * max(1, max |reference|), and the same argmax. Its origin:
float32 rounding (2^-24 relative per op) accumulated over a few-layer chain of sums of at most a few hundred terms,
under any summation order, stays at a few 1e-6 on these outputs (measured here: at most 4.3e-6 on hf_radio, whose
largest value is 7.4); 5e-5 x max(1, max |reference|) keeps >= 10x over that, while a left-out part moves the outputs
far more (README: LayerScale ignored >= 1.1).
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
import transformers
from safetensors.numpy import load_file, save_file

import vit_keras
from tests.family2_cases import FAMILY2, check, run, run_case
from tests.torch_compat import randomise_parameters

# Slow tier (tests/tiny.py's rule: over 1.5 s on 2 cores): each case builds, loads and runs a model, some with torch.
pytestmark = pytest.mark.slow


# NVIDIA RADIO: C-RADIOv3 as timm builds it, and transformers' RadioModel.
RADIO_CASES = ["hf_radio", "timm_radio"]


@pytest.mark.numerics
@pytest.mark.parametrize("case", RADIO_CASES)
def test_fixture_case_through_from_pretrained_and_keras_round_trip(case, tmp_path, record_property):
    run_case(case, tmp_path, record_property)


# ---- RADIO's cropped position table: torch bilinear (align_corners=False, no antialias) to a square of the longer
# side, then the first rows / columns (transformers RadioPatchEmbeddings._interpolate_position_embedding).
def _torch_bilinear_crop(grid, new_grid):
    table = torch.from_numpy(grid).permute(2, 0, 1)[None]
    side = max(new_grid)
    table = F.interpolate(table, size=(side, side), mode="bilinear", align_corners=False)
    return table[0, :, : new_grid[0], : new_grid[1]].permute(1, 2, 0).numpy()


def test_bilinear_crop_resampling_equals_torch_in_graph_and_numpy():
    from vit_keras.layers.interpolation import numpy_resample_grid, resample_grid

    grid = np.random.default_rng(0).normal(size=(8, 8, 6)).astype(np.float32)
    for new_grid in ((4, 4), (4, 6), (6, 3), (10, 5), (3, 16), (8, 8), (1, 1)):
        expected = _torch_bilinear_crop(grid, new_grid)
        in_graph = keras.ops.convert_to_numpy(resample_grid(keras.ops.convert_to_tensor(grid), new_grid,
                                                            "bilinear_crop"))
        # float32 rounding of a two-tap weighted sum of O(1) values: ~1e-7; 1e-5 is a wide margin, a wrong tap or
        # crop moves entries by O(0.1).
        np.testing.assert_allclose(in_graph, expected, atol=1e-5)
        np.testing.assert_allclose(numpy_resample_grid(grid, new_grid, "bilinear_crop"), expected, atol=1e-5)


# ---- transformers RadioModel: save_pretrained directories of randomised models, compared as RadioModel runs them:
# the stored 8x8 table (max_img_size 64, patch 8) resized to each image's grid and cropped.
RADIO_CONFIG = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=3, patch_size=8, image_size=32,
                    max_img_size=64, num_cls_tokens=2, num_registers=3, mlp_ratio=2.0,
                    norm_mean=[0.4, 0.5, 0.6], norm_std=[0.2, 0.3, 0.25])


def _radio_dir(tmp_path, seed=1, **changes):
    config = transformers.RadioConfig(**{**RADIO_CONFIG, **changes})
    reference = randomise_parameters(transformers.RadioModel(config), seed=seed)
    directory = str(tmp_path / "radio")
    reference.save_pretrained(directory, safe_serialization=True)
    return reference, directory


def _radio_reference(reference, x):
    with torch.no_grad():
        return reference(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))


# (height, width): the stored size; a smaller square (the 8x8 table downsampled to 6x6); non-square grids that
# crop (4x6: a 6x6 square cut to 4 rows; 10x5: upsampled to 10x10, cut to 5 columns).
RADIO_SIZES = ((32, 32), (48, 48), (32, 48), (80, 40))


def test_transformers_radio_parity_at_other_sizes(tmp_path):
    reference, directory = _radio_dir(tmp_path)
    rng = np.random.default_rng(2)
    any_size = vit_keras.from_pretrained(directory, any_image_size=True, include_top=False,
                                         include_preprocessing=False)
    for size in RADIO_SIZES:
        x = rng.uniform(0, 1, (2, *size, 3)).astype(np.float32)
        check(run(any_size, x), _radio_reference(reference, x).last_hidden_state.numpy())
    # A fixed size resamples the same stored table in its graph (80x40: a 10x10 square cut to 10x5).
    fixed = vit_keras.from_pretrained(directory, image_size=(80, 40), include_top=False, include_preprocessing=False)
    check(run(fixed, x), _radio_reference(reference, x).last_hidden_state.numpy())
    # RADIO's summary: its class tokens, concatenated (summary_idxs = all of them); [0, 255] input with preprocessing.
    x = rng.uniform(0, 1, (2, 32, 48, 3)).astype(np.float32)
    pooled = vit_keras.from_pretrained(directory, image_size=(32, 48), include_top=False, pooling="token")
    check(run(pooled, x * 255.0), _radio_reference(reference, x).summary.numpy())
    assert pooled.output_shape == (None, 2 * 48)
    # The table is part of the architecture: stored at its own 8x8 grid whatever the image size.
    assert tuple(pooled.get_layer("patch_encoder").pos_embedding.shape) == (1, 64, 48)


def test_radio_attention_maps_skip_every_prefix_token(tmp_path):
    _, directory = _radio_dir(tmp_path)
    model = vit_keras.from_pretrained(directory, image_size=(32, 48), include_top=False, include_preprocessing=False)
    images = np.random.default_rng(3).uniform(0, 1, (1, 32, 48, 3)).astype(np.float32)
    weights = vit_keras.inspection.attention_weights(model, images)
    assert weights[0].shape == (1, 3, 5 + 4 * 6, 5 + 4 * 6)  # 2 class tokens + 3 registers + the 4x6 patches
    maps = vit_keras.inspection.attention_maps(model, images)
    assert maps.heads.shape == (1, 3, 4, 6) and maps.rollout.shape == (1, 4, 6)


def _edit_config(directory, **changes):
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(changes)
    with open(path, "w") as f:
        json.dump(config, f)


def _edit_tensors(directory, edit):
    path = os.path.join(directory, "model.safetensors")
    tensors = dict(load_file(path))
    edit(tensors)
    save_file(tensors, path)


def test_radio_checkpoint_whose_config_and_tensors_disagree_is_refused(tmp_path):
    _, directory = _radio_dir(tmp_path)
    bad = str(tmp_path / "bad")
    cases = [
        # registers miscounted: the (class + register, D) tensor has 5 rows, the config says 2 + 4.
        (dict(num_registers=4), None, r"patch_generator\.cls_token\.token has shape \(5, 48\).*\(6, 48\)"),
        (dict(summary_idxs=[1]), lambda t: t.update({"radio_model.summary_idxs": np.array([1], np.int64)}),
         r"summary_idxs \[1\]"),
        (dict(norm_mean=[0.5, 0.5, 0.5]), None, r"input_conditioner\.norm_mean is .* config\.json's norm_mean"),
        (dict(video_temporal_patch_size=2), None, "video"),
        (dict(use_swiglu_ffn=True), None, "use_swiglu_ffn"),
    ]
    for config_changes, tensor_edit, match in cases:
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(directory, bad)
        _edit_config(bad, **config_changes)
        if tensor_edit is not None:
            _edit_tensors(bad, tensor_edit)
        with pytest.raises(ValueError, match=match):
            vit_keras.from_pretrained(bad, include_top=False)


def test_radio_model_is_not_written_as_a_plain_vit(tmp_path):
    _, directory = _radio_dir(tmp_path)
    model = vit_keras.from_pretrained(directory, include_top=False, pooling="token")
    for target in ("timm", "transformers"):
        with pytest.raises(ValueError, match="RADIO's"):
            vit_keras.save_pretrained(model, str(tmp_path / target), format=target)


# ---- timm vit_*_patch16_radio_v3: a randomised tiny model, saved with save_for_hf, against timm at a second square
# size and a non-square one (timm with dynamic_img_size=True resamples the table with antialiased bicubic, as
# from_pretrained does at load).
TINY_RADIO_TIMM = dict(patch_size=8, embed_dim=48, depth=2, num_heads=3, num_classes=5, img_size=32)


def _timm_radio_dir(tmp_path, seed=4):
    reference = randomise_parameters(timm.create_model("vit_base_patch16_radio_v3", pretrained=False,
                                                       **TINY_RADIO_TIMM), seed=seed)
    directory = str(tmp_path / "timm_radio")
    timm.models.save_for_hf(reference, directory, model_args=TINY_RADIO_TIMM, safe_serialization=True)
    return reference, directory


def test_timm_radio_parity_at_other_sizes(tmp_path):
    reference, directory = _timm_radio_dir(tmp_path)
    dynamic = timm.create_model("vit_base_patch16_radio_v3", pretrained=False,
                                **{**TINY_RADIO_TIMM, "dynamic_img_size": True}).eval()
    dynamic.load_state_dict(reference.state_dict())
    rng = np.random.default_rng(5)
    for size in ((32, 32), (48, 48), (32, 48)):
        x = rng.uniform(-1, 1, (2, *size, 3)).astype(np.float32)
        with torch.no_grad():
            expected = (reference if size == (32, 32) else dynamic)(torch.from_numpy(x.transpose(0, 3, 1, 2)))
        model = vit_keras.from_pretrained(directory, image_size=size, include_preprocessing=False,
                                          classifier_activation=None)
        check(run(model, x), expected.numpy())
    config = vit_keras.weights.model_config(model)
    assert (config.num_register_tokens, config.layer_scale, config.final_norm) == (7, True, False)


def test_timm_radio_names_and_a_final_norm_the_config_rules_out(tmp_path):
    from vit_keras.weights import timm as timm_reader

    assert timm_reader.architecture_switches("vit_large_patch16_radio_v3")["layer_scale"] is True
    assert "layer_scale" not in timm_reader.architecture_switches("vit_huge_patch16_radio_v3")
    with pytest.raises(ValueError, match="C-RADIOv4"):
        timm_reader.architecture_switches("vit_huge_patch16_radio_v4")
    _, directory = _timm_radio_dir(tmp_path)
    _edit_tensors(directory, lambda t: t.update({"norm.weight": np.ones(48, np.float32),
                                                 "norm.bias": np.zeros(48, np.float32)}))
    with pytest.raises(ValueError, match=r"final_norm=False .* \['norm\.bias', 'norm\.weight'\]"):
        vit_keras.from_pretrained(directory)


def test_radio_config_fields_are_validated():
    tiny = dict(patch_size=8, hidden_size=48, num_heads=3, num_layers=1, mlp_dim=96, image_size=32)
    with pytest.raises(ValueError, match="num_class_tokens"):
        vit_keras.configs.ViTConfig(**tiny, num_class_tokens=2, class_token=False, global_pool="avg")
    with pytest.raises(ValueError, match="final_norm=False"):
        vit_keras.configs.ViTConfig(**tiny, final_norm=False, fc_norm=True)
    with pytest.raises(ValueError, match="no_embed_class=True"):
        vit_keras.configs.ViTConfig(**tiny, pos_interpolation="bilinear_crop")
    with pytest.raises(ValueError, match="finite positive stds"):
        vit_keras.configs.ViTConfig(**tiny, input_normalization=((0.5,) * 3, (0.5, 0.0, 0.5)))
    config = vit_keras.configs.ViTConfig(**tiny, pos_interpolation="bilinear_crop", no_embed_class=True,
                                         pos_grid=(8, 8), num_class_tokens=2)
    assert (config.grid_size, config.image_grid, config.num_prefix_tokens) == ((8, 8), (4, 4), 2)


def test_convert_takes_the_radio_checkpoint(tmp_path, capsys):
    from vit_keras.cli import main as cli_main

    case = os.path.join(FAMILY2, "hf_radio")
    out = str(tmp_path / "radio.keras")
    assert cli_main(["convert", os.path.join(case, "checkpoint"), out]) == 0
    capsys.readouterr()
    model = keras.models.load_model(out, safe_mode=True)
    # The converted model keeps its preprocessing (x / 255, then RADIO's conditioner): fed [0, 255] images. Without
    # a head it pools its class tokens: RADIO's summary, the first 2 tokens of last_hidden_state concatenated.
    x = np.load(os.path.join(case, "input.npy")).astype(np.float32)
    expected = np.load(os.path.join(case, "expected.npy"))
    check(run(model, x), expected[:, :2].reshape(2, -1))
