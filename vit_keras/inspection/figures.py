"""Write all four inspection figures of a model to PNG files in one call."""

from __future__ import annotations

import os

import numpy as np

from vit_keras.inspection.attention import attention_maps
from vit_keras.inspection.distance import attention_distances, uniform_attention_distance
from vit_keras.inspection.filters import embedding_filters
from vit_keras.inspection.plots import (
    plot_attention_distance,
    plot_attention_maps,
    plot_embedding_filters,
    plot_position_embedding_similarity,
    require_matplotlib,
)
from vit_keras.inspection.position import position_embedding_similarity
from vit_keras.inspection.probe import AttentionProbe

FIGURE_NAMES = (
    "attention_maps.png",
    "attention_distance.png",
    "position_embedding_similarity.png",
    "embedding_filters.png",
)


def write_figures(model, images, output_dir, max_images: int = 4, layer: int = -1, batch_size: int = 8,
                  dpi: int = 100) -> list[str]:
    """Save the paper's inspection figures for `model` as PNGs in `output_dir`; return their paths.

    Writes `attention_maps.png` (rollout and the heads of block `layer` for the first `max_images`
    images), `attention_distance.png` (over all `images`), `position_embedding_similarity.png`
    (skipped for `position_embedding="none"`) and `embedding_filters.png` (skipped for hybrids,
    whose patch embedding sees ResNet features rather than pixels).

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> images = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
        >>> write_figures(model, images, "demo_output/inspection")
        ['demo_output/inspection/attention_maps.png', ...]
    """
    require_matplotlib("matplotlib.figure")  # before the analyses run, not after
    probe = AttentionProbe(model)
    images = probe.check_images(images)
    os.makedirs(output_dir, exist_ok=True)
    written = []

    def save(figure, name):
        path = os.path.join(output_dir, name)
        figure.savefig(path, dpi=dpi)
        written.append(path)

    shown = images[: max(1, int(max_images))]
    save(plot_attention_maps(shown, attention_maps(model, shown, layer=layer, batch_size=batch_size),
                             max_images=max_images), FIGURE_NAMES[0])
    distances = attention_distances(model, images, batch_size=batch_size)
    reference = uniform_attention_distance(probe.grid_for(images.shape[1:3]), probe.patch_stride)
    seen = probe.image_size if None not in probe.image_size else images.shape[1:3]
    save(plot_attention_distance(distances, reference=reference, image_size=seen), FIGURE_NAMES[1])
    if probe.patch_encoder.position_embedding != "none":
        save(plot_position_embedding_similarity(position_embedding_similarity(model)), FIGURE_NAMES[2])
    filters = embedding_filters(model)
    if filters.on_pixels and np.asarray(filters.components).shape[-1] in (1, 3):
        save(plot_embedding_filters(filters), FIGURE_NAMES[3])
    return written
