"""Write a zero-shot model back as a library writes it: `save_pretrained(model, directory, format="transformers")`
(a `CLIPModel`, `SiglipModel` or `Siglip2Model` directory that `AutoModel.from_pretrained` loads strictly) or, for a
model read from open_clip's files, `format="open_clip"`.

The tensors are the readers' rule tables run backwards (`rules.invert_table`): the vision tower's (its row in
`vit_keras.weights.hf_family_rows`, or `open_clip.VISION_TABLE`), the text tower's and the heads' (the family's
row, `vit_keras.zeroshot.families`); each table is written once and read both ways. The arrays come from the
model's declared checkpoint variables; the architecture from its `vision_config` (`ViTConfig`, written by the
vision writer's own rules, `vit_keras.weights.save.transformers_config`) and `text_config`. Before anything is
written, the tensors are read back with the same tables and must give the model's arrays exactly. What the target
cannot hold is refused by name; the directory is written under a temporary name and renamed into place.

Example:
    >>> from vit_keras import zeroshot
    >>> m = zeroshot.from_pretrained("tests/fixtures/zeroshot/siglip/checkpoint")
    >>> save_pretrained(m, "siglip-ft")
    'siglip-ft'
    >>> sorted(os.listdir("siglip-ft"))
    ['config.json', 'model.safetensors', 'preprocessor_config.json', 'tokenizer.json', 'tokenizer_config.json']
"""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np

from vit_keras.files import atomic_directory
from vit_keras.weights import hf, rules
from vit_keras.weights import save as vision_save
from vit_keras.weights.assign import model_slots
from vit_keras.zeroshot import hf_reader, open_clip
from vit_keras.zeroshot.families import FAMILIES, Family
from vit_keras.zeroshot.text import text_slots
from vit_keras.zeroshot.vision import head_slots

logger = logging.getLogger("vit_keras.zeroshot")

FORMATS = ("transformers", "open_clip")
# The tokenizer's files, copied beside the weights (what `vit_keras.zeroshot.from_pretrained` and transformers read).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# Where each family pools its text: what transformers' text model of that family computes.
_TEXT_POOLINGS = {"first_eos": ("clip",), "argmax": ("clip",), "last": ("siglip", "siglip2")}
# open_clip builds its LayerNorms with eps 1e-5 and its MLPs with GELU or quick-GELU (`quick_gelu`).
_OPEN_CLIP_EPSILON = 1e-5
_OPEN_CLIP_ACTIVATIONS = ("gelu", "quick_gelu")


def _refuse(what: str, fix: str):
    raise ValueError(f"{what}; {fix}.")


def model_arrays(model) -> tuple[dict, dict, dict]:
    """(vision tower, text tower, heads): the model's canonical float32 arrays, each in its checkpoint layout."""
    heads = head_slots(model.image_model, model.logits_layer)
    vision = {name: slot.checkpoint_value() for name, slot in model_slots(model.image_model).items()
              if name not in heads}
    text = {name: slot.checkpoint_value() for name, slot in text_slots(model.text_model).items()}
    return vision, text, {name: slot.checkpoint_value() for name, slot in heads.items()}


def _family(model) -> Family:
    if model.family not in FAMILIES:
        _refuse(f"{model.family!r} is not an image-text family vit_keras writes ({sorted(FAMILIES)})",
                "keep the towers' .keras files")
    if model.vision_config is None or model.text_config is None:
        _refuse("This zero-shot model does not carry its towers' configs (vision_config, text_config), which say "
                "what to write", "build it with vit_keras.zeroshot.from_pretrained")
    return FAMILIES[model.family]


def _check_text(model, family: Family) -> None:
    text = model.text_config
    wrong = []
    if text.causal != family.causal:
        wrong.append(f"causal={text.causal}")
    if model.family not in _TEXT_POOLINGS[text.pooling]:
        wrong.append(f"pooling={text.pooling!r}")
    if text.projection_dim is None or text.projection_bias != family.text_projection_bias:
        wrong.append(f"projection_dim={text.projection_dim}, projection_bias={text.projection_bias}")
    if wrong:
        poolings = " or ".join(pooling for pooling, families in _TEXT_POOLINGS.items() if model.family in families)
        _refuse(f"transformers' {family.model_class} text tower has no {', '.join(wrong)} (its text model is "
                f"{'causal' if family.causal else 'bidirectional'}, pools {poolings} and projects "
                f"{'with' if family.text_projection_bias else 'without'} a bias)", "keep the towers' .keras files")


def _text_config(model, family: Family) -> dict:
    text = model.text_config
    out = {"model_type": family.vision_model_type.replace("vision", "text"), "vocab_size": text.vocab_size,
           "hidden_size": text.hidden_size, "intermediate_size": text.mlp_dim,
           "num_hidden_layers": text.num_layers, "num_attention_heads": text.num_heads,
           "max_position_embeddings": text.context_length, "hidden_act": vision_save.HIDDEN_ACTS[text.activation],
           "layer_norm_eps": text.layer_norm_epsilon}
    if text.pooling == "argmax":  # transformers' rule: a CLIP config with eos_token_id 2 pools at the largest id
        out["eos_token_id"] = hf_reader.LEGACY_CLIP_EOS
    elif text.eos_token_id is not None:
        out["eos_token_id"] = text.eos_token_id
    if family.text_projection != "text_projection":
        out["projection_size"] = text.projection_dim
    # The special tokens the forward pass does not read: the tokenizer's padding, no begin-of-text token.
    out["pad_token_id"] = getattr(model.tokenizer, "pad_id", None)
    out["bos_token_id"] = None
    return out


def _vision_config(model, family: Family, params: dict) -> dict:
    config = model.vision_config
    kind = vision_save.transformers_model_type(config)
    # A NaFlex tower (SigLIP 2) computes what a SigLIP tower computes at the stored grid, its table aside.
    if kind != family.vision_model_type and not (family.vision.naflex and kind == "siglip_vision_model"):
        _refuse(f"The image tower computes what transformers' {kind} computes, not the {family.vision_model_type} of "
                f"a {family.model_class}", "save the image tower alone (vit_keras.save_pretrained of a vision model)")
    out = vision_save.transformers_config(config, params)
    out.pop("architectures")
    out["model_type"] = family.vision_model_type
    if family.vision.naflex:
        positions = int(params["Transformer/posembed_input/pos_embedding"].shape[1])
        side = int(round(positions ** 0.5))
        if side * side != positions:
            _refuse(f"{family.vision.classes} stores a square position grid; this model's holds {positions} "
                    "positions", "build the model at a square image size")
        out.pop("image_size")
        out["num_patches"] = positions
    return out


def transformers_files(model) -> tuple[dict, dict[str, np.ndarray]]:
    """(config.json, tensors) of the transformers image-text model that computes what `model` computes."""
    family = _family(model)
    _check_text(model, family)
    vision, text, heads = model_arrays(model)
    config = {"architectures": [family.model_class], "model_type": model.family,
              "text_config": _text_config(model, family), "vision_config": _vision_config(model, family, vision),
              "dtype": "float32"}
    if family.visual_projection is not None:
        config["projection_dim"] = model.text_config.projection_dim
    tables = ((family.vision.table, vision, model.vision_config.num_heads, hf_reader.VISION_PREFIX),
              (family.text_table, text, model.text_config.num_heads, ""), (family.head_table, heads, 1, ""))
    tensors = _invert(tables)
    vision_tensors = {key: value for key, value in tensors.items() if key.startswith(hf_reader.VISION_PREFIX)}
    _read_back(family.text_table, family.head_table, hf_reader.VISION_PREFIX, tensors, model,
               vision_back=lambda: hf.canonicalize(vision_tensors, config["vision_config"],
                                                   source="the written tensors"),
               expected=(vision, text, heads))
    return config, tensors


def open_clip_files(model) -> tuple[dict, dict[str, np.ndarray]]:
    """(open_clip_config.json, tensors) of the open_clip CLIP that computes what `model` (read from open_clip's
    files) computes."""
    _family(model)
    if model.layout != "open_clip":
        _refuse(f"format='open_clip' writes the models read from open_clip's files; this one was read from "
                f"{model.layout or 'no files'}'s, whose text pooling and options open_clip may not share",
                "use format='transformers'")
    vision_config, text = model.vision_config, model.text_config
    if vision_save.transformers_model_type(vision_config) != "clip_vision_model" or model.family != "clip":
        _refuse("open_clip's OpenAI-style CLIP towers are what vit_keras writes; this model's image tower is not one",
                "use format='transformers'")
    towers = {"vision": vision_config, "text": text}
    activations = {vision_config.activation, text.activation}
    epsilons = {vision_config.layer_norm_epsilon, text.layer_norm_epsilon}
    if len(activations) != 1 or not activations <= set(_OPEN_CLIP_ACTIVATIONS) or epsilons != {_OPEN_CLIP_EPSILON}:
        _refuse(f"open_clip builds both towers with one GELU ({_OPEN_CLIP_ACTIVATIONS}) and LayerNorm eps 1e-5; this "
                f"model has activations {sorted(activations)} and eps {sorted(epsilons)}", "use format='transformers'")
    if text.pooling != "argmax":
        _refuse(f"open_clip pools the text at the largest token id; this model pools {text.pooling!r}",
                "use format='transformers'")
    size = vision_config.reference_image_size
    if size[0] != size[1]:
        _refuse(f"open_clip's CLIP takes square images; this model's are {size[0]}x{size[1]}",
                "use format='transformers'")
    ratios = {name: tower.mlp_dim / tower.hidden_size for name, tower in towers.items()}
    for name, tower in towers.items():
        if int(tower.hidden_size * ratios[name]) != tower.mlp_dim:
            _refuse(f"the {name} tower's MLP width {tower.mlp_dim} is not int(width * mlp_ratio) for its width "
                    f"{tower.hidden_size}", "use format='transformers'")
    vision, text_params, heads = model_arrays(model)
    model_cfg = {
        "embed_dim": text.projection_dim, "quick_gelu": activations == {"quick_gelu"},
        "vision_cfg": {"width": vision_config.hidden_size, "layers": vision_config.num_layers,
                       "head_width": vision_config.hidden_size // vision_config.num_heads,
                       "patch_size": vision_config.patch_size, "image_size": size[0], "mlp_ratio": ratios["vision"]},
        "text_cfg": {"context_length": text.context_length, "vocab_size": text.vocab_size, "width": text.hidden_size,
                     "heads": text.num_heads, "layers": text.num_layers, "mlp_ratio": ratios["text"]},
    }
    config = {"model_cfg": model_cfg}
    normalization = vision_save.model_normalization(model.image_model)
    if normalization is not None:
        config["preprocess_cfg"] = {"mean": list(normalization[0]), "std": list(normalization[1])}
    tables = ((open_clip.VISION_TABLE, vision, vision_config.num_heads, ""),
              (open_clip.TEXT_TABLE, text_params, text.num_heads, ""), (open_clip.HEAD_TABLE, heads, 1, ""))
    tensors = _invert(tables)
    vision_tensors = {key: value for key, value in tensors.items() if open_clip.VISION_TABLE.knows(key)}
    _read_back(open_clip.TEXT_TABLE, open_clip.HEAD_TABLE, open_clip.VISION_PREFIX, tensors, model,
               vision_back=lambda: rules.apply_table(open_clip.VISION_TABLE, vision_tensors,
                                                     num_heads=vision_config.num_heads, source="the written tensors"),
               expected=(vision, text_params, heads))
    return config, tensors


def _invert(tables) -> dict[str, np.ndarray]:
    tensors: dict[str, np.ndarray] = {}
    for table, params, num_heads, prefix in tables:
        tensors.update(rules.invert_table(table, params, num_heads=num_heads, prefix=prefix))
    return tensors


def _read_back(text_table, head_table, vision_prefix, tensors, model, *, vision_back, expected) -> None:
    """The written tensors, read with the reader's tables, must give the model's arrays exactly."""
    text, heads, _ = hf_reader.split_tensors(tensors, text_table, head_table, vision_prefix, "the written tensors",
                                             model.family)
    back = (vision_back(),
            rules.apply_table(text_table, text, num_heads=model.text_config.num_heads, source="the written tensors"),
            rules.apply_table(head_table, heads, num_heads=1, source="the written tensors"))
    for read, wanted in zip(back, expected):
        differ = sorted(name for name in set(read) | set(wanted)
                        if name not in read or name not in wanted or not np.array_equal(read[name], wanted[name]))
        if differ:
            raise AssertionError(f"{model.family}: the written tensors read back differently for {differ}.")


def _preprocessor(model, family: Family) -> dict | None:
    """The image processor's normalisation (what `vit_keras.zeroshot.from_pretrained` reads back), when the model
    says it (its preprocessing layer)."""
    normalization = vision_save.model_normalization(model.image_model)
    if normalization is None:
        logger.warning("The model takes normalised images (include_preprocessing=False), so it does not say its "
                       "normalisation; no preprocessor_config.json is written (readers take the %s default).",
                       family.model_class)
        return None
    return {"image_processor_type": f"{family.model_class.replace('Model', '')}ImageProcessor",
            "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
            "image_mean": list(normalization[0]), "image_std": list(normalization[1])}


def _copy_tokenizer(model, directory: str) -> None:
    source = getattr(model.tokenizer, "source", None)
    folder = os.path.dirname(source) if isinstance(source, str) and os.path.isfile(source) else None
    if folder is None:
        logger.warning("The model has no tokenizer read from files; none is written beside the weights (zero-shot "
                       "readers need one: save the tokenizer's tokenizer.json there).")
        return
    for name in TOKENIZER_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            shutil.copyfile(os.path.join(folder, name), os.path.join(directory, name))


def save_pretrained(model, directory, format: str | None = None, *, overwrite: bool = False) -> str:
    """Write the zero-shot `model` as a transformers image-text directory (`format="transformers"`, the default:
    config.json, model.safetensors, preprocessor_config.json, the tokenizer's files; `AutoModel.from_pretrained`
    loads it with no missing or unexpected keys) or, for a model read from open_clip's files, as open_clip's
    (`format="open_clip"`: open_clip_config.json, open_clip_model.safetensors), and return its path.

    The directory is written under a temporary name and renamed into place (nothing is left on failure); an
    existing non-empty `directory` is refused unless `overwrite=True`, and a symbolic link always. A model the
    target cannot hold is refused with a `ValueError` naming what it lacks and the format that holds it.
    """
    format = "transformers" if format is None else format
    if format not in FORMATS:
        raise ValueError(f"A zero-shot model is written as format in {FORMATS}, got {format!r} (timm has no "
                         "image-text models).")
    vision_save.refuse_link(directory)
    if format == "transformers":
        config, tensors = transformers_files(model)
        names = (hf_reader.CONFIG_NAME, hf_reader.WEIGHTS_NAME)
        preprocessor = _preprocessor(model, FAMILIES[model.family])
    else:
        config, tensors = open_clip_files(model)
        names, preprocessor = (open_clip.CONFIG_NAME, open_clip.WEIGHTS_NAME), None
    directory = os.fspath(directory)
    with atomic_directory(directory, overwrite=overwrite or vision_save.is_empty_dir(directory)) as tmp:
        vision_save.write_directory(tmp, config, tensors, config_name=names[0], weights_name=names[1])
        if preprocessor is not None:
            vision_save.write_json(os.path.join(tmp, hf_reader.PREPROCESSOR_NAME), preprocessor)
        _copy_tokenizer(model, tmp)
    return directory
