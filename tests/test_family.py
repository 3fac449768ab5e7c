"""The ViT family through `vit_keras.from_pretrained`: reference fixtures made by timm 1.0.31 and transformers 5.23.0
(tests/fixtures/family/README.md), and parity with timm / transformers models built here with random weights, at a
second image size (position embeddings resampled as each library resamples them) and after a `.keras` round trip.

Tolerance (the fixtures' README): max |diff| <= 5e-5 * max(1, max |reference|), and the same argmax.
"""

import json
import os

import keras
import numpy as np
import pytest
import timm
import torch
import transformers

import vit_keras
from tests.family2_cases import check as _check
from tests.family2_cases import fixture_input
from tests.family2_cases import run as _run
from tests.torch_compat import randomise_parameters

FAMILY = os.path.join(os.path.dirname(__file__), "fixtures", "family")
CASES = sorted(name for name in os.listdir(FAMILY) if os.path.isdir(os.path.join(FAMILY, name)))
# Reference: the float32 forward against the source framework's output (float64 NumPy, JAX or PyTorch) on O(1)
# logits. float32 rounding (2^-24 relative per op) accumulated over a few-layer chain of sums of at most a few
# hundred terms, under any summation order (oneDNN ISA, thread count), stays at a few 1e-6 for these fixtures
# (LayerScale, registers, MAP heads); 5e-5 x max(1, max |logit|) keeps >= 10x over that: family2_cases.TOLERANCE,
# which `_check` applies.


def test_every_fixture_case_is_here():
    assert len(CASES) == 8


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_family_fixture_through_from_pretrained_and_keras_round_trip(case, tmp_path):
    with open(os.path.join(FAMILY, case, "meta.json")) as f:
        meta = json.load(f)
    model = vit_keras.from_pretrained(os.path.join(FAMILY, case, meta["checkpoint"]), **meta["call"])
    x = fixture_input(case, meta, FAMILY)
    expected = np.load(os.path.join(FAMILY, case, "expected.npy"))
    out = _run(model, x)
    _check(out, expected)
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(_run(reloaded, x), out)
    assert vit_keras.weights.model_config(reloaded) == vit_keras.weights.model_config(model)


# ---- timm: a save_for_hf directory of a randomised model; the reference runs at another size with
# dynamic_img_size=True, which resamples the position embeddings (antialiased bicubic) as from_pretrained does.
TINY_TIMM = dict(patch_size=8, embed_dim=48, depth=2, num_heads=3, num_classes=5)
TIMM_FAMILIES = {
    "dinov2_reg4": ("vit_small_patch14_reg4_dinov2", dict(patch_size=14), 28, 42),
    "dinov2": ("vit_small_patch14_dinov2", dict(patch_size=14), 28, 56),
    "clip_quickgelu": ("vit_base_patch16_clip_quickgelu_224", {}, 32, 48),
    "siglip_map": ("vit_base_patch16_siglip_224", {}, 32, 40),
    "deit_distilled": ("deit_small_distilled_patch16_224", {}, 32, 48),
    "avg_fc_norm": ("vit_base_patch16_224", dict(global_pool="avg"), 32, 24),
}


def _timm_dir(tmp_path, name, model_args, size, seed):
    args = {**TINY_TIMM, **model_args, "img_size": size}
    reference = randomise_parameters(timm.create_model(name, pretrained=False, **args), seed=seed)
    directory = tmp_path / "timm"
    timm.models.save_for_hf(reference, str(directory), model_args=args, safe_serialization=True)
    return reference, str(directory), args


@pytest.mark.parametrize("family", sorted(TIMM_FAMILIES))
def test_timm_family_parity_at_a_second_size(family, tmp_path):
    name, extra, size, new_size = TIMM_FAMILIES[family]
    reference, directory, args = _timm_dir(tmp_path, name, extra, size, seed=len(family))
    dynamic = timm.create_model(name, pretrained=False, **{**args, "dynamic_img_size": True}).eval()
    dynamic.load_state_dict(reference.state_dict())
    rng = np.random.default_rng(3)
    for image, torch_model in ((size, reference), (new_size, dynamic)):
        x = rng.uniform(-1, 1, (2, image, image, 3)).astype(np.float32)
        with torch.no_grad():
            expected = torch_model(torch.from_numpy(x.transpose(0, 3, 1, 2))).numpy()
        model = vit_keras.from_pretrained(directory, image_size=image, include_preprocessing=False,
                                          classifier_activation=None)
        _check(_run(model, x), expected)


def test_timm_directory_preprocessing_is_pretrained_cfg(tmp_path):
    """include_preprocessing=True applies pretrained_cfg's mean/std to [0, 255] input, as timm's data config does."""
    reference, directory, _ = _timm_dir(tmp_path, "vit_base_patch16_clip_quickgelu_224", {}, 32, seed=5)
    cfg = reference.pretrained_cfg
    x = np.random.default_rng(4).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    normalised = (x / 255.0 - np.asarray(cfg["mean"])) / np.asarray(cfg["std"])
    with torch.no_grad():
        expected = reference(torch.from_numpy(normalised.transpose(0, 3, 1, 2).astype(np.float32))).numpy()
    _check(_run(vit_keras.from_pretrained(directory, classifier_activation=None), x), expected)


# ---- transformers: save_pretrained directories of randomised vision towers, compared at a second size with
# interpolate_pos_encoding=True (bicubic without antialias, what from_pretrained uses for these sources).
def _hf_model(kind, size, seed):
    common = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=3, image_size=size, patch_size=8)
    if kind == "dinov2":
        model = transformers.Dinov2Model(transformers.Dinov2Config(**{**common, "patch_size": 14}, mlp_ratio=2))
    elif kind == "clip":
        model = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**common, intermediate_size=96))
    elif kind == "siglip":
        model = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**common, intermediate_size=96))
    else:
        model = transformers.ViTModel(transformers.ViTConfig(**common, intermediate_size=96))
    return randomise_parameters(model, seed=seed)


HF_FAMILIES = {"dinov2": (28, 42, "token"), "clip": (32, 48, "token"), "siglip": (32, 40, "map"),
               "vit": (32, 48, "token")}


@pytest.mark.parametrize("kind", sorted(HF_FAMILIES))
def test_transformers_family_parity_at_a_second_size(kind, tmp_path):
    size, new_size, pooling = HF_FAMILIES[kind]
    reference = _hf_model(kind, size, seed=len(kind))
    reference.save_pretrained(str(tmp_path / "hf"), safe_serialization=True)
    rng = np.random.default_rng(5)
    for image in (size, new_size):
        x = rng.uniform(-1, 1, (2, image, image, 3)).astype(np.float32)
        with torch.no_grad():
            out = reference(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)),
                            interpolate_pos_encoding=image != size)
        expected = out.pooler_output.numpy()
        model = vit_keras.from_pretrained(str(tmp_path / "hf"), image_size=image, include_top=False,
                                          pooling=pooling, include_preprocessing=False)
        if kind == "vit":  # ViTModel's pooler is tanh(dense(class token)): the model's pre_logits
            assert model.get_layer("pre_logits") is not None
        _check(_run(model, x), expected)


def test_bicubic_antialias_resampling_equals_torch():
    from vit_keras.weights.resample import resample_grid

    rng = np.random.default_rng(0)
    for old, new in (((4, 4), (6, 6)), ((6, 6), (4, 4)), ((5, 7), (9, 3))):
        grid = rng.normal(size=(*old, 5)).astype(np.float32)
        for antialias in (False, True):
            expected = torch.nn.functional.interpolate(
                torch.from_numpy(grid).permute(2, 0, 1)[None], size=new, mode="bicubic", antialias=antialias,
                align_corners=False)[0].permute(1, 2, 0).numpy()
            np.testing.assert_allclose(resample_grid(grid, new, "bicubic", antialias=antialias), expected, atol=1e-5)


@pytest.mark.slow
@pytest.mark.tf_only
def test_family_model_exports_to_saved_model_and_tflite(tmp_path):
    """A DINOv2-with-registers model (LayerScale, registers, no_embed_class, patch 14, timm normalisation) through
    the same export helpers as the paper's models: SavedModel and float32 TFLite give the Keras probabilities."""
    import tensorflow as tf

    from vit_keras import export

    model = vit_keras.from_pretrained(os.path.join(FAMILY, "timm_dinov2_reg4", "checkpoint"))
    x = np.load(os.path.join(FAMILY, "timm_dinov2_reg4", "input.npy")).astype(np.float32)
    expected = _run(model, x)
    serving = export.saved_model(model, str(tmp_path / "serving"), version=1, top_k=3)
    signature = tf.saved_model.load(serving).signatures["serving_default"]
    np.testing.assert_allclose(signature(images=tf.constant(x))["probabilities"].numpy(), expected, atol=1e-5)
    path = export.tflite(model, str(tmp_path / "dinov2.tflite"))
    got = np.concatenate([export.tflite_predict(path, x[i : i + 1])["probabilities"] for i in range(len(x))])
    np.testing.assert_allclose(got, expected, atol=1e-5)


# ---- the config, the builder's options and clear errors for malformed checkpoint configs


def test_config_validates_once_and_round_trips():
    from vit_keras.configs import VARIANTS, ViTConfig

    config = ViTConfig(patch_size=14, hidden_size=48, num_heads=3, num_layers=2, mlp_dim=96, image_size=28,
                       layer_scale=True, num_register_tokens=4, no_embed_class=True, activation="quick_gelu")
    assert ViTConfig.from_dict(config.to_dict()) == config
    assert config.num_prefix_tokens == 5 and config.num_embedded_prefix_tokens == 0
    assert VARIANTS["B/16"].replace(image_size=384).grid_size == (24, 24)
    for bad, match in ((dict(activation="relu"), "activation"), (dict(num_heads=5), "not divisible by"),
                       (dict(global_pool="token", class_token=False), "needs a class token"),
                       (dict(image_size=30), "not divisible by patch_size"),
                       (dict(layer_norm_epsilon=0), "layer_norm_epsilon"), (dict(pre_norm=1), "pre_norm")):
        with pytest.raises(ValueError, match=match):
            ViTConfig(**{**dict(patch_size=8, hidden_size=48, num_heads=3, image_size=32), **bad})
    with pytest.raises(ValueError, match="Unknown ViTConfig fields"):
        ViTConfig.from_dict({"patch": 8})


def test_model_carries_its_config_through_keras_file(tiny_kwargs, tmp_path):
    model = vit_keras.ViT(image_size=32, classes=3, layer_scale=True, num_register_tokens=2, no_embed_class=True,
                          pre_norm=True, activation="quick_gelu", **tiny_kwargs)
    path = str(tmp_path / "m.keras")
    model.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    assert vit_keras.weights.model_config(reloaded) == vit_keras.weights.model_config(model)
    assert vit_keras.weights.model_config(model).num_register_tokens == 2


def test_pooling_rules_and_max_pooling(tiny_kwargs):
    with pytest.raises(ValueError, match="include_top=False only"):
        vit_keras.ViT(image_size=32, pooling="token", **tiny_kwargs)
    model = vit_keras.ViT(image_size=32, include_top=False, pooling="max", include_preprocessing=False, **tiny_kwargs)
    tokens = vit_keras.ViT(image_size=32, include_top=False, include_preprocessing=False, **tiny_kwargs)
    tokens.set_weights(model.get_weights())
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(model, x), _run(tokens, x)[:, 1:].max(axis=1), atol=1e-6)


def test_input_tensor_keeps_the_users_layers(tiny_kwargs):
    images = keras.Input((32, 32, 3))
    adjusted = keras.layers.Conv2D(3, 1, name="user_conv")(images)
    model = vit_keras.ViT(input_tensor=adjusted, classes=4, **tiny_kwargs)
    assert model.inputs[0] is images
    assert "user_conv" in [layer.name for layer in model.layers]


@pytest.mark.parametrize(
    "kind, edit, match",
    [
        ("hf", lambda text: text[:-5], "not valid JSON"),
        ("hf", lambda text: text.replace('"patch_size": 8', '"patch_size": 0'), "'patch_size' must be positive"),
        ("hf", lambda text: text.replace('"hidden_size": 48', '"hidden_size": "48"'), "'hidden_size' must be an"),
        ("hf", lambda text: text.replace('"num_hidden_layers"', '"layers"'), "has no 'num_hidden_layers'"),
        ("timm", lambda text: text.replace('"architecture"', '"arch"'), "has no 'architecture'|timm"),
        ("timm", lambda text: text.replace('"patch_size": 8', '"patch_size": 0'), "'patch_size' must be positive"),
        ("timm", lambda text: text.replace('"depth": 3', '"depth": [3]'), "'depth' must be an integer"),
        ("timm", lambda text: text.replace("vit_base_patch16_clip_quickgelu_224", "vit_base_patch16_rpn_224"),
         "'rpn'"),
    ],
)
def test_malformed_checkpoint_configs_name_the_file_and_key(kind, edit, match, tmp_path):
    import shutil

    case = "hf_clip_vision" if kind == "hf" else "timm_clip_quickgelu"
    directory = tmp_path / case
    shutil.copytree(os.path.join(FAMILY, case, "checkpoint"), directory)
    config = directory / "config.json"
    config.write_text(edit(config.read_text()))
    with pytest.raises(ValueError, match=match) as error:
        vit_keras.from_pretrained(str(directory))
    assert "config.json" in str(error.value) or "timm" in str(error.value)


def test_convert_takes_family_sources(tmp_path, capsys):
    from vit_keras.cli import main as cli_main

    case = os.path.join(FAMILY, "timm_deit_distilled")
    out = str(tmp_path / "deit.keras")
    assert cli_main(["convert", os.path.join(case, "checkpoint"), out]) == 0
    assert "from_pretrained" in capsys.readouterr().out
    model = keras.models.load_model(out, safe_mode=True)
    x = np.load(os.path.join(case, "input.npy")).astype(np.float32)
    _check(_run(model, x), np.load(os.path.join(case, "expected.npy")))
