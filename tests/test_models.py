"""The Keras forward pass against an independent NumPy ViT, and the model constructor's contract."""

import numpy as np
import pytest

import vit_keras
from tests.reference_numpy import params_from_model, randomize_weights, vit_forward

# float32 Keras vs float64 NumPy on models whose logits are O(1): the float32 noise floor is ~1e-6.
TOLERANCE = 1e-5


def _images(shape, seed=0, low=-1.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


@pytest.mark.parametrize(
    "classifier, gelu_approximate, image_size",
    [
        ("token", True, (32, 32)),
        ("token", False, (32, 32)),
        ("gap", True, (32, 32)),
        ("gap", False, (24, 40)),
        ("token", True, (16, 48)),
    ],
)
def test_forward_matches_numpy_reference(tiny_kwargs, classifier, gelu_approximate, image_size):
    model = vit_keras.ViT(
        image_size=image_size,
        classifier=classifier,
        gelu_approximate=gelu_approximate,
        include_preprocessing=False,
        classes=5,
        classifier_activation=None,
        **tiny_kwargs,
    )
    randomize_weights(model, seed=1)
    x = _images((2, *image_size, 3))
    expected = vit_forward(
        x,
        params_from_model(model),
        patch_size=tiny_kwargs["patch_size"],
        num_layers=tiny_kwargs["num_layers"],
        classifier=classifier,
        gelu_approximate=gelu_approximate,
    )
    out = np.asarray(model(x, training=False))
    assert np.abs(out - expected).max() <= TOLERANCE


def test_representation_layer_and_preprocessing_match_numpy_reference(tiny_kwargs):
    model = vit_keras.ViT(image_size=32, representation_size=24, classes=4, classifier_activation=None, **tiny_kwargs)
    randomize_weights(model, seed=2)
    x = _images((2, 32, 32, 3), low=0.0, high=255.0)
    expected = vit_forward(
        x, params_from_model(model), patch_size=8, num_layers=2, include_preprocessing=True
    )
    assert np.abs(np.asarray(model(x)) - expected).max() <= TOLERANCE


def test_hybrid_forward_matches_numpy_reference():
    kwargs = dict(patch_size=1, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96)
    resnet = {"num_layers": [1, 1], "width_factor": 1}
    model = vit_keras.ViT(
        image_size=(32, 48), resnet=resnet, include_preprocessing=False, classes=3, classifier_activation=None, **kwargs
    )
    randomize_weights(model, seed=3)
    x = _images((2, 32, 48, 3))
    expected = vit_forward(x, params_from_model(model), patch_size=1, num_layers=1, resnet_layers=(1, 1))
    assert np.abs(np.asarray(model(x)) - expected).max() <= TOLERANCE


def test_stem_only_hybrid_uses_patches_on_the_root_feature_map():
    model = vit_keras.ViT(
        image_size=64, patch_size=4, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96,
        resnet={"num_layers": []}, include_preprocessing=False, classes=3, classifier_activation=None,
    )
    assert model.get_layer("patch_encoder").grid_size == (4, 4)  # 64 / 4 (root) / 4 (patch)
    randomize_weights(model, seed=4)
    x = _images((1, 64, 64, 3))
    expected = vit_forward(x, params_from_model(model), patch_size=4, num_layers=1, resnet_layers=())
    assert np.abs(np.asarray(model(x)) - expected).max() <= TOLERANCE


def test_softmax_head_and_float32_output(tiny_kwargs):
    model = vit_keras.ViT(image_size=32, classes=6, **tiny_kwargs)
    randomize_weights(model, seed=5)
    probs = np.asarray(model(_images((3, 32, 32, 3), low=0, high=255)))
    assert probs.shape == (3, 6)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)  # float32 softmax: rounding of 6 terms


@pytest.mark.parametrize(
    "pooling, classifier, expected_shape",
    [(None, "token", (2, 17, 48)), ("token", "token", (2, 48)), ("avg", "token", (2, 48)), ("avg", "gap", (2, 48))],
)
def test_feature_extractor_outputs(tiny_kwargs, pooling, classifier, expected_shape):
    model = vit_keras.ViT(image_size=32, include_top=False, pooling=pooling, classifier=classifier, **tiny_kwargs)
    x = _images((2, 32, 32, 3), low=0, high=255)
    out = np.asarray(model(x))
    assert out.shape == expected_shape
    if pooling == "avg" and classifier == "token":
        sequence = vit_keras.ViT(image_size=32, include_top=False, classifier=classifier, **tiny_kwargs)
        sequence.set_weights(model.get_weights())
        # The same float32 mean in another op order: rounding ~1e-7 on O(1) features.
        np.testing.assert_allclose(out, np.asarray(sequence(x))[:, 1:].mean(1), atol=1e-6)


def test_input_tensor_and_input_shape_are_accepted(tiny_kwargs):
    import keras

    tensor = keras.Input((16, 32, 3))
    model = vit_keras.ViT(input_tensor=tensor, classes=2, **tiny_kwargs)
    assert model.input_shape == (None, 16, 32, 3)
    model = vit_keras.ViT(input_shape=(24, 24, 3), classes=2, **tiny_kwargs)
    assert model.input_shape == (None, 24, 24, 3)
    assert model.inputs[0].name.startswith("images")


def test_named_constructor_forwards_overrides():
    model = vit_keras.ViTTi16(image_size=32, classes=3, num_layers=1, dropout_rate=0.1)
    assert model.name == "vit-ti16"
    assert len([layer for layer in model.layers if layer.name.startswith("Transformer_encoderblock")]) == 1
    assert model.get_layer("Transformer_encoderblock_0").block.dropout_rate == 0.1
    assert model.get_layer("Transformer_encoderblock_0").block.num_heads == 3


def test_layer_norm_epsilon_and_gelu_defaults(tiny_kwargs):
    # LN eps 1e-6 vs Keras' 1e-3 default is invisible in logits at small scale: check the layers directly.
    model = vit_keras.ViT(image_size=16, **tiny_kwargs)
    block = model.get_layer("Transformer_encoderblock_0")
    assert block.norm_1.epsilon == block.norm_2.epsilon == model.get_layer("encoder_norm").epsilon == 1e-6
    assert block.block.activation == "gelu_tanh"  # gelu_approximate=True in the older vocabulary
    model = vit_keras.ViT(image_size=16, layer_norm_epsilon=1e-12, gelu_approximate=False, **tiny_kwargs)
    assert model.get_layer("encoder_norm").epsilon == 1e-12
    assert model.get_layer("Transformer_encoderblock_1").mlp.activation == "gelu"


def test_hybrid_group_norm_settings():
    model = vit_keras.ViT(
        image_size=32, patch_size=1, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96,
        resnet={"num_layers": [1]},
    )
    stem = model.get_layer("resnet")
    norms = [stem.gn_root] + [getattr(u, n) for u in stem.units for n in ("gn1", "gn2", "gn3", "gn_proj")]
    assert all(n.epsilon == 1e-6 and n.groups == 32 for n in norms)


def test_preprocess_input_and_in_model_rescaling_agree(tiny_kwargs):
    with_pre = vit_keras.ViT(image_size=16, classes=3, classifier_activation=None, **tiny_kwargs)
    randomize_weights(with_pre, seed=6)
    without = vit_keras.ViT(
        image_size=16, classes=3, classifier_activation=None, include_preprocessing=False, **tiny_kwargs
    )
    without.set_weights(with_pre.get_weights())
    raw = _images((2, 16, 16, 3), low=0, high=255)
    np.testing.assert_array_equal(vit_keras.preprocess_input(raw), raw)
    scaled = vit_keras.preprocess_input(raw, include_preprocessing=False)
    assert scaled.min() >= -1.0 and scaled.max() <= 1.0
    # Same weights, rescaling inside or outside the graph: float32 rounding through the model (~1e-6), 10x.
    np.testing.assert_allclose(np.asarray(with_pre(raw)), np.asarray(without(scaled)), atol=1e-5)


def test_decode_predictions():
    classes = vit_keras.imagenet_classes()
    assert len(classes) == 1000 and len({wnid for wnid, _ in classes}) == 1000
    assert classes[0] == ("n01440764", "tench")
    scores = np.zeros((2, 1000), np.float32)
    scores[0, [285, 281, 7]] = [0.7, 0.2, 0.1]
    scores[1, 999] = 1.0
    decoded = vit_keras.decode_predictions(scores, top=3)
    assert [name for _, name, _ in decoded[0]] == ["Egyptian_cat", "tabby", "cock"]
    assert decoded[0][0][2] == pytest.approx(0.7)
    assert decoded[1][0][:2] == ("n15075141", "toilet_tissue")
    with pytest.raises(ValueError, match="1000"):
        vit_keras.decode_predictions(np.zeros((2, 10)))
