"""Held-out zero-shot cases made here with transformers (random small models of other widths, depths and context
lengths, towers of different widths; SigLIP 2 at a non-square image), saved with `save_pretrained` beside the
fixtures' tokenizers, read through `vit_keras.zeroshot.from_pretrained` unchanged and compared with transformers'
own outputs (same tolerance as the fixtures: tests/zeroshot_cases.py). And the fine-tuning losses against NumPy
references, and a few `fit` steps on a small image-text set."""

from __future__ import annotations

import json
import os
import shutil

import keras
import numpy as np
import pytest

from tests import zeroshot_cases as cases
from vit_keras import zeroshot
from vit_keras.zeroshot import losses

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore:.*longer than the model.s context:UserWarning")
TEXTS = ["a photo of a cat", "a photo of a dog on the grass", "Don't stop 123!", "a red car"]
# Each case: the family whose tokenizer it reuses, the config, the image size (H, W).
HELDOUT = {
    "clip_deeper_text_wider_vision": ("clip", dict(
        text_config=dict(vocab_size=634, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                         intermediate_size=80, max_position_embeddings=20, hidden_act="quick_gelu",
                         bos_token_id=632, eos_token_id=633, pad_token_id=633),
        vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=40,
                           image_size=24, patch_size=8, hidden_act="quick_gelu"),
        projection_dim=16), (24, 24)),
    "siglip_narrow_text": ("siglip", dict(
        text_config=dict(vocab_size=113, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                         intermediate_size=48, max_position_embeddings=12, projection_size=40,
                         eos_token_id=1, pad_token_id=1),
        vision_config=dict(hidden_size=40, num_hidden_layers=3, num_attention_heads=4, intermediate_size=56,
                           image_size=16, patch_size=4)), (16, 16)),
    "siglip2_wide_image": ("siglip2", dict(
        text_config=dict(vocab_size=442, hidden_size=40, num_hidden_layers=2, num_attention_heads=5,
                         intermediate_size=64, max_position_embeddings=24, projection_size=24,
                         eos_token_id=1, pad_token_id=0, bos_token_id=2),
        vision_config=dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48,
                           num_patches=16, patch_size=4)), (16, 24)),
}
CLASSES = {"clip": "CLIPModel", "siglip": "SiglipModel", "siglip2": "Siglip2Model"}
CONFIGS = {"clip": "CLIPConfig", "siglip": "SiglipConfig", "siglip2": "Siglip2Config"}
MEAN_STD = {"clip": (np.array([0.48145466, 0.4578275, 0.40821073]), np.array([0.26862954, 0.26130258, 0.27577711])),
            "siglip": (0.5, 0.5), "siglip2": (0.5, 0.5)}


def _make(name, directory):
    family, config_args, size = HELDOUT[name]
    torch.manual_seed(sum(map(ord, name)))
    config = getattr(transformers, CONFIGS[family])(**config_args)
    reference = getattr(transformers, CLASSES[family])(config).eval()
    with torch.no_grad():
        for parameter in reference.parameters():  # random weights far from the initialisation's symmetries
            parameter.add_(0.1 * torch.randn_like(parameter))
    reference.save_pretrained(directory)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(cases.case_dir(family), "checkpoint", file), os.path.join(directory, file))
    return family, reference, size


def _reference_outputs(family, reference, directory, images01, context):
    from transformers import AutoTokenizer

    tokens = AutoTokenizer.from_pretrained(directory)(TEXTS, padding="max_length", max_length=context,
                                                      truncation=True, return_tensors="pt")
    mean, std = MEAN_STD[family]
    pixels = (images01 - mean) / std
    kwargs = {"input_ids": tokens["input_ids"]}
    if family != "siglip":
        kwargs["attention_mask"] = tokens["attention_mask"]
    if family == "siglip2":
        patch = reference.config.vision_config.patch_size
        n, h, w, c = pixels.shape
        patches = pixels.reshape(n, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
        kwargs.update(pixel_values=torch.tensor(patches.reshape(n, -1, patch * patch * c), dtype=torch.float32),
                      pixel_attention_mask=torch.ones(n, patches.shape[1] * patches.shape[2], dtype=torch.long),
                      spatial_shapes=torch.tensor([[h // patch, w // patch]] * n))
    else:
        kwargs["pixel_values"] = torch.tensor(pixels.transpose(0, 3, 1, 2), dtype=torch.float32)
    with torch.no_grad():
        out = reference(**kwargs)
        image_kwargs = {k: v for k, v in kwargs.items() if k.startswith(("pixel", "spatial"))}
        text_kwargs = {k: v for k, v in kwargs.items() if k in ("input_ids", "attention_mask")}
        image_features = reference.get_image_features(**image_kwargs)
        text_features = reference.get_text_features(**text_kwargs)
    pooled = [getattr(f, "pooler_output", f) for f in (image_features, text_features)]
    return tokens["input_ids"].numpy(), {
        "image_features": pooled[0].numpy(), "text_features": pooled[1].numpy(),
        "image_embeds": out.image_embeds.numpy(), "text_embeds": out.text_embeds.numpy(),
        "logits_per_image": out.logits_per_image.numpy(), "logits_per_text": out.logits_per_text.numpy()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HELDOUT))
def test_heldout_model_matches_transformers(name, tmp_path):
    family, reference, (height, width) = _make(name, str(tmp_path))
    images = np.random.default_rng(1).uniform(0, 255, (2, height, width, 3)).astype(np.float32)
    model = zeroshot.from_pretrained(str(tmp_path))  # RGB in [0, 255], the family's normalisation in the model
    context = HELDOUT[name][1]["text_config"]["max_position_embeddings"]
    want_ids, expected = _reference_outputs(family, reference, str(tmp_path), images.astype(np.float64) / 255,
                                            context)
    ids, mask = model.tokenize(TEXTS)
    np.testing.assert_array_equal(ids, want_ids)
    found = cases.outputs(model, images, ids, mask)
    differences = cases.relative_differences(found, expected)
    assert max(differences.values()) <= cases.RELATIVE_TOLERANCE, differences
    assert (found["logits_per_image"].argmax(-1) == expected["logits_per_image"].argmax(-1)).all()


def _numpy_contrastive(logits):
    def cross_entropy(z):
        z = z - z.max(-1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
        return -np.diag(log_p).mean()

    return (cross_entropy(logits) + cross_entropy(logits.T)) / 2


def _numpy_sigmoid(logits):
    labels = 2 * np.eye(len(logits)) - 1
    return np.log1p(np.exp(-labels * logits)).sum() / len(logits)  # -log σ(x) = log(1 + e^-x)


def test_losses_equal_numpy_references():
    logits = np.random.default_rng(0).normal(0, 3, (6, 6)).astype(np.float32)
    np.testing.assert_allclose(float(losses.contrastive_loss(logits)), _numpy_contrastive(logits.astype(np.float64)),
                               rtol=1e-5)
    np.testing.assert_allclose(float(losses.sigmoid_loss(logits)), _numpy_sigmoid(logits.astype(np.float64)),
                               rtol=1e-5)
    dummy = np.zeros(6, np.float32)
    np.testing.assert_allclose(float(losses.ContrastiveLoss()(dummy, logits)), float(losses.contrastive_loss(logits)),
                               rtol=1e-6)
    np.testing.assert_allclose(float(losses.SigmoidLoss()(dummy, logits)), float(losses.sigmoid_loss(logits)),
                               rtol=1e-6)
    with pytest.raises(ValueError, match=r"\(batch, batch\) logits"):
        losses.contrastive_loss(np.zeros(3, np.float32))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["clip", "siglip"])
def test_a_few_fit_steps_lower_the_loss(case):
    model = zeroshot.from_pretrained(os.path.join(cases.case_dir(case), "checkpoint"))
    rng = np.random.default_rng(0)
    names = ["cat", "dog", "car", "tree", "boat", "house", "bird", "fish"]
    images = rng.uniform(0, 255, (len(names), 32, 32, 3)).astype(np.float32)
    ids, mask = model.tokenize([f"a photo of a {name}" for name in names])
    mask = np.ones_like(ids) if mask is None else mask
    pairs = {"images": images, "token_ids": ids, "attention_mask": mask}
    trainer = losses.training_model(model)
    loss = losses.loss_for(model)
    trainer.compile(optimizer=keras.optimizers.Adam(2e-4), loss=loss)
    before = float(loss(np.zeros(len(names)), trainer(pairs)))
    reference = (_numpy_contrastive if case == "clip" else _numpy_sigmoid)(
        np.asarray(trainer(pairs), np.float64))
    np.testing.assert_allclose(before, reference, rtol=1e-5)
    history = trainer.fit(pairs, np.zeros(len(names), np.float32), batch_size=len(names), epochs=10, verbose=0)
    after = float(loss(np.zeros(len(names)), trainer(pairs)))
    assert after < 0.8 * before, (before, after, history.history["loss"])
    # The fitted towers are the model's own: its encoders give the trained logits.
    np.testing.assert_allclose(model.logits(model.encode_image(images), model.encode_text(ids, mask)),
                               np.asarray(trainer(pairs)), atol=1e-4)


def test_heldout_configs_are_what_they_claim():
    # Other widths/depths/contexts than the fixtures (32 wide, 2 deep, context 16), and towers of unequal widths.
    for _, config, _ in HELDOUT.values():
        text, vision = config["text_config"], config["vision_config"]
        assert text["max_position_embeddings"] != 16 and text["hidden_size"] != vision["hidden_size"]


@pytest.mark.slow
def test_siglip_reads_the_mask_when_its_tokenizer_gives_one(tmp_path):
    # A SiglipModel whose tokenizer returns the attention mask (as the Gemma tokenizers of the fixed-size SigLIP 2
    # checkpoints do): the reference pipeline, model(**tokenizer(texts)), passes it, and so does the loader.
    from transformers import AutoTokenizer, SiglipModel

    directory = tmp_path / "siglip"
    shutil.copytree(os.path.join(cases.case_dir("siglip"), "checkpoint"), directory)
    config_file = directory / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["model_input_names"] = ["input_ids", "attention_mask"]
    config_file.write_text(json.dumps(config))
    tokens = AutoTokenizer.from_pretrained(str(directory))(TEXTS, padding="max_length", max_length=16,
                                                           truncation=True, return_tensors="pt")
    assert "attention_mask" in tokens
    reference = SiglipModel.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        want = reference.get_text_features(**tokens)
    want = getattr(want, "pooler_output", want).numpy()
    model = zeroshot.from_pretrained(directory)
    ids, mask = model.tokenize(TEXTS)
    assert mask is not None
    found = model.encode_text(ids, mask)
    assert np.abs(found - want).max() <= cases.RELATIVE_TOLERANCE * max(1.0, np.abs(want).max())
    # and it differs from the unmasked fixture case: the mask is read
    assert np.abs(found - model.encode_text(ids, np.ones_like(ids))).max() > 1e-2


@pytest.mark.slow
def test_siglip_model_with_a_gemma_tokenizer_matches_transformers(tmp_path):
    # The fixed-size SigLIP 2 releases: a SiglipModel whose tokenizer_config names GemmaTokenizer. transformers
    # runs GemmaTokenizer's own pipeline (no lowercasing, whatever the file says) and passes the mask it returns.
    torch.manual_seed(7)
    config = transformers.SiglipConfig(
        text_config=dict(vocab_size=442, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=48, max_position_embeddings=16, projection_size=24, eos_token_id=1,
                         pad_token_id=0),
        vision_config=dict(hidden_size=24, num_hidden_layers=1, num_attention_heads=2, intermediate_size=40,
                           image_size=16, patch_size=8))
    reference = transformers.SiglipModel(config).eval()
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    reference.save_pretrained(str(tmp_path))
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(cases.case_dir("siglip2"), "checkpoint", file), tmp_path / file)
    tokenizer_config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    tokenizer_config["tokenizer_class"] = "GemmaTokenizer"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    texts = ["A Photo of a CAT", "a photo of a cat", "Don't stop 123!"]
    tokens = transformers.AutoTokenizer.from_pretrained(str(tmp_path))(texts, padding="max_length", max_length=16,
                                                                       truncation=True, return_tensors="pt")
    assert type(transformers.AutoTokenizer.from_pretrained(str(tmp_path))).__name__ == "GemmaTokenizer"
    images = np.random.default_rng(2).uniform(0, 255, (2, 16, 16, 3)).astype(np.float32)
    pixels = torch.tensor((images / 255.0 - 0.5) / 0.5, dtype=torch.float32).permute(0, 3, 1, 2)
    with torch.no_grad():
        out = reference(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"], pixel_values=pixels)
    model = zeroshot.from_pretrained(str(tmp_path))
    ids, mask = model.tokenize(texts)
    np.testing.assert_array_equal(ids, tokens["input_ids"].numpy())
    np.testing.assert_array_equal(mask, tokens["attention_mask"].numpy())
    assert (ids[0] != ids[1]).any()  # not lowercased: "A Photo of a CAT" is not "a photo of a cat"
    logits = model.logits(model.encode_image(images), model.encode_text(ids, mask))
    want = out.logits_per_image.numpy()
    assert np.abs(logits - want).max() <= cases.RELATIVE_TOLERANCE * max(1.0, np.abs(want).max())


@pytest.mark.slow
def test_siglip2_naflex_batch_of_two_sizes_matches_transformers(tmp_path):
    # flexible=True: a NaFlex batch (images of different grids, padded to one length with a mask), against
    # Siglip2Model.get_image_features with the same patches, mask and spatial shapes.
    family, reference, _ = _make("siglip2_wide_image", str(tmp_path))
    model = zeroshot.from_pretrained(str(tmp_path), include_preprocessing=False, flexible=True)
    patch, length, rng = 4, 32, np.random.default_rng(3)
    patches, masks, grids = [], [], []
    for rows, cols in ((4, 6), (5, 3)):
        image = rng.uniform(-1, 1, (rows * patch, cols * patch, 3)).astype(np.float32)
        cut = image.reshape(rows, patch, cols, patch, 3).transpose(0, 2, 1, 3, 4).reshape(rows * cols, -1)
        padded = np.zeros((length, cut.shape[1]), np.float32)
        padded[: len(cut)] = cut
        patches.append(padded)
        masks.append(np.arange(length) < len(cut))
        grids.append((rows, cols))
    inputs = {"patches": np.stack(patches), "grid": np.array(grids, "int32"), "mask": np.stack(masks).astype("int32")}
    with torch.no_grad():
        want = reference.get_image_features(pixel_values=torch.tensor(inputs["patches"]),
                                            pixel_attention_mask=torch.tensor(inputs["mask"], dtype=torch.long),
                                            spatial_shapes=torch.tensor(inputs["grid"], dtype=torch.long))
    want = getattr(want, "pooler_output", want).numpy()
    found = model.encode_image(inputs)
    assert np.abs(found - want).max() <= cases.RELATIVE_TOLERANCE * max(1.0, np.abs(want).max())
