"""Read timm `VisionTransformer` checkpoints (no torch needed): bare `.safetensors` state dicts and the Hugging
Face-style directories timm's `save_for_hf` / `push_to_hub` write (`config.json` + `model.safetensors`).

timm fuses q, k and v into `attn.qkv` ((3D, D), q first) and stores torch layouts (see `torch_layout`); `TABLE`
maps each module onto the canonical names (see `vit_keras.weights.rules`), and refuses a tensor the architecture
needs but the file lacks. A bare state dict does not say the number of heads; it comes from the model being loaded.
A directory's `config.json` gives the architecture: its `architecture` name fixes the family switches (table
below), `model_args` overrides sizes and switches, and `pretrained_cfg` gives the normalisation (mean/std) the model
was trained with.

Example:
    >>> deit = "tests/fixtures/family/timm_deit_distilled/checkpoint"  # a tiny DeiT: hidden 48, 3 heads
    >>> params = read_timm(f"{deit}/model.safetensors", num_heads=3)
    >>> params["cls"].shape
    (1, 1, 48)
"""

from __future__ import annotations

import os
import re

import numpy as np

from vit_keras.weights import json_config, rules, schema
from vit_keras.weights.safetensors_io import read_safetensors

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
LAYER_NORM_EPSILON = 1e-6

# timm's VisionTransformer state dict, one rule per module (timm 1.0.31 vision_transformer.py; see `rules`).
TABLE = rules.Table("timm ViT", (
    rules.Rule("patch_embed.proj", "embedding", rules.PATCH, required=True, bias="patch_bias"),
    rules.Rule("cls_token", "cls", rules.TOKENS),
    rules.Rule("dist_token", "dist", rules.TOKENS),
    rules.Rule("reg_token", "reg", rules.TOKENS),
    rules.Rule("pos_embed", schema.POS_EMBEDDING, rules.TOKENS),
    rules.Rule("norm_pre", "pre_norm", rules.NORM),
    rules.Rule("blocks.{i}.norm1", schema.BLOCK_NORM_1, rules.NORM, required=True),
    rules.Rule("blocks.{i}.attn.qkv", schema.BLOCK_ATTENTION, rules.fused("query", "key", "value"), required=True,
               bias="qkv_bias"),
    rules.Rule("blocks.{i}.attn.proj", f"{schema.BLOCK_ATTENTION}/out", rules.HEADS_OUT, required=True),
    rules.Rule("blocks.{i}.ls1", schema.BLOCK_SCALE_1, rules.scale("gamma")),
    rules.Rule("blocks.{i}.norm2", schema.BLOCK_NORM_2, rules.NORM, required=True),
    rules.Rule("blocks.{i}.mlp.fc1", schema.BLOCK_MLP_IN, rules.LINEAR, required=True),
    rules.Rule("blocks.{i}.mlp.fc2", schema.BLOCK_MLP_OUT, rules.LINEAR, required=True),
    rules.Rule("blocks.{i}.ls2", schema.BLOCK_SCALE_2, rules.scale("gamma")),
    rules.Rule("norm", schema.ENCODER_NORM, rules.NORM),
    rules.Rule("attn_pool.latent", f"{schema.MAP_HEAD}/probe", rules.TOKENS, part="attention-pooling head"),
    rules.Rule("attn_pool.q", f"{schema.MAP_ATTENTION}/query", rules.HEADS_IN, part="attention-pooling head"),
    rules.Rule("attn_pool.kv", schema.MAP_ATTENTION, rules.fused("key", "value"), part="attention-pooling head"),
    rules.Rule("attn_pool.proj", f"{schema.MAP_ATTENTION}/out", rules.HEADS_OUT, part="attention-pooling head"),
    rules.Rule("attn_pool.norm", schema.MAP_NORM, rules.NORM, part="attention-pooling head"),
    rules.Rule("attn_pool.mlp.fc1", schema.MAP_MLP_IN, rules.LINEAR, part="attention-pooling head"),
    rules.Rule("attn_pool.mlp.fc2", schema.MAP_MLP_OUT, rules.LINEAR, part="attention-pooling head"),
    rules.Rule("fc_norm", "fc_norm", rules.NORM),
    rules.Rule("pre_logits.fc", "pre_logits", rules.LINEAR),
    rules.Rule("head", "head", rules.LINEAR),
    rules.Rule("head_dist", "head_dist", rules.LINEAR),
), refused=(
    ("patch_embed.backbone.", "a timm hybrid backbone (load the Google .npz of the hybrid instead)"),
    (".q_norm.", "q/k normalisation"),
    (".mlp.norm.", "a LayerNorm inside the MLP (scale_mlp_norm)"),
    ("attn.norm.", "a LayerNorm inside the attention (scale_attn_norm)"),
))

# timm's NaFlexVit (naflexvit.py): the same blocks and heads, with a Linear on (row, column, channel)-flattened
# patches and a (1, rows, cols, D) position grid, resized to each image's grid (antialiased bilinear for SigLIP 2).
NAFLEX_TABLE = rules.Table("timm NaFlexVit", (
    rules.Rule("embeds.proj", "embedding", rules.LINEAR_PATCH, required=True, bias="patch_bias"),
    rules.Rule("embeds.cls_token", "cls", rules.TOKENS),
    rules.Rule("embeds.reg_token", "reg", rules.TOKENS),
    rules.Rule("embeds.pos_embed", schema.POS_EMBEDDING, rules.tokens(rank=4), required=True),
    *[rule for rule in TABLE.rules if rule.target not in ("embedding", "cls", "dist", "reg", schema.POS_EMBEDDING)],
), refused=(*TABLE.refused, ("embeds.norm", "a norm on the patch embeddings"),
            ("embeds.pos_embed_y", "factorized position embeddings")))
# The NaFlexVit architectures vit_keras implements (timm 1.0.31 naflexvit.py) -> their fields; the position grid is
# timm's `pos_embed_grid_size`, 16x16 (`image_size` below is that grid times the patch size).
NAFLEX_ARCHITECTURES = {
    "naflexvit_base_patch16_siglip": {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "mlp_ratio": 4.0},
    "naflexvit_so400m_patch16_siglip": {"hidden_size": 1152, "num_layers": 27, "num_heads": 16, "mlp_ratio": 3.7362},
}
NAFLEX_GRID = (16, 16)

# The architecture names timm registers for the ViT family -> the switches each fixes (timm 1.0.31
# vision_transformer.py / deit.py). Sizes come from the size word; `model_args` in config.json overrides both.
SIZES = {"tiny": (192, 12, 3), "small": (384, 12, 6), "base": (768, 12, 12), "large": (1024, 24, 16),
         "huge": (1280, 32, 16)}
_NAME = re.compile(r"^(vit|deit|deit3)_(tiny|small|base|large|huge)(_distilled)?_patch(\d+)((?:_[a-z0-9]+)*)$")
SWITCHES = {
    "dinov2": {"layer_scale": True, "image_size": (518, 518)},
    "reg1": {"num_register_tokens": 1, "no_embed_class": True},
    "reg4": {"num_register_tokens": 4, "no_embed_class": True},
    "reg8": {"num_register_tokens": 8, "no_embed_class": True},
    "clip": {"pre_norm": True, "patch_bias": False, "layer_norm_epsilon": 1e-5},
    "quickgelu": {"activation": "quick_gelu"},
    "siglip": {"class_token": False, "global_pool": "map"},
    "gap": {"class_token": False, "global_pool": "avg", "fc_norm": False},
    # C-RADIOv3 as timm builds it (vit_*_patch16_radio_v3): 7 registers without position embeddings, no final norm.
    "radio": {"num_register_tokens": 7, "no_embed_class": True, "final_norm": False, "image_size": (512, 512)},
}
# timm's vit_base / vit_large _patch16_radio_v3 have LayerScale (init_values=1e-5); vit_huge_patch16_radio_v3 has not.
RADIO_LAYER_SCALE_SIZES = ("base", "large")
_RESOLUTION = re.compile(r"^(\d{3})$")
_BENIGN_TOKENS = {"in21k", "in22k", "ft", "in1k", "augreg", "orig", "mae", "dino", "v3"}
_MODEL_ARGS = {"img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "num_classes", "global_pool",
               "fc_norm", "class_token", "reg_tokens", "no_embed_class", "pre_norm", "init_values", "qkv_bias",
               "in_chans", "drop_rate", "pos_drop_rate", "attn_drop_rate", "drop_path_rate", "proj_drop_rate",
               "dynamic_img_size", "dynamic_img_pad", "representation_size", "act_layer", "pos_embed_grid_size",
               "final_norm"}
# timm `act_layer` names (timm/layers/create_act.py) -> ViTConfig.activation.
ACT_LAYERS = {"gelu": "gelu", "gelu_tanh": "gelu_tanh", "quick_gelu": "quick_gelu"}


def looks_like_timm(names) -> bool:
    """Whether tensor names follow timm's ViT layout.

    Example:
        >>> looks_like_timm(["blocks.0.attn.qkv.weight"])
        True
    """
    return any(name.startswith(("blocks.", "patch_embed.")) for name in names)


def is_timm_dir(path: str) -> bool:
    """Whether `path` is a timm `save_for_hf` directory (config.json with an `architecture` key).

    Example:
        >>> is_timm_dir("/nonexistent")
        False
    """
    config_path = os.path.join(path, CONFIG_NAME)
    if not os.path.isfile(config_path):
        return False
    return "architecture" in json_config.load(config_path)


def canonicalize(tensors: dict[str, np.ndarray], num_heads: int, *, config: dict | None = None,
                 source: str | None = None, naflex: bool = False,
                 architecture: dict | None = None) -> dict[str, np.ndarray]:
    """timm ViT tensors -> the canonical vit_jax raw-name dict, by `TABLE`.

    `config`: the `ViTConfig` fields of the checkpoint's config.json (`read_config`), which say whether the q/k/v
    and patch projections have biases; without it (a bare state dict) the file must be consistent across blocks.
    A tensor the architecture needs and the file lacks is refused, naming its timm key and `source` (default: the
    file the tensors were read from). `naflex`: a NaFlexVit's tensors (`NAFLEX_TABLE`). `architecture`: for a bare
    state dict, the `ViTConfig` fields of the model it is read for, against which each tensor's shape is checked
    (with a config, the config's fields are).

    Example:
        >>> deit = "tests/fixtures/family/timm_deit_distilled/checkpoint"
        >>> params = canonicalize(read_safetensors(f"{deit}/model.safetensors"), num_heads=3)
        >>> params["Transformer/encoder_norm/scale"].shape
        (48,)
    """
    source = rules.source_name(tensors, source)
    if config is not None and not config.get("final_norm", True):
        norms = sorted(key for key in tensors if key.startswith(("norm.", "fc_norm.")))
        if norms:
            raise ValueError(f"{source}: the config says final_norm=False (no norm after the blocks), but the file "
                             f"holds {norms}; nothing was loaded. Check that the file and its config.json describe "
                             "the same model.")
    return rules.apply_table(NAFLEX_TABLE if naflex else TABLE, tensors, num_heads=num_heads, source=source,
                             switches=rules.config_switches(config), fields=config or architecture)


def read_timm(path: str, num_heads: int) -> dict[str, np.ndarray]:
    """Read a timm ViT `.safetensors` state dict into the canonical dict.

    Example:
        >>> params = read_timm("tests/fixtures/family/timm_deit_distilled/checkpoint/model.safetensors", num_heads=3)
        >>> params["cls"].shape
        (1, 1, 48)
    """
    return canonicalize(read_safetensors(path), num_heads, source=path)


def is_naflex(directory: str) -> bool:
    """Whether a timm directory's config.json names a NaFlexVit (`naflexvit_*`).

    Example:
        >>> is_naflex("/nonexistent")
        False
    """
    path = os.path.join(directory, CONFIG_NAME)
    if not os.path.isfile(path):
        return False
    name = json_config.load(path).get("architecture")
    return isinstance(name, str) and name.startswith("naflexvit_")


def _naflex_fields(name: str, path: str) -> dict:
    if name not in NAFLEX_ARCHITECTURES:
        raise ValueError(f"{path!r}: timm architecture {name!r} is a NaFlexVit vit_keras does not implement; it reads "
                         f"{sorted(NAFLEX_ARCHITECTURES)}.")
    patch = 16
    sizes = {k: v for k, v in NAFLEX_ARCHITECTURES[name].items() if k != "mlp_ratio"}
    return {"patch_size": patch, **sizes, "activation": "gelu_tanh",
            "layer_norm_epsilon": LAYER_NORM_EPSILON, "class_token": False, "global_pool": "map",
            "image_size": (NAFLEX_GRID[0] * patch, NAFLEX_GRID[1] * patch)}


def architecture_switches(name: str, path: str = CONFIG_NAME) -> dict:
    """ViTConfig fields that timm's registered architecture `name` fixes.

    Example:
        >>> architecture_switches("vit_small_patch14_reg4_dinov2")["num_register_tokens"]
        4
    """
    match = _NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise ValueError(
            f"{path!r}: timm architecture {name!r} is not a ViT vit_keras knows; supported names look like "
            "vit_<tiny|small|base|large|huge>_patch<P>_[clip_|siglip_|...]<size>[_dinov2|_reg4_dinov2] or "
            "deit_<size>_[distilled_]patch<P>_<size>; timm's eva.py names (EVA-02, DINOv3, PE, RoPE-ViT) are read by "
            "vit_keras.weights.timm_eva."
        )
    family, size, distilled, patch, rest = match.groups()
    hidden, depth, heads = SIZES[size]
    fields = {"patch_size": int(patch), "hidden_size": hidden, "num_layers": depth, "num_heads": heads,
              "mlp_dim": 4 * hidden, "activation": "gelu", "layer_norm_epsilon": LAYER_NORM_EPSILON,
              "distilled": bool(distilled), "image_size": (224, 224)}
    for token in [t for t in rest.split("_") if t]:
        if token == "v4" and "radio" in rest:
            raise ValueError(f"{path!r}: timm architecture {name!r} is C-RADIOv4, which vit_keras does not implement "
                             "(it reads C-RADIOv3: vit_<base|large|huge>_patch16_radio_v3).")
        if token in SWITCHES:
            fields.update(SWITCHES[token])
            if token == "radio" and size in RADIO_LAYER_SCALE_SIZES:
                fields["layer_scale"] = True
        elif _RESOLUTION.match(token):
            fields["image_size"] = (int(token), int(token))
        elif token not in _BENIGN_TOKENS:
            raise ValueError(f"{path!r}: timm architecture {name!r} has the part {token!r}, a switch vit_keras does "
                             f"not implement (known: {sorted(SWITCHES)}).")
    if family == "deit3":
        fields.update(layer_scale=True, no_embed_class=True)
    return fields


def read_config(directory: str) -> tuple[dict, tuple | None]:
    """A timm directory's config.json -> (ViTConfig fields, (mean, std) or None) plus `classes`.

    Example:
        >>> fields, normalization = read_config("tests/fixtures/family/timm_deit_distilled/checkpoint")
        >>> fields["hidden_size"], fields["distilled"], normalization[0]
        (48, True, (0.485, 0.456, 0.406))
    """
    path = os.path.join(directory, CONFIG_NAME)
    config = json_config.load(path)
    name = json_config.require(config, "architecture", str, path)
    naflex = name.startswith("naflexvit_")
    fields = _naflex_fields(name, path) if naflex else architecture_switches(name, path)
    args = json_config.require(config, "model_args", dict, path, default={})
    unknown = sorted(set(args) - _MODEL_ARGS)
    if unknown:
        raise ValueError(f"{path!r}: model_args {unknown} are timm options vit_keras does not implement.")
    margs = f"{path} model_args"
    if naflex:
        # NaFlexVit keeps its position grid at pos_embed_grid_size whatever img_size says.
        grid = json_config.size_pair(args, "pos_embed_grid_size", margs, default=NAFLEX_GRID)
        patch = json_config.require(args, "patch_size", int, margs, positive=True, default=fields["patch_size"])
        fields["image_size"] = (grid[0] * patch, grid[1] * patch)
    elif "img_size" in args:
        fields["image_size"] = json_config.size_pair(args, "img_size", margs)
    else:
        cfg = json_config.require(config, "pretrained_cfg", dict, path, default={})
        input_size = json_config.require(cfg, "input_size", list, path, default=None)
        if input_size is not None and len(input_size) == 3:
            fields["image_size"] = json_config.size_pair({"input_size": input_size[1:]}, "input_size", path)
    for key, field in (("patch_size", "patch_size"), ("embed_dim", "hidden_size"), ("depth", "num_layers"),
                       ("num_heads", "num_heads")):
        if key in args:
            fields[field] = json_config.require(args, key, int, margs, positive=True)
    ratio = json_config.require(args, "mlp_ratio", float, margs, positive=True,
                                default=NAFLEX_ARCHITECTURES[name]["mlp_ratio"] if naflex else 4.0)
    fields["mlp_dim"] = int(fields["hidden_size"] * ratio)
    for key, field in (("class_token", "class_token"), ("no_embed_class", "no_embed_class"),
                       ("pre_norm", "pre_norm"), ("qkv_bias", "qkv_bias"), ("final_norm", "final_norm")):
        if key in args:
            fields[field] = json_config.require(args, key, bool, margs)
    if "pre_norm" in args:
        fields["patch_bias"] = not fields["pre_norm"]
    if "act_layer" in args:
        act_layer = json_config.require(args, "act_layer", str, margs)
        if act_layer not in ACT_LAYERS:
            raise ValueError(f"{path!r}: act_layer {act_layer!r} is not one vit_keras implements "
                             f"({sorted(ACT_LAYERS)}).")
        fields["activation"] = ACT_LAYERS[act_layer]
    if "reg_tokens" in args:
        fields["num_register_tokens"] = json_config.require(args, "reg_tokens", int, margs)
    if args.get("init_values") is not None:
        fields["layer_scale"] = True
    global_pool = json_config.require(args, "global_pool", str, margs,
                                      default=json_config.require(config, "global_pool", str, path, default=None))
    if global_pool is not None:
        if global_pool not in ("token", "avg", "map", ""):
            raise ValueError(f"{path!r}: global_pool {global_pool!r} is not one of 'token', 'avg', 'map'.")
        fields["global_pool"] = global_pool or "token"
    # timm: fc_norm=None means "after pooling exactly when the pooling is an average".
    fc_norm = args.get("fc_norm")
    fields["fc_norm"] = (fields.get("global_pool") == "avg" if fc_norm is None
                         else json_config.require(args, "fc_norm", bool, margs))
    if not fields.get("final_norm", True):
        fields["fc_norm"] = False  # timm: final_norm=False makes both `norm` and `fc_norm` Identity
    if json_config.require(args, "in_chans", int, margs, default=3) != 3:
        raise ValueError(f"{path!r}: in_chans {args['in_chans']} (vit_keras checkpoints take RGB).")
    if fields.get("distilled") and fields.get("global_pool", "token") != "token":
        raise ValueError(f"{path!r}: a distilled model pools its tokens, not {fields['global_pool']!r}.")
    return fields, pretrained_normalization(config, path)


def pretrained_normalization(config: dict, path: str = CONFIG_NAME) -> tuple | None:
    """The (mean, std) a timm config.json's `pretrained_cfg` states, or None when it states none.

    Example:
        >>> pretrained_normalization({"pretrained_cfg": {"mean": [0.5] * 3, "std": [0.5] * 3}})
        ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    """
    cfg = json_config.require(config, "pretrained_cfg", dict, path, default={})
    if "mean" not in cfg and "std" not in cfg:
        return None
    mean = json_config.require(cfg, "mean", list, f"{path} pretrained_cfg")
    std = json_config.require(cfg, "std", list, f"{path} pretrained_cfg")
    if len(mean) != 3 or len(std) != 3 or not all(isinstance(v, int | float) for v in mean + std):
        raise ValueError(f"{path!r}: pretrained_cfg mean/std must be 3 numbers each, got {mean!r}, {std!r}.")
    if not all(s > 0 for s in std):
        raise ValueError(f"{path!r}: pretrained_cfg std must be positive, got {std!r}.")
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)
