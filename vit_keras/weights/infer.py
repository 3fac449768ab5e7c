"""Read an architecture (`ViTConfig` fields) off a canonical parameter dict, for checkpoints whose files say nothing
else (Google `.npz`, bare timm state dicts).

Example:
    >>> from vit_keras.weights.google import read_npz
    >>> infer_config_fields(read_npz("tests/fixtures/vitjax_token_raw/checkpoint.npz"))["hidden_size"]
    48
"""

from __future__ import annotations

import math
import re

from vit_keras.weights.google import POS_EMBEDDING_KEY

_BLOCK = re.compile(r"^Transformer/encoderblock_(\d+)/")
_UNIT = re.compile(r"^block(\d+)/unit(\d+)/")


def infer_config_fields(params: dict, source_grid=None, no_embed_class: bool | None = None) -> dict:
    """`ViTConfig` fields that the shapes and names of a canonical parameter dict determine.

    The image size is the stored position-embedding grid times the total stride; `source_grid` says the grid
    when it is not square. `no_embed_class=None` reads it off the table's length when the grid is square.

    Example:
        >>> from vit_keras.weights.google import read_npz
        >>> params = read_npz("tests/fixtures/vitjax_token_raw/checkpoint.npz")
        >>> infer_config_fields(params)["num_layers"]
        2
    """
    try:
        kernel = params["embedding/kernel"]
    except KeyError as error:
        raise ValueError("The checkpoint has no `embedding/kernel`; it is not a ViT.") from error
    patch, hidden = int(kernel.shape[0]), int(kernel.shape[-1])
    layers = sorted({int(m.group(1)) for k in params if (m := _BLOCK.match(k))})
    if not layers:
        raise ValueError("The checkpoint has no Transformer encoder blocks.")
    block = f"Transformer/encoderblock_{layers[0]}"
    query = params[f"{block}/MultiHeadDotProductAttention_1/query/kernel"]
    mlp = params[f"{block}/MlpBlock_3/Dense_0/kernel"]
    fields = {
        "patch_size": patch,
        "hidden_size": hidden,
        "num_layers": len(layers),
        "num_heads": int(query.shape[1]),
        "mlp_dim": int(mlp.shape[-1]),
        "class_token": "cls" in params,
        "distilled": "dist" in params,
        "num_register_tokens": int(params["reg"].shape[1]) if "reg" in params else 0,
        "layer_scale": f"{block}/LayerScale_1/scale" in params,
        "pre_norm": "pre_norm/scale" in params,
        "fc_norm": "fc_norm/scale" in params and "Transformer/encoder_norm/scale" not in params,
        "patch_bias": "embedding/bias" in params,
        "qkv_bias": f"{block}/MultiHeadDotProductAttention_1/query/bias" in params,
        "representation_size": int(params["pre_logits/bias"].shape[0]) if "pre_logits/bias" in params else None,
    }
    fields["global_pool"] = ("map" if "MAPHead_0/probe" in params else "token" if fields["class_token"] else "avg")
    units: dict[int, int] = {}
    for key in params:
        if m := _UNIT.match(key):
            units[int(m.group(1))] = max(units.get(int(m.group(1)), 0), int(m.group(2)))
    stride = 1
    fields["resnet"] = None
    if "conv_root/kernel" in params:
        width = int(params["conv_root/kernel"].shape[-1])
        fields["resnet"] = {"num_layers": [units[s] for s in sorted(units)], "width_factor": max(width // 64, 1)}
        stride = 4 * 2 ** max(len(units) - 1, 0)
    fields["image_size"] = None
    if POS_EMBEDDING_KEY in params:
        rows = int(params[POS_EMBEDDING_KEY].shape[1])
        prefix = int(fields["class_token"]) + int(fields["distilled"]) + fields["num_register_tokens"]
        candidates = [False, True] if no_embed_class is None else [no_embed_class]
        for flag in candidates:
            patches = rows - (0 if flag else prefix)
            grid = source_grid
            if grid is None and patches > 0:
                side = math.isqrt(patches)
                grid = (side, side) if side * side == patches else None
            if grid is not None and grid[0] * grid[1] == patches:
                fields["no_embed_class"] = flag and prefix > 0
                fields["image_size"] = tuple(int(g) * patch * stride for g in grid)
                break
    return fields
