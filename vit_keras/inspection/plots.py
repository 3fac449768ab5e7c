"""Matplotlib figures of the inspection results, after the paper's Fig. 6, 7, 10 and 11.

Each function takes the numbers the analysis functions return and gives back a
`matplotlib.figure.Figure`, made without pyplot: nothing global is touched and nothing is shown;
save with `figure.savefig(path)` or display it in a notebook.
"""

from __future__ import annotations

import numpy as np

from vit_keras.extras import require

_PURPOSE = "Drawing inspection figures (vit_keras.inspection.plot_*, write_figures, `vit-keras inspect`)"


def require_matplotlib(module: str = "matplotlib"):
    """Import matplotlib (or one of its modules), or raise the ImportError that names the [inspection] extra."""
    return require(module, "inspection", _PURPOSE)


def _figure(width, height):
    return require_matplotlib("matplotlib.figure").Figure(figsize=(width, height), dpi=100, layout="constrained")


def _display(image) -> np.ndarray:
    """An image scaled to [0, 1] for display, whatever range the model takes."""
    image = np.asarray(image, dtype=np.float32)
    low, high = float(image.min()), float(image.max())
    image = (image - low) / (high - low) if high > low else np.zeros_like(image)
    return image[..., 0] if image.shape[-1] == 1 else image


def _mosaic(tiles, gap_value=np.nan):
    """Lay `(rows, cols, h, w[, c])` tiles out as one image with a one-pixel gap between them."""
    rows, cols, h, w = tiles.shape[:4]
    extra = tiles.shape[4:]
    canvas = np.full((rows * (h + 1) - 1, cols * (w + 1) - 1, *extra), gap_value, dtype=np.float32)
    for r in range(rows):
        for c in range(cols):
            canvas[r * (h + 1) : r * (h + 1) + h, c * (w + 1) : c * (w + 1) + w] = tiles[r, c]
    return canvas


def plot_attention_maps(images, maps, max_images: int = 4, max_heads: int = 12):
    """Each image, its attention rollout (image × mask as in the paper's Fig. 6, and as a heat map) and per-head maps.

    Args:
        images: the `(B, H, W, C)` images `maps` was computed from.
        maps: an `AttentionMaps` from `attention_maps`.
        max_images, max_heads: how many rows and head columns to draw.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> images = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
        >>> from vit_keras.inspection import attention_maps
        >>> plot_attention_maps(images, attention_maps(model, images)).savefig("attention.png")
    """
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[None]
    count = min(len(images), len(maps.rollout), max_images)
    heads = min(maps.heads.shape[1], max_heads)
    columns = 3 + heads
    figure = _figure(1.5 * columns, 1.6 * count + 0.4)
    axes = figure.subplots(count, columns, squeeze=False)
    rollout = maps.rollout_image
    head_maps = maps.heads_image
    for row in range(count):
        image = _display(images[row])
        cmap = "gray" if image.ndim == 2 else None
        mask = rollout[row] if image.ndim == 2 else rollout[row][..., None]
        axes[row, 0].imshow(image, cmap=cmap, vmin=0, vmax=1)
        axes[row, 1].imshow(image * mask, cmap=cmap, vmin=0, vmax=1)
        overlays = [rollout[row]] + [head_maps[row, head] for head in range(heads)]
        for column, heat in enumerate(overlays, start=2):
            axes[row, column].imshow(image, cmap=cmap, vmin=0, vmax=1)
            axes[row, column].imshow(heat, cmap="inferno", alpha=0.6, vmin=0, vmax=1)
    titles = ["image", "image x rollout", "rollout"] + [f"L{maps.layer + 1} head {h + 1}" for h in range(heads)]
    for column, title in enumerate(titles):
        axes[0, column].set_title(title, fontsize=8)
    for axis in axes.ravel():
        axis.set_axis_off()
    figure.suptitle("Attention: rollout over all layers and one layer's heads", fontsize=10)
    return figure


def plot_attention_distance(distances, reference: float | None = None, image_size=None):
    """Mean attention distance per head against depth: one dot per head (the paper's Fig. 7 right).

    Args:
        distances: `(layers, heads)` from `attention_distances`.
        reference: optional distance to draw as a line, e.g. that of uniform attention.
        image_size: optional `(H, W)` to mention in the title.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> images = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
        >>> from vit_keras.inspection import attention_distances
        >>> plot_attention_distance(attention_distances(model, images)).savefig("distance.png")
    """
    distances = np.asarray(distances, dtype=np.float32)
    if distances.ndim != 2:
        raise ValueError(f"Expected (layers, heads) distances, got shape {distances.shape}.")
    layers, heads = distances.shape
    figure = _figure(5.4, 3.6)
    axis = figure.subplots()
    colormaps = require_matplotlib().colormaps

    colors = colormaps["tab20"](np.arange(heads) % 20)
    depth = np.arange(1, layers + 1)
    for head in range(heads):
        axis.scatter(depth, distances[:, head], s=14, color=colors[head], label=f"Head {head + 1}")
    if reference is not None:
        axis.axhline(reference, color="gray", linestyle="--", linewidth=1, label="uniform attention")
    axis.set_xlabel("Network depth (layer)")
    axis.set_ylabel("Mean attention distance (pixels)")
    axis.set_xticks(depth if layers <= 24 else depth[:: max(1, layers // 12)])
    top = max(float(np.nanmax(distances)), reference or 0.0)
    axis.set_ylim(0, 1.1 * top if top > 0 else 1.0)
    title = "Mean attention distance"
    if image_size is not None:
        title += f" ({image_size[0]}x{image_size[1]} images)"
    axis.set_title(title, fontsize=10)
    if heads <= 16:
        axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return figure


def plot_position_embedding_similarity(similarity, value_range=(-1.0, 1.0)):
    """The paper's grid of grids: tile `(i, j)` shows how patch `(i, j)`'s embedding resembles each patch's.

    Args:
        similarity: `(gh, gw, gh, gw)` cosine similarities from `position_embedding_similarity`.
        value_range: the colour scale, `(-1, 1)` like the paper; None stretches it to the data (useful for
            fixed sine-cosine embeddings, whose similarities all lie well above 0).

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> from vit_keras.inspection import position_embedding_similarity
        >>> plot_position_embedding_similarity(position_embedding_similarity(model)).savefig("similarity.png")
    """
    similarity = np.asarray(similarity, dtype=np.float32)
    if similarity.ndim != 4:
        raise ValueError(f"Expected (gh, gw, gh, gw) similarities, got shape {similarity.shape}.")
    gh, gw = similarity.shape[:2]
    canvas = _mosaic(similarity)
    side = 5.0
    figure = _figure(side + 1.0, side * gh / gw + 0.4)
    axis = figure.subplots()
    colormaps = require_matplotlib().colormaps

    cmap = colormaps["viridis"].with_extremes(bad="white")
    low, high = (np.nanmin(canvas), np.nanmax(canvas)) if value_range is None else value_range
    image = axis.imshow(np.ma.masked_invalid(canvas), cmap=cmap, vmin=low, vmax=high, interpolation="nearest")
    step_h, step_w = similarity.shape[2] + 1, similarity.shape[3] + 1
    label_every = max(1, gh // 8)
    axis.set_yticks([r * step_h + (step_h - 2) / 2 for r in range(0, gh, label_every)],
                    [str(r + 1) for r in range(0, gh, label_every)])
    label_every = max(1, gw // 8)
    axis.set_xticks([c * step_w + (step_w - 2) / 2 for c in range(0, gw, label_every)],
                    [str(c + 1) for c in range(0, gw, label_every)])
    axis.tick_params(length=0, labelsize=8)
    axis.set_xlabel("Input patch column")
    axis.set_ylabel("Input patch row")
    for spine in axis.spines.values():
        spine.set_visible(False)
    figure.colorbar(image, ax=axis, shrink=0.8, label="Cosine similarity")
    axis.set_title("Position embedding similarity", fontsize=10)
    return figure


def plot_embedding_filters(filters, columns: int = 7):
    """The principal components of the patch embedding as RGB (or grey) tiles, as in the paper's Fig. 7 left.

    Each component is scaled to [0, 1] on its own, so only its pattern shows, not its sign or size.

    Args:
        filters: an `EmbeddingFilters` from `embedding_filters`.
        columns: tiles per row.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> from vit_keras.inspection import embedding_filters
        >>> plot_embedding_filters(embedding_filters(model)).savefig("filters.png")
    """
    components = np.asarray(filters.components, dtype=np.float32)
    if not getattr(filters, "on_pixels", True) or components.shape[-1] not in (1, 3):
        raise ValueError(
            f"Filters with {components.shape[-1]} input channels cannot be drawn as images: the patch embedding "
            "acts on feature maps (a hybrid's ResNet output), not on RGB or grey pixels."
        )
    count = len(components)
    columns = max(1, min(columns, count))
    rows = -(-count // columns)
    # Drawn as one mosaic rather than one axis per tile: a figure with dozens of axes is slow to lay out.
    tiles = np.ones((rows * columns, *components.shape[1:]), dtype=np.float32)
    for index in range(count):
        tiles[index] = _display(components[index]).reshape(components.shape[1:])
    canvas = _mosaic(tiles.reshape(rows, columns, *components.shape[1:]), gap_value=1.0)
    figure = _figure(0.9 * columns + 0.3, 0.9 * rows + 0.5)
    axis = figure.subplots()
    axis.imshow(canvas[..., 0] if canvas.shape[-1] == 1 else canvas,
                cmap="gray" if components.shape[-1] == 1 else None, vmin=0, vmax=1, interpolation="nearest")
    axis.set_axis_off()
    figure.suptitle(f"Patch-embedding filters: top {count} principal components, row by row", fontsize=10)
    return figure
