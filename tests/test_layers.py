"""Layer-level facts: patch order, position-embedding variants, attention weights on request."""

import keras
import numpy as np
import pytest

from vit_keras import layers


def test_patches_are_row_major_and_flattened_row_column_channel():
    x = np.arange(2 * 4 * 6 * 3, dtype=np.float32).reshape(2, 4, 6, 3)
    patches = np.asarray(layers.Patches(2)(x))
    assert patches.shape == (2, 6, 12)
    # Token 4 is grid row 1, column 1: pixels rows 2-3, columns 2-3, flattened (row, column, channel).
    np.testing.assert_array_equal(patches[1, 4], x[1, 2:4, 2:4, :].reshape(-1))
    np.testing.assert_array_equal(patches[0, 2], x[0, 0:2, 4:6, :].reshape(-1))


def test_patch_projection_equals_google_conv_embedding():
    # vit_jax embeds with Conv(D, kernel=P, stride=P, VALID); our Dense on flattened patches must be the same map.
    rng = np.random.default_rng(0)
    kernel = rng.standard_normal((4, 4, 3, 8)).astype(np.float32)
    x = rng.standard_normal((1, 8, 12, 3)).astype(np.float32)
    conv = keras.ops.conv(x, kernel, strides=4, padding="valid")
    dense = np.asarray(layers.Patches(4)(x)) @ kernel.reshape(-1, 8)
    # Same products, other summation order (48-term dot products of N(0, 1) values): float32 rounding ~1e-6.
    np.testing.assert_allclose(dense, np.asarray(conv).reshape(1, -1, 8), atol=1e-5)


def test_sincos_table_follows_the_formula():
    table = layers.sincos_2d_position_embeddings((3, 4), 8)
    omega = 1.0 / 10_000 ** (np.arange(2) / 2)
    row, col = 2, 1  # token 9
    expected = np.concatenate([np.sin(col * omega), np.cos(col * omega), np.sin(row * omega), np.cos(row * omega)])
    np.testing.assert_allclose(table[row * 4 + col], expected, atol=1e-6)  # float32 sin/cos of values <= 4
    with pytest.raises(ValueError, match="divisible by 4"):
        layers.sincos_2d_position_embeddings((2, 2), 6)


def test_learned_2d_embeddings_concatenate_row_and_column_tables():
    encoder = layers.PatchEncoder(8, (2, 3), position_embedding="learned_2d")
    encoder.build((None, 6, 12))
    table = np.asarray(encoder.patch_position_embeddings())
    rows, cols = encoder.pos_embedding_row.numpy(), encoder.pos_embedding_col.numpy()
    np.testing.assert_array_equal(table[1, 2], np.concatenate([rows[1], cols[2]]))
    x = np.zeros((1, 6, 12), np.float32)
    out = np.asarray(encoder(x))
    # Zero patches: each token is the projection bias + its position embedding; the class token has none.
    np.testing.assert_allclose(out[0, 0], encoder.cls.numpy()[0, 0], atol=1e-7)
    np.testing.assert_allclose(out[0, 1 + 5], table[1, 2] + encoder.embedding.bias.numpy(), atol=1e-6)


def test_no_position_embedding_makes_tokens_permutation_equivariant():
    encoder = layers.PatchEncoder(8, (2, 2), class_token=False, position_embedding="none")
    x = np.random.default_rng(0).standard_normal((1, 4, 12)).astype(np.float32)
    out = np.asarray(encoder(x))
    np.testing.assert_allclose(np.asarray(encoder(x[:, ::-1])), out[:, ::-1], atol=1e-6)
    assert encoder.patch_position_embeddings() is None


def test_attention_scores_on_request_leave_the_output_unchanged():
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16)
    x = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
    y = np.asarray(block(x))
    y2, scores = block(x, return_attention_scores=True)
    # The same float32 ops with and without returning the scores; softmax rows sum to 1 within float32 rounding.
    np.testing.assert_allclose(np.asarray(y2), y, atol=1e-6)
    scores = np.asarray(scores)
    assert scores.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-6)


def test_transformer_block_rejects_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match="not divisible by num_heads 3"):
        layers.TransformerBlock(num_heads=3, mlp_dim=16)(np.zeros((1, 2, 8), np.float32))


def test_patches_reject_sizes_that_do_not_divide():
    with pytest.raises(ValueError, match="not divisible by patch_size 4"):
        layers.Patches(4)(np.zeros((1, 6, 8, 3), np.float32))


def test_std_conv_standardises_the_kernel():
    conv = layers.StdConv2D(2, 1, use_bias=False)
    x = np.random.default_rng(2).standard_normal((1, 3, 3, 4)).astype(np.float32)
    conv.build(x.shape)
    w = np.random.default_rng(3).standard_normal((1, 1, 4, 2)).astype(np.float32) * 5 + 3
    conv.kernel.assign(w)
    w_std = (w - w.mean(axis=(0, 1, 2))) / (w.std(axis=(0, 1, 2)) + 1e-5)
    # float32 standardisation of weights ~N(3, 25) against float64: rounding ~1e-6 on O(1) outputs.
    np.testing.assert_allclose(np.asarray(conv(x)), x @ w_std[0, 0], atol=1e-5)


def test_attention_dropout_applies_only_in_training():
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16, attention_dropout_rate=0.5)
    x = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")
    inference = [keras.ops.convert_to_numpy(block(x, training=False)) for _ in range(2)]
    np.testing.assert_array_equal(inference[0], inference[1])
    training = keras.ops.convert_to_numpy(block(x, training=True))
    assert np.abs(training - inference[0]).max() > 1e-3


def test_transformer_block_without_qkv_bias_has_no_qkv_bias_variables():
    """qkv_bias=False drops the q/k/v biases only (timm/transformers keep the output projection's), and the layer's
    config rebuilds the same variables; the default keeps all four."""
    block = layers.TransformerBlock(num_heads=3, mlp_dim=96, qkv_bias=False)
    block.build((None, 5, 48))
    names = set(block.checkpoint_variables())
    attention = "MultiHeadDotProductAttention_1"
    assert not names & {f"{attention}/{p}/bias" for p in ("query", "key", "value")}
    assert {f"{attention}/out/bias", f"{attention}/query/kernel"} <= names
    rebuilt = layers.TransformerBlock.from_config(block.get_config())
    rebuilt.build((None, 5, 48))
    assert set(rebuilt.checkpoint_variables()) == names
    default = layers.TransformerBlock(num_heads=3, mlp_dim=96)
    default.build((None, 5, 48))
    assert set(default.checkpoint_variables()) - names == {f"{attention}/{p}/bias" for p in ("query", "key", "value")}
    with pytest.raises(ValueError, match="qkv_bias"):
        layers.TransformerBlock(num_heads=3, mlp_dim=96, qkv_bias="no")


def test_patch_encoder_takes_its_config_whole_and_old_keywords_and_saved_configs_through_one_translation():
    from vit_keras.configs import PatchConfig, ViTConfig

    config = ViTConfig(patch_size=8, hidden_size=48, num_heads=3, num_layers=1, image_size=32, distilled=True,
                       num_register_tokens=2, patch_norm="rmsnorm", layer_norm_epsilon=1e-5)
    encoder = layers.PatchEncoder(patch=config.patch)
    assert encoder.patch == config.patch and encoder.num_prefix_tokens == config.num_prefix_tokens == 4
    assert encoder.grid_size == (4, 4) and encoder.patch_size == 8
    # The flat keywords of the layer on its own, and the flat layer config of a file saved by 0.1.0 (its older
    # `classifier` and `norm_epsilon`), give the same config.
    flat = dict(hidden_size=48, grid_size=[4, 4], patch_size=8, distilled=True, num_register_tokens=2,
                patch_norm="rmsnorm", norm_epsilon=1e-5, classifier="token")
    assert layers.PatchEncoder(**flat).patch == config.patch
    assert layers.PatchEncoder.from_config({**flat, "name": "patch_encoder"}).patch == config.patch
    assert layers.PatchEncoder.from_config(encoder.get_config()).patch == config.patch
    assert PatchConfig.from_arguments({"hidden_size": 8, "grid_size": (2, 2), "classifier": "gap"}).class_token is False
    with pytest.raises(TypeError, match="either as `patch=` or as keywords"):
        layers.PatchEncoder(patch=config.patch, hidden_size=48)
    with pytest.raises(TypeError, match=r"Unknown patch embedding arguments \['grid'\]"):
        PatchConfig.from_arguments({"hidden_size": 48, "grid_size": (4, 4), "grid": (2, 2)})
    # The config validates the fields, once: the layer's keywords reach the same checks.
    with pytest.raises(ValueError, match="needs an even hidden_size"):
        layers.PatchEncoder(9, (2, 2), position_embedding="learned_2d")
    with pytest.raises(ValueError, match="needs an even hidden_size"):
        ViTConfig(patch_size=8, hidden_size=9, num_heads=3, position_embedding="learned_2d")


def test_mlp_block_reads_the_older_gelu_approximate_only_from_a_saved_config():
    """`activation` is the MLP's one argument; a layer config written before it (`gelu_approximate`, with
    `activation` None or absent) is translated when the file is read."""
    older = {"mlp_dim": 8, "gelu_approximate": False, "activation": None}
    assert layers.MlpBlock.from_config(older).activation == "gelu"
    assert layers.MlpBlock.from_config({"mlp_dim": 8, "gelu_approximate": True}).activation == "gelu_tanh"
    assert "gelu_approximate" not in layers.MlpBlock(8).get_config()
    with pytest.raises(ValueError, match="Unrecognized keyword arguments"):
        layers.MlpBlock(8, gelu_approximate=False)


def test_attention_pooling_heads_take_their_config_whole_or_as_keywords():
    import keras
    import pytest

    from vit_keras.configs import PoolingHeadConfig, ViTConfig
    from vit_keras.layers import AttentionPoolingHead, MAPHead

    config = ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_heads=2, mlp_dim=32, num_layers=1,
                       global_pool="map", class_token=False, map_mlp_dim=24)
    head = MAPHead(head=config.pooling_head)
    assert (head.num_heads, head.head.mlp_dim) == (2, 24)  # the head's own MLP width, resolved by the config
    # its saved config is the keywords, which make the same head again
    again = MAPHead.from_config(head.get_config())
    assert again.head == head.head
    with pytest.raises(TypeError, match="either as `head=` or as keywords"):
        MAPHead(num_heads=2, head=config.pooling_head)
    with pytest.raises(ValueError, match="'aimv2' attention-pooling head; got a config of kind 'big_vision'"):
        AttentionPoolingHead(head=config.pooling_head)
    with pytest.raises(ValueError, match="`activation` must be one of"):
        MAPHead(num_heads=2, mlp_dim=8, activation="relu")
    aimv2 = ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_heads=2, mlp_dim=32, num_layers=1,
                      global_pool="map", class_token=False, map_head="aimv2", qkv_bias=True).pooling_head
    assert aimv2 == PoolingHeadConfig(num_heads=2, kind="aimv2", qkv_bias=True)
    assert tuple(AttentionPoolingHead(head=aimv2)(keras.ops.ones((1, 4, 16))).shape) == (1, 16)


def test_every_config_activation_has_a_function_and_a_stray_name_fails_on_the_first_call():
    import keras
    import pytest

    from vit_keras.configs import ACTIVATIONS
    from vit_keras.layers.transformer import ACTIVATION_FUNCTIONS, MlpBlock

    assert tuple(ACTIVATION_FUNCTIONS) == ACTIVATIONS
    with pytest.raises(ValueError, match="`activation` must be one of.*'relu'"):
        MlpBlock(8, activation="relu")(keras.ops.ones((1, 3, 4)))  # built on its own: no config checked the name
