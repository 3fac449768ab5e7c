"""Read Hugging Face `transformers` ViT checkpoints (`config.json` + `model.safetensors`) without torch.

Keys of `ViTForImageClassification` (`vit.` prefix, `classifier`) and of `ViTModel` (no prefix, optional
`pooler.dense`) map onto the canonical vit_jax names. Torch `Linear` weights are (out, in) and are transposed;
the patch convolution is OIHW. The pooler (`tanh(dense(token))`) is the same computation as vit_jax's
`pre_logits`, so it loads there. `hidden_act` and `layer_norm_eps` come from `config.json`.

Example:
    >>> params, config = read_hf_dir("vit-base-patch16-224")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from vit_keras.weights.google import POS_EMBEDDING_KEY
from vit_keras.weights.safetensors_io import read_safetensors

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
PICKLE_NAMES = ("pytorch_model.bin", "model.bin", "pytorch_model.pt")
# hidden_act values -> gelu_approximate (HF's "gelu" is exact erf; the tanh forms are the approximations).
_HIDDEN_ACTS = {"gelu": False, "gelu_python": False, "gelu_new": True, "gelu_pytorch_tanh": True,
                "gelu_fast": True}
_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)$")
_LAYER_MAP = {
    "layernorm_before": ("LayerNorm_0", "norm"),
    "layernorm_after": ("LayerNorm_2", "norm"),
    "attention.attention.query": ("MultiHeadDotProductAttention_1/query", "qkv"),
    "attention.attention.key": ("MultiHeadDotProductAttention_1/key", "qkv"),
    "attention.attention.value": ("MultiHeadDotProductAttention_1/value", "qkv"),
    "attention.output.dense": ("MultiHeadDotProductAttention_1/out", "out"),
    "intermediate.dense": ("MlpBlock_3/Dense_0", "linear"),
    "output.dense": ("MlpBlock_3/Dense_1", "linear"),
}


def is_hf_dir(path: str) -> bool:
    """Whether `path` is a `save_pretrained` directory (it has a config.json).

    Example:
        >>> is_hf_dir("/nonexistent")
        False
    """
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG_NAME))


def read_config(path: str) -> dict:
    """The `config.json` of an HF ViT directory, checked for what vit_keras can run.

    Example:
        >>> read_config("vit-base-patch16-224")["hidden_size"]  # doctest: +SKIP
        768
    """
    with open(os.path.join(path, CONFIG_NAME)) as f:
        config = json.load(f)
    model_type = config.get("model_type", "vit")
    if model_type != "vit":
        raise ValueError(f"{path!r} holds a {model_type!r} model; vit_keras reads Hugging Face 'vit' models.")
    act = config.get("hidden_act", "gelu")
    if act not in _HIDDEN_ACTS:
        raise ValueError(f"{path!r}: hidden_act {act!r} is not a GELU; vit_keras supports {sorted(_HIDDEN_ACTS)}.")
    if config.get("num_channels", 3) != 3:
        raise ValueError(f"{path!r}: num_channels {config['num_channels']} (vit_keras checkpoints take RGB).")
    return config


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


def gelu_approximate(config: dict) -> bool:
    """Whether the config's activation is the tanh GELU (False: exact erf).

    Example:
        >>> gelu_approximate({"hidden_act": "gelu"})
        False
    """
    return _HIDDEN_ACTS[config.get("hidden_act", "gelu")]


def canonicalize(tensors: dict[str, np.ndarray], config: dict) -> dict[str, np.ndarray]:
    """HF ViT tensors -> the canonical vit_jax raw-name dict.

    Example:
        >>> canonicalize(read_safetensors("model.safetensors"), config)  # doctest: +SKIP
    """
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = hidden // heads
    out: dict[str, np.ndarray] = {}
    unknown = []
    for name, value in tensors.items():
        value = np.asarray(value, np.float32)
        short = name[len("vit.") :] if name.startswith("vit.") else name
        if short == "embeddings.cls_token":
            out["cls"] = value
        elif short == "embeddings.position_embeddings":
            out[POS_EMBEDDING_KEY] = value
        elif short == "embeddings.patch_embeddings.projection.weight":
            out["embedding/kernel"] = value.transpose(2, 3, 1, 0)
        elif short == "embeddings.patch_embeddings.projection.bias":
            out["embedding/bias"] = value
        elif short == "embeddings.mask_token":
            continue  # masked-image-modelling only; not part of the forward pass
        elif short in ("layernorm.weight", "layernorm.bias"):
            out["Transformer/encoder_norm/" + ("scale" if short.endswith("weight") else "bias")] = value
        elif short in ("pooler.dense.weight", "pooler.dense.bias"):
            out["pre_logits/" + ("kernel" if short.endswith("weight") else "bias")] = (
                value.T if short.endswith("weight") else value
            )
        elif name in ("classifier.weight", "classifier.bias"):
            out["head/" + ("kernel" if name.endswith("weight") else "bias")] = value.T if value.ndim == 2 else value
        elif match := _LAYER.match(short):
            index, rest = match.groups()
            module, param = rest.rsplit(".", 1)
            if module not in _LAYER_MAP or param not in ("weight", "bias"):
                unknown.append(name)
                continue
            target, kind = _LAYER_MAP[module]
            prefix = f"Transformer/encoderblock_{index}/{target}"
            if kind == "norm":
                out[f"{prefix}/{'scale' if param == 'weight' else 'bias'}"] = value
            elif param == "bias":
                out[f"{prefix}/bias"] = value.reshape(heads, head_dim) if kind == "qkv" else value
            elif kind == "qkv":
                out[f"{prefix}/kernel"] = value.T.reshape(hidden, heads, head_dim)
            elif kind == "out":
                out[f"{prefix}/kernel"] = value.T.reshape(heads, head_dim, hidden)
            else:
                out[f"{prefix}/kernel"] = value.T
        else:
            unknown.append(name)
    if not config.get("qkv_bias", True):
        # qkv_bias=False: the projections have no bias, which is a zero bias in vit_jax's layout.
        for key in [k for k in out if k.endswith("/query/kernel")]:
            for part in ("query", "key", "value"):
                out.setdefault(key.replace("/query/kernel", f"/{part}/bias"), np.zeros((heads, head_dim), np.float32))
    if unknown:
        raise ValueError(f"Unknown Hugging Face ViT tensors (not a plain ViT?): {', '.join(sorted(unknown))}")
    return out


def read_hf_dir(path: str) -> tuple[dict[str, np.ndarray], dict]:
    """Read an HF ViT directory into (canonical params, config).

    Example:
        >>> params, config = read_hf_dir("vit-base-patch16-224")  # doctest: +SKIP
    """
    config = read_config(path)
    return canonicalize(read_safetensors(weights_file(path)), config), config
