"""Analytic checks of the inspection maths (pure NumPy, no model): each expected value is derived in the test."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from vit_keras import inspection

TOL = 1e-9  # float64 arithmetic throughout


def _random_attention(rng, shape):
    logits = rng.normal(size=shape)
    weights = np.exp(logits)
    return weights / weights.sum(-1, keepdims=True)


def _brute_mean_pairwise_distance(grid, stride):
    (gh, gw), (sh, sw) = grid, stride
    cells = list(itertools.product(range(gh), range(gw)))
    total = sum(math.hypot((r1 - r2) * sh, (c1 - c2) * sw) for (r1, c1), (r2, c2) in itertools.product(cells, cells))
    return total / len(cells) ** 2


# --- attention rollout ---------------------------------------------------------------------------------------


def test_uniform_attention_gives_uniform_rollout_over_patches():
    grid, layers, batch, heads = (3, 4), 4, 2, 3
    tokens = 1 + grid[0] * grid[1]
    uniform = np.full((layers, batch, heads, tokens, tokens), 1.0 / tokens)
    raw = inspection.attention_rollout(uniform, residual=False)
    np.testing.assert_allclose(raw, 1.0 / tokens, atol=TOL)  # a product of uniform matrices is uniform
    maps = inspection.token_attention(inspection.attention_rollout(uniform), 1, grid)
    assert maps.shape == (batch, *grid)
    np.testing.assert_allclose(maps, 1.0 / 12, atol=TOL)


def test_rollout_of_one_layer_is_half_attention_half_identity():
    # Row-stochastic A: (mean_h A + I) / 2 already sums to 1 per row, so the renormalisation is a no-op.
    attention = _random_attention(np.random.default_rng(0), (1, 2, 4, 5, 5))
    expected = (attention[0].mean(axis=1) + np.eye(5)) / 2
    np.testing.assert_allclose(inspection.attention_rollout(attention), expected, atol=TOL)


def test_rollout_multiplies_later_layers_on_the_left():
    attention = _random_attention(np.random.default_rng(1), (3, 1, 2, 6, 6))
    step = [(a.mean(axis=1)[0] + np.eye(6)) / 2 for a in attention]
    expected = step[2] @ step[1] @ step[0]
    rollout = inspection.attention_rollout(attention)[0]
    np.testing.assert_allclose(rollout, expected, atol=TOL)
    np.testing.assert_allclose(rollout.sum(-1), 1.0, atol=TOL)


def test_identity_attention_rollout_is_identity():
    eye = np.broadcast_to(np.eye(5), (3, 2, 4, 5, 5))
    np.testing.assert_allclose(inspection.attention_rollout(eye), np.broadcast_to(np.eye(5), (2, 5, 5)), atol=TOL)


def test_token_attention_class_row_and_gap_mean():
    rng = np.random.default_rng(2)
    matrix = _random_attention(rng, (5, 5))
    with_token = inspection.token_attention(matrix, 1, (2, 2))
    np.testing.assert_allclose(with_token.ravel(), matrix[0, 1:] / matrix[0, 1:].sum(), atol=TOL)
    gap = inspection.token_attention(matrix[1:, 1:] / matrix[1:, 1:].sum(-1, keepdims=True), 0, (2, 2))
    rows = matrix[1:, 1:] / matrix[1:, 1:].sum(-1, keepdims=True)
    np.testing.assert_allclose(gap.ravel(), rows.mean(0) / rows.mean(0).sum(), atol=TOL)


def test_upsample_keeps_constant_maps_and_shape():
    up = inspection.upsample(np.full((2, 3, 3, 4), 0.25), (12, 16))
    assert up.shape == (2, 3, 12, 16)
    np.testing.assert_allclose(up, 0.25, atol=1e-7)


# --- mean attention distance ---------------------------------------------------------------------------------


@pytest.mark.parametrize("grid, stride", [((3, 4), (16.0, 8.0)), ((5, 5), (4.0, 4.0)), ((1, 7), (2.0, 2.0))])
def test_uniform_attention_distance_is_mean_pairwise_patch_distance(grid, stride):
    tokens = 1 + grid[0] * grid[1]
    uniform = np.full((2, 3, 2, tokens, tokens), 1.0 / tokens)  # (layers, batch, heads, T, T)
    distances = inspection.mean_attention_distance(uniform, grid, stride, num_prefix_tokens=1)
    expected = _brute_mean_pairwise_distance(grid, stride)
    assert distances.shape == (2, 2)
    np.testing.assert_allclose(distances, expected, rtol=1e-12)
    assert inspection.uniform_attention_distance(grid, stride) == pytest.approx(expected, rel=1e-12)


def test_uniform_distance_on_a_line_matches_closed_form():
    # Mean |i - j| over i, j in 0..n-1 is (n^2 - 1) / (3 n).
    n, stride = 9, 16.0
    uniform = np.full((1, 1, n, n), 1.0 / n)
    distance = inspection.mean_attention_distance(uniform, (1, n), stride, num_prefix_tokens=0)
    np.testing.assert_allclose(distance, stride * (n * n - 1) / (3 * n), rtol=1e-12)


def test_identity_attention_has_zero_distance():
    eye = np.broadcast_to(np.eye(1 + 16), (3, 2, 4, 17, 17))
    np.testing.assert_allclose(inspection.mean_attention_distance(eye, (4, 4), 16), 0.0, atol=TOL)


def test_one_hot_attention_to_a_known_patch_gives_its_distance():
    grid, stride = (3, 4), (10.0, 6.0)
    target = (2, 1)  # row 2, column 1
    tokens = 1 + 12
    attention = np.zeros((1, 1, tokens, tokens))
    attention[..., 1 + target[0] * 4 + target[1]] = 1.0
    expected = np.mean([math.hypot((r - target[0]) * 10, (c - target[1]) * 6) for r in range(3) for c in range(4)])
    np.testing.assert_allclose(inspection.mean_attention_distance(attention, grid, stride), expected, rtol=1e-12)


def test_swapping_neighbours_gives_exactly_one_stride_and_class_token_mass_is_renormalised():
    # Two patches side by side, each attending to the other: distance = one column stride, even when half of
    # the weight goes to the class token (it is dropped and the rest renormalised).
    attention = np.array([[[[1.0, 0.0, 0.0], [0.5, 0.0, 0.5], [0.5, 0.5, 0.0]]]])
    np.testing.assert_allclose(inspection.mean_attention_distance(attention, (1, 2), (16, 12)), [12.0], rtol=1e-12)


def test_patch_distances_are_between_patch_centres():
    distances = inspection.patch_distances((2, 2), (3.0, 4.0))
    np.testing.assert_allclose(distances[0], [0.0, 4.0, 3.0, 5.0], atol=TOL)


# --- position embeddings, filters ----------------------------------------------------------------------------


def test_orthogonal_embeddings_give_identity_similarity():
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.normal(size=(24, 24)))
    table = (q[:12] * rng.uniform(0.5, 3.0, size=(12, 1))).reshape(3, 4, 24)  # orthogonal rows, any norms
    similarity = inspection.cosine_similarity_grid(table)
    assert similarity.shape == (3, 4, 3, 4)
    np.testing.assert_allclose(similarity.reshape(12, 12), np.eye(12), atol=1e-12)


def test_kernel_components_are_recovered_up_to_sign():
    rng = np.random.default_rng(4)
    patch, channels, dim, count = 4, 3, 40, 5
    inputs = patch * patch * channels
    u, _ = np.linalg.qr(rng.normal(size=(inputs, count)))
    # Filter coefficients orthogonal to the all-ones vector, so that mean-centring leaves them unchanged.
    v, _ = np.linalg.qr(np.concatenate([np.ones((dim, 1)), rng.normal(size=(dim, count))], axis=1))
    v = v[:, 1:]
    scales = np.array([9.0, 7.0, 5.0, 3.0, 2.0])
    kernel = u @ np.diag(scales) @ v.T
    result = inspection.kernel_principal_components(kernel, patch, channels, num_components=count)
    got = result.components.reshape(count, inputs)
    np.testing.assert_allclose(np.abs(np.sum(got * u.T, axis=1)), 1.0, atol=1e-5)
    np.testing.assert_allclose(result.explained_variance_ratio, scales**2 / np.sum(scales**2), rtol=1e-5)


# --- bad input to the pure functions -------------------------------------------------------------------------


def test_mismatched_grid_is_rejected():
    with pytest.raises(ValueError, match="does not match"):
        inspection.mean_attention_distance(np.full((1, 1, 5, 5), 0.2), (3, 3), 16)
    with pytest.raises(ValueError, match="does not match"):
        inspection.token_attention(np.full((5, 5), 0.2), 1, (3, 3))


def test_non_square_attention_is_rejected():
    with pytest.raises(ValueError, match="square"):
        inspection.attention_rollout(np.ones((2, 1, 1, 4, 5)))
