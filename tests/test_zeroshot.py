"""Zero-shot CLIP, SigLIP and SigLIP 2 (`vit_keras.zeroshot`): the reference cases of tests/fixtures/zeroshot/
(tolerance and its source: tests/zeroshot_cases.py), the tokenizers' ids against the fixtures' and transformers',
held-out random models made here with transformers, classification, the refusals, the `.keras` round trip and a hub
id served by the local hub."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

from tests import zeroshot_cases as cases
from vit_keras import zeroshot
from vit_keras.zeroshot.logits import l2_normalize


@pytest.fixture(scope="module")
def models():
    return {case: zeroshot.from_pretrained(os.path.join(cases.case_dir(case), "checkpoint"),
                                           include_preprocessing=False) for case in cases.CASES}


@pytest.mark.parametrize("case", cases.CASES)
def test_reference_case_within_tolerance(models, case):
    model = models[case]
    ids, mask = cases.token_inputs(case)
    found = cases.outputs(model, cases.normalised_images(case), ids, mask)
    expected = cases.expected(case)
    differences = cases.relative_differences(found, expected)
    assert max(differences.values()) <= cases.RELATIVE_TOLERANCE, differences
    assert (found["logits_per_image"].argmax(-1) == expected["logits_per_image"].argmax(-1)).all()


@pytest.mark.parametrize("case", cases.CASES)
def test_tokenizer_gives_the_fixture_ids(models, case):
    ids, mask = models[case].tokenize(cases.texts(case))
    np.testing.assert_array_equal(ids, np.load(os.path.join(cases.case_dir(case), "token_ids.npy")))
    if cases.meta(case)["call"]["attention_mask_passed_to_model"]:
        np.testing.assert_array_equal(mask, np.load(os.path.join(cases.case_dir(case), "attention_mask.npy")))
    else:
        assert mask is None  # SigLIP's reference passes no mask: none is offered


def test_include_preprocessing_takes_0_255_images(models, case="clip"):
    raw = zeroshot.from_pretrained(os.path.join(cases.case_dir(case), "checkpoint"))
    images = np.load(os.path.join(cases.case_dir(case), "input.npy")).astype(np.float32)
    np.testing.assert_allclose(raw.encode_image(images), cases.expected(case)["image_features"], atol=1e-5)


@pytest.mark.parametrize("case", cases.CASES)
def test_classify_scores_are_the_families_probabilities_of_the_logits(models, case):
    model = models[case]
    images = cases.normalised_images(case)
    names = ["cat", "dog", "car"]
    scores = model.classify(images, names)
    text = zeroshot.l2_normalize(model.encode_text(*model.tokenize(names)))
    logits = model.logits(model.encode_image(images), np.asarray(text))
    if case == "clip":
        want = np.exp(logits - logits.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
        np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-6)
    else:
        want = 1 / (1 + np.exp(-logits))
    np.testing.assert_allclose(scores, want, atol=1e-6)


def test_prompt_ensemble_averages_normalised_template_embeddings(models):
    model = models["clip"]
    templates = ["a photo of a {}.", "a drawing of a {}!", "{}"]
    names = ["cat", "dog"]
    found = model.class_text_features(names, templates)
    want = []
    for name in names:
        prompts = [template.format(name) for template in templates]
        embeds = np.asarray(l2_normalize(model.encode_text(*model.tokenize(prompts))))
        mean = embeds.mean(0)
        want.append(mean / np.linalg.norm(mean))
    np.testing.assert_allclose(found, np.stack(want), atol=1e-6)
    scores = model.classify(cases.normalised_images("clip"), names, templates=templates)
    logits = model.logits(model.encode_image(cases.normalised_images("clip")), found)
    np.testing.assert_allclose(scores, keras.ops.convert_to_numpy(keras.ops.softmax(logits)), atol=1e-6)


def test_long_text_is_truncated_as_transformers_once_with_a_warning(models):
    from transformers import AutoTokenizer

    long_texts = ["a photo of a cat " * 10, "a dog", "Don't stop 123! " * 6]
    for case in cases.CASES:
        reference = AutoTokenizer.from_pretrained(os.path.join(cases.case_dir(case), "checkpoint"))
        want = reference(long_texts, padding="max_length", max_length=16, truncation=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ids, mask = models[case].tokenize(long_texts)
        truncation = [w for w in caught if "truncated" in str(w.message)]
        assert len(truncation) == 1 and "2 text(s)" in str(truncation[0].message), [str(w.message) for w in caught]
        np.testing.assert_array_equal(ids, np.array(want["input_ids"]))
        if mask is not None:
            np.testing.assert_array_equal(mask, np.array(want["attention_mask"]))


def _copy_checkpoint(case, tmp_path, skip=()):
    target = tmp_path / case
    shutil.copytree(os.path.join(cases.case_dir(case), "checkpoint"), target,
                    ignore=lambda directory, names: [name for name in names if name in skip])
    return target


def test_refusals_name_the_problem_and_the_fix(models, tmp_path):
    no_tokenizer = _copy_checkpoint("clip", tmp_path, skip=("tokenizer.json",))
    with pytest.raises(ValueError, match=r"has no tokenizer\.json.*tokenizer\.save_pretrained"):
        zeroshot.from_pretrained(no_tokenizer)
    foreign = _copy_checkpoint("siglip", tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(cases.case_dir("clip"), "checkpoint", name), foreign / name)
    with pytest.raises(ValueError, match=r"ids up to 633.*113 rows.*not this model's"):
        zeroshot.from_pretrained(foreign)
    slow = _copy_checkpoint("siglip", tmp_path / "slow")
    config = json.loads((slow / "tokenizer_config.json").read_text())
    (slow / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "SiglipTokenizer"}))
    with pytest.raises(ValueError, match="SiglipTokenizer.*sentencepiece.*tokenizer.json only"):
        zeroshot.from_pretrained(slow)
    with pytest.raises(ValueError, match="no class names"):
        models["clip"].classify(cases.normalised_images("clip"), [])
    with pytest.raises(ValueError, match="templates must be strings with a"):
        models["clip"].classify(cases.normalised_images("clip"), ["cat"], templates=["a photo"])
    with pytest.raises(ValueError, match="got no texts"):
        models["clip"].tokenize([])
    with pytest.raises(ValueError, match="more than the context length 16"):
        models["clip"].encode_text(np.zeros((1, 17), "int32"))
    vision_only = tmp_path / "vision_only"
    vision_only.mkdir()
    (vision_only / "config.json").write_text(json.dumps({"model_type": "clip_vision_model"}))
    with pytest.raises(ValueError, match="vision tower alone.*vit_keras.from_pretrained"):
        zeroshot.from_pretrained(vision_only)
    with pytest.raises(ValueError, match="is not a directory"):
        zeroshot.from_pretrained(str(tmp_path / "missing"))
    extra = _copy_checkpoint("clip", tmp_path / "extra")
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(extra / "model.safetensors"))
    save_file({**tensors, "text_model.pooler.weight": np.zeros((2, 2), "float32")}, str(extra / "model.safetensors"))
    with pytest.raises(ValueError, match=r"text_model\.pooler\.weight.*nothing was loaded"):
        zeroshot.from_pretrained(extra)
    del tensors["text_projection.weight"]
    save_file(tensors, str(extra / "model.safetensors"))
    with pytest.raises(ValueError, match=r"lacks 'text_projection\.weight'"):
        zeroshot.from_pretrained(extra)


def test_broken_files_and_wrong_images_are_refused_with_the_fix(models, tmp_path):
    no_text = _copy_checkpoint("clip", tmp_path / "no_text")
    config = json.loads((no_text / "config.json").read_text())
    del config["text_config"]
    (no_text / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="needs `text_config`.*save_pretrained"):
        zeroshot.from_pretrained(no_text)
    from safetensors.numpy import load_file, save_file

    diverged = _copy_checkpoint("clip", tmp_path / "diverged")
    tensors = load_file(str(diverged / "model.safetensors"))
    name = "text_model.encoder.layers.0.mlp.fc1.weight"
    tensors[name][0, 0] = np.nan
    save_file(tensors, str(diverged / "model.safetensors"))
    with pytest.raises(ValueError, match=rf"{re.escape(name)}' has 1 NaN.*Nothing was loaded"):
        zeroshot.from_pretrained(diverged)
    images = cases.normalised_images("clip")
    for wrong, words in ((images[..., :1], "grayscale images repeat the channel"), (images[0], "batch axis"),
                         (np.concatenate([images, images[..., :1]], -1), "drop the alpha channel")):
        with pytest.raises(ValueError, match=f"shape \\(batch, height, width, 3\\).*{words}"):
            models["clip"].classify(wrong, ["cat"])
    with pytest.raises(ValueError, match=r"takes 32x32 images, got 48x48.*image_size=\(48, 48\)"):
        models["clip"].encode_image(np.zeros((1, 48, 48, 3), "float32"))


def test_the_command_without_labels_says_so(tmp_path):
    run = subprocess.run([sys.executable, "-m", "vit_keras.cli", "zeroshot", str(tmp_path / "x.png"), "--model",
                          os.path.join(cases.case_dir("clip"), "checkpoint")], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 2 and "required: --labels" in run.stderr, run.stderr[-500:]


@pytest.mark.slow
def test_keras_round_trip_in_safe_mode(models, tmp_path):
    for case in cases.CASES:
        model = models[case]
        ids, mask = cases.token_inputs(case)
        images = cases.normalised_images(case)
        for tower, inputs in (("image_model", images),
                              ("text_model", {"token_ids": ids.astype("int32"),
                                              "attention_mask": (np.ones_like(ids) if mask is None
                                                                 else mask).astype("int32")})):
            path = str(tmp_path / f"{case}_{tower}.keras")
            getattr(model, tower).save(path)
            loaded = keras.saving.load_model(path, safe_mode=True)
            np.testing.assert_array_equal(np.asarray(loaded(inputs)), np.asarray(getattr(model, tower)(inputs)))


def test_hub_id_through_the_local_hub(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from tests.local_hub import LocalHub

    directory = os.path.join(cases.case_dir("siglip2"), "checkpoint")
    files = {name: open(os.path.join(directory, name), "rb").read() for name in os.listdir(directory)}
    server = LocalHub()
    server.add("google/siglip2_tiny_test", files)
    server.add("google/siglip2_no_tokenizer", {k: v for k, v in files.items() if not k.startswith("tokenizer")})
    server.start()
    try:
        monkeypatch.setattr(constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf_cache"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        model = zeroshot.from_pretrained("hf-hub:google/siglip2_tiny_test", include_preprocessing=False)
        ids, mask = model.tokenize(cases.texts("siglip2"))
        np.testing.assert_array_equal(ids, np.load(os.path.join(cases.case_dir("siglip2"), "token_ids.npy")))
        np.testing.assert_allclose(model.encode_text(ids, mask), cases.expected("siglip2")["text_features"],
                                   atol=5e-5)
        with pytest.raises(ValueError, match="has no tokenizer.json"):
            zeroshot.from_pretrained("hf://google/siglip2_no_tokenizer")
        # Offline: the cached checkpoint loads with its tokenizer; an uncached one is refused saying so.
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        cached = zeroshot.from_pretrained("hf-hub:google/siglip2_tiny_test", include_preprocessing=False)
        np.testing.assert_array_equal(cached.tokenize(cases.texts("siglip2"))[0], ids)
        with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
            zeroshot.from_pretrained("hf-hub:google/siglip2_never_fetched")
    finally:
        server.stop()


def test_siglip2_naflex_dict_matches_the_reference(models):
    # The fixture's own NaFlex call (meta["call"]["naflex"]): (p, p, C) patches in row-major grid order.
    naflex = cases.meta("siglip2")["call"]["naflex"]
    patch, (rows, cols) = naflex["patch_size"], naflex["grid"]
    flexible = zeroshot.from_pretrained(os.path.join(cases.case_dir("siglip2"), "checkpoint"),
                                        include_preprocessing=False, flexible=True)
    images = cases.normalised_images("siglip2")
    n, h, w, c = images.shape
    patches = images.reshape(n, rows, patch, cols, patch, c).transpose(0, 1, 3, 2, 4, 5)
    inputs = {"patches": patches.reshape(n, rows * cols, patch * patch * c),
              "grid": np.array([[rows, cols]] * n, "int32"), "mask": np.ones((n, rows * cols), "int32")}
    found = flexible.encode_image(inputs)
    expected = cases.expected("siglip2")["image_features"]
    assert np.abs(found - expected).max() <= cases.RELATIVE_TOLERANCE * max(1.0, np.abs(expected).max())
    # Padding patches (mask 0) after the valid ones change nothing.
    padded = {"patches": np.concatenate([inputs["patches"], np.ones((n, 4, patch * patch * c), "float32")], 1),
              "grid": inputs["grid"], "mask": np.concatenate([inputs["mask"], np.zeros((n, 4), "int32")], 1)}
    np.testing.assert_allclose(flexible.encode_image(padded), found, atol=1e-5)


MIXED_TEXTS = ["A Photo of a CAT", "Don't stop 123!  two   spaces", "ÉCOLE café", "x" * 40]


def _restyled(case, tmp_path, tokenizer_edit, config_edit):
    """The fixture's checkpoint with its tokenizer files rewritten as another writer might have saved them."""
    directory = _copy_checkpoint(case, tmp_path)
    with open(directory / "tokenizer.json", encoding="utf-8") as f:
        tokenizer = json.load(f)
    with open(directory / "tokenizer_config.json", encoding="utf-8") as f:
        config = json.load(f)
    tokenizer_edit(tokenizer)
    config_edit(config)
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def _gemma_file(tokenizer):
    # As a Gemma tokenizer is saved: no lowercasing, <bos> prepended and no <eos>.
    tokenizer["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    tokenizer["post_processor"] = {"type": "TemplateProcessing",
                                   "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                              {"Sequence": {"id": "A", "type_id": 0}}],
                                   "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                            {"Sequence": {"id": "B", "type_id": 1}}],
                                   "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}}


@pytest.mark.parametrize("variant", ["siglip2_gemma_class", "siglip2_no_padding_side", "clip_no_lowercase"])
def test_tokenizer_files_of_other_writers_give_transformers_ids(variant, tmp_path):
    from transformers import AutoTokenizer

    case = variant.split("_")[0]
    if variant == "siglip2_gemma_class":
        # Named GemmaTokenizer, as google/siglip2-* name it: transformers runs Siglip2Tokenizer's pipeline (lowercase)
        # with the file's post-processor; the add_*_token flags do not rebuild it (transformers 5.23).
        directory = _restyled(case, tmp_path, _gemma_file, lambda c: c.update(
            tokenizer_class="GemmaTokenizer", add_bos_token=False, add_eos_token=True))
    elif variant == "siglip2_no_padding_side":  # neither the config nor the file says: Siglip2Tokenizer's left
        directory = _restyled(case, tmp_path, lambda t: t.update(padding=None), lambda c: c.pop("padding_side"))
    else:  # a CLIP file without lowercasing: CLIPTokenizer lowercases all the same
        directory = _restyled(case, tmp_path, lambda t: t["normalizer"]["normalizers"].pop(), lambda c: None)
    reference = AutoTokenizer.from_pretrained(str(directory))
    want = reference(MIXED_TEXTS, padding="max_length", max_length=16, truncation=True)
    model = zeroshot.from_pretrained(directory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids, mask = model.tokenize(MIXED_TEXTS)
    np.testing.assert_array_equal(ids, np.array(want["input_ids"]))
    np.testing.assert_array_equal(mask, np.array(want["attention_mask"]))


def test_clip_configs_with_the_legacy_eos_id_pool_at_the_largest_id(tmp_path):
    # transformers' rule: text_config.eos_token_id == 2 (the first released CLIP configs) pools at argmax(ids);
    # the fixture's <|endoftext|> is its largest id, so the reference outputs stay the same.
    directory = _copy_checkpoint("clip", tmp_path)
    config = json.loads((directory / "config.json").read_text())
    config["text_config"]["eos_token_id"] = 2
    (directory / "config.json").write_text(json.dumps(config))
    model = zeroshot.from_pretrained(directory, include_preprocessing=False)
    assert model.text_model.get_layer("text_pooling").pooling == "argmax"
    ids, mask = cases.token_inputs("clip")
    np.testing.assert_allclose(model.encode_text(ids, mask), cases.expected("clip")["text_features"], atol=5e-5)
    pooled = np.arange(12, dtype="float32").reshape(1, 4, 3)
    pooling = zeroshot.TextPooling("argmax")
    assert np.asarray(pooling(pooled, np.array([[5, 9, 7, 7]]))).tolist() == [[3.0, 4.0, 5.0]]
    assert np.asarray(zeroshot.TextPooling("last")(pooled, np.array([[5, 9, 7, 7]]))).tolist() == [[9.0, 10.0, 11.0]]


def test_texts_are_encoded_in_batches_with_the_same_result(models, monkeypatch):
    from vit_keras.zeroshot import image_text_model as model_module

    model = models["siglip2"]
    ids, mask = model.tokenize([f"a photo of a {name}" for name in ("cat", "dog", "car", "tree", "boat")])
    whole = model.encode_text(ids, mask)
    monkeypatch.setattr(model_module, "TEXT_BATCH", 2)
    # Other batch sizes may take other matmul kernels: bit-equal with oneDNN's AVX-512 kernels, but 7.2e-7
    # (ONEDNN_MAX_CPU_ISA=AVX2) and 1.1e-6 (TF_ENABLE_ONEDNN_OPTS=0) apart on features of magnitude 3.4, measured on
    # an Intel Xeon: float32 rounding. 1e-5 relative leaves 30x margin; a text taken from the wrong batch or a
    # misaligned mask moves the features by O(1).
    parts, whole = np.asarray(model.encode_text(ids, mask)), np.asarray(whole)
    assert np.abs(parts - whole).max() <= 1e-5 * max(1.0, np.abs(whole).max())
    # Braces other than the class slot are kept as they are.
    features = model.class_text_features(["cat"], ["a {} in {style}"])
    np.testing.assert_allclose(features, np.asarray(l2_normalize(model.encode_text(
        *model.tokenize(["a cat in {style}"])))), atol=1e-6)


def test_siglip_text_tower_ignores_a_padding_mask_as_its_reference(models, case="siglip"):
    # SiglipModel is called without the mask (meta: attention_mask_passed_to_model false), so pad tokens are
    # attended; a tower that honoured a padding mask would move the last-position pooled text (README: mask table).
    ids, _ = cases.token_inputs(case)
    padding = np.load(os.path.join(cases.case_dir(case), "attention_mask.npy"))
    assert (padding == 0).any()  # the fixture has padding, so the mask would matter if honoured
    found = cases.outputs(models[case], cases.normalised_images(case), ids, padding)
    differences = cases.relative_differences(found, cases.expected(case))
    assert max(differences.values()) <= cases.RELATIVE_TOLERANCE, differences


@pytest.mark.parametrize("labels, words", [([], "no class names"), (["cat", " "], "position [1] are empty")])
def test_classify_refuses_an_empty_class_list_or_label(models, labels, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        models["clip"].classify(cases.normalised_images("clip"), labels)


def test_the_image_tower_is_built_from_the_checkpoint_as_read_without_writing_it(models, tmp_path, monkeypatch):
    """The vision tower's config and tensors go to `vit_keras.from_pretrained` from memory: no temporary copy of
    them is written (a SigLIP so400m tower is 1.7 GB), the model is the one the reference case holds (above), and a
    vision config vit_keras cannot run is refused naming the checkpoint's config.json."""
    import tempfile

    from vit_keras.zeroshot.hf_reader import read_checkpoint
    from vit_keras.zeroshot.vision import image_model, vision_tower

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    directory = os.path.join(cases.case_dir("siglip"), "checkpoint")
    checkpoint = read_checkpoint(directory)
    image = cases.normalised_images("siglip")
    built = image_model(checkpoint, include_preprocessing=False)
    assert list(scratch.iterdir()) == []
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(built(image)),
                                  keras.ops.convert_to_numpy(models["siglip"].image_model(image)))
    info = vision_tower(checkpoint)
    assert info.normalization == ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))  # the family's, without a preprocessor file
    checkpoint.vision_config["hidden_act"] = "relu"
    config_file = re.escape(os.path.join(directory, "config.json"))
    with pytest.raises(ValueError, match=config_file + ".*'hidden_act' is 'relu'"):
        vision_tower(checkpoint)


def test_token_ids_outside_the_vocabulary_or_with_fractions_are_refused(models):
    model = models["clip"]
    ids, mask = model.tokenize(["a photo of a cat"])
    for wrong, words in ((np.where(ids == ids[0, 1], -1, ids), r"in \[0, 634\).*got \[-1\]"),
                         (np.where(ids == ids[0, 1], 634, ids), r"in \[0, 634\).*got \[634\]"),
                         (ids + 0.5, r"whole numbers in \[0, 634\).*float64")):
        with pytest.raises(ValueError, match=words):
            model.encode_text(wrong, mask)
    # whole numbers in a float array are the same ids
    np.testing.assert_array_equal(model.encode_text(ids.astype("float32"), mask), model.encode_text(ids, mask))


def test_classify_refuses_a_string_or_repeated_class_names(models):
    images = cases.normalised_images("clip")
    with pytest.raises(ValueError, match=r"the string 'cat'.*\['cat'\] for one class"):
        models["clip"].classify(images, "cat")
    with pytest.raises(ValueError, match=r"\['cat'\] appear more than once"):
        models["clip"].classify(images, ["cat", "dog", "cat"])


def test_a_tokenizer_that_never_gives_the_towers_end_of_text_id_is_refused(tmp_path):
    # SigLIP 2's tokenizer files in a CLIP directory, and a CLIP config whose eos_token_id the tokenizer never gives:
    # CLIP pools at that token, so either would pool at position 0 without a word
    foreign = _copy_checkpoint("clip", tmp_path / "foreign")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(cases.case_dir("siglip2"), "checkpoint", name), foreign / name)
    with pytest.raises(ValueError, match=r"eos_token_id 633.*tokenizer\.json.*never gives that id"):
        zeroshot.from_pretrained(foreign)
    wrong_eos = _copy_checkpoint("clip", tmp_path / "wrong_eos")
    config = json.loads((wrong_eos / "config.json").read_text())
    config["text_config"]["eos_token_id"] = 5
    (wrong_eos / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config\.json.*eos_token_id 5.*tokenizer\.json.*never gives that id"):
        zeroshot.from_pretrained(wrong_eos)


@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_a_corrupt_tokenizer_file_is_named(name, tmp_path):
    broken = _copy_checkpoint("clip", tmp_path)
    (broken / name).write_text('{"truncated": ')
    with pytest.raises(ValueError, match=rf"{re.escape(name)}' is not valid JSON.*save_pretrained"):
        zeroshot.from_pretrained(broken)
