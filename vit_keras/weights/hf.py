"""Read Hugging Face `transformers` vision towers (`config.json` + `model.safetensors`) without torch.

Supported `model_type`s: `vit` (`ViTModel`, `ViTForImageClassification`: the pooler `tanh(dense(token))` is vit_jax's
`pre_logits`), `dinov2` (`Dinov2Model`: LayerScale), `clip_vision_model` (`CLIPVisionModel`: `pre_layrnorm`,
quick-GELU, `post_layernorm` on the class token only) and `siglip_vision_model` (`SiglipVisionModel`: no class
token, `post_layernorm` on every token, the attention-pooling `head`). Each maps onto the canonical vit_jax names
and a partial `ViTConfig` read off `config.json`; errors name the file and the key.

Example:
    >>> params, fields = read_hf_dir("vit-base-patch16-224")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import re

import numpy as np

from vit_keras.weights import json_config, torch_layout
from vit_keras.weights.google import POS_EMBEDDING_KEY
from vit_keras.weights.safetensors_io import read_safetensors

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PICKLE_NAMES = ("pytorch_model.bin", "model.bin", "pytorch_model.pt")
# hidden_act values -> ViTConfig.activation (HF's "gelu" is exact erf; the tanh forms are the approximations).
_HIDDEN_ACTS = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "gelu_fast": "gelu_tanh", "quick_gelu": "quick_gelu"}
MODEL_TYPES = ("vit", "dinov2", "clip_vision_model", "siglip_vision_model")
_VIT_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias|lambda1)$")
_CLIP_LAYER = re.compile(r"^encoder\.layers\.(\d+)\.(.+)\.(weight|bias)$")


def is_hf_dir(path: str) -> bool:
    """Whether `path` is a `save_pretrained` directory (it has a config.json).

    Example:
        >>> is_hf_dir("/nonexistent")
        False
    """
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG_NAME))


def read_config(path: str) -> dict:
    """The `config.json` of an HF directory, checked for what vit_keras can run.

    Example:
        >>> read_config("vit-base-patch16-224")["hidden_size"]  # doctest: +SKIP
        768
    """
    file = os.path.join(path, CONFIG_NAME)
    config = json_config.load(file)
    model_type = json_config.require(config, "model_type", str, file, default="vit")
    if model_type in ("clip", "siglip") and isinstance(config.get("vision_config"), dict):
        raise ValueError(f"{path!r} holds a whole {model_type} model (text and vision); save its vision tower "
                         f"({'CLIP' if model_type == 'clip' else 'Siglip'}VisionModel) and load that directory.")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"{path!r} holds a {model_type!r} model; vit_keras reads Hugging Face {MODEL_TYPES}.")
    act = json_config.require(config, "hidden_act", str, file, default="gelu")
    if act not in _HIDDEN_ACTS:
        raise ValueError(f"{file!r}: hidden_act {act!r} is not a GELU; vit_keras supports {sorted(_HIDDEN_ACTS)}.")
    if json_config.require(config, "num_channels", int, file, default=3) != 3:
        raise ValueError(f"{file!r}: num_channels {config['num_channels']} (vit_keras checkpoints take RGB).")
    if config.get("use_swiglu_ffn"):
        raise ValueError(f"{file!r}: use_swiglu_ffn (DINOv2 giant's SwiGLU MLP) is not implemented in vit_keras.")
    return config


def architecture(config: dict, path: str) -> dict:
    """The `ViTConfig` fields an HF config.json gives (the rest is read off the weights).

    Example:
        >>> architecture({"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3,
        ...               "intermediate_size": 96, "patch_size": 8, "image_size": 32}, "x")["mlp_dim"]
        96
    """
    file = os.path.join(path, CONFIG_NAME)
    model_type = config.get("model_type", "vit")
    # save_pretrained always writes the sizes; a config without them is refused by name rather than given
    # transformers' class defaults, which would only surface later as shape mismatches.
    hidden = json_config.require(config, "hidden_size", int, file, positive=True)
    fields = {
        "hidden_size": hidden,
        "num_layers": json_config.require(config, "num_hidden_layers", int, file, positive=True),
        "num_heads": json_config.require(config, "num_attention_heads", int, file, positive=True),
        "patch_size": json_config.require(config, "patch_size", int, file, positive=True),
        "image_size": json_config.size_pair(config, "image_size", file),
        "activation": _HIDDEN_ACTS[config.get("hidden_act", "gelu")],
        "layer_norm_epsilon": float(json_config.require(config, "layer_norm_eps", float, file, positive=True,
                                                        default=1e-12 if model_type == "vit" else 1e-6)),
        "qkv_bias": json_config.require(config, "qkv_bias", bool, file, default=True),
    }
    if model_type == "dinov2":
        ratio = json_config.require(config, "mlp_ratio", float, file, default=4, positive=True)
        fields.update(mlp_dim=int(hidden * ratio), layer_scale=True)
    else:
        fields["mlp_dim"] = json_config.require(config, "intermediate_size", int, file, default=4 * hidden,
                                                positive=True)
    if model_type == "clip_vision_model":
        fields.update(pre_norm=True, fc_norm=True, patch_bias=False)
    if model_type == "siglip_vision_model":
        use_head = json_config.require(config, "vision_use_head", bool, file, default=True)
        fields.update(class_token=False, global_pool="map" if use_head else "avg")
    return fields


def weights_file(path: str) -> str:
    """The safetensors file of an HF directory; pickle-only directories are refused.

    Example:
        >>> weights_file("vit-base-patch16-224")  # doctest: +SKIP
        'vit-base-patch16-224/model.safetensors'
    """
    candidate = os.path.join(path, WEIGHTS_NAME)
    if os.path.isfile(candidate):
        return candidate
    if os.path.isfile(os.path.join(path, "model.safetensors.index.json")):
        raise ValueError(f"{path!r} is a sharded checkpoint; merge the shards into one model.safetensors.")
    pickles = [name for name in PICKLE_NAMES if os.path.isfile(os.path.join(path, name))]
    if pickles:
        raise ValueError(
            f"{path!r} only has {pickles[0]}, a pickle file, which vit_keras does not load (unpickling can run "
            "code). Use the model's model.safetensors twin (on the Hub: the same repo, or "
            "`save_pretrained(..., safe_serialization=True)`)."
        )
    raise ValueError(f"{path!r} has no {WEIGHTS_NAME}.")


def gelu_approximate(config: dict) -> bool | None:
    """Whether the config's activation is the tanh GELU (False: exact erf; None: quick-GELU).

    Example:
        >>> gelu_approximate({"hidden_act": "gelu"})
        False
    """
    return {"gelu_tanh": True, "gelu": False}.get(_HIDDEN_ACTS[config.get("hidden_act", "gelu")])


def _vit_like(tensors, heads, unknown) -> dict:
    """`ViTModel` / `Dinov2Model` names (`embeddings.*`, `encoder.layer.{i}.*`, `layernorm`)."""
    out: dict[str, np.ndarray] = {}
    attention: dict[str, dict] = {}
    for name, value in tensors.items():
        short = name[len("vit."):] if name.startswith("vit.") else name
        short = short[len("dinov2."):] if short.startswith("dinov2.") else short
        if short == "embeddings.cls_token":
            out["cls"] = value
        elif short == "embeddings.position_embeddings":
            out[POS_EMBEDDING_KEY] = value
        elif short == "embeddings.patch_embeddings.projection.weight":
            out["embedding/kernel"] = torch_layout.patch_kernel(value)
        elif short == "embeddings.patch_embeddings.projection.bias":
            out["embedding/bias"] = value
        elif short == "embeddings.mask_token":
            continue  # masked-image-modelling only; not part of the forward pass
        elif short in ("layernorm.weight", "layernorm.bias"):
            out["Transformer/encoder_norm/" + ("scale" if short.endswith("weight") else "bias")] = value
        elif short in ("pooler.dense.weight", "pooler.dense.bias"):
            out["pre_logits/" + ("kernel" if short.endswith("weight") else "bias")] = (
                value.T if short.endswith("weight") else value)
        elif name in ("classifier.weight", "classifier.bias"):
            out["head/" + ("kernel" if name.endswith("weight") else "bias")] = value.T if value.ndim == 2 else value
        elif match := _VIT_LAYER.match(short):
            index, module, param = match.groups()
            prefix = f"Transformer/encoderblock_{index}"
            norms = {"layernorm_before": "LayerNorm_0", "norm1": "LayerNorm_0", "layernorm_after": "LayerNorm_2",
                     "norm2": "LayerNorm_2"}
            linears = {"intermediate.dense": "Dense_0", "output.dense": "Dense_1", "mlp.fc1": "Dense_0",
                       "mlp.fc2": "Dense_1"}
            projections = {"attention.attention.query": "q", "attention.attention.key": "k",
                           "attention.attention.value": "v", "attention.output.dense": "o"}
            if module in norms:
                out[f"{prefix}/{norms[module]}/{'scale' if param == 'weight' else 'bias'}"] = value
            elif module in linears:
                out[f"{prefix}/MlpBlock_3/{linears[module]}/{'kernel' if param == 'weight' else 'bias'}"] = (
                    value.T if param == "weight" else value)
            elif module in projections:
                attention.setdefault(index, {})[f"{projections[module]}.{param}"] = value
            elif module in ("layer_scale1", "layer_scale2") and param == "lambda1":
                out[f"{prefix}/LayerScale_{1 if module.endswith('1') else 3}/scale"] = value
            else:
                unknown.append(name)
        else:
            unknown.append(name)
    for index, parts in attention.items():
        out.update(_attention(f"Transformer/encoderblock_{index}/MultiHeadDotProductAttention_1", parts, heads))
    return out


def _attention(prefix, parts, heads):
    pairs = [(parts[f"{p}.weight"], parts.get(f"{p}.bias")) for p in "qkvo"]
    return torch_layout.attention(prefix, *pairs, heads)


def _clip_like(tensors, heads, unknown) -> dict:
    """`CLIPVisionModel` / `SiglipVisionModel` names (`embeddings.*`, `encoder.layers.{i}.*`, `post_layernorm`,
    `head.*`)."""
    out: dict[str, np.ndarray] = {}
    attention: dict[str, dict] = {}
    for name, value in tensors.items():
        short = name[len("vision_model."):] if name.startswith("vision_model.") else name
        if short == "embeddings.class_embedding":
            out["cls"] = value.reshape(1, 1, -1)
        elif short == "embeddings.position_embedding.weight":
            out[POS_EMBEDDING_KEY] = value[None]
        elif short == "embeddings.patch_embedding.weight":
            out["embedding/kernel"] = torch_layout.patch_kernel(value)
        elif short == "embeddings.patch_embedding.bias":
            out["embedding/bias"] = value
        elif short.startswith(("pre_layrnorm.", "post_layernorm.", "head.layernorm.")):
            module, param = short.rsplit(".", 1)
            target = {"pre_layrnorm": "pre_norm", "post_layernorm": "post_layernorm",
                      "head.layernorm": "MAPHead_0/LayerNorm_0"}[module]
            out[f"{target}/{'scale' if param == 'weight' else 'bias'}"] = value
        elif short == "head.probe":
            out["MAPHead_0/probe"] = value
        elif short.startswith("head.mlp.fc"):
            module, param = short.rsplit(".", 1)
            dense = "Dense_0" if module.endswith("fc1") else "Dense_1"
            out[f"MAPHead_0/MlpBlock_0/{dense}/{'kernel' if param == 'weight' else 'bias'}"] = (
                value.T if param == "weight" else value)
        elif short.startswith("head.attention."):
            attention.setdefault("head", {})[short[len("head.attention."):]] = value
        elif match := _CLIP_LAYER.match(short):
            index, module, param = match.groups()
            prefix = f"Transformer/encoderblock_{index}"
            norms = {"layer_norm1": "LayerNorm_0", "layer_norm2": "LayerNorm_2"}
            if module in norms:
                out[f"{prefix}/{norms[module]}/{'scale' if param == 'weight' else 'bias'}"] = value
            elif module in ("mlp.fc1", "mlp.fc2"):
                dense = "Dense_0" if module.endswith("fc1") else "Dense_1"
                out[f"{prefix}/MlpBlock_3/{dense}/{'kernel' if param == 'weight' else 'bias'}"] = (
                    value.T if param == "weight" else value)
            elif module in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"):
                attention.setdefault(index, {})[f"{module[len('self_attn.')]}.{param}"] = value
            else:
                unknown.append(name)
        else:
            unknown.append(name)
    for index, parts in attention.items():
        if index == "head":  # torch.nn.MultiheadAttention: packed in_proj (3D, D), out_proj
            q, k, v = torch_layout.split_fused(parts["in_proj_weight"], parts.get("in_proj_bias"), 3)
            out.update(torch_layout.attention("MAPHead_0/MultiHeadDotProductAttention_0", q, k, v,
                                              (parts["out_proj.weight"], parts.get("out_proj.bias")), heads))
        else:
            out.update(_attention(f"Transformer/encoderblock_{index}/MultiHeadDotProductAttention_1", parts, heads))
    return out


def canonicalize(tensors: dict[str, np.ndarray], config: dict) -> dict[str, np.ndarray]:
    """HF tensors -> the canonical vit_jax raw-name dict.

    Example:
        >>> canonicalize(read_safetensors("model.safetensors"), config)  # doctest: +SKIP
    """
    heads = int(config.get("num_attention_heads", 12))
    model_type = config.get("model_type", "vit")
    tensors = {name: np.asarray(value, np.float32) for name, value in tensors.items()}
    unknown: list[str] = []
    if model_type in ("vit", "dinov2"):
        out = _vit_like(tensors, heads, unknown)
    else:
        out = _clip_like(tensors, heads, unknown)
        post = {k.split("/", 1)[1]: out.pop(k) for k in [k for k in out if k.startswith("post_layernorm/")]}
        # CLIP normalises the pooled class token only (fc_norm); SigLIP every token (the final norm).
        target = "fc_norm" if model_type == "clip_vision_model" else "Transformer/encoder_norm"
        out.update({f"{target}/{k}": v for k, v in post.items()})
    if unknown:
        raise ValueError(f"Unknown Hugging Face {model_type} tensors (not a model vit_keras implements?): "
                         f"{', '.join(sorted(unknown))}")
    return out


def read_hf_dir(path: str) -> tuple[dict[str, np.ndarray], dict]:
    """Read an HF directory into (canonical params, config.json).

    Example:
        >>> params, config = read_hf_dir("vit-base-patch16-224")  # doctest: +SKIP
    """
    config = read_config(path)
    return canonicalize(read_safetensors(weights_file(path)), config), config
