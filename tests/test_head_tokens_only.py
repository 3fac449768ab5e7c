"""`head_tokens_only=True`: the last block computes only the tokens the head reads, and the outputs stay the
reference's.

References: the timm / transformers fixtures (tests/fixtures/family, tolerance as in test_family: max |diff| <=
5e-5 * max(1, max |reference|) and the same argmax), the independent NumPy ViT of tests/reference_numpy.py (1e-5 on
O(1) logits, float32 against float64), and the same model computing every token (gradients to 1e-5: float32
reassociation only).
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import vit_keras
from tests.family2_cases import check as _check
from tests.family2_cases import fixture_input
from tests.family2_cases import run as _run
from tests.reference_numpy import params_from_model, randomize_weights, vit_forward
from tests.test_family import FAMILY

# Reference: the full model's float32 output; computing only the head's tokens changes the matmul shapes and so
# the summation blocking (float32 rounding, ~1e-6 on O(1) outputs); 1e-5 keeps 10x.
TOLERANCE = 1e-5
TOKEN_READERS = ("hf_clip_vision", "hf_dinov2", "timm_clip_quickgelu", "timm_deit_distilled", "timm_dinov2_reg4")
ALL_TOKEN_READERS = ("hf_siglip_vision", "timm_avg_fcnorm", "timm_siglip_map")


def _meta(case):
    with open(os.path.join(FAMILY, case, "meta.json")) as f:
        return json.load(f)


def _images(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def test_fixture_cases_are_split_between_the_two_kinds_of_head():
    assert sorted(TOKEN_READERS + ALL_TOKEN_READERS) == sorted(
        name for name in os.listdir(FAMILY) if os.path.isdir(os.path.join(FAMILY, name)))


@pytest.mark.parametrize("case", TOKEN_READERS)
def test_class_token_heads_match_the_reference_libraries(case):
    meta = _meta(case)
    model = vit_keras.from_pretrained(os.path.join(FAMILY, case, meta["checkpoint"]), head_tokens_only=True,
                                      **meta["call"])
    last = [layer for layer in model.layers if layer.name.startswith("Transformer_encoderblock_")][-1]
    distilled = case == "timm_deit_distilled"
    assert last.output.shape[1] == (2 if distilled else 1)  # class (+ distillation) token, registers skipped
    _check(_run(model, fixture_input(case, meta, FAMILY)), np.load(os.path.join(FAMILY, case, "expected.npy")))


@pytest.mark.parametrize("case", ALL_TOKEN_READERS)
def test_heads_that_read_every_token_are_refused(case):
    meta = _meta(case)
    with pytest.raises(ValueError, match="head_tokens_only=True needs a head that reads the class token alone"):
        vit_keras.from_pretrained(os.path.join(FAMILY, case, meta["checkpoint"]), head_tokens_only=True,
                                  **meta["call"])


@pytest.mark.parametrize("image_size", [(32, 32), (16, 48)])
def test_logits_match_the_numpy_reference(tiny_kwargs, image_size):
    model = vit_keras.ViT(image_size=image_size, include_preprocessing=False, classes=5, classifier_activation=None,
                          head_tokens_only=True, **tiny_kwargs)
    randomize_weights(model, seed=1)
    x = _images((2, *image_size, 3))
    expected = vit_forward(x, params_from_model(model), patch_size=tiny_kwargs["patch_size"],
                           num_layers=tiny_kwargs["num_layers"], classifier="token", gelu_approximate=True)
    assert np.abs(np.asarray(model(x, training=False)) - expected).max() <= TOLERANCE


def _pair(tiny_kwargs, **kwargs):
    """The same weights, computing every token of the last block and the head tokens only."""
    full = vit_keras.ViT(include_preprocessing=False, classes=5, classifier_activation=None, **tiny_kwargs,
                         **kwargs)
    randomize_weights(full, seed=2)
    pruned = vit_keras.ViT(include_preprocessing=False, classes=5, classifier_activation=None,
                           head_tokens_only=True, **tiny_kwargs, **kwargs)
    pruned.set_weights(full.get_weights())
    return full, pruned


def test_any_image_size_and_layer_scale_give_the_same_logits(tiny_kwargs):
    full, pruned = _pair(tiny_kwargs, image_size=None, layer_scale=True, num_register_tokens=2)
    for shape in ((1, 32, 32, 3), (2, 48, 24, 3)):
        x = _images(shape, seed=3)
        assert np.abs(np.asarray(full(x)) - np.asarray(pruned(x))).max() <= TOLERANCE


def test_training_gradients_are_those_of_the_full_model(tiny_kwargs):
    full, pruned = _pair(tiny_kwargs, image_size=32)
    x, labels = _images((4, 32, 32, 3), seed=4), np.array([0, 1, 2, 3])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def gradients(model):
        with tf.GradientTape() as tape:
            value = loss(labels, model(x, training=True))
        return [np.asarray(g) for g in tape.gradient(value, model.trainable_variables)]

    expected, got = gradients(full), gradients(pruned)
    assert [v.path for v in full.trainable_variables] == [v.path for v in pruned.trainable_variables]
    for variable, want, have in zip(full.trainable_variables, expected, got):
        assert np.abs(want - have).max() <= TOLERANCE * max(1.0, np.abs(want).max()), variable.path


@pytest.mark.slow
def test_keras_file_round_trip_and_attention_maps(tiny_kwargs, tmp_path):
    full, pruned = _pair(tiny_kwargs, image_size=32)
    x = _images((2, 32, 32, 3), seed=5)
    path = str(tmp_path / "pruned.keras")
    pruned.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    assert reloaded.get_layer(f"Transformer_encoderblock_{tiny_kwargs['num_layers'] - 1}").query_tokens == 1
    np.testing.assert_allclose(np.asarray(reloaded(x)), np.asarray(full(x)), atol=TOLERANCE)
    # The inspection tools still see every block's whole map.
    want = vit_keras.inspection.attention_weights(full, x)
    np.testing.assert_allclose(vit_keras.inspection.attention_weights(pruned, x), want, atol=TOLERANCE)


@pytest.mark.slow
def test_tflite_export_computes_the_same_logits(tiny_kwargs, tmp_path):
    full, pruned = _pair(tiny_kwargs, image_size=32)
    x = np.random.default_rng(6).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    outputs = [vit_keras.export.tflite_predict(vit_keras.export.tflite(model, str(tmp_path / f"{name}.tflite")), x)
               for name, model in (("full", full), ("pruned", pruned))]
    assert outputs[0].keys() == outputs[1].keys()
    for name in outputs[0]:
        assert np.abs(outputs[0][name] - outputs[1][name]).max() <= TOLERANCE, name


@pytest.mark.parametrize("kwargs", [dict(classifier="gap"), dict(include_top=False),
                                    dict(include_top=False, pooling="avg")])
def test_a_head_that_reads_every_token_is_refused(tiny_kwargs, kwargs):
    with pytest.raises(ValueError, match="head_tokens_only=True needs a head that reads the class token alone"):
        vit_keras.ViT(image_size=32, head_tokens_only=True, **tiny_kwargs, **kwargs)


def test_feature_extractor_with_token_pooling(tiny_kwargs):
    full, pruned = (vit_keras.ViT(image_size=32, include_top=False, pooling="token", include_preprocessing=False,
                                  head_tokens_only=flag, **tiny_kwargs) for flag in (False, True))
    randomize_weights(full, seed=7)
    pruned.set_weights(full.get_weights())
    x = _images((2, 32, 32, 3), seed=8)
    assert np.abs(np.asarray(full(x)) - np.asarray(pruned(x))).max() <= TOLERANCE
