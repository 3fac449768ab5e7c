"""Read a model's architecture off a canonical parameter dict, so that a checkpoint can be converted alone.

Example:
    >>> infer_architecture(read_npz("ViT-B_16.npz"))["hidden_size"]  # doctest: +SKIP
    768
"""

from __future__ import annotations

import math
import re

from vit_keras.weights.google import POS_EMBEDDING_KEY

_BLOCK = re.compile(r"^Transformer/encoderblock_(\d+)/")
_UNIT = re.compile(r"^block(\d+)/unit(\d+)/")


def infer_architecture(params: dict, source_grid=None) -> dict:
    """`vit_keras.ViT` keyword arguments that rebuild the model a canonical parameter dict came from.

    The image size is the stored position-embedding grid times the total stride; `source_grid` says the grid
    when it is not square.

    Example:
        >>> infer_architecture(params)["num_layers"]  # doctest: +SKIP
        12
    """
    try:
        kernel = params["embedding/kernel"]
    except KeyError as error:
        raise ValueError("The checkpoint has no `embedding/kernel`; it is not a ViT.") from error
    patch, hidden = int(kernel.shape[0]), int(kernel.shape[-1])
    layers = sorted({int(m.group(1)) for k in params if (m := _BLOCK.match(k))})
    if not layers:
        raise ValueError("The checkpoint has no Transformer encoder blocks.")
    query = params[f"Transformer/encoderblock_{layers[0]}/MultiHeadDotProductAttention_1/query/kernel"]
    mlp = params[f"Transformer/encoderblock_{layers[0]}/MlpBlock_3/Dense_0/kernel"]
    classifier = "token" if "cls" in params else "gap"
    units = {}
    for key in params:
        if m := _UNIT.match(key):
            units[int(m.group(1))] = max(units.get(int(m.group(1)), 0), int(m.group(2)))
    resnet = None
    stride = 1
    if "conv_root/kernel" in params:
        width = int(params["conv_root/kernel"].shape[-1])
        resnet = {"num_layers": [units[s] for s in sorted(units)], "width_factor": max(width // 64, 1)}
        stride = 4 * 2 ** max(len(units) - 1, 0)
    image_size = None
    if POS_EMBEDDING_KEY in params:
        patches = params[POS_EMBEDDING_KEY].shape[1] - (1 if classifier == "token" else 0)
        if source_grid is None:
            side = math.isqrt(patches)
            source_grid = (side, side) if side * side == patches else None
        if source_grid is not None:
            image_size = [int(g) * patch * stride for g in source_grid]
    head = params.get("head/bias")
    rep = params.get("pre_logits/bias")
    return {
        "image_size": image_size,
        "patch_size": patch,
        "hidden_size": hidden,
        "num_layers": len(layers),
        "num_heads": int(query.shape[1]),
        "mlp_dim": int(mlp.shape[-1]),
        "classifier": classifier,
        "representation_size": None if rep is None else int(rep.shape[0]),
        "resnet": resnet,
        "classes": None if head is None else int(head.shape[0]),
    }
