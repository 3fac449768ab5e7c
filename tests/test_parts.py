"""Block parts against the libraries they load from: RMSNorm (timm `RmsNorm`, transformers `Aimv2RMSNorm`), the
SwiGLU MLPs (timm `SwiGLU`, `SwiGLUPacked`, EVA's `SwiGLU(norm_layer=...)`), and whole blocks with 2-D RoPE (timm
`EvaBlock`, transformers `DINOv3ViTLayer`), with the reference's weights copied over; and the parts' `.keras` files.

Bounds (float32 throughout, random weights of unit scale, D = 48):
- RMSNorm: the mean of D squares summed in another order (relative error ≤ D·u/2 ≈ 1.4e-6 worst case, u = 2^-24,
  halved again by the rsqrt) plus a few ulps for rsqrt and the two products: rtol 2e-6.
- SwiGLU and the blocks: sums of 48-96 products of unit-scale values in another order (BLAS on either side), each
  output ≈ O(1-10) with relative error ~sqrt(K)·u per matmul over three to six chained matmuls; measured ≤ 2e-6
  absolute; 1e-5 (atol and rtol) leaves margin while a wrong layout, transpose or gate half moves outputs by O(1).
"""

import functools

import keras
import numpy as np
import pytest
import torch
from timm.layers import LayerNorm, RmsNorm
from timm.layers.mlp import SwiGLU, SwiGLUPacked
from timm.layers.pos_embed_sincos import RotaryEmbeddingCat
from timm.models.eva import EvaBlock
from transformers.models.aimv2.modeling_aimv2 import Aimv2RMSNorm
from transformers.models.dinov3_vit.configuration_dinov3_vit import DINOv3ViTConfig
from transformers.models.dinov3_vit.modeling_dinov3_vit import DINOv3ViTLayer, DINOv3ViTRopePositionEmbedding

from tests.torch_compat import randomise_parameters
from vit_keras.layers import RMSNorm, RotaryEmbedding2D, SwiGLUBlock, TransformerBlock, checkpoint_variables
from vit_keras.weights import schema

RMS_RTOL = 2e-6  # see the module docstring
TOL = 1e-5  # see the module docstring
D, HEADS, HIDDEN = 48, 3, 96
HEAD_DIM = D // HEADS


def _inputs(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _torch(module, x):
    with torch.no_grad():
        return module(torch.from_numpy(x)).numpy()


def _dense(layer, linear):
    layer.kernel.assign(linear.weight.detach().numpy().T)
    if linear.bias is not None:
        layer.bias.assign(linear.bias.detach().numpy())


def _norm(layer, norm):
    layer.scale.assign(norm.weight.detach().numpy()) if isinstance(layer, RMSNorm) else (
        layer.gamma.assign(norm.weight.detach().numpy()), layer.beta.assign(norm.bias.detach().numpy()))


# ---- RMSNorm ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reference", [functools.partial(RmsNorm, eps=1e-5), functools.partial(Aimv2RMSNorm, eps=1e-5)])
def test_rmsnorm_equals_timm_and_transformers(reference):
    module = randomise_parameters(reference(D))
    x = 3.0 * _inputs((2, 7, D))
    layer = RMSNorm(epsilon=1e-5)
    layer.build(x.shape)
    _norm(layer, module)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), _torch(module, x), rtol=RMS_RTOL, atol=1e-7)
    assert sorted(checkpoint_variables(layer)) == ["scale"]


def test_rmsnorm_keeps_its_statistics_in_float32_under_bfloat16():
    x = _inputs((1, 3, D))
    layer = RMSNorm(dtype="mixed_bfloat16")
    y = keras.ops.convert_to_numpy(keras.ops.cast(layer(x), "float32"))
    expected = x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(y, expected, rtol=2**-7, atol=2**-7)  # bfloat16 keeps 8 significant bits


# ---- SwiGLU -------------------------------------------------------------------------------------------------------

def _copy_swiglu(layer, module, packed):
    if packed:
        _dense(layer.dense_in, module.fc1)
    else:
        _dense(layer.dense_gate, module.fc1_g)
        _dense(layer.dense_value, module.fc1_x)
    if layer.norm_kind is not None:
        _norm(layer.norm, module.norm)
    _dense(layer.dense_out, module.fc2)


LN, RMS = functools.partial(LayerNorm, eps=1e-6), functools.partial(RmsNorm, eps=1e-6)
SWIGLUS = [
    (dict(packed=False), lambda: SwiGLU(D, HIDDEN)),
    (dict(packed=False, use_bias=False), lambda: SwiGLU(D, HIDDEN, bias=False)),  # AIMv2
    (dict(packed=False, norm="layernorm"), lambda: SwiGLU(D, HIDDEN, norm_layer=LN)),
    (dict(packed=False, norm="rmsnorm"), lambda: SwiGLU(D, HIDDEN, norm_layer=RMS)),
    (dict(packed=True), lambda: SwiGLUPacked(D, 2 * HIDDEN)),  # EVA-02 S/Ti: GluMlp(gate_last=False)
]


@pytest.mark.parametrize("options, reference", SWIGLUS)
def test_swiglu_equals_timm(options, reference):
    module = randomise_parameters(reference())
    layer = SwiGLUBlock(HIDDEN, norm_epsilon=1e-6, **options)
    x = _inputs((2, 5, D))
    layer.build(x.shape)
    _copy_swiglu(layer, module, options["packed"])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), _torch(module, x), rtol=TOL, atol=TOL)
    names = set(checkpoint_variables(layer))
    assert ("Dense_0/bias" in names or "Dense_0_gate/bias" in names) == options.get("use_bias", True)


def test_the_packed_halves_are_gate_then_value():
    """The same weights with the two halves of `Dense_0` swapped give another function: the order is tested above."""
    module = randomise_parameters(SwiGLUPacked(D, 2 * HIDDEN))
    layer = SwiGLUBlock(HIDDEN, packed=True)
    x = _inputs((1, 4, D))
    layer.build(x.shape)
    _copy_swiglu(layer, module, packed=True)
    kernel, bias = (keras.ops.convert_to_numpy(v) for v in (layer.dense_in.kernel, layer.dense_in.bias))
    layer.dense_in.kernel.assign(np.concatenate(np.split(kernel, 2, axis=-1)[::-1], axis=-1))
    layer.dense_in.bias.assign(np.concatenate(np.split(bias, 2)[::-1]))
    assert np.abs(keras.ops.convert_to_numpy(layer(x)) - _torch(module, x)).max() > 0.1


# ---- whole blocks with RoPE ---------------------------------------------------------------------------------------

def _copy_attention(attention, projections, out):
    """timm/transformers (out, in) q/k/v/out linears into Keras' (D, heads, D_h) / (heads, D_h, D) kernels."""
    for dense, linear in zip((attention.query_dense, attention.key_dense, attention.value_dense), projections):
        dense.kernel.assign(linear.weight.detach().numpy().T.reshape(D, HEADS, HEAD_DIM))
        bias = np.zeros(D, "float32") if linear.bias is None else linear.bias.detach().numpy()  # EVA/DINOv3: no k bias
        dense.bias.assign(bias.reshape(HEADS, HEAD_DIM))
    attention.output_dense.kernel.assign(out.weight.detach().numpy().T.reshape(HEADS, HEAD_DIM, D))
    attention.output_dense.bias.assign(out.bias.detach().numpy())


def _run_block(block, x, tables):
    return keras.ops.convert_to_numpy(block(keras.ops.convert_to_tensor(x), rope=tables))


@pytest.mark.parametrize("grid", [(4, 4), (3, 5)])
def test_eva02_block_equals_timm_eva_block(grid):
    """EVA-02 B/L: q/v bias (no k bias), RoPE interleaved with the training grid as reference, SwiGLU with sub-LN."""
    torch.manual_seed(0)
    norm = functools.partial(LayerNorm, eps=1e-6)
    reference = randomise_parameters(EvaBlock(D, HEADS, qkv_bias=True, qkv_fused=False, mlp_ratio=HIDDEN / D,
                                              swiglu_mlp=True, scale_mlp=True, num_prefix_tokens=1, norm_layer=norm))
    rope = RotaryEmbeddingCat(HEAD_DIM, in_pixels=False, ref_feat_shape=[4, 4])
    x = _inputs((2, 1 + grid[0] * grid[1], D))
    with torch.no_grad():
        expected = reference(torch.from_numpy(x), rope=rope.get_embed(list(grid))).numpy()

    block = TransformerBlock(HEADS, HIDDEN, layer_norm_epsilon=1e-6, mlp="swiglu", mlp_norm="layernorm",
                             rope="interleaved", num_prefix_tokens=1)
    block.build(x.shape)
    _norm(block.norm_1, reference.norm1)
    _norm(block.norm_2, reference.norm2)
    _copy_attention(block.attention, (reference.attn.q_proj, reference.attn.k_proj, reference.attn.v_proj),
                    reference.attn.proj)
    _copy_swiglu(block.mlp, reference.mlp, packed=False)
    tables = RotaryEmbedding2D(HEAD_DIM, "interleaved", ref_grid_size=(4, 4))(np.zeros((1, *grid, 1), "float32"))
    np.testing.assert_allclose(_run_block(block, x, tables), expected, rtol=TOL, atol=TOL)

    # The class-token-only last block (head_tokens_only) gives the first row of the full block.
    first = TransformerBlock(**{**block.get_config(), "query_tokens": 1})
    first.build(x.shape)
    first.set_weights(block.get_weights())
    np.testing.assert_allclose(_run_block(first, x, tables), expected[:, :1], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("image", [(64, 64), (48, 80)])
def test_dinov3_block_equals_transformers_dinov3_layer(image):
    """DINOv3: class token + 4 registers unrotated, rotate-half RoPE from the patch centres, gated MLP, LayerScale."""
    config = DINOv3ViTConfig(hidden_size=D, num_attention_heads=HEADS, intermediate_size=HIDDEN, use_gated_mlp=True,
                             hidden_act="silu", num_register_tokens=4, patch_size=16, image_size=64,
                             layerscale_value=0.5)
    torch.manual_seed(0)
    reference = randomise_parameters(DINOv3ViTLayer(config))
    cos, sin = DINOv3ViTRopePositionEmbedding(config).eval()(torch.zeros(1, 3, *image))
    grid = (image[0] // 16, image[1] // 16)
    x = _inputs((2, 5 + grid[0] * grid[1], D))
    with torch.no_grad():
        expected = reference(torch.from_numpy(x), position_embeddings=(cos, sin)).numpy()

    block = TransformerBlock(HEADS, HIDDEN, layer_norm_epsilon=1e-5, mlp="swiglu", layer_scale=True,
                             rope="rotate_half", num_prefix_tokens=5)
    block.build(x.shape)
    _norm(block.norm_1, reference.norm1)
    _norm(block.norm_2, reference.norm2)
    attention = reference.attention
    _copy_attention(block.attention, (attention.q_proj, attention.k_proj, attention.v_proj), attention.o_proj)
    _dense(block.mlp.dense_gate, reference.mlp.gate_proj)
    _dense(block.mlp.dense_value, reference.mlp.up_proj)
    _dense(block.mlp.dense_out, reference.mlp.down_proj)
    block.scale_1.scale.assign(reference.layer_scale1.lambda1.detach().numpy())
    block.scale_3.scale.assign(reference.layer_scale2.lambda1.detach().numpy())
    tables = RotaryEmbedding2D(HEAD_DIM, "rotate_half")(np.zeros((1, *grid, 1), "float32"))
    np.testing.assert_allclose(_run_block(block, x, tables), expected, rtol=TOL, atol=TOL)


# ---- defaults, names, serialisation --------------------------------------------------------------------------------

def test_the_default_block_is_the_paper_block():
    block = TransformerBlock(HEADS, HIDDEN)
    block.build((None, 5, D))
    assert type(block.norm_1).__name__ == "LayerNormalization" and type(block.mlp).__name__ == "MlpBlock"
    assert type(block.attention).__name__ == "ProjectionAttention"
    assert len(block.weights) == 16
    config = block.get_config()["block"]  # the block's config, whole
    assert (config["mlp"], config["norm"], config["rope"], config["mlp_norm"], config["mlp_bias"]) == (
        "gelu", "layernorm", None, None, True)


def _block_names(**kwargs):
    block = TransformerBlock(HEADS, HIDDEN, **kwargs)
    block.build((None, 17, D))
    return {f"Transformer/encoderblock_0/{name}" for name in checkpoint_variables(block)}


BLOCKS = [
    dict(mlp="swiglu", mlp_norm="layernorm", rope="interleaved"),
    dict(mlp="swiglu_packed", norm="rmsnorm", mlp_norm="rmsnorm", mlp_bias=False, rope="rotate_half"),
    dict(mlp="swiglu", mlp_norm="rmsnorm", rope="mixed"),
]


def test_the_parts_declare_canonical_names():
    names = set().union(*(_block_names(**kwargs) for kwargs in BLOCKS))
    rope = RotaryEmbedding2D(HEAD_DIM, "mixed", grid_size=(4, 4), depth=2, num_heads=HEADS, name="rope")
    rope.build((None, 1, D))
    names |= {f"rope/{name}" for name in checkpoint_variables(rope)}
    assert all(schema.is_canonical(name) for name in names), sorted(n for n in names if not schema.is_canonical(n))
    for template in (schema.BLOCK_MLP_GATE, schema.BLOCK_MLP_VALUE, schema.BLOCK_MLP_NORM):
        for leaf in ("kernel", "bias") if template != schema.BLOCK_MLP_NORM else ("scale", "bias"):
            assert template.format(i=0) + f"/{leaf}" in names
    assert schema.ROPE_FREQS in names
    assert "Transformer/encoderblock_0/LayerNorm_0/bias" not in _block_names(**BLOCKS[1])  # RMSNorm: scale only


@pytest.mark.slow
@pytest.mark.parametrize("kwargs", BLOCKS)
def test_a_model_of_rope_blocks_saves_and_reloads(tmp_path, kwargs):
    """The parts serialise in `.keras` with safe_mode (no Lambda), RoPE tables passed from a shared layer."""
    grid = (3, 5)
    tokens = keras.Input((1 + grid[0] * grid[1], D))
    patches = keras.Input((*grid, 4))
    mixed = kwargs["rope"] == "mixed"
    tables = RotaryEmbedding2D(HEAD_DIM, kwargs["rope"], depth=2 if mixed else None, num_heads=HEADS if mixed else None,
                               name="rope")(patches)
    x = tokens
    for i in range(2):
        x = TransformerBlock(HEADS, HIDDEN, name=f"Transformer_encoderblock_{i}", **kwargs)(
            x, rope=tables[i] if mixed else tables)
    model = keras.Model([tokens, patches], x)
    inputs = [_inputs((2, 16, D)), np.zeros((2, *grid, 4), "float32")]
    expected = model.predict(inputs, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(reloaded.predict(inputs, verbose=0), expected, rtol=0, atol=0)


def test_bad_part_names_are_refused_by_name():
    with pytest.raises(ValueError, match="`mlp` must be one of"):
        TransformerBlock(HEADS, HIDDEN, mlp="relu")
    with pytest.raises(ValueError, match="`norm` must be one of"):
        TransformerBlock(HEADS, HIDDEN, norm="batchnorm")
    with pytest.raises(ValueError, match="`rope` must be None or one of"):
        TransformerBlock(HEADS, HIDDEN, rope="cat")
    with pytest.raises(ValueError, match="SwiGLU MLPs only"):
        TransformerBlock(HEADS, HIDDEN, mlp_norm="layernorm")
    block = TransformerBlock(HEADS, HIDDEN, rope="interleaved")
    with pytest.raises(ValueError, match="called without RoPE tables"):
        block(keras.ops.zeros((1, 5, D)))


@pytest.mark.slow
def test_a_model_of_any_size_computes_its_tables_in_the_graph():
    """Patch grid unknown until run time: the tables come from the runtime grid; the last block computes its first 3
    tokens only (class token + 2 rotated patch tokens) and equals the full computation's first rows."""
    patches, tokens = keras.Input((None, None, 4)), keras.Input((None, D))
    options = dict(mlp="swiglu", rope="interleaved", num_prefix_tokens=1)
    tables = RotaryEmbedding2D(HEAD_DIM, "interleaved", ref_grid_size=(4, 4), grid_indexing="xy")(patches)
    first, last = TransformerBlock(HEADS, HIDDEN, **options), TransformerBlock(HEADS, HIDDEN, query_tokens=3, **options)
    model = keras.Model([tokens, patches], last(first(tokens, rope=tables), rope=tables))
    full = TransformerBlock(HEADS, HIDDEN, **options)
    full.build((None, None, D))
    full.set_weights(last.get_weights())
    for grid in [(3, 5), (4, 4)]:
        x = _inputs((2, 1 + grid[0] * grid[1], D))
        constants = RotaryEmbedding2D(HEAD_DIM, "interleaved", ref_grid_size=(4, 4), grid_indexing="xy")(
            np.zeros((1, *grid, 1), "float32"))
        expected = _run_block(full, keras.ops.convert_to_numpy(first(x, rope=constants)), constants)[:, :3]
        actual = model.predict([x, np.zeros((2, *grid, 4), "float32")], verbose=0)
        np.testing.assert_allclose(actual, expected, rtol=TOL, atol=TOL)
