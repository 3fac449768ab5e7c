"""What a Vision Transformer learned, measured and drawn as in the paper (§4.5, App. D).

- Attention maps: `attention_maps` (rollout and one layer's heads), `attention_weights`,
  `attention_rollout`; drawn by `plot_attention_maps`. A flexible (NaFlex) model's, each image at its own grid:
  `flexible_attention_maps`.
- Mean attention distance: `attention_distances` (per layer and head), `mean_attention_distance`;
  drawn by `plot_attention_distance`.
- Position-embedding similarity: `position_embedding_similarity`; drawn by
  `plot_position_embedding_similarity`.
- Patch-embedding filters: `embedding_filters`; drawn by `plot_embedding_filters`.
- `write_figures(model, images, output_dir)` saves all four as PNGs.

Every analysis returns NumPy arrays; every `plot_*` returns a `matplotlib.figure.Figure`.

Example:
    >>> from vit_keras import inspection
    >>> import vit_keras
    >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
    ...                       mlp_dim=96, classes=10)
    >>> images = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
    >>> maps = inspection.attention_maps(model, images)
    >>> inspection.plot_attention_maps(images, maps).savefig("attention.png")
"""

from vit_keras.inspection.attention import (
    AttentionMaps,
    attention_maps,
    attention_rollout,
    flexible_attention_maps,
    token_attention,
    upsample,
)
from vit_keras.inspection.distance import (
    attention_distances,
    mean_attention_distance,
    patch_distances,
    uniform_attention_distance,
)
from vit_keras.inspection.figures import FIGURE_NAMES, write_figures
from vit_keras.inspection.filters import EmbeddingFilters, embedding_filters, kernel_principal_components
from vit_keras.inspection.plots import (
    plot_attention_distance,
    plot_attention_maps,
    plot_embedding_filters,
    plot_position_embedding_similarity,
)
from vit_keras.inspection.position import cosine_similarity_grid, position_embedding_similarity, position_embeddings
from vit_keras.inspection.probe import AttentionProbe, FlexibleAttentionProbe, attention_weights

__all__ = [
    "FIGURE_NAMES",
    "AttentionMaps",
    "AttentionProbe",
    "FlexibleAttentionProbe",
    "EmbeddingFilters",
    "attention_distances",
    "attention_maps",
    "flexible_attention_maps",
    "attention_rollout",
    "attention_weights",
    "cosine_similarity_grid",
    "embedding_filters",
    "kernel_principal_components",
    "mean_attention_distance",
    "patch_distances",
    "plot_attention_distance",
    "plot_attention_maps",
    "plot_embedding_filters",
    "plot_position_embedding_similarity",
    "position_embedding_similarity",
    "position_embeddings",
    "token_attention",
    "uniform_attention_distance",
    "upsample",
    "write_figures",
]
