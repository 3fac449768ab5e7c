"""Inspection on real vit_keras models: nested, Sequential, hybrid, gap, 384x384, bad input, figures."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from vit_keras import ViT, inspection

SMALL = dict(hidden_size=48, num_layers=2, num_heads=3, mlp_dim=64)


def _images(count, size, channels=3, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, size=(count, size, size, channels)).astype("float32")


@pytest.fixture(scope="module")
def token_model():
    keras.utils.set_random_seed(0)
    return ViT(image_size=32, patch_size=8, classes=10, **SMALL)


def _layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def test_first_block_attention_matches_numpy_softmax_of_the_blocks_weights(token_model):
    # Reference: the paper's MHSA softmax(q k^T / sqrt(d_head)) computed in NumPy from the block's own weights.
    images = _images(2, 32)
    tokens = keras.Model(token_model.inputs, token_model.get_layer("patch_encoder").output).predict_on_batch(images)
    block = token_model.get_layer("Transformer_encoderblock_0")
    x = _layer_norm(tokens.astype(np.float64), block.norm_1.gamma.numpy(), block.norm_1.beta.numpy(),
                    block.norm_1.epsilon)
    att = block.attention
    q = np.einsum("btd,dhk->bhtk", x, att._query_dense.kernel.numpy()) + att._query_dense.bias.numpy()[:, None]
    k = np.einsum("btd,dhk->bhtk", x, att._key_dense.kernel.numpy()) + att._key_dense.bias.numpy()[:, None]
    logits = np.einsum("bhqk,bhsk->bhqs", q, k) / np.sqrt(q.shape[-1])
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    got = inspection.attention_weights(token_model, images)
    assert got.shape == (2, 2, 3, 17, 17)
    np.testing.assert_allclose(got[0], expected, atol=2e-6)  # float32 forward vs float64 reference


def test_token_model_maps_are_distributions_of_the_right_shape(token_model):
    maps = inspection.attention_maps(token_model, _images(3, 32))
    assert maps.rollout.shape == (3, 4, 4) and maps.heads.shape == (3, 3, 4, 4) and maps.layer == 1
    # Distributions summed over 16 float32 cells after a float32 rollout product: rounding ~1e-6, 10x.
    np.testing.assert_allclose(maps.rollout.sum((-2, -1)), 1.0, atol=1e-5)
    np.testing.assert_allclose(maps.heads.sum((-2, -1)), 1.0, atol=1e-5)
    assert maps.rollout_image.shape == (3, 32, 32) and maps.heads_image.shape == (3, 3, 32, 32)
    assert maps.rollout_image.max() == pytest.approx(1.0)


def test_single_image_and_batching_agree(token_model):
    images = _images(5, 32)
    full = inspection.attention_weights(token_model, images, batch_size=16)
    chunked = inspection.attention_weights(token_model, images, batch_size=2)
    # Attention probabilities in [0, 1]: batch size changes only matmul blocking, float32 rounding ~1e-7. The
    # 1e-6 bounds below compare the same float32 computation reached another way, or cosines of unit vectors.
    np.testing.assert_allclose(full, chunked, atol=1e-6)
    one = inspection.attention_weights(token_model, images[0])
    np.testing.assert_allclose(one[:, 0], full[:, 0], atol=1e-6)


def test_nested_model_applies_the_outer_layers_first(token_model):
    inputs = keras.Input((40, 40, 3))
    x = keras.layers.CenterCrop(32, 32)(inputs)
    x = token_model(x)
    outer = keras.Model(inputs, keras.layers.Dense(2)(x), name="user_model")
    images = _images(2, 40)
    nested = inspection.attention_weights(outer, images)
    direct = inspection.attention_weights(token_model, images[:, 4:36, 4:36])
    np.testing.assert_allclose(nested, direct, atol=1e-6)
    maps = inspection.attention_maps(outer, images)
    assert maps.rollout.shape == (2, 4, 4) and maps.rollout_image.shape == (2, 40, 40)

    sequential = keras.Sequential([keras.Input((32, 32, 3)), token_model, keras.layers.Dense(2)])
    np.testing.assert_allclose(
        inspection.attention_weights(sequential, images[:, 4:36, 4:36]), direct, atol=1e-6
    )


def test_gap_model_uses_the_mean_over_query_tokens():
    keras.utils.set_random_seed(1)
    model = ViT(image_size=24, patch_size=8, classifier="gap", classes=3, **SMALL)
    images = _images(2, 24)
    attention = inspection.attention_weights(model, images)
    assert attention.shape == (2, 2, 3, 9, 9)  # no class token
    maps = inspection.attention_maps(model, images, layer=0)
    expected = attention[0].mean(axis=-2)  # mean over queries, per head
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(maps.heads.reshape(2, 3, 9), expected, atol=1e-6)
    assert maps.rollout.shape == (2, 3, 3)


def test_hybrid_uses_the_effective_patch_stride():
    keras.utils.set_random_seed(2)
    model = ViT(image_size=64, patch_size=2, resnet={"num_layers": (), "width_factor": 1}, classes=3, **SMALL)
    probe = inspection.AttentionProbe(model)
    assert probe.grid_size == (8, 8) and probe.patch_stride == (8.0, 8.0)  # stem stride 4 x patch 2
    maps = inspection.attention_maps(model, _images(1, 64))
    assert maps.rollout.shape == (1, 8, 8) and maps.rollout_image.shape == (1, 64, 64)
    distances = inspection.attention_distances(model, _images(2, 64))
    assert distances.shape == (2, 3)
    assert np.all(distances >= 0) and np.all(distances <= np.hypot(56, 56))
    with pytest.raises(ValueError, match="feature maps"):
        inspection.plot_embedding_filters(inspection.embedding_filters(model))


def test_384_model_gives_maps_of_the_image_size():
    keras.utils.set_random_seed(3)
    model = ViT(image_size=384, patch_size=32, hidden_size=24, num_layers=1, num_heads=3, mlp_dim=24, classes=2)
    maps = inspection.attention_maps(model, _images(1, 384))
    assert maps.rollout.shape == (1, 12, 12) and maps.heads.shape == (1, 3, 12, 12)
    assert maps.rollout_image.shape == (1, 384, 384)
    assert inspection.position_embedding_similarity(model).shape == (12, 12, 12, 12)


@pytest.mark.slow
def test_position_similarity_of_orthogonal_learned_embeddings_is_identity():
    keras.utils.set_random_seed(4)
    model = ViT(image_size=16, patch_size=4, classes=2, **SMALL)  # 16 patches, D = 48
    encoder = model.get_layer("patch_encoder")
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(48, 48)))
    table = np.concatenate([np.ones((1, 48)), q[:16]], axis=0)[None].astype("float32")  # class token row first
    encoder.pos_embedding.assign(table)
    similarity = inspection.position_embedding_similarity(model)
    np.testing.assert_allclose(similarity.reshape(16, 16), np.eye(16), atol=1e-6)


def test_learned_2d_similarity_is_the_mean_of_row_and_column_matches():
    # Orthonormal row and column tables: cos((i,j),(k,l)) = ([i == k] + [j == l]) / 2.
    keras.utils.set_random_seed(5)
    model = ViT(image_size=16, patch_size=4, classes=2, position_embedding="learned_2d", **SMALL)
    encoder = model.get_layer("patch_encoder")
    q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(24, 24)))
    encoder.pos_embedding_row.assign(q[:4].astype("float32"))
    encoder.pos_embedding_col.assign(q[4:8].astype("float32"))
    eye = np.eye(4)
    expected = (eye[:, None, :, None] + eye[None, :, None, :]) / 2
    np.testing.assert_allclose(inspection.position_embedding_similarity(model), expected, atol=1e-6)


def test_sincos_similarity_is_symmetric_with_unit_diagonal():
    model = ViT(image_size=32, patch_size=8, classes=2, position_embedding="sincos_2d", **SMALL)
    similarity = inspection.position_embedding_similarity(model).reshape(16, 16)
    np.testing.assert_allclose(similarity, similarity.T, atol=1e-6)
    np.testing.assert_allclose(np.diag(similarity), 1.0, atol=1e-6)


def test_filters_of_a_model_kernel_recover_its_components():
    keras.utils.set_random_seed(6)
    model = ViT(image_size=16, patch_size=4, classes=2, **SMALL)  # kernel (4*4*3, 48)
    rng = np.random.default_rng(2)
    u, _ = np.linalg.qr(rng.normal(size=(48, 3)))
    v, _ = np.linalg.qr(np.concatenate([np.ones((48, 1)), rng.normal(size=(48, 3))], axis=1))
    kernel = u @ np.diag([5.0, 3.0, 1.0]) @ v[:, 1:].T
    model.get_layer("patch_encoder").embedding.kernel.assign(kernel.astype("float32"))
    filters = inspection.embedding_filters(model, num_components=3)
    assert filters.components.shape == (3, 4, 4, 3) and filters.on_pixels
    # Principal directions from a float32 SVD of a 48-dim kernel: rounding ~1e-6 on unit vectors, 10x.
    np.testing.assert_allclose(np.abs(np.sum(filters.components.reshape(3, 48) * u.T, axis=1)), 1.0, atol=1e-5)


# --- bad input -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "images, match",
    [
        (np.zeros((32, 32)), "rank 2"),
        (np.zeros((1, 1, 32, 32, 3)), "rank 5"),
        (np.zeros((1, 32, 32, 1)), "3-channel"),
        (np.zeros((1, 32, 32, 4)), "3-channel"),
        (np.zeros((1, 16, 16, 3)), "resize"),
        (np.zeros((0, 32, 32, 3)), "empty"),
    ],
)
def test_bad_images_are_rejected(token_model, images, match):
    with pytest.raises(ValueError, match=match):
        inspection.attention_maps(token_model, images)


def test_model_without_attention_layers_is_rejected():
    inputs = keras.Input((16, 16, 3))
    cnn = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(inputs)), name="cnn")
    with pytest.raises(ValueError, match="no vit_keras TransformerBlock"):
        inspection.attention_maps(cnn, np.zeros((1, 16, 16, 3)))
    with pytest.raises(ValueError, match="keras.Model"):
        inspection.AttentionProbe("not a model")


def test_subclassed_wrapper_points_to_the_inner_vit():
    class Wrapper(keras.Model):
        def __init__(self):
            super().__init__(name="wrapper")
            self.vit = ViT(image_size=16, patch_size=4, include_top=False, pooling="avg", name="inner_vit", **SMALL)
            self.head = keras.layers.Dense(2)

        def call(self, x):
            return self.head(self.vit(x))

    wrapper = Wrapper()
    wrapper(np.zeros((1, 16, 16, 3)))
    with pytest.raises(ValueError, match="pass the ViT inside it \\('inner_vit'\\)"):
        inspection.attention_maps(wrapper, _images(1, 16))
    assert inspection.attention_maps(wrapper.vit, _images(1, 16)).rollout.shape == (1, 4, 4)


@pytest.mark.parametrize("layer", [2, -3, 1.0])
def test_unknown_layer_index_is_rejected(token_model, layer):
    with pytest.raises(ValueError, match="layer"):
        inspection.attention_maps(token_model, _images(1, 32), layer=layer)


def test_model_without_position_embeddings_is_rejected():
    model = ViT(image_size=16, patch_size=4, classes=2, position_embedding="none", **SMALL)
    with pytest.raises(ValueError, match="no position embeddings"):
        inspection.position_embedding_similarity(model)


def test_bad_batch_size_is_rejected(token_model):
    with pytest.raises(ValueError, match="batch_size"):
        inspection.attention_weights(token_model, _images(1, 32), batch_size=0)


# --- figures -------------------------------------------------------------------------------------------------

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.parametrize("image_size, patch_size", [(8, 2), (16, 4)])
def test_write_figures_on_digit_sized_models(tmp_path, image_size, patch_size):
    keras.utils.set_random_seed(7)
    model = ViT(image_size=image_size, patch_size=patch_size, classes=10, classifier_activation=None, **SMALL)
    paths = inspection.write_figures(model, _images(6, image_size), tmp_path / "figs")
    assert [p.rsplit("/", 1)[-1] for p in map(str, paths)] == list(inspection.FIGURE_NAMES)
    for path in paths:
        with open(path, "rb") as handle:
            assert handle.read(8) == PNG_SIGNATURE


def test_write_figures_skips_what_a_model_does_not_have(tmp_path):
    model = ViT(image_size=16, patch_size=4, classes=2, position_embedding="none", **SMALL)
    paths = inspection.write_figures(model, _images(2, 16), tmp_path)
    names = [str(p).rsplit("/", 1)[-1] for p in paths]
    assert names == ["attention_maps.png", "attention_distance.png", "embedding_filters.png"]


def test_plot_functions_return_figures_with_the_expected_panels(token_model):
    images = _images(2, 32)
    maps = inspection.attention_maps(token_model, images)
    figure = inspection.plot_attention_maps(images, maps)
    assert len(figure.axes) == 2 * (3 + 3)
    figure = inspection.plot_attention_distance(inspection.attention_distances(token_model, images), reference=16.0)
    assert len(figure.axes[0].collections) == 3  # one scatter per head
    with pytest.raises(ValueError, match="layers, heads"):
        inspection.plot_attention_distance(np.zeros(3))
