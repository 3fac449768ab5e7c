"""Position-embedding resampling against vit_jax's `interpolate_posembed` (reproduced in NumPy) and torch's
bicubic `interpolate` (what Hugging Face's `interpolate_pos_encoding` calls)."""


import numpy as np
import pytest
import torch  # installed by `make test`: a broken install must fail here, not skip

from tests import reference_numpy  # noqa: E402
from vit_keras.layers.interpolation import interpolation_matrix, numpy_interpolation_matrix
from vit_keras.weights.resample import resample_grid, resample_position_embeddings

GRIDS = [((8, 8), (12, 12)), ((14, 14), (24, 24)), ((24, 24), (14, 14)), ((7, 7), (7, 10)), ((8, 8), (5, 13)),
         ((4, 6), (9, 3)), ((2, 2), (5, 5))]


@pytest.mark.parametrize("old,new", GRIDS)
@pytest.mark.parametrize("prefix", [0, 1])
def test_linear_matches_numpy_interpolate_posembed(old, new, prefix):
    """Tolerance 1e-6: float32 storage of the same float64 computation."""
    rng = np.random.default_rng(0)
    table = rng.normal(size=(1, prefix + old[0] * old[1], 16)).astype(np.float32)
    out = resample_position_embeddings(table, new, num_prefix_tokens=prefix, source_grid=old)
    reference = reference_numpy.interpolate_posembed(table, new, prefix, old_grid=old)
    assert out.shape == (1, prefix + new[0] * new[1], 16)
    assert np.abs(out - reference).max() <= 1e-6
    np.testing.assert_array_equal(out[:, :prefix], table[:, :prefix])


def test_linear_matches_vit_jax_square_recipe():
    """vit_jax: zoom (gs_new/gs_old, gs_new/gs_old, 1), order=1, on the square grid, class token kept."""
    import scipy.ndimage

    table = np.random.default_rng(1).normal(size=(1, 1 + 14 * 14, 8)).astype(np.float32)
    grid = table[0, 1:].reshape(14, 14, -1)
    expected = scipy.ndimage.zoom(grid, (24 / 14, 24 / 14, 1), order=1).reshape(1, 24 * 24, -1)
    out = resample_position_embeddings(table, (24, 24))
    np.testing.assert_array_equal(out[:, 1:], expected)


@pytest.mark.parametrize("old,new", [((4, 4), (6, 6)), ((8, 8), (5, 13)), ((14, 14), (24, 24)), ((6, 6), (3, 3))])
def test_bicubic_matches_torch_interpolate(old, new):
    """torch bicubic a=-0.75, align_corners=False, clamped borders (HF interpolate_pos_encoding).

    In float64 the two agree to 1e-9 (same arithmetic); in float32 torch's own rounding shows, so relative 2e-6.
    """
    grid = np.random.default_rng(2).normal(size=(*old, 8))

    def torch_bicubic(array):
        return torch.nn.functional.interpolate(
            torch.from_numpy(array).permute(2, 0, 1)[None], size=new, mode="bicubic", align_corners=False
        )[0].permute(1, 2, 0).numpy()

    assert np.abs(resample_grid(grid, new, interpolation="bicubic") - torch_bicubic(grid)).max() <= 1e-9
    grid32 = grid.astype(np.float32)
    out32 = resample_grid(grid32, new, interpolation="bicubic")
    assert out32.dtype == np.float32
    assert np.abs(out32 - torch_bicubic(grid32)).max() <= 2e-6 * np.abs(grid32).max()


def test_half_pixel_bilinear_is_not_what_vit_jax_does():
    """Guard against keras.ops.image.resize-style (half-pixel) bilinear: it differs by far more than 1e-6."""
    table = np.random.default_rng(3).normal(size=(1, 65, 8)).astype(np.float32)
    out = resample_position_embeddings(table, (12, 12))
    import scipy.ndimage

    half_pixel = scipy.ndimage.zoom(table[0, 1:].reshape(8, 8, -1), (1.5, 1.5, 1), order=1, grid_mode=True,
                                    mode="nearest")
    assert np.abs(out[0, 1:] - half_pixel.reshape(144, -1)).max() > 1e-2


def test_bad_arguments_are_explained():
    table = np.zeros((1, 1 + 60, 4), np.float32)
    with pytest.raises(ValueError, match="source_grid"):
        resample_position_embeddings(table, (8, 8))
    with pytest.raises(ValueError, match="interpolation"):
        resample_grid(np.zeros((2, 2, 1)), (3, 3), interpolation="nearest")
    with pytest.raises(ValueError, match="6x10 grid"):
        resample_position_embeddings(table, (8, 8), source_grid=(6, 10)) if False else \
            resample_position_embeddings(np.zeros((1, 1 + 59, 4)), (8, 8), source_grid=(6, 10))


@pytest.mark.parametrize("old,new", GRIDS)
def test_the_linear_matrix_is_vit_jax_zoom(old, new):
    """The linear matrix (the in-graph linear mode, here in float64) is scipy.ndimage.zoom(order=1), the NumPy path:
    1e-12 bounds float64 rounding of weights summing to 1 over O(1) values."""
    import scipy.ndimage

    grid = np.random.default_rng(3).normal(size=(*old, 4))
    rows, cols = (numpy_interpolation_matrix("linear", o, n) for o, n in zip(old, new))
    expected = scipy.ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
    assert np.abs(np.einsum("ri,cj,ijd->rcd", rows, cols, grid) - expected).max() <= 1e-12


@pytest.mark.parametrize("mode", ["linear", "bicubic", "bicubic_antialias"])
def test_graph_and_numpy_matrices_are_the_same_maths(mode):
    """One implementation, two array libraries: the float32 graph matrix is the float64 one rounded. Bound: each
    weight is formed from a float32 sample point of magnitude up to `in_size`, so it carries a few float32 ulps of
    `in_size` (4 ulps: the point's product, the difference, the kernel polynomial, the normalisation)."""
    import keras

    for old, new in GRIDS:
        for in_size, out_size in zip(old, new):
            graph = keras.ops.convert_to_numpy(interpolation_matrix(mode, in_size, out_size))
            bound = 4 * in_size * np.finfo(np.float32).eps
            np.testing.assert_allclose(graph, numpy_interpolation_matrix(mode, in_size, out_size), rtol=0, atol=bound)
