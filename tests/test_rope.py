"""2-D RoPE tables and rotation against timm 1.0.31's own functions (`timm/layers/pos_embed_sincos.py`).

Each layout at a square grid, a second size and a non-square grid (3×5: only there do `ij`/`xy` and the per-axis
reference rescaling show), as numpy constants and computed in the graph from a runtime grid.

Bound, tables: the angles are float32 products `position · band` (≤ 6 rad here: positions ≤ 6, bands ≤ 1; DINOv3's
≤ 2π), each rounded within a few float32 ulps of the angle by numpy's and torch's `pow`/`sin` on either side, so
|Δsin| ≤ |Δangle| ≲ 4 · 2π · 2^-24 ≈ 1.5e-6; 1e-5 leaves margin and still catches any wrong position or band
(those move entries by O(0.1)). The rotation adds two float32 products of values ≤ |x| ≈ 3: ~1e-6 more.
"""

import keras
import numpy as np
import pytest
import torch
from timm.layers.pos_embed_sincos import (
    RotaryEmbeddingCat,
    RotaryEmbeddingDinoV3,
    RotaryEmbeddingMixed,
    apply_rot_embed_cat,
)

from vit_keras.layers import RotaryEmbedding2D, apply_rope, rope_tables
from vit_keras.layers.rope import split_tables

ATOL = 1e-5  # see the module docstring
HEAD_DIM = 16
GRIDS = [(4, 4), (6, 6), (3, 5)]


def _timm_interleaved(grid, **kwargs):
    rope = RotaryEmbeddingCat(HEAD_DIM, in_pixels=False, **kwargs)
    return rope.get_embed(list(grid)).numpy()


INTERLEAVED = [
    dict(),  # timm SBB-style: integer positions, no reference grid
    dict(ref_grid_size=(4, 4)),  # EVA-02: positions rescaled to the training grid
    dict(ref_grid_size=(4, 4), grid_offset=1.0, grid_indexing="xy"),  # PE
    dict(grid_indexing="xy", temperature=100.0),  # RoPE-ViT axial
]


def _timm_kwargs(options):
    out = {"grid_offset": options.get("grid_offset", 0.0), "grid_indexing": options.get("grid_indexing", "ij"),
           "temperature": options.get("temperature", 10000.0)}
    if "ref_grid_size" in options:
        out["ref_feat_shape"] = list(options["ref_grid_size"])
    return out


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("options", INTERLEAVED)
def test_interleaved_tables_equal_timm_rotary_embedding_cat(grid, options):
    expected = _timm_interleaved(grid, **_timm_kwargs(options))
    np.testing.assert_allclose(rope_tables(HEAD_DIM, "interleaved", grid, **options), expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("grid_indexing", ["ij", "xy"])
def test_rotate_half_tables_equal_timm_dinov3(grid, grid_indexing):
    expected = RotaryEmbeddingDinoV3(HEAD_DIM, temperature=100.0, grid_indexing=grid_indexing).eval()
    expected = expected.get_embed(list(grid)).numpy()
    actual = rope_tables(HEAD_DIM, "rotate_half", grid, grid_indexing=grid_indexing)
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=0)


def test_the_grid_order_matters_on_a_non_square_grid():
    """The test above can fail: on 3×5 the xy and ij tables differ, so a swapped order would be caught."""
    ij = rope_tables(HEAD_DIM, "interleaved", (3, 5), ref_grid_size=(4, 4))
    xy = rope_tables(HEAD_DIM, "interleaved", (3, 5), ref_grid_size=(4, 4), grid_indexing="xy")
    assert np.abs(ij - xy).max() > 0.1


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("grid_indexing", ["xy", "ij"])
def test_mixed_tables_equal_timm_rotary_embedding_mixed(grid, grid_indexing):
    depth, heads = 2, 3
    torch.manual_seed(0)
    reference = RotaryEmbeddingMixed(HEAD_DIM * heads, depth=depth, num_heads=heads, grid_indexing=grid_indexing)
    expected = reference.get_embed(list(grid)).detach().numpy()  # (depth, heads, N, 2·D_h)
    layer = RotaryEmbedding2D(HEAD_DIM, "mixed", grid_size=grid, grid_indexing=grid_indexing, depth=depth,
                              num_heads=heads)
    layer.build((1, 1, HEAD_DIM))
    layer.freqs.assign(reference.freqs.detach().numpy())
    tables = layer(keras.ops.zeros((1, 1, HEAD_DIM)))
    assert len(tables) == depth
    for i, table in enumerate(tables):
        np.testing.assert_allclose(np.transpose(keras.ops.convert_to_numpy(table), (1, 0, 2)), expected[i],
                                   atol=ATOL, rtol=0)


@pytest.mark.parametrize("layout, options", [("interleaved", dict(ref_grid_size=(4, 4), grid_indexing="xy")),
                                             ("rotate_half", dict())])
def test_in_graph_tables_for_a_runtime_grid_equal_the_constants(layout, options):
    """A model of any size computes the tables from the grid it is given, in the graph."""
    grid = keras.Input((None, None, 3))
    model = keras.Model(grid, RotaryEmbedding2D(HEAD_DIM, layout, **options)(grid))
    for size in [(3, 5), (6, 6)]:
        actual = model.predict(np.zeros((1, *size, 3), "float32"), verbose=0)
        np.testing.assert_allclose(actual, rope_tables(HEAD_DIM, layout, size, **options), atol=ATOL, rtol=0)


@pytest.mark.tf_only
def test_a_fixed_grid_gives_constant_tables():
    """For a fixed grid the tables are constants: no Range/Sin ops reach the graph (nor a TFLite file)."""
    import tensorflow as tf

    layer = RotaryEmbedding2D(HEAD_DIM, "interleaved", ref_grid_size=(4, 4))
    graph = tf.function(layer).get_concrete_function(tf.TensorSpec((None, 3, 5, 3))).graph
    kinds = {op.type for op in graph.get_operations()}
    assert not kinds & {"Range", "Sin", "Cos", "Tile", "Pow"}, kinds
    dynamic = tf.function(layer).get_concrete_function(tf.TensorSpec((None, None, None, 3))).graph
    assert "Sin" in {op.type for op in dynamic.get_operations()}  # the check above can see such ops


@pytest.mark.parametrize("layout, half", [("interleaved", False), ("rotate_half", True)])
@pytest.mark.parametrize("num_prefix_tokens", [0, 1, 5])
def test_apply_rope_rotates_the_patch_tokens_as_timm(layout, half, num_prefix_tokens):
    """timm EvaAttention: prefix tokens concatenated back unrotated, `apply_rot_embed_cat` on the rest."""
    grid = (3, 5)
    tables = rope_tables(HEAD_DIM, layout, grid, ref_grid_size=(4, 4) if layout == "interleaved" else None)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, num_prefix_tokens + 15, HEAD_DIM)).astype("float32")  # timm (B, heads, T, D_h)
    torch_x = torch.from_numpy(x)
    expected = torch.cat([torch_x[:, :, :num_prefix_tokens],
                          apply_rot_embed_cat(torch_x[:, :, num_prefix_tokens:], torch.from_numpy(tables), half=half)],
                         dim=2).numpy()
    sin, cos = split_tables(tables)
    actual = apply_rope(keras.ops.convert_to_tensor(np.transpose(x, (0, 2, 1, 3))), sin, cos, layout,
                        num_prefix_tokens)
    np.testing.assert_allclose(np.transpose(keras.ops.convert_to_numpy(actual), (0, 2, 1, 3)), expected, atol=ATOL,
                               rtol=0)
    # The prefix tokens go through the same multiply-add with cos = 1, sin = 0: exactly unchanged, as in timm.
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(actual)[:, :num_prefix_tokens],
                                  np.transpose(x, (0, 2, 1, 3))[:, :num_prefix_tokens])
    # Fewer tokens (the queries of a block computing its first tokens only) take the grid's first rows.
    first = apply_rope(keras.ops.convert_to_tensor(np.transpose(x, (0, 2, 1, 3))[:, : num_prefix_tokens + 4]), sin,
                       cos, layout, num_prefix_tokens)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(first),
                               keras.ops.convert_to_numpy(actual)[:, : num_prefix_tokens + 4], atol=0, rtol=0)


def test_bad_rope_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="layout must be one of"):
        rope_tables(HEAD_DIM, "spiral", (2, 2))
    with pytest.raises(ValueError, match="divisible by 4"):
        RotaryEmbedding2D(6, "interleaved")
    with pytest.raises(ValueError, match="pass `depth` and `num_heads`"):
        RotaryEmbedding2D(HEAD_DIM, "mixed")
    with pytest.raises(ValueError, match="grid_size"):
        RotaryEmbedding2D(HEAD_DIM, "interleaved")(keras.ops.zeros((1, 7, 16)))
