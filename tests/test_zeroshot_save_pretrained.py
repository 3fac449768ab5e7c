"""`vit_keras.save_pretrained` of a zero-shot model: the reference cases (tests/fixtures/zeroshot: CLIP, SigLIP,
SigLIP 2 fixed and NaFlex) written back to transformers reload with `AutoModel.from_pretrained` with no missing,
unexpected or mismatched keys, hold the reference checkpoint's tensors bit for bit, and give its logits; a
fine-tuned model's change reaches transformers; open_clip's layout is written back tensor for tensor (open_clip
itself is not installed here, so the written state dict is compared with the one read); the refusals leave
nothing behind.

Tolerances: the reloaded transformers model against the fixture's logits, 1e-5 absolute: the weights are the
reference's exactly (checked first), so only the forward pass's float32 order can differ, and on this CPU it gives
the same bits (measured: 0). The fine-tuned Keras model against its reload in transformers: the reference cases'
relative bound (tests/zeroshot_cases.py, 5e-5 of the largest logit; the Keras-vs-torch spread it was set from).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

import vit_keras
from tests import zeroshot_cases as cases
from vit_keras import zeroshot
from vit_keras.weights import schema
from vit_keras.zeroshot.text import text_slots

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.numpy import load_file  # noqa: E402

RELOAD_TOLERANCE = 1e-5
# (case, flexible): SigLIP 2 is written from its fixed-size model and from its NaFlex one.
SAVED = (("clip", False), ("siglip", False), ("siglip2", False), ("siglip2", True))


def _checkpoint(case: str) -> str:
    return os.path.join(cases.case_dir(case), "checkpoint")


@pytest.fixture(scope="module")
def models():
    """Each case read by vit_keras once: {(case, flexible): ZeroShotModel}."""
    return {(case, flexible): zeroshot.from_pretrained(_checkpoint(case), flexible=flexible)
            for case, flexible in SAVED}


@pytest.fixture(scope="module")
def saved(models, tmp_path_factory):
    """Each case written back to transformers once: {(case, flexible): directory}."""
    root = tmp_path_factory.mktemp("saved")
    return {key: vit_keras.save_pretrained(model, str(root / f"{key[0]}-{key[1]}")) for key, model in models.items()}


def _reference_logits(model, case: str) -> np.ndarray:
    """logits_per_image of a transformers model on the fixture's inputs, called as the fixture's meta.json says."""
    ids, mask = cases.token_inputs(case)
    images = cases.normalised_images(case)
    kwargs = {"input_ids": torch.tensor(ids)}
    if mask is not None:
        kwargs["attention_mask"] = torch.tensor(mask)
    naflex = cases.meta(case)["call"].get("naflex")
    if naflex:
        patch, (rows, cols) = naflex["patch_size"], naflex["grid"]
        n = len(images)
        patches = images.reshape(n, rows, patch, cols, patch, 3).transpose(0, 1, 3, 2, 4, 5)
        kwargs.update(pixel_values=torch.tensor(patches.reshape(n, rows * cols, -1)),
                      pixel_attention_mask=torch.ones((n, rows * cols), dtype=torch.long),
                      spatial_shapes=torch.tensor([[rows, cols]] * n))
    else:
        kwargs["pixel_values"] = torch.tensor(images.transpose(0, 3, 1, 2).copy())
    with torch.no_grad():
        return model(**kwargs).logits_per_image.numpy()


@pytest.mark.slow
@pytest.mark.parametrize("case, flexible", SAVED)
def test_saved_model_reloads_strictly_in_transformers_with_the_reference_tensors_and_logits(saved, case, flexible):
    model, info = transformers.AutoModel.from_pretrained(saved[case, flexible], output_loading_info=True)
    assert {key: value for key, value in info.items() if value} == {}  # no missing, unexpected, mismatched keys
    assert type(model).__name__ == json.load(open(os.path.join(_checkpoint(case), "config.json")))["architectures"][0]
    written, reference = load_file(os.path.join(saved[case, flexible], "model.safetensors")), load_file(
        os.path.join(_checkpoint(case), "model.safetensors"))
    assert sorted(written) == sorted(reference)
    assert [key for key in written if not np.array_equal(written[key], reference[key])] == []
    logits = _reference_logits(model.eval(), case)
    assert np.abs(logits - cases.expected(case)["logits_per_image"]).max() <= RELOAD_TOLERANCE


@pytest.mark.slow
def test_a_fine_tuned_model_computes_the_same_logits_in_transformers(tmp_path):
    """A change to the Keras weights (here to the text projection and the logit scale, as fine-tuning makes) is
    what transformers computes with after the reload; the image processor's normalisation is written too."""
    model = zeroshot.from_pretrained(_checkpoint("clip"))
    kernel = model.text_model.get_layer("text_projection").kernel
    kernel.assign(kernel.numpy() + 0.05 * np.random.default_rng(0).normal(size=kernel.shape).astype("float32"))
    model.logits_layer.logit_scale.assign(3.0)
    directory = vit_keras.save_pretrained(model, str(tmp_path / "tuned"))
    reloaded = transformers.CLIPModel.from_pretrained(directory).eval()
    images = np.load(os.path.join(cases.case_dir("clip"), "input.npy")).astype(np.float32)
    ids, mask = cases.token_inputs("clip")
    found = model.logits(model.encode_image(images), model.encode_text(ids, mask))
    preprocessor = json.load(open(os.path.join(directory, "preprocessor_config.json")))
    pixels = (images / 255.0 - np.array(preprocessor["image_mean"])) / np.array(preprocessor["image_std"])
    with torch.no_grad():
        expected = reloaded(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                            pixel_values=torch.tensor(pixels.transpose(0, 3, 1, 2), dtype=torch.float32)
                            ).logits_per_image.numpy()
    assert np.abs(found - expected).max() <= cases.RELATIVE_TOLERANCE * max(1.0, np.abs(expected).max())
    assert np.abs(expected - cases.expected("clip")["logits_per_image"]).max() > 0.1  # the change is in there


@pytest.mark.slow
def test_open_clip_model_is_written_back_tensor_for_tensor(models, tmp_path):
    from tests.test_zeroshot_open_clip import _write

    _write(str(tmp_path / "oc"), quick_gelu=True)
    model = zeroshot.from_pretrained(str(tmp_path / "oc"))
    directory = vit_keras.save_pretrained(model, str(tmp_path / "back"), format="open_clip")
    assert sorted(os.listdir(directory)) == ["open_clip_config.json", "open_clip_model.safetensors",
                                             "tokenizer.json", "tokenizer_config.json"]
    written = load_file(os.path.join(directory, "open_clip_model.safetensors"))
    original = load_file(str(tmp_path / "oc" / "open_clip_model.safetensors"))
    assert sorted(written) == sorted(original)
    # open_clip's logit scale is a 0-d parameter (torch.ones([])); the helper above stored it 1-d.
    assert written["logit_scale"].shape == ()
    assert [key for key in written if key != "logit_scale" and written[key].shape != original[key].shape] == []
    assert [key for key in written if not np.array_equal(written[key].reshape(original[key].shape), original[key])
            ] == []
    config = json.load(open(os.path.join(directory, "open_clip_config.json")))
    source = json.load(open(tmp_path / "oc" / "open_clip_config.json"))
    assert config["model_cfg"]["quick_gelu"] is True and config["model_cfg"]["embed_dim"] == source["model_cfg"][
        "embed_dim"]
    assert np.allclose(config["preprocess_cfg"]["mean"], source["preprocess_cfg"]["mean"])
    with pytest.raises(ValueError, match="format='open_clip' writes the models read from open_clip's files"):
        vit_keras.save_pretrained(models["clip", False], str(tmp_path / "x"), format="open_clip")
    assert not os.path.exists(tmp_path / "x")


def test_what_transformers_cannot_hold_is_refused_and_nothing_is_left(models, tmp_path):
    model = models["siglip", False]
    with pytest.raises(ValueError, match=r"format in \('transformers', 'open_clip'\), got 'timm'"):
        vit_keras.save_pretrained(model, str(tmp_path / "timm"), format="timm")
    text_config = model.text_config
    model.text_config = dataclasses.replace(text_config, causal=True)
    try:
        with pytest.raises(ValueError, match=r"SiglipModel text tower has no causal=True.*\.keras files"):
            vit_keras.save_pretrained(model, str(tmp_path / "causal"))
    finally:
        model.text_config = text_config
    assert os.listdir(tmp_path) == []  # no directory, no temporary one
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="already exists; pass overwrite=True"):
        vit_keras.save_pretrained(model, str(tmp_path / "taken"))
    assert os.listdir(tmp_path / "taken") == ["keep.txt"]


def test_text_and_head_names_are_the_schema_and_every_one_is_declared(models):
    """The text towers' and heads' variables have canonical names (the tables are checked against the same
    list), and every TEXT_NAMES/HEAD_NAMES template is a name some family's model declares."""
    from vit_keras.zeroshot.vision import head_slots

    declared = set()
    for model in models.values():
        names = set(text_slots(model.text_model)) | set(head_slots(model.image_model, model.logits_layer))
        assert [name for name in names if not schema.is_canonical(name)] == []
        declared |= names
    for template in (*schema.TEXT_NAMES, *schema.HEAD_NAMES):
        regex = schema.template_regex(template)
        assert any(regex.match(name) for name in declared), template
