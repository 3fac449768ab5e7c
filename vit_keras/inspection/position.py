"""Position-embedding similarity (the paper's Fig. 7 centre and Fig. 10)."""

from __future__ import annotations

import keras
import numpy as np

from vit_keras.inspection.probe import AttentionProbe


def cosine_similarity_grid(table) -> np.ndarray:
    """Cosine similarity of every patch's embedding with every other: `(gh, gw, D)` -> `(gh, gw, gh, gw)`.

    `result[i, j]` is the `(gh, gw)` map of how similar patch `(i, j)`'s embedding is to each patch's.

    Example:
        >>> cosine_similarity_grid(np.eye(4).reshape(2, 2, 4)).reshape(4, 4)
        array([[1., 0., 0., 0.],
               [0., 1., 0., 0.],
               [0., 0., 1., 0.],
               [0., 0., 0., 1.]])
    """
    table = np.asarray(table, dtype=np.float64)
    if table.ndim != 3:
        raise ValueError(f"Expected a (grid_height, grid_width, dim) table, got shape {table.shape}.")
    gh, gw, dim = table.shape
    flat = table.reshape(gh * gw, dim)
    norms = np.linalg.norm(flat, axis=-1, keepdims=True)
    unit = flat / np.where(norms > 0, norms, 1.0)
    return (unit @ unit.T).reshape(gh, gw, gh, gw)


def position_embeddings(model) -> np.ndarray:
    """The `(gh, gw, D)` position embeddings of a model's patches (learned 1-D, learned 2-D or sin-cos).

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> position_embeddings(model).shape
        (4, 4, 48)
    """
    encoder = AttentionProbe(model).patch_encoder
    table = encoder.patch_position_embeddings()
    if table is None:
        raise ValueError(
            f"Model {model.name!r} was built with position_embedding={encoder.position_embedding!r}: it has no "
            "position embeddings to compare. Use a model with 'learned_1d', 'learned_2d' or 'sincos_2d'."
        )
    return np.asarray(keras.ops.convert_to_numpy(table), dtype=np.float32)


def position_embedding_similarity(model) -> np.ndarray:
    """Cosine similarity between the position embeddings of all patch pairs: `(gh, gw, gh, gw)`.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> position_embedding_similarity(model).shape
        (4, 4, 4, 4)
    """
    return cosine_similarity_grid(position_embeddings(model)).astype(np.float32)
