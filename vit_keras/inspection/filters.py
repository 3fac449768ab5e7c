"""Principal components of the patch-embedding filters (the paper's Fig. 7 left)."""

from __future__ import annotations

import dataclasses

import keras
import numpy as np

from vit_keras.inspection.probe import AttentionProbe


@dataclasses.dataclass(frozen=True)
class EmbeddingFilters:
    """Top principal components of the patch embedding.

    Attributes:
        components: `(K, P, P, C)` unit-norm components, largest variance first (sign arbitrary).
        explained_variance_ratio: `(K,)` share of the filters' variance each component explains.
        on_pixels: False for hybrids, whose patch embedding acts on ResNet features, not pixels.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> ratio = embedding_filters(model).explained_variance_ratio  # largest first
        >>> ratio.shape, bool(np.all(np.diff(ratio) <= 0))
        ((28,), True)
    """

    components: np.ndarray
    explained_variance_ratio: np.ndarray
    on_pixels: bool = True


def kernel_principal_components(kernel, patch_size: int, channels: int, num_components: int = 28,
                                center: bool = True) -> EmbeddingFilters:
    """Principal components of the `D` filters of a `(P·P·C, D)` patch-embedding kernel.

    Each of the `D` columns is one `P×P×C` filter (flattened in the (row, column, channel) order of
    `Patches`); the components are the leading left singular vectors of the (mean-centred) columns.

    Example:
        >>> kernel_principal_components(np.random.randn(48, 64), 4, 3, 5).components.shape
        (5, 4, 4, 3)
    """
    kernel = np.asarray(kernel, dtype=np.float64)
    if kernel.ndim != 2 or kernel.shape[0] != patch_size * patch_size * channels:
        raise ValueError(
            f"Expected a ({patch_size}*{patch_size}*{channels}, D) kernel, got shape {kernel.shape}."
        )
    if isinstance(num_components, bool) or not isinstance(num_components, int) or num_components < 1:
        raise ValueError(f"`num_components` must be a positive int, got {num_components!r}.")
    filters = kernel - kernel.mean(axis=1, keepdims=True) if center else kernel
    vectors, singular, _ = np.linalg.svd(filters, full_matrices=False)
    count = min(num_components, vectors.shape[1])
    variance = singular**2
    ratio = variance[:count] / max(variance.sum(), np.finfo(np.float64).tiny)
    components = vectors[:, :count].T.reshape(count, patch_size, patch_size, channels)
    return EmbeddingFilters(components.astype(np.float32), ratio.astype(np.float32))


def embedding_filters(model, num_components: int = 28) -> EmbeddingFilters:
    """Top principal components of `model`'s patch-embedding filters, as `(K, P, P, C)` tiles.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> embedding_filters(model).components.shape
        (28, 8, 8, 3)
    """
    probe = AttentionProbe(model)
    kernel = keras.ops.convert_to_numpy(probe.patch_encoder.embedding.kernel)
    result = kernel_principal_components(kernel, probe.patches.patch_size, int(probe.patches.channels),
                                         num_components)
    return dataclasses.replace(result, on_pixels=probe.resnet is None)
