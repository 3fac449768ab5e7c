"""The 2025-26 ViT families through `vit_keras.from_pretrained`: the reference fixtures of tests/fixtures/family2
(made by timm 1.0.31 / transformers 5.23.0, see its README), parity with transformers models built here with random
weights at a second and a non-square image size, refusals of checkpoints whose config and tensors disagree, and
`vit-keras convert`.

Tolerance (the fixtures' README): max |diff| <= 5e-5 * max(1, max |reference|), and the same argmax.
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import torch
import transformers

import vit_keras
from tests.family2_cases import FAMILY2, check, fixture_input, run, run_case
from tests.torch_compat import randomise_parameters
from vit_keras.cli import main as cli_main
from vit_keras.configs import ViTConfig

# Slow tier (tests/tiny.py's rule: over 1.5 s on 2 cores): each case builds, loads and runs a model, some with torch.
pytestmark = pytest.mark.slow

# transformers' 2025-26 towers: DINOv3 (RoPE, registers, LayerScale, no key bias), AIMv2 (RMSNorm, SwiGLU, its
# attention-pooling head), I-JEPA (no class token, the whole token sequence).
HF_CASES = ["hf_aimv2", "hf_dinov3", "hf_ijepa"]


@pytest.mark.numerics
@pytest.mark.parametrize("case", HF_CASES)
def test_family2_fixture_through_from_pretrained_and_keras_round_trip(case, tmp_path, record_property):
    run_case(case, tmp_path, record_property)


# ---- transformers towers built here with random weights (N(0, 0.1) on every parameter), written with
# save_pretrained, compared at the stored size, a larger one and a non-square one (RoPE's row/column order and the
# position-table resampling only show there).
TINY_HF = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=3, intermediate_size=96, patch_size=8,
               image_size=32)
SIZES = ((32, 32), (48, 48), (32, 48))


def _save(model, tmp_path, seed):
    directory = str(tmp_path / "hf")
    randomise_parameters(model, seed=seed).save_pretrained(directory, safe_serialization=True)
    return directory


def _parity(reference, directory, sizes, pooling, output, **forward):
    rng = np.random.default_rng(7)
    for height, width in sizes:
        x = rng.uniform(-1, 1, (2, height, width, 3)).astype(np.float32)
        extra = {k: v(height, width) for k, v in forward.items()}
        with torch.no_grad():
            expected = getattr(reference(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), **extra), output)
        model = vit_keras.from_pretrained(directory, image_size=(height, width), include_top=False, pooling=pooling,
                                          include_preprocessing=False)
        check(run(model, x), expected.numpy())


DINOV3 = {
    # A plain MLP without biases and no query bias: zeros in vit_keras' bias slots, the same function.
    "mlp_registers": dict(num_register_tokens=2, mlp_bias=False, query_bias=False),
    # SwiGLU without biases, a key bias, no output-projection bias, no registers (an empty register_tokens), θ 50.
    "swiglu_key_bias": dict(use_gated_mlp=True, hidden_act="silu", mlp_bias=False, key_bias=True, proj_bias=False,
                            num_register_tokens=0, rope_theta=50.0),
}


@pytest.mark.parametrize("variant", sorted(DINOV3))
def test_dinov3_parity_at_other_and_non_square_sizes(variant, tmp_path):
    config = transformers.DINOv3ViTConfig(**TINY_HF, **DINOV3[variant])
    reference = transformers.DINOv3ViTModel(config)
    directory = _save(reference, tmp_path, seed=len(variant))
    _parity(reference, directory, SIZES, "token", "pooler_output")


def test_ijepa_parity_at_other_and_non_square_sizes(tmp_path):
    reference = transformers.IJepaModel(transformers.IJepaConfig(**TINY_HF))
    directory = _save(reference, tmp_path, seed=3)
    # interpolate_pos_encoding: transformers' bicubic resampling of the table, which from_pretrained matches.
    _parity(reference, directory, SIZES, None, "last_hidden_state",
            interpolate_pos_encoding=lambda h, w: (h, w) != (32, 32))
    # IJepaForImageClassification: its classifier reads the mean of every token (global_pool="avg").
    classifier = transformers.IJepaForImageClassification(transformers.IJepaConfig(**TINY_HF, num_labels=5))
    directory = _save(classifier, tmp_path / "classifier", seed=6)
    x = np.random.default_rng(8).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    with torch.no_grad():
        expected = classifier(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).logits.numpy()
    model = vit_keras.from_pretrained(directory, include_preprocessing=False, classifier_activation=None)
    check(run(model, x), expected)


def test_aimv2_parity(tmp_path):
    # The learned table runs at its own size only (Aimv2VisionEmbeddings indexes it by position); the native models'
    # sine-cosine embeddings follow any grid. qkv_bias / mlp_bias on, so that every bias slot is exercised too.
    learned = transformers.Aimv2VisionModel(transformers.Aimv2VisionConfig(**TINY_HF))
    _parity(learned, _save(learned, tmp_path / "learned", seed=4), SIZES[:1], "map", "pooler_output")
    native = transformers.Aimv2VisionModel(transformers.Aimv2VisionConfig(**TINY_HF, is_native=True, qkv_bias=True,
                                                                          mlp_bias=True))
    _parity(native, _save(native, tmp_path / "native", seed=5), SIZES, "map", "pooler_output")


def test_aimv2_whole_model_reads_its_vision_tower(tmp_path):
    """A whole Aimv2Model directory: its vision_config and vision_model.* tensors, the text tower and the
    projections left out; the output is the vision tower's pooler_output."""
    config = transformers.Aimv2Config(
        vision_config=TINY_HF, projection_dim=16,
        text_config=dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=8, eos_token_id=1))
    whole = transformers.Aimv2Model(config)
    _parity(whole.vision_model, _save(whole, tmp_path, seed=9), SIZES[:1], "map", "pooler_output")


# ---- config and tensors that disagree: refused by key (and shapes), nothing loaded


def _fixture_copy(case, tmp_path, **config_changes):
    directory = str(tmp_path / case)
    shutil.copytree(os.path.join(FAMILY2, case, "checkpoint"), directory)
    path = os.path.join(directory, "config.json")
    os.chmod(path, 0o644)
    with open(path) as f:
        config = json.load(f)
    config.update(config_changes)
    with open(path, "w") as f:
        json.dump(config, f)
    return directory


def test_dinov3_register_count_and_biases_must_match_the_config(tmp_path):
    with pytest.raises(ValueError, match=r"embeddings\.register_tokens has shape \(1, 4, 48\), but .*config\.json' "
                                         r"says num_register_tokens=2 \(shape \(1, 2, 48\)\); nothing was loaded"):
        vit_keras.from_pretrained(_fixture_copy("hf_dinov3", tmp_path / "a", num_register_tokens=2),
                                  include_top=False, pooling="token")
    # The file has no key bias: a config that promises one is refused, never filled in.
    with pytest.raises(ValueError, match=r"layer\.0\.attention\.k_proj\.bias \(the config says key_bias=True\)"):
        vit_keras.from_pretrained(_fixture_copy("hf_dinov3", tmp_path / "b", key_bias=True), include_top=False)
    with pytest.raises(ValueError, match="'num_register_tokens' must be an integer"):
        vit_keras.from_pretrained(_fixture_copy("hf_dinov3", tmp_path / "c", num_register_tokens="4"))


def test_dinov3_gated_checkpoint_read_as_plain_mlp_is_refused(tmp_path):
    gated = transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(**TINY_HF, use_gated_mlp=True,
                                                                     hidden_act="silu"))
    directory = _save(gated, tmp_path, seed=1)
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({**config, "use_gated_mlp": False, "hidden_act": "gelu"}, f)
    with pytest.raises(ValueError, match=r"nothing was loaded(.|\n)*Unknown(.|\n)*layer\.0\.mlp\.gate_proj\.weight"):
        vit_keras.from_pretrained(directory, include_top=False)
    # A gated MLP is SwiGLU only with SiLU.
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({**config, "hidden_act": "gelu"}, f)
    with pytest.raises(ValueError, match="hidden_act 'gelu' with use_gated_mlp=True"):
        vit_keras.from_pretrained(directory, include_top=False)


def test_aimv2_and_ijepa_refusals_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="'hidden_act' is 'gelu'; vit_keras runs this model type with hidden_act in"):
        vit_keras.from_pretrained(_fixture_copy("hf_aimv2", tmp_path / "a", hidden_act="gelu"))
    # The file's k/v/q projections have no biases: a config with qkv_bias=True is refused by key.
    with pytest.raises(ValueError, match=r"encoder\.layers\.0\.attention\.q_proj\.bias \(the config says qkv_bias"):
        vit_keras.from_pretrained(_fixture_copy("hf_aimv2", tmp_path / "b", qkv_bias=True), include_top=False)
    pooled = transformers.IJepaModel(transformers.IJepaConfig(**TINY_HF), add_pooling_layer=True)
    with pytest.raises(ValueError, match=r"first patch token.*'pooler\.dense\.(weight|bias)'"):
        vit_keras.from_pretrained(_save(pooled, tmp_path / "d", seed=2), include_top=False)


def test_convert_writes_the_dinov3_keras_model(tmp_path):
    source = os.path.join(FAMILY2, "hf_dinov3", "checkpoint")
    out = str(tmp_path / "dinov3.keras")
    assert cli_main(["convert", source, out, "--no-top"]) == 0
    converted = keras.models.load_model(out, safe_mode=True)
    # --no-top pools as the architecture does (the class token): DINOv3ViTModel's pooler_output.
    direct = vit_keras.from_pretrained(source, include_top=False, pooling="token")
    with open(os.path.join(FAMILY2, "hf_dinov3", "meta.json")) as f:
        x = fixture_input("hf_dinov3", json.load(f))
    # Both keep the preprocessing layer; a transformers config.json states no normalisation, so it is [-1, 1]: fed
    # (x + 1) * 127.5, the model sees the fixture's normalised input.
    x = (x + 1.0) * 127.5
    check(run(converted, x), np.load(os.path.join(FAMILY2, "hf_dinov3", "expected.npy")))
    np.testing.assert_array_equal(run(converted, x), run(direct, x))
    assert vit_keras.weights.model_config(converted) == vit_keras.weights.model_config(direct)


# ---- the new parts: a patch norm and AIMv2's attention-pooling head are fields, checked and refused by name


def test_patch_norm_and_map_head_are_checked_and_not_saved_to_other_libraries(tmp_path):
    with pytest.raises(ValueError, match="map_head='aimv2'.*global_pool is 'token'"):
        ViTConfig(map_head="aimv2")
    with pytest.raises(ValueError, match="`patch_norm` must be None or one of"):
        ViTConfig(patch_norm="batchnorm")
    tiny = dict(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96, classes=3)
    for parts in (dict(patch_norm="layernorm"), dict(global_pool="map", class_token=False, map_head="aimv2")):
        model = vit_keras.ViT(**tiny, **parts)
        for target in ("timm", "transformers"):
            with pytest.raises(ValueError, match="plain ViT block"):
                vit_keras.save_pretrained(model, str(tmp_path / target), format=target)
        assert not os.path.exists(tmp_path / "timm")


def test_the_preprocessor_config_gives_the_models_normalisation(tmp_path):
    """transformers keeps the training normalisation in preprocessor_config.json (DINOv3: ImageNet's mean/std): with
    it beside the weights, the default model (include_preprocessing=True) takes [0, 255] images and gives the
    reference output; a rescale factor other than 1/255 is refused by name."""
    with open(os.path.join(FAMILY2, "hf_dinov3", "meta.json")) as f:
        meta = json.load(f)
    directory = tmp_path / "dinov3"
    shutil.copytree(os.path.join(FAMILY2, "hf_dinov3", "checkpoint"), directory)
    preprocessor = {"image_mean": meta["preprocess"]["mean"], "image_std": meta["preprocess"]["std"],
                    "do_normalize": True, "rescale_factor": 1 / 255}
    (directory / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    model = vit_keras.from_pretrained(str(directory), include_top=False, pooling="token")
    x = np.load(os.path.join(FAMILY2, "hf_dinov3", "input.npy")).astype(np.float32)
    check(run(model, x), np.load(os.path.join(FAMILY2, "hf_dinov3", "expected.npy")))
    (directory / "preprocessor_config.json").write_text(json.dumps({**preprocessor, "rescale_factor": 1.0}))
    with pytest.raises(ValueError, match="rescale_factor"):
        vit_keras.from_pretrained(str(directory), include_top=False, pooling="token")
