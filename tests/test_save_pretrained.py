"""`vit_keras.save_pretrained`: the readers' tables run backwards. Every family fixture (tests/fixtures/family,
made by timm 1.0.31 / transformers 5.23.0) goes through from_pretrained -> save_pretrained -> timm.create_model +
load_state_dict(strict=True) / transformers AutoModel (no missing or unexpected keys), and gives the fixture's
expected output; a Keras fine-tune gives the same outputs in timm.

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
from tests.test_family import _check  # the family fixtures' tolerance, stated there
from vit_keras.weights import save as save_lib

FAMILY = os.path.join(os.path.dirname(__file__), "fixtures", "family")
HF_DIR = os.path.join(os.path.dirname(__file__), "fixtures", "hf_dir")
TIMM_CASES = sorted(name for name in os.listdir(FAMILY) if name.startswith("timm_"))
HF_CASES = sorted(name for name in os.listdir(FAMILY) if name.startswith("hf_"))


def _meta(case):
    with open(os.path.join(FAMILY, case, "meta.json")) as f:
        return json.load(f)


def _normalised(x, mean, std):
    return ((x / 255.0 - np.asarray(mean)) / np.asarray(std)).astype(np.float32)


def _nchw(x):
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def _timm_model(directory):
    """The timm model of a directory: create_model(architecture, **model_args) + a strict load_state_dict."""
    from safetensors.torch import load_file

    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    model = timm.create_model(config["architecture"], pretrained=False, **config["model_args"])
    model.load_state_dict(load_file(os.path.join(directory, "model.safetensors")), strict=True)
    # timm's own loader of such a directory (the hf-hub: path, from a folder) builds the same model, same weights.
    loaded = timm.create_model(f"local-dir:{directory}", pretrained=True).eval()
    assert list(loaded.pretrained_cfg["mean"]) == config["pretrained_cfg"]["mean"]
    expected = model.state_dict()
    assert sorted(loaded.state_dict()) == sorted(expected)
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, expected[key]), key
    return model.eval(), config


def _timm_logits(model, config, x_uint8_range):
    cfg = config["pretrained_cfg"]
    with torch.no_grad():
        return model(_nchw(_normalised(x_uint8_range, cfg["mean"], cfg["std"]))).numpy()


@pytest.mark.parametrize("case", TIMM_CASES)
def test_timm_fixture_round_trips_through_timm(case, tmp_path):
    meta = _meta(case)
    model = vit_keras.from_pretrained(os.path.join(FAMILY, case, "checkpoint"), **meta["call"])
    out = str(tmp_path / "timm")
    assert vit_keras.save_pretrained(model, out, format="timm") == out
    reference, config = _timm_model(out)
    x = np.load(os.path.join(FAMILY, case, "input.npy")).astype(np.float32)
    _check(_timm_logits(reference, config, x), np.load(os.path.join(FAMILY, case, "expected.npy")))
    assert config["pretrained_cfg"]["mean"] == pytest.approx(meta["preprocess"]["mean"])
    # ... and back: from_pretrained reads the same architecture off what was written.
    again = vit_keras.from_pretrained(out, **meta["call"])
    assert vit_keras.weights.model_config(again) == vit_keras.weights.model_config(model)


def _hf_expected(case):
    meta = _meta(case)
    x = np.load(os.path.join(FAMILY, case, "input.npy")).astype(np.float32)
    return meta, _normalised(x, meta["preprocess"]["mean"], meta["preprocess"]["std"]), np.load(
        os.path.join(FAMILY, case, "expected.npy"))


def _auto_model(directory, cls=transformers.AutoModel):
    model, info = cls.from_pretrained(directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return model.eval()


@pytest.mark.slow
@pytest.mark.parametrize("case", HF_CASES)
def test_transformers_fixture_round_trips_through_timm_and_transformers(case, tmp_path):
    meta, x, expected = _hf_expected(case)
    model = vit_keras.from_pretrained(os.path.join(FAMILY, case, "checkpoint"), **meta["call"])
    # transformers: the pooled output of AutoModel, loaded with no missing or unexpected keys.
    hf_dir = vit_keras.save_pretrained(model, str(tmp_path / "hf"), format="transformers")
    with torch.no_grad():
        _check(_auto_model(hf_dir)(pixel_values=_nchw(x)).pooler_output.numpy(), expected)
    again = vit_keras.from_pretrained(hf_dir, **meta["call"])
    assert vit_keras.weights.model_config(again) == vit_keras.weights.model_config(model)
    # timm: no head here, so timm's forward_head(pre_logits=True) is the pooled, normalised token.
    timm_dir = vit_keras.save_pretrained(model, str(tmp_path / "timm"), format="timm",
                                         normalization=(meta["preprocess"]["mean"], meta["preprocess"]["std"]))
    reference, _ = _timm_model(timm_dir)
    with torch.no_grad():
        pooled = reference.forward_head(reference.forward_features(_nchw(x)), pre_logits=True).numpy()
    _check(pooled, expected)


def test_vit_classifier_round_trips_through_transformers(tmp_path):
    """tests/fixtures/hf_dir: a ViTForImageClassification (LayerNorm eps 1e-12, which timm does not build)."""
    with open(os.path.join(HF_DIR, "meta.json")) as f:
        meta = json.load(f)
    model = vit_keras.from_pretrained(os.path.join(HF_DIR, "hf_model"), classifier_activation=None,
                                      include_preprocessing=False)
    x = np.load(os.path.join(HF_DIR, "input.npy"))
    out = vit_keras.save_pretrained(model, str(tmp_path / "hf"), format="transformers", label_names="abcdefg")
    reference = _auto_model(out, transformers.ViTForImageClassification)
    assert reference.config.id2label[6] == "g"
    with torch.no_grad():
        _check(reference(pixel_values=_nchw(x)).logits.numpy(), np.load(os.path.join(HF_DIR, "expected.npy")))
    assert meta["output"] == "logits"
    with pytest.raises(ValueError, match="LayerNorm.*1e-12.*format='transformers'"):
        vit_keras.save_pretrained(model, str(tmp_path / "timm"), format="timm", normalization=((0.5,) * 3,) * 2)


@pytest.mark.slow
def test_keras_fine_tune_gives_the_same_outputs_in_timm(tiny_kwargs, tmp_path):
    """Two `fit` steps move every weight; timm then computes what Keras computes. Bound: float32 round-off of two
    implementations of the same graph, the fixtures' 5e-5 relative (their README), far above the ~1e-6 seen."""
    keras.utils.set_random_seed(0)
    model = vit_keras.ViT(image_size=32, classes=4, classifier_activation=None, layer_scale=True,
                          num_register_tokens=2, no_embed_class=True, activation="gelu_tanh", **tiny_kwargs)
    before = save_lib.model_params(model)
    rng = np.random.default_rng(1)
    images = rng.uniform(0, 255, (8, 32, 32, 3)).astype(np.float32)
    labels = rng.integers(0, 4, 8)
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(images, labels, batch_size=4, epochs=1, steps_per_epoch=2, verbose=0)
    after = save_lib.model_params(model)
    assert all(not np.array_equal(before[k], after[k]) for k in before), "a weight did not train"
    out = vit_keras.save_pretrained(model, str(tmp_path / "ft"))
    reference, config = _timm_model(out)
    assert config["model_args"]["act_layer"] == "gelu_tanh"
    x = rng.uniform(0, 255, (3, 32, 32, 3)).astype(np.float32)
    _check(_timm_logits(reference, config, x), np.asarray(model(x, training=False)))


def test_refusals_name_the_fix(tiny_kwargs, tmp_path):
    distilled = vit_keras.from_pretrained(os.path.join(FAMILY, "timm_deit_distilled", "checkpoint"))
    with pytest.raises(ValueError, match="distil.*format='timm'"):
        vit_keras.save_pretrained(distilled, str(tmp_path / "hf"), format="transformers")
    registers = vit_keras.from_pretrained(os.path.join(FAMILY, "timm_dinov2_reg4", "checkpoint"),
                                          include_top=False, pooling="token")
    with pytest.raises(ValueError, match="num_register_tokens=4.*format='timm'"):
        vit_keras.save_pretrained(registers, str(tmp_path / "hf"), format="transformers")
    assert not os.path.exists(tmp_path / "hf")
    with pytest.raises(ValueError, match="format must be one of"):
        vit_keras.save_pretrained(distilled, str(tmp_path / "x"), format="onnx")
    target = tmp_path / "taken"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="already exists; pass overwrite=True"):
        vit_keras.save_pretrained(distilled, str(target))
    assert os.listdir(target) == ["keep.txt"]
    vit_keras.save_pretrained(distilled, str(target), overwrite=True)
    assert sorted(os.listdir(target)) == ["config.json", "model.safetensors"]
    with pytest.raises(ValueError, match="label_names has 2 names for the model's 7 classes"):
        vit_keras.save_pretrained(distilled, str(tmp_path / "l"), label_names=["a", "b"])
    plain = vit_keras.ViT(image_size=32, classes=3, include_preprocessing=False, **tiny_kwargs)
    with pytest.raises(ValueError, match="pass normalization="):
        vit_keras.save_pretrained(plain, str(tmp_path / "n"))
    empty = tmp_path / "empty"
    empty.mkdir()
    vit_keras.save_pretrained(plain, str(empty), normalization=((0.5,) * 3, (0.5,) * 3))
    assert sorted(os.listdir(empty)) == ["config.json", "model.safetensors"]


def test_push_to_hub_uploads_the_folder_with_a_model_card(tiny_kwargs, tmp_path, monkeypatch):
    """The upload itself is huggingface_hub's (mocked here: tests never touch the internet); what is checked is
    the folder handed to upload_folder: the saved model, which timm loads, and the card."""
    import huggingface_hub

    calls = {}

    class FakeApi:
        def __init__(self, token=None):
            calls["token"] = token

        def create_repo(self, repo_id, private, exist_ok, repo_type):
            calls["create"] = (repo_id, private, exist_ok, repo_type)

        def upload_folder(self, repo_id, folder_path, commit_message, repo_type):
            copy = tmp_path / "uploaded"
            import shutil

            shutil.copytree(folder_path, copy)
            calls["upload"] = (repo_id, commit_message, repo_type)
            return "commit-info"

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    model = vit_keras.ViT(image_size=32, classes=3, classifier_activation=None, **tiny_kwargs)
    result = vit_keras.push_to_hub(model, "me/tiny-vit", token="t", private=True, source="B/16:imagenet21k",
                                   recipe="2 epochs, SGD 0.01", metrics={"top1": 0.9},
                                   model_card_metadata={"license": "apache-2.0"})
    assert result == "commit-info"
    assert calls["token"] == "t" and calls["create"] == ("me/tiny-vit", True, True, "model")
    assert calls["upload"][0] == "me/tiny-vit"
    uploaded = tmp_path / "uploaded"
    assert sorted(os.listdir(uploaded)) == ["README.md", "config.json", "model.safetensors"]
    card = (uploaded / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: \"timm\"") and 'license: "apache-2.0"' in card
    for text in ("vit_base_patch16_224", "B/16:imagenet21k", "2 epochs, SGD 0.01", "| top1 | 0.9 |"):
        assert text in card
    reference, config = _timm_model(str(uploaded))
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    _check(_timm_logits(reference, config, x), np.asarray(model(x, training=False)))
    with pytest.raises(ValueError, match="format must be one of"):
        vit_keras.push_to_hub(model, "me/tiny-vit", format="keras")


def test_timm_siglip_backbone_goes_to_transformers(tmp_path):
    """The timm SigLIP fixture without its classifier is a transformers SiglipVisionModel: its pooler_output (the
    MAP head) equals timm's pooled features of the same weights."""
    case = "timm_siglip_map"
    model = vit_keras.from_pretrained(os.path.join(FAMILY, case, "checkpoint"), include_top=False, pooling="map",
                                      include_preprocessing=False)
    x = _normalised(np.load(os.path.join(FAMILY, case, "input.npy")).astype(np.float32), (0.5,) * 3, (0.5,) * 3)
    source = timm.create_model("vit_base_patch16_siglip_224", pretrained=False, patch_size=8, embed_dim=48, depth=3,
                               num_heads=3, img_size=32, num_classes=7).eval()
    from safetensors.torch import load_file

    source.load_state_dict(load_file(os.path.join(FAMILY, case, "checkpoint", "model.safetensors")), strict=True)
    with torch.no_grad():
        expected = source.forward_head(source.forward_features(_nchw(x)), pre_logits=True).numpy()
    _check(np.asarray(model(x)), expected)
    out = vit_keras.save_pretrained(model, str(tmp_path / "hf"), format="transformers")
    with torch.no_grad():
        _check(_auto_model(out)(pixel_values=_nchw(x)).pooler_output.numpy(), expected)


def test_transformers_refuses_heads_it_computes_otherwise(tmp_path):
    dinov2 = vit_keras.from_pretrained(os.path.join(FAMILY, "timm_dinov2_reg4", "checkpoint"))
    with pytest.raises(ValueError, match="format='timm'"):
        vit_keras.save_pretrained(dinov2, str(tmp_path / "a"), format="transformers")
    siglip = vit_keras.from_pretrained(os.path.join(FAMILY, "timm_siglip_map", "checkpoint"))
    with pytest.raises(ValueError, match="siglip_vision_model classifiers .* format='timm'"):
        vit_keras.save_pretrained(siglip, str(tmp_path / "b"), format="transformers")
    hf_vit = vit_keras.from_pretrained(os.path.join(HF_DIR, "hf_model"), include_top=False, pooling="token")
    with pytest.raises(ValueError, match="neither; use format='timm'"):
        vit_keras.save_pretrained(hf_vit, str(tmp_path / "c"), format="transformers")
    assert not os.listdir(tmp_path)


def test_any_image_size_model_runs_at_another_size_in_timm(tmp_path):
    """A model built with any_image_size=True resamples its position embeddings as timm does (antialiased
    bicubic), so it is written with dynamic_img_size=True and both agree at a size other than the stored one."""
    case = "timm_avg_fcnorm"
    model = vit_keras.from_pretrained(os.path.join(FAMILY, case, "checkpoint"), any_image_size=True,
                                      classifier_activation=None)
    out = vit_keras.save_pretrained(model, str(tmp_path / "timm"))
    reference, config = _timm_model(out)
    assert config["model_args"]["dynamic_img_size"] is True and config["model_args"]["img_size"] == [32, 32]
    x = np.random.default_rng(2).uniform(0, 255, (2, 48, 48, 3)).astype(np.float32)
    _check(_timm_logits(reference, config, x), np.asarray(model(x, training=False)))


def test_invert_table_is_apply_table_backwards_and_refuses_what_has_no_place():
    from vit_keras.weights import hf, rules
    from vit_keras.weights import timm as timm_reader

    rng = np.random.default_rng(0)
    block = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1"
    params = {f"{block}/{p}/kernel": rng.normal(size=(6, 2, 3)).astype(np.float32) for p in ("query", "key", "value")}
    params.update({f"{block}/{p}/bias": rng.normal(size=(2, 3)).astype(np.float32) for p in ("query", "key", "value")})
    tensors = rules.invert_table(timm_reader.TABLE, params, num_heads=2)
    assert sorted(tensors) == ["blocks.0.attn.qkv.bias", "blocks.0.attn.qkv.weight"]
    assert tensors["blocks.0.attn.qkv.weight"].shape == (18, 6)
    clip = rules.invert_table(hf.TABLES["clip_vision_model"], {"cls": np.ones((1, 1, 6), np.float32)}, num_heads=2)
    assert clip["embeddings.class_embedding"].shape == (6,)  # CLIP stores its class token as a vector
    with pytest.raises(ValueError, match="no place for 1 of the model's arrays: head_dist/kernel"):
        rules.invert_table(hf.TABLES["vit"], {"head_dist/kernel": np.zeros((6, 3), np.float32)}, num_heads=2)
    with pytest.raises(ValueError, match="needs all of them"):
        rules.invert_table(timm_reader.TABLE, {"head/bias": np.zeros(3, np.float32)}, num_heads=2)


def test_vit_model_pooler_is_pre_logits_both_ways(tmp_path):
    """A transformers ViTModel's pooler, tanh(dense(class token)), is vit_jax's pre_logits: read into Keras and
    written back, AutoModel loads every key and gives the same pooler_output."""
    from tests.torch_compat import randomise_parameters

    config = transformers.ViTConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=3, image_size=32,
                                    patch_size=8, intermediate_size=96)
    reference = randomise_parameters(transformers.ViTModel(config), seed=3)
    reference.save_pretrained(str(tmp_path / "source"), safe_serialization=True)
    model = vit_keras.from_pretrained(str(tmp_path / "source"), include_top=False, pooling="token",
                                      include_preprocessing=False)
    out = vit_keras.save_pretrained(model, str(tmp_path / "hf"), format="transformers")
    x = np.random.default_rng(6).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    with torch.no_grad():
        expected = reference(pixel_values=_nchw(x)).pooler_output.numpy()
        _check(_auto_model(out)(pixel_values=_nchw(x)).pooler_output.numpy(), expected)
    _check(np.asarray(model(x)), expected)
    with pytest.raises(ValueError, match="pre-logits.*format='transformers'"):
        vit_keras.save_pretrained(model, str(tmp_path / "timm"), normalization=((0.5,) * 3, (0.5,) * 3))


@pytest.mark.parametrize("target", ["timm", "transformers"])
def test_convert_writes_a_directory_its_library_loads(target, tmp_path, capsys):
    from vit_keras.cli import main as cli_main

    case = HF_CASES[0]
    meta, x, expected = _hf_expected(case)
    out = str(tmp_path / target)
    assert cli_main(["convert", os.path.join(FAMILY, case, "checkpoint"), out, "--to", target]) == 0
    if target == "transformers":
        with torch.no_grad():
            _check(_auto_model(out)(pixel_values=_nchw(x)).pooler_output.numpy(), expected)
    else:
        reference, _ = _timm_model(out)
        with torch.no_grad():
            _check(reference.forward_head(reference.forward_features(_nchw(x)), pre_logits=True).numpy(), expected)
    # A second run does not replace the directory unless asked to.
    assert cli_main(["convert", os.path.join(FAMILY, case, "checkpoint"), out, "--to", target]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert cli_main(["convert", os.path.join(FAMILY, case, "checkpoint"), out, "--to", target, "--overwrite"]) == 0


def test_a_save_path_under_a_file_is_refused_naming_the_file(tmp_path):
    from tests.tiny import TINY

    (tmp_path / "notes.txt").write_text("mine")
    model = vit_keras.ViT(image_size=16, classes=3, **TINY)
    with pytest.raises(ValueError, match=r"notes\.txt' is a file, not a folder"):
        vit_keras.save_pretrained(model, tmp_path / "notes.txt" / "model")
    assert (tmp_path / "notes.txt").read_text() == "mine"
