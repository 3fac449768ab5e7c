"""Attention rollout (Abnar & Zuidema, 2020) and per-head attention maps, as in the paper's Fig. 6 / App. D.7."""

from __future__ import annotations

import dataclasses
import numbers

import keras
import numpy as np

from vit_keras.inspection.probe import AttentionProbe, FlexibleAttentionProbe


def _check_attention(attention, name="attention") -> np.ndarray:
    attention = np.asarray(attention, dtype=np.float64)
    if attention.ndim < 3 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(
            f"`{name}` must end in (heads, tokens, tokens) square attention matrices, got shape {attention.shape}."
        )
    return attention


def attention_rollout(attention, residual: bool = True) -> np.ndarray:
    """Attention rollout: how much each output token draws from each input token through all layers.

    Per layer the heads are averaged, the identity is added for the residual connection (when
    `residual`), rows are renormalised to sum to 1, and the layers are multiplied in order:
    `R = Â_L · … · Â_1` with `Â_l = normalise(mean_h A_l + I)`.

    Args:
        attention: `(layers, batch, heads, T, T)` or `(layers, heads, T, T)` attention weights
            (e.g. from `attention_weights`).
        residual: add the identity before renormalising (Abnar & Zuidema's rollout); False multiplies
            the raw head-averaged attention.

    Returns:
        `(batch, T, T)` (or `(T, T)`) row-stochastic matrices; row `i` is output token `i`'s mix of inputs.

    Example:
        >>> uniform = np.full((2, 1, 3, 5, 5), 0.2)
        >>> np.allclose(attention_rollout(uniform, residual=False), 0.2)
        True
    """
    attention = _check_attention(attention)
    if attention.ndim not in (4, 5):
        raise ValueError(
            f"`attention` must be (layers, batch, heads, T, T) or (layers, heads, T, T), got shape {attention.shape}."
        )
    layers = attention.mean(axis=-3)  # average the heads
    tokens = layers.shape[-1]
    if residual:
        layers = layers + np.eye(tokens)
    layers = layers / layers.sum(axis=-1, keepdims=True)
    rollout = layers[0]
    for layer in layers[1:]:
        rollout = layer @ rollout
    return rollout


def token_attention(matrix, num_prefix_tokens: int, grid_size) -> np.ndarray:
    """Where the model looks: a `(..., gh, gw)` distribution over patches from `(..., T, T)` attention.

    With a class token (`num_prefix_tokens=1`) this is the class token's row; without one (a
    `classifier="gap"` model, whose output is the mean of all tokens) it is the mean over all query
    rows. The class token's own column is dropped and the patch weights renormalised to sum to 1.

    Example:
        >>> token_attention(np.full((5, 5), 0.2), num_prefix_tokens=1, grid_size=(2, 2))
        array([[0.25, 0.25],
               [0.25, 0.25]])
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    gh, gw = grid_size
    if matrix.shape[-1] != num_prefix_tokens + gh * gw or matrix.shape[-2] != matrix.shape[-1]:
        raise ValueError(
            f"Attention of shape {matrix.shape} does not match {num_prefix_tokens} prefix token(s) plus a "
            f"{gh}x{gw} patch grid."
        )
    rows = matrix[..., 0, :] if num_prefix_tokens else matrix.mean(axis=-2)
    patches = rows[..., num_prefix_tokens:]
    patches = patches / np.maximum(patches.sum(axis=-1, keepdims=True), np.finfo(np.float64).tiny)
    return patches.reshape(*patches.shape[:-1], gh, gw)


def upsample(maps, size) -> np.ndarray:
    """Bilinearly resize `(..., gh, gw)` maps to `(..., H, W)` (half-pixel centres, like tf.image.resize).

    Example:
        >>> upsample(np.eye(2), (4, 4)).shape
        (4, 4)
    """
    maps = np.asarray(maps, dtype=np.float32)
    lead = maps.shape[:-2]
    flat = maps.reshape(-1, *maps.shape[-2:], 1)
    resized = keras.ops.image.resize(flat, tuple(int(s) for s in size), interpolation="bilinear",
                                     antialias=False, data_format="channels_last")
    return np.asarray(keras.ops.convert_to_numpy(resized))[..., 0].reshape(*lead, *size)


@dataclasses.dataclass(frozen=True)
class AttentionMaps:
    """Attention maps of a batch of images.

    Attributes:
        rollout: `(B, gh, gw)` attention rollout of the class token (mean over queries for gap
            models), a distribution over patches.
        heads: `(B, heads, gh, gw)` class-token attention (mean over queries for gap) of each head of
            block `layer`, each a distribution over patches.
        layer: index of the block `heads` comes from.
        image_size: `(H, W)` of the model's input; `rollout_image`/`heads_image` are upsampled to it (if
            the model crops or resizes before the ViT, the maps are stretched over the whole input).
        patch_stride: pixels between patch centres.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> images = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
        >>> maps = attention_maps(model, images)
        >>> maps.rollout_image.shape
        (4, 32, 32)
    """

    rollout: np.ndarray
    heads: np.ndarray
    layer: int
    image_size: tuple
    patch_stride: tuple

    @property
    def rollout_image(self) -> np.ndarray:
        """`(B, H, W)` rollout upsampled to the image, scaled to a maximum of 1 per image."""
        return _unit_max(upsample(self.rollout, self.image_size))

    @property
    def heads_image(self) -> np.ndarray:
        """`(B, heads, H, W)` per-head maps upsampled to the image, scaled to a maximum of 1 per map."""
        return _unit_max(upsample(self.heads, self.image_size))


def _unit_max(maps):
    peak = maps.max(axis=(-2, -1), keepdims=True)
    return maps / np.where(peak > 0, peak, 1.0)


def resolve_layer(layer, num_layers: int) -> int:
    """Turn a possibly negative block index into `0..num_layers-1`, or raise a clear ValueError.

    Example:
        >>> resolve_layer(-1, 12)
        11
    """
    if isinstance(layer, bool) or not isinstance(layer, numbers.Integral):
        raise ValueError(f"`layer` must be an int block index, got {layer!r}.")
    if not -num_layers <= layer < num_layers:
        raise ValueError(
            f"Unknown layer index {layer}: the model has {num_layers} Transformer blocks "
            f"(valid: 0..{num_layers - 1}, or -1..-{num_layers} from the end)."
        )
    return int(layer) % num_layers


def attention_maps(model, images, layer: int = -1, batch_size: int = 8) -> AttentionMaps:
    """Attention rollout and one block's per-head class-token attention for each image.

    Args:
        model: a vit_keras model, or a functional model with one nested inside.
        images: `(B, H, W, C)` (or one `(H, W, C)`) images as the model takes them.
        layer: which block's heads to return (default: the last).
        batch_size: images per forward pass.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> images = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
        >>> maps = attention_maps(model, images)
        >>> maps.rollout.shape, maps.heads.shape
        ((4, 4, 4), (4, 3, 4, 4))
    """
    probe = AttentionProbe(model)
    layer = resolve_layer(layer, probe.num_layers)
    images = probe.check_images(images)
    grid = probe.grid_for(images.shape[1:3])
    rollouts, heads = [], []
    for attention in probe.iter_batches(images, batch_size):
        # Averaging the heads first (in float32) keeps memory at one (B, T, T) matrix per layer.
        joint = attention_rollout(np.stack([a.mean(axis=1, keepdims=True) for a in attention], axis=0))
        rollouts.append(token_attention(joint, probe.num_prefix_tokens, grid))
        heads.append(token_attention(attention[layer], probe.num_prefix_tokens, grid))
    return AttentionMaps(
        rollout=np.concatenate(rollouts).astype(np.float32),
        heads=np.concatenate(heads).astype(np.float32),
        layer=layer,
        image_size=tuple(int(s) for s in images.shape[1:3]),
        patch_stride=probe.patch_stride,
    )


def flexible_attention_maps(model, batch, layer: int = -1) -> list[AttentionMaps]:
    """`attention_maps` of a flexible (NaFlex) model: for each image of the `batch` (`patches`, `grid`, `mask`, e.g.
    `vit_keras.images.naflex_patches`), its maps at its own grid (rows x cols of its `grid`, the padding dropped).

    Returns one `AttentionMaps` per image, with a batch of one: `rollout` `(1, rows, cols)`, `heads`
    `(1, heads, rows, cols)`, `image_size` `(rows · P, cols · P)` (the image as it was cut into patches).

    Example:
        >>> import vit_keras
        >>> from vit_keras.images import naflex_patches
        >>> model = vit_keras.ViT(flexible=True, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)
        >>> images = [np.zeros((16, 40, 3)), np.zeros((24, 24, 3))]
        >>> batch = naflex_patches(images, 8, 10, resize=False)
        >>> [maps.rollout.shape for maps in flexible_attention_maps(model, batch)]
        [(1, 2, 5), (1, 3, 3)]
    """
    from vit_keras.layers.flexible import check_flexible_inputs

    probe = FlexibleAttentionProbe(model)
    layer = resolve_layer(layer, probe.num_layers)
    if not isinstance(batch, dict) or not {"patches", "grid", "mask"} <= set(batch):
        raise ValueError("`batch` must be a NaFlex dict of `patches`, `grid` and `mask` "
                         "(vit_keras.images.naflex_patches).")
    batch = {key: np.asarray(keras.ops.convert_to_numpy(batch[key])) for key in ("patches", "grid", "mask")}
    check_flexible_inputs(batch["patches"], batch["grid"], batch["mask"],
                          features=int(model.input["patches"].shape[-1]))
    attention = probe(batch)
    prefix, patch = probe.num_prefix_tokens, probe.patch_size
    maps = []
    for index, (rows, cols) in enumerate(batch["grid"].astype(int).tolist()):
        tokens = prefix + rows * cols
        # The padding's columns are exactly 0 and its rows are dropped: the image's own matrices, rows summing to 1.
        own = [a[index, :, :tokens, :tokens] for a in attention]
        joint = attention_rollout(np.stack([a.mean(axis=0, keepdims=True) for a in own], axis=0))
        maps.append(AttentionMaps(
            rollout=token_attention(joint, prefix, (rows, cols))[None].astype(np.float32),
            heads=token_attention(own[layer], prefix, (rows, cols))[None].astype(np.float32),
            layer=layer,
            image_size=(rows * patch, cols * patch),
            patch_stride=(float(patch), float(patch)),
        ))
    return maps
