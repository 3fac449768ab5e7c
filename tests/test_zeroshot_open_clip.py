"""open_clip's layout of CLIP (`vit_keras.zeroshot.open_clip`): a random transformers CLIPModel written in
open_clip's layout (open_clip_config.json, open_clip_model.safetensors: fused attention projections, `x @ proj`
matrices, resblocks) by this test's own writer, read by `vit_keras.zeroshot.from_pretrained` and compared with the
transformers model (open_clip itself is not installed here). Same tolerance as the reference cases
(tests/zeroshot_cases.py)."""

import json
import os
import shutil

import numpy as np
import pytest

from tests import zeroshot_cases as cases
from vit_keras import zeroshot

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VISION = {"width": 32, "layers": 2, "head_width": 16, "patch_size": 8, "image_size": 24}
TEXT = {"width": 48, "heads": 4, "layers": 2, "context_length": 16, "vocab_size": 634}
EMBED = 20
MEAN, STD = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]


def _open_clip_layout(state: dict) -> dict:
    """transformers CLIPModel tensors → open_clip's names (the inverse of what open_clip's conversion does)."""
    out = {"visual.class_embedding": state["vision_model.embeddings.class_embedding"],
           "visual.positional_embedding": state["vision_model.embeddings.position_embedding.weight"],
           "visual.conv1.weight": state["vision_model.embeddings.patch_embedding.weight"],
           "visual.proj": state["visual_projection.weight"].T.copy(),
           "token_embedding.weight": state["text_model.embeddings.token_embedding.weight"],
           "positional_embedding": state["text_model.embeddings.position_embedding.weight"],
           "text_projection": state["text_projection.weight"].T.copy(),
           "logit_scale": state["logit_scale"]}
    for name, source in (("ln_pre", "pre_layrnorm"), ("ln_post", "post_layernorm")):
        for param in ("weight", "bias"):
            out[f"visual.{name}.{param}"] = state[f"vision_model.{source}.{param}"]
    for param in ("weight", "bias"):
        out[f"ln_final.{param}"] = state[f"text_model.final_layer_norm.{param}"]
    for tower, prefix, layers in (("visual.transformer", "vision_model", VISION["layers"]),
                                  ("transformer", "text_model", TEXT["layers"])):
        for i in range(layers):
            hf, oc = f"{prefix}.encoder.layers.{i}", f"{tower}.resblocks.{i}"
            for param in ("weight", "bias"):
                out[f"{oc}.attn.in_proj_{param}"] = np.concatenate(
                    [state[f"{hf}.self_attn.{p}_proj.{param}"] for p in "qkv"])
                for source, target in (("layer_norm1", "ln_1"), ("layer_norm2", "ln_2"), ("mlp.fc1", "mlp.c_fc"),
                                       ("mlp.fc2", "mlp.c_proj"), ("self_attn.out_proj", "attn.out_proj")):
                    out[f"{oc}.{target}.{param}"] = state[f"{hf}.{source}.{param}"]
    return {name: np.ascontiguousarray(value, np.float32) for name, value in out.items()}


def _write(directory, quick_gelu: bool, vision_extra=None):
    from safetensors.numpy import save_file

    act = "quick_gelu" if quick_gelu else "gelu"
    config = transformers.CLIPConfig(
        text_config=dict(vocab_size=TEXT["vocab_size"], hidden_size=TEXT["width"], num_hidden_layers=TEXT["layers"],
                         num_attention_heads=TEXT["heads"], intermediate_size=4 * TEXT["width"],
                         max_position_embeddings=TEXT["context_length"], hidden_act=act, eos_token_id=2),
        vision_config=dict(hidden_size=VISION["width"], num_hidden_layers=VISION["layers"],
                           num_attention_heads=VISION["width"] // VISION["head_width"],
                           intermediate_size=4 * VISION["width"], image_size=VISION["image_size"],
                           patch_size=VISION["patch_size"], hidden_act=act),
        projection_dim=EMBED)
    torch.manual_seed(5)
    reference = transformers.CLIPModel(config).eval()
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    state = {name: value.detach().numpy() for name, value in reference.state_dict().items()}
    os.makedirs(directory)
    save_file(_open_clip_layout(state), os.path.join(directory, "open_clip_model.safetensors"))
    with open(os.path.join(directory, "open_clip_config.json"), "w") as f:
        json.dump({"model_cfg": {"embed_dim": EMBED, "quick_gelu": quick_gelu,
                                 "vision_cfg": {**VISION, **(vision_extra or {})}, "text_cfg": TEXT},
                   "preprocess_cfg": {"mean": MEAN, "std": STD}}, f)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(cases.case_dir("clip"), "checkpoint", file), os.path.join(directory, file))
    return reference


@pytest.mark.slow
@pytest.mark.parametrize("quick_gelu", [True, False])
def test_open_clip_layout_matches_the_transformers_model(quick_gelu, tmp_path):
    reference = _write(str(tmp_path / "oc"), quick_gelu)
    model = zeroshot.from_pretrained(str(tmp_path / "oc"))  # RGB in [0, 255], preprocess_cfg's mean/std
    images = np.random.default_rng(0).uniform(0, 255, (2, 24, 24, 3)).astype(np.float32)
    texts = ["a photo of a cat", "a dog", "Don't stop 123!"]
    ids, mask = model.tokenize(texts)
    pixels = torch.tensor((images / 255.0 - np.array(MEAN)) / np.array(STD), dtype=torch.float32).permute(0, 3, 1, 2)
    with torch.no_grad():
        out = reference(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                        pixel_values=pixels)
    found = cases.outputs(model, images, ids, mask)
    expected = {"image_embeds": out.image_embeds.numpy(), "text_embeds": out.text_embeds.numpy(),
                "logits_per_image": out.logits_per_image.numpy(), "logits_per_text": out.logits_per_text.numpy()}
    for name, want in expected.items():
        assert np.abs(found[name] - want).max() <= cases.RELATIVE_TOLERANCE * max(1.0, np.abs(want).max()), name


def test_open_clip_architectures_it_does_not_read_are_refused(tmp_path):
    _write(str(tmp_path / "trunk"), True, {"timm_model_name": "vit_base_patch16_siglip_224"})
    with pytest.raises(ValueError, match="timm model 'vit_base_patch16_siglip_224'.*transformers conversion"):
        zeroshot.from_pretrained(str(tmp_path / "trunk"))
    _write(str(tmp_path / "scaled"), True, {"ls_init_value": 0.1})
    with pytest.raises(ValueError, match=r"vision_cfg sets \['ls_init_value'\]"):
        zeroshot.from_pretrained(str(tmp_path / "scaled"))
    pickled = tmp_path / "pickled"
    _write(str(pickled), True)
    os.rename(pickled / "open_clip_model.safetensors", pickled / "open_clip_pytorch_model.bin")
    with pytest.raises(ValueError, match="pickle files.*never loads"):
        zeroshot.from_pretrained(str(pickled))
