"""The readers' rule tables: a tensor the architecture needs and the file lacks is refused by its source name (never
loaded as zero, never a raw KeyError), tensors the config rules out are refused, and every table writes only
canonical names, the ones the layers declare.

Each case edits a copy of a reference checkpoint (tests/fixtures) in tmp_path: one tensor deleted.
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest
from safetensors.numpy import save_file

import vit_keras
from tests.tiny import TINY
from vit_keras.cli import main as cli_main
from vit_keras.layers import RotaryEmbedding2D, TransformerBlock, checkpoint_variables
from vit_keras.weights import hf, hf_family_rows, rules, schema, timm
from vit_keras.weights.assign import model_slots
from vit_keras.weights.safetensors_io import read_safetensors

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
FAMILY = os.path.join(FIXTURES, "family")


def _copy_without(case_dir, tmp_path, *deleted):
    """A copy of a checkpoint directory whose model.safetensors lacks `deleted` (which it must hold)."""
    directory = tmp_path / os.path.basename(os.path.dirname(case_dir.rstrip("/")))
    shutil.copytree(case_dir, directory)
    weights = directory / "model.safetensors"
    tensors = dict(read_safetensors(str(weights)))
    for key in deleted:
        assert key in tensors, key  # the case must delete a tensor the file really has
        del tensors[key]
    save_file(tensors, str(weights))
    return str(directory)


def _refusal(load, *expected):
    """The ValueError `load()` raises, checked to name every string in `expected`."""
    with pytest.raises(ValueError) as error:
        load()
    message = str(error.value)
    for text in expected:
        assert text in message, (text, message)
    return message


@pytest.mark.parametrize("case, deleted, says", [
    # timm directory (save_for_hf): the q/k/v bias of one block; a projection weight; a whole MLP layer
    ("family/timm_dinov2_reg4/checkpoint", "blocks.0.attn.qkv.bias", "the config says qkv_bias=True"),
    ("family/timm_clip_quickgelu/checkpoint", "blocks.1.attn.proj.weight", "its bias blocks.1.attn.proj.bias"),
    # transformers ViT / DINOv2 / CLIP: the query bias the config promises (qkv_bias=True); a projection weight
    ("hf_dir/hf_model", "vit.encoder.layer.0.attention.attention.query.bias", "the config says qkv_bias=True"),
    ("hf_dir/hf_model", "vit.encoder.layer.1.attention.output.dense.weight", "its bias"),
    ("family/hf_dinov2/checkpoint", "encoder.layer.0.attention.attention.query.bias", "qkv_bias=True"),
    ("family/hf_dinov2/checkpoint", "encoder.layer.1.layer_scale2.lambda1", "every block has one"),
    ("family/hf_clip_vision/checkpoint", "encoder.layers.0.self_attn.q_proj.bias", "qkv_bias=True"),
    ("family/hf_clip_vision/checkpoint", "encoder.layers.1.self_attn.v_proj.weight", "its bias"),
    ("family/hf_siglip_vision/checkpoint", "head.attention.in_proj_weight", "its bias head.attention.in_proj_bias"),
])
def test_a_missing_tensor_is_refused_by_its_source_name(case, deleted, says, tmp_path):
    directory = _copy_without(os.path.join(FIXTURES, case), tmp_path, deleted)
    message = _refusal(lambda: vit_keras.from_pretrained(directory), deleted, says, "model.safetensors",
                       "nothing was loaded")
    assert "KeyError" not in message


def test_a_bare_state_dict_without_a_config_must_be_consistent_across_blocks():
    # No config.json says whether q/k/v have biases: the file itself must agree with itself.
    tensors = dict(read_safetensors(os.path.join(FAMILY, "timm_dinov2_reg4", "checkpoint", "model.safetensors")))
    del tensors["blocks.0.attn.qkv.bias"]
    _refusal(lambda: timm.canonicalize(tensors, num_heads=3), "blocks.0.attn.qkv.bias",
             "the other blocks have theirs")


def test_a_whole_missing_module_is_named_with_both_its_tensors(tmp_path):
    case = os.path.join(FAMILY, "timm_deit_distilled", "checkpoint")
    directory = _copy_without(case, tmp_path, "blocks.1.mlp.fc2.weight", "blocks.1.mlp.fc2.bias")
    _refusal(lambda: vit_keras.from_pretrained(directory), "blocks.1.mlp.fc2.weight (every block has one)")


def test_convert_exits_non_zero_for_a_checkpoint_with_a_hole(tmp_path, capsys):
    case = os.path.join(FAMILY, "timm_clip_quickgelu", "checkpoint")
    directory = _copy_without(case, tmp_path, "blocks.0.attn.qkv.bias")
    assert cli_main(["convert", directory, str(tmp_path / "out.keras")]) != 0
    assert "blocks.0.attn.qkv.bias" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out.keras")


def test_bare_timm_state_dict_with_a_missing_bias_or_weight(tmp_path):
    tensors = dict(read_safetensors(os.path.join(FAMILY, "timm_avg_fcnorm", "checkpoint", "model.safetensors")))
    kwargs = dict(image_size=32, patch_size=8, hidden_size=48, num_layers=3, num_heads=3, mlp_dim=192,
                  classifier="gap", classes=7, fc_norm=True)
    for deleted in ("blocks.2.attn.qkv.bias", "blocks.0.mlp.fc1.weight", "patch_embed.proj.weight"):
        path = str(tmp_path / f"{deleted}.safetensors")
        save_file({k: v for k, v in tensors.items() if k != deleted}, path)
        _refusal(lambda path=path: vit_keras.ViT(weights=path, **kwargs), deleted, path)


def test_the_config_decides_a_bias_the_file_lacks_everywhere():
    """With the directory's config, a q/k/v bias missing from every block is refused by what the config says; a
    bare state dict without any is a qkv_bias=False model (timm's own reading of it)."""
    directory = os.path.join(FAMILY, "timm_dinov2_reg4", "checkpoint")
    fields, _ = timm.read_config(directory)
    tensors = {k: v for k, v in read_safetensors(os.path.join(directory, "model.safetensors")).items()
               if not k.endswith("attn.qkv.bias")}
    _refusal(lambda: timm.canonicalize(tensors, 3, config=fields, source="dinov2"),
             "dinov2:", "blocks.0.attn.qkv.bias (the config says qkv_bias=True)", "blocks.1.attn.qkv.bias")
    params = timm.canonicalize(tensors, 3)
    assert not any(key.endswith("query/bias") for key in params)


def test_a_bias_the_config_rules_out_is_refused(tmp_path):
    directory = tmp_path / "hf"
    shutil.copytree(os.path.join(FIXTURES, "hf_dir", "hf_model"), directory)
    config = json.loads((directory / "config.json").read_text())
    config["qkv_bias"] = False
    (directory / "config.json").write_text(json.dumps(config))
    _refusal(lambda: vit_keras.from_pretrained(str(directory)), "Ruled out by the config",
             "vit.encoder.layer.0.attention.attention.query.bias (the config says qkv_bias=False)")


def test_unknown_and_unimplemented_tensors_are_named(tmp_path):
    tensors = dict(read_safetensors(os.path.join(FAMILY, "timm_deit_distilled", "checkpoint", "model.safetensors")))
    extra = {**tensors, "blocks.0.attn.rel_pos": np.zeros(3, np.float32)}
    _refusal(lambda: timm.canonicalize(extra, 3, source="x.safetensors"), "Unknown", "blocks.0.attn.rel_pos")
    qk_norm = {**tensors, "blocks.0.attn.q_norm.weight": np.zeros(16, np.float32)}
    _refusal(lambda: timm.canonicalize(qk_norm, 3), "q/k normalisation", "blocks.0.attn.q_norm.weight")


def test_a_rule_must_target_canonical_names():
    with pytest.raises(ValueError, match="not a canonical name"):
        rules.Rule("blocks.{i}.attn.proj", "Transformer/encoderblock_{i}/Attention/out", rules.HEADS_OUT)


def test_hf_tables_cover_the_model_types_read_config_accepts():
    # Every model type is a Family row; DINOv3 chooses its table by its config (the gated MLP), the others have one.
    assert set(hf_family_rows.FAMILIES) | set(hf_family_rows.WHOLE_MODELS) == set(hf.MODEL_TYPES)
    assert set(hf.TABLES) == set(hf_family_rows.FAMILIES) - {"dinov3_vit"}


# ---- the schema is the layers' own names ------------------------------------------------------------------------

_MODELS = [
    dict(classifier="token", distilled=True, num_register_tokens=2, pre_norm=True, layer_scale=True),
    dict(classifier="map", fc_norm=True, representation_size=24),
    dict(classifier="gap", patch_bias=False, patch_norm="layernorm"),
    dict(classifier="map", map_head="aimv2"),
    dict(classifier="token", resnet={"num_layers": [1, 1], "width_factor": 1}, patch_size=1, image_size=32),
]


def _part_names():
    """The names of the block parts a ViTConfig does not select yet (SwiGLU, RMSNorm, RoPE-Mixed), as a block and a
    `rope` layer of a model would declare them."""
    names = set()
    for kwargs in (dict(mlp="swiglu", mlp_norm="layernorm"), dict(mlp="swiglu_packed", norm="rmsnorm")):
        block = TransformerBlock(3, 96, **kwargs)
        block.build((None, 5, 48))
        names |= {f"{schema.BLOCK.format(i=0)}/{name}" for name in checkpoint_variables(block)}
    rope = RotaryEmbedding2D(16, "mixed", grid_size=(2, 2), depth=2, num_heads=3)
    rope.build((None, 5, 48))
    names |= {f"rope/{name}" for name in checkpoint_variables(rope)}
    assert all(schema.is_canonical(name) for name in names), sorted(n for n in names if not schema.is_canonical(n))
    return names


def _task_names():
    """The names the task heads (`vit_keras.dense.tasks`) declare, under the layer names their models give them."""
    from vit_keras.dense.tasks import layers as task

    heads = [("queries", task.QueryTokens(2), ((None, 5, 8),)), ("mask_head", task.EomtMaskHead(), ((None, 2, 8),)),
             ("upscale", task.EomtUpscale(1), ((None, 2, 2, 8),)), ("class_head", keras.layers.Dense(3), ((None, 8),)),
             ("neck", task.DPTNeck([4, 4, 4], [2, 1, 0.5], 4), ([(None, 2, 2, 8)] * 3,)),
             ("depth_head", task.DepthHead(2, 14), ((None, 4, 4, 4), (None, 28, 28, 3))),
             ("pose_head", task.VitPoseSimpleDecoder(3), ((None, 2, 2, 8),)),
             ("pose_head", task.VitPoseClassicDecoder(3), ((None, 2, 2, 8),))]
    names = set()
    for prefix, layer, shapes in heads:
        layer.build(*shapes)
        names |= {f"{prefix}/{name}" for name in checkpoint_variables(layer)}
    return names


@pytest.mark.slow
def test_the_schema_is_the_union_of_the_layers_checkpoint_names():
    """Every name a model declares is canonical, and every canonical template is declared by some model."""
    declared = set()
    for extra in _MODELS:
        model = vit_keras.ViT(**{**TINY, "image_size": 32, **extra, "classes": 4})
        names = set(model_slots(model))
        assert all(schema.is_canonical(name) for name in names), sorted(n for n in names if not schema.is_canonical(n))
        declared |= names
        keras.backend.clear_session()
    declared |= _part_names()
    task_names = _task_names()
    assert all(schema.is_canonical(name) for name in task_names), sorted(
        n for n in task_names if not schema.is_canonical(n))
    declared |= task_names
    for template in schema.CANONICAL_NAMES:
        regex = schema.template_regex(template)
        assert any(regex.match(name) for name in declared), template


def test_google_npz_missing_a_block_weight_is_refused_by_name(tmp_path):
    """The architecture of a Google file is read off its block weights: one missing is named, not a KeyError."""
    arrays = dict(np.load(os.path.join(FIXTURES, "vitjax_token_raw", "checkpoint.npz")))
    deleted = "Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel"
    del arrays[deleted]
    path = str(tmp_path / "broken.npz")
    np.savez(path, **arrays)
    _refusal(lambda: vit_keras.from_pretrained(path), path, f"Missing from the checkpoint (1): {deleted}")


def test_every_transformers_family_row_gives_vitconfig_fields_and_the_switches_its_table_names():
    """A row's fields are `ViTConfig`'s own (no pseudo-fields) and build a valid config; every bias switch its rule
    table names is one the row reads (a `ViTConfig` switch or one of its config.json bias keys)."""
    from vit_keras.configs import ViTConfig

    sizes = {"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 96,
             "patch_size": 8, "image_size": 32, "num_patches": 16, "max_img_size": 64, "norm_mean": [0.5] * 3,
             "norm_std": [0.5] * 3, "num_cls_tokens": 2}
    gated = {"use_gated_mlp": True, "hidden_act": "silu", "mlp_bias": False}
    for kind, family in hf_family_rows.FAMILIES.items():
        for extra in ({}, gated) if kind == "dinov3_vit" else ({},):
            fields, switches = family.read({**sizes, **extra}, "config.json")
            assert ViTConfig(**fields).to_dict(), kind
            table = family.rule_table(fields, switches)
            named = {rule.bias for rule in table.rules if isinstance(rule.bias, str)}
            assert named <= set(switches), (kind, named - set(switches))
