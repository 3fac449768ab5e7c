"""Dense features (`vit_keras.features`) against timm's `forward_intermediates` and transformers' backbones.

The reference cases in tests/fixtures/dense (README there: the calls, the layer numbering of each library, and how
far each likely mistake moves the maps: 9.1e-2 at the least, an index off by one on DINOv3) are read through the
public API; the held-out cases run timm and transformers here on the same checkpoints with other requests
(every block, negative indices, the stem, prefix tokens, NCHW, norm on and off).
"""

import json
import os

import keras
import numpy as np
import pytest

import vit_keras
from vit_keras import features
from vit_keras.vision_transformer import config_of

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "dense")
CASES = ("timm_vit_cls", "timm_dinov3_rect", "hf_dinov2_backbone", "hf_dinov3_backbone")
# The fixtures' bound (README): max |diff| <= 5e-5 x max(1, max |expected|) per map. Measured here 2.2e-7..3.7e-7
# (TensorFlow, this float32 model), over 100x inside it and 1800x below the smallest likely mistake.
TOLERANCE = 5e-5


def check(actual, expected, tolerance=TOLERANCE):
    actual = np.asarray(keras.ops.convert_to_numpy(actual), np.float64)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    error = np.max(np.abs(actual - expected)) / max(1.0, np.max(np.abs(expected)))
    assert error <= tolerance, error
    return error


def load_case(case):
    directory = os.path.join(FIXTURES, case)
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    model = vit_keras.from_pretrained(os.path.join(directory, "checkpoint"), include_preprocessing=False,
                                      include_top=False)
    preprocess = meta["preprocess"]
    images = np.load(os.path.join(directory, "input.npy"))
    x = ((images / 255.0 - np.array(preprocess["mean"])) / np.array(preprocess["std"])).astype("float32")
    return meta, model, x, np.load(os.path.join(directory, "expected.npz"))


def requested(meta):
    """The request in the form the reference library took it: timm's `indices`, or the backbone's stage names."""
    call = meta["call"]
    return (call["indices"], call["layers"]) if "indices" in call else (call["out_features"], call["out_features"])


@pytest.mark.parametrize("case", CASES)
def test_dense_fixture(case):
    meta, model, x, expected = load_case(case)
    indices, layers = requested(meta)
    maps = features.intermediate_model(model, indices, norm=meta["loader"]["norm"])(x)
    for layer, feature_map in zip(layers, maps, strict=True):
        check(feature_map, expected[f"{layer}_nhwc"])
    channels_first = features.intermediate_model(model, meta["loader"]["layers_absolute"] if "indices" in
                                                 meta["call"] else indices, norm=meta["loader"]["norm"],
                                                 output_format="NCHW")(x)
    for layer, feature_map in zip(layers, channels_first, strict=True):
        check(feature_map, expected[layer])


@pytest.mark.slow
def test_feature_model_keras_round_trip_in_safe_mode(tmp_path):
    meta, model, x, expected = load_case("timm_dinov3_rect")
    feature_model = features.intermediate_model(model, [0, 2], return_prefix_tokens=True)
    path = str(tmp_path / "features.keras")
    feature_model.save(path)
    reloaded = keras.saving.load_model(path, safe_mode=True)
    for (before_map, before_prefix), (after_map, after_prefix) in zip(feature_model(x), reloaded(x), strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(before_map), keras.ops.convert_to_numpy(after_map))
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(before_prefix),
                                      keras.ops.convert_to_numpy(after_prefix))
    check(reloaded(x)[1][0], expected["block2_nhwc"])


# --- held-out requests, against the reference libraries run here -------------------------------------------------

def _timm_model(case):
    import torch
    from safetensors.torch import load_file
    timm = pytest.importorskip("timm")

    directory = os.path.join(FIXTURES, case, "checkpoint")
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    reference = timm.create_model(config["architecture"], pretrained=False, **config["model_args"])
    reference.load_state_dict(load_file(os.path.join(directory, "model.safetensors")), strict=True)
    return reference.eval(), torch


@pytest.mark.slow
@pytest.mark.parametrize("case", ["timm_vit_cls", "timm_dinov3_rect"])
@pytest.mark.parametrize("indices, norm", [(3, False), ([-1, -3], True), ([1], False), (1, True)])
def test_timm_forward_intermediates_held_out(case, indices, norm):
    reference, torch = _timm_model(case)
    _, model, x, _ = load_case(case)
    with torch.no_grad():
        expected = reference.forward_intermediates(torch.from_numpy(x).permute(0, 3, 1, 2), indices=indices,
                                                   norm=norm, output_fmt="NCHW", intermediates_only=True)
    maps = features.intermediate_model(model, indices, norm=norm, output_format="NCHW")(x)
    maps = maps if isinstance(maps, (list, tuple)) else [maps]
    for actual, reference_map in zip(maps, expected, strict=True):
        check(actual, reference_map.numpy())


@pytest.mark.slow
def test_timm_prefix_tokens_held_out():
    """DINOv3: the class token and 4 registers come back beside each map, as timm's return_prefix_tokens gives."""
    reference, torch = _timm_model("timm_dinov3_rect")
    _, model, x, _ = load_case("timm_dinov3_rect")
    with torch.no_grad():
        expected = reference.forward_intermediates(torch.from_numpy(x).permute(0, 3, 1, 2), indices=[0, 1, 2],
                                                   return_prefix_tokens=True, output_fmt="NCHW",
                                                   intermediates_only=True)
    outputs = features.intermediate_model(model, 3, output_format="NCHW", return_prefix_tokens=True)(x)
    for (actual_map, actual_prefix), (expected_map, expected_prefix) in zip(outputs, expected, strict=True):
        assert tuple(actual_prefix.shape) == (2, 5, 48)
        check(actual_map, expected_map.numpy())
        check(actual_prefix, expected_prefix.numpy())


@pytest.mark.slow
@pytest.mark.parametrize("case, backbone", [("hf_dinov2_backbone", "Dinov2Backbone"),
                                            ("hf_dinov3_backbone", "DINOv3ViTBackbone")])
@pytest.mark.parametrize("stages", [["stem", "stage1"], ["stage1", "stage2", "stage3"]])
def test_transformers_backbone_stages_held_out(case, backbone, stages):
    """The stem and every stage, unnormalised (the DINOv3 backbone always normalises its last stage: asked only
    with its norm)."""
    import torch
    import transformers

    directory = os.path.join(FIXTURES, case, "checkpoint")
    norm = backbone == "DINOv3ViTBackbone" and "stage3" in stages
    reference = getattr(transformers, backbone).from_pretrained(directory, out_features=stages,
                                                                apply_layernorm=norm).eval()
    _, model, x, _ = load_case(case)
    with torch.no_grad():
        expected = reference(torch.from_numpy(x).permute(0, 3, 1, 2)).feature_maps
    maps = features.intermediate_model(model, stages, norm=norm, output_format="NCHW")(x)
    for actual, reference_map in zip(maps, expected, strict=True):
        check(actual, reference_map.numpy())


# --- any image size, flexible models, what is computed ---------------------------------------------------------

def tiny(**kwargs):
    size = {} if kwargs.get("flexible") else {"image_size": 32}  # a flexible model takes patches, not a size
    return vit_keras.ViT(**{**size, **dict(patch_size=8, hidden_size=48, num_layers=3, num_heads=3, mlp_dim=96,
                                           include_top=False), **kwargs})


def test_blocks_after_the_last_one_asked_for_are_not_computed():
    model = tiny()
    feature_model = features.intermediate_model(model, [0])
    names = {layer.name for layer in feature_model.layers}
    assert "Transformer_encoderblock_0" in names
    assert not names & {"Transformer_encoderblock_1", "Transformer_encoderblock_2", "encoder_norm"}


def test_any_image_size_model_gives_each_size_its_grid():
    model = tiny(image_size=None)
    feature_model = features.intermediate_model(model, ["stage3"], norm=True)
    for height, width in [(32, 32), (16, 40)]:
        x = np.random.default_rng(0).normal(size=(2, height, width, 3)).astype("float32")
        feature_map = feature_model(x)
        tokens = keras.Model(model.input, model.get_layer("encoder_norm").output)(x)
        assert tuple(feature_map.shape) == (2, height // 8, width // 8, 48)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(feature_map).reshape(2, -1, 48),
                                   keras.ops.convert_to_numpy(tokens)[:, 1:], rtol=0, atol=1e-6)


def test_flexible_model_tokens_cut_per_image_equal_the_fixed_model_maps():
    from vit_keras.images import naflex_patches

    fixed = tiny(image_size=(16, 24), class_token=False, global_pool="avg", position_embedding="sincos_2d")
    flexible = tiny(flexible=True, class_token=False, global_pool="avg", position_embedding="sincos_2d")
    flexible.set_weights(fixed.get_weights())
    images = np.random.default_rng(1).uniform(0, 255, (1, 16, 24, 3)).astype("float32")
    inputs = naflex_patches(list(images), patch_size=8, max_num_patches=8, resize=False)
    tokens = features.intermediate_model(flexible, [1], output_format="NLC")(inputs)
    (per_image,) = features.naflex_maps(keras.ops.convert_to_numpy(tokens), inputs["grid"])
    expected = features.intermediate_model(fixed, [1])(images)
    np.testing.assert_allclose(per_image, keras.ops.convert_to_numpy(expected)[0], rtol=0, atol=1e-5)


# --- bad requests --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("indices, message", [
    (4, r"asks for the last 4 blocks; this model has 3 blocks"),
    (0, r"asks for the last 0 blocks"),
    ([3], r"Block index 3 is out of range; this model has 3 blocks: .* 0\.\.2 \(or -3\.\.-1"),
    ([-4], r"Block index -4 is out of range"),
    ([0, -3], r"names block\(s\) \[0\] more than once"),
    (["stage0"], r"Stage 'stage0' does not exist; .*'stem', 'stage1'\.\.'stage3'"),
    (["stage4"], r"Stage 'stage4' does not exist"),
    (["layer1"], r"Stage 'layer1' does not exist"),
    (["stem", 1], r"mixes block indices and stage names"),
    ([], r"indices is empty"),
    ([1.0], r"Block index 1\.0 is not an integer"),
    (True, r"indices=True"),
    ({1, 2}, r"indices=\{1, 2\} is a set, whose order is not defined; pass a list such as \[1, 2\]"),
])
def test_bad_indices_name_the_valid_range(indices, message):
    with pytest.raises(ValueError, match=message):
        features.intermediate_model(tiny(), indices)


def test_hybrid_blocks_are_counted_without_the_resnet_stages():
    """A hybrid's 12 blocks follow its ResNet stem; a block index past them (as if the stages counted) is refused
    naming the range."""
    model = vit_keras.ViT(image_size=32, patch_size=1, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
                          resnet={"num_layers": [1]}, include_top=False)
    with pytest.raises(ValueError, match=r"Block index 3 is out of range; this model has 2 blocks"):
        features.intermediate_model(model, [3])
    stride = config_of(model).stride  # the ResNet stem's stride x patch_size
    feature_map = features.intermediate_model(model, 1)(np.zeros((1, 32, 32, 3), "float32"))
    assert tuple(feature_map.shape) == (1, 32 // stride, 32 // stride, 48)


@pytest.mark.parametrize("kwargs, call, message", [
    (dict(fc_norm=True, class_token=False, global_pool="avg"), dict(norm=True), r"fc_norm.*Pass norm=False"),
    (dict(final_norm=False), dict(norm=True), r"no norm after the blocks.*Pass norm=False"),
    (dict(), dict(output_format="NWHC"), r"output_format='NWHC': use one of"),
    (dict(), dict(norm="yes"), r"norm='yes': pass True or False"),
    (dict(), dict(return_prefix_tokens="no"), r"return_prefix_tokens='no': pass True or False"),
])
def test_bad_options_are_refused(kwargs, call, message):
    with pytest.raises(ValueError, match=message):
        features.intermediate_model(tiny(**kwargs), 1, **call)


def test_flexible_model_asks_for_tokens_and_head_tokens_only_model_is_refused():
    with pytest.raises(ValueError, match=r"flexible \(NaFlex\) model.*output_format='NLC'.*naflex_maps"):
        features.intermediate_model(tiny(flexible=True, class_token=False, global_pool="avg"), 1)
    model = tiny(include_top=True, classes=3, head_tokens_only=True)
    with pytest.raises(ValueError, match=r"head tokens only.*block 2 has no patch tokens"):
        features.intermediate_model(model, 1)
    assert len(features.intermediate_model(model, [1]).outputs) == 1  # earlier blocks are whole
