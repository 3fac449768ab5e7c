"""Move trained weights into a model of the same architecture at another resolution or with another head."""

from __future__ import annotations

import logging

import numpy as np

from vit_keras.weights.resample import resample_position_embeddings

logger = logging.getLogger(__name__)

HEAD_LAYERS = ("head",)


def _zoom_table(table, size):
    import scipy.ndimage

    if table.shape[0] == size:
        return table
    return scipy.ndimage.zoom(table, (size / table.shape[0], 1), order=1).astype(table.dtype)


def _transfer_patch_encoder(src, dst):
    for weight in dst.weights:
        name = weight.path.split("/")[-1]
        source = {w.path.split("/")[-1]: w for w in src.weights}.get(name)
        if source is None:
            raise ValueError(f"The source model has no position-encoder weight {name!r}: are both ViTs alike?")
        value = np.asarray(source.numpy())
        if name == "pos_embedding" and value.shape != tuple(weight.shape):
            value = resample_position_embeddings(value, dst.grid_size, num_prefix_tokens=dst.num_prefix_tokens,
                                                 source_grid=src.grid_size)
            logger.info("Resampled position embeddings from grid %s to %s.", src.grid_size, dst.grid_size)
        elif name == "pos_embedding_row":
            value = _zoom_table(value, dst.grid_size[0])
        elif name == "pos_embedding_col":
            value = _zoom_table(value, dst.grid_size[1])
        weight.assign(value)


def transfer_weights(src_model, dst_model, *, reset_head: bool | None = None) -> dict:
    """Copy every weight of `src_model` into `dst_model` (same architecture), the paper's fine-tuning way.

    - A different input resolution: position embeddings are resampled to the new grid (vit_jax semantics).
    - The head: copied when its shape matches and `reset_head` is not True; replaced by a zero-initialised one
      (paper §3.2) when the number of classes differs or `reset_head=True`.
    - `pre_logits`: copied when both models have it; dropped (as vit_jax does) when only the source has it.
    Any other mismatch raises a `ValueError`. Returns `{"resampled": bool, "head": "copied" | "zero-init"}`.

    Example:
        >>> kwargs = dict(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, classes=10)
        >>> low, high = vit_keras.ViT(image_size=16, **kwargs), vit_keras.ViT(image_size=32, **kwargs)
        >>> transfer_weights(low, high)
        {'resampled': True, 'head': 'copied'}
    """
    report = {"resampled": False, "head": "absent"}
    src_layers = {layer.name: layer for layer in src_model.layers}
    for layer in dst_model.layers:
        if not layer.weights:
            continue
        if layer.name in HEAD_LAYERS:
            source = src_layers.get(layer.name)
            same = source is not None and [tuple(w.shape) for w in source.weights] == [
                tuple(w.shape) for w in layer.weights
            ]
            if same and not reset_head:
                layer.set_weights(source.get_weights())
                report["head"] = "copied"
            else:
                if reset_head is False:
                    raise ValueError(
                        f"The heads differ ({[tuple(w.shape) for w in layer.weights]}); pass reset_head=None/True "
                        "to start the new head from zeros."
                    )
                layer.set_weights([np.zeros(tuple(w.shape), w.dtype) for w in layer.weights])
                report["head"] = "zero-init"
                logger.warning("Head %r starts from zeros (%d classes).", layer.name, layer.weights[0].shape[-1])
            continue
        source = src_layers.get(layer.name)
        if source is None:
            raise ValueError(
                f"Layer {layer.name!r} of {dst_model.name!r} has no counterpart in {src_model.name!r}: "
                "transfer_weights needs two models of the same architecture."
            )
        if layer.name == "patch_encoder":
            _transfer_patch_encoder(source, layer)
            report["resampled"] = tuple(source.grid_size) != tuple(layer.grid_size)
            continue
        shapes_src = [tuple(w.shape) for w in source.weights]
        shapes_dst = [tuple(w.shape) for w in layer.weights]
        if shapes_src != shapes_dst:
            raise ValueError(f"Layer {layer.name!r}: weight shapes {shapes_src} do not fit {shapes_dst}.")
        layer.set_weights(source.get_weights())
    return report
