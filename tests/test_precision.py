"""Mixed precision (bf16, fp16) and XLA: the model runs, the head stays float32, a jitted fit step trains."""

import keras
import numpy as np
import pytest

import vit_keras
from tests.reference_numpy import randomize_weights


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_keeps_head_and_softmax_in_float32(tiny_kwargs, policy):
    reference = vit_keras.ViT(image_size=32, classes=5, **tiny_kwargs)
    randomize_weights(reference, seed=10)
    keras.mixed_precision.set_global_policy(policy)
    model = vit_keras.ViT(image_size=32, classes=5, **tiny_kwargs)
    model.set_weights(reference.get_weights())
    assert model.get_layer("Transformer_encoderblock_0").compute_dtype == policy.split("_")[1]
    assert model.get_layer("head").compute_dtype == "float32"
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    probs = model(x)
    assert probs.dtype == "float32"
    # Half precision keeps ~3 significant digits: the probabilities agree with float32 to about 1e-2.
    np.testing.assert_allclose(np.asarray(probs), np.asarray(reference(x)), atol=3e-2)


def test_jit_compiled_inference_matches_eager(tiny_kwargs):
    model = vit_keras.ViT(image_size=32, classes=5, classifier_activation=None, **tiny_kwargs)
    randomize_weights(model, seed=11)
    x = np.random.default_rng(1).uniform(0, 255, (4, 32, 32, 3)).astype(np.float32)
    model.compile(jit_compile=True)
    np.testing.assert_allclose(model.predict_on_batch(x), np.asarray(model(x)), atol=1e-5)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_jit_compiled_fit_reduces_the_loss(tiny_kwargs, policy):
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(policy)
    model = vit_keras.ViT(image_size=16, classes=2, classifier_activation=None, dropout_rate=0.1, **tiny_kwargs)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    # Two trivially separable classes: dark and bright images.
    x = np.concatenate([np.full((16, 16, 16, 3), 20.0), np.full((16, 16, 16, 3), 230.0)]).astype(np.float32)
    y = np.array([0] * 16 + [1] * 16)
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0, shuffle=True)
    losses = history.history["loss"]
    assert np.isfinite(losses).all()
    assert losses[-1] < losses[0]
