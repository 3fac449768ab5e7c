"""Mixed precision (bf16, fp16) and XLA: the model runs, the head stays float32, a jitted fit step trains."""

import keras
import numpy as np
import pytest

import vit_keras
from tests.reference_numpy import randomize_weights


@pytest.mark.numerics
@pytest.mark.parametrize("policy", [pytest.param("mixed_bfloat16", marks=pytest.mark.half_precision("bfloat16")),
                                    pytest.param("mixed_float16", marks=pytest.mark.half_precision("float16"))])
def test_mixed_precision_keeps_head_and_softmax_in_float32(tiny_kwargs, policy, record_property):
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
    # Error model: bfloat16 rounds each activation and weight to 2^-9 relative (float16: 2^-11); over the tiny
    # model's two blocks (LayerNorm renormalises each) the logits move by about 1e-2 at most, and softmax's
    # Jacobian (entries <= 1/4) shrinks that on the probabilities. 3e-2 is that bound; the worst measured across
    # the 7 settings `make test-numerics` runs on an AVX2 EPYC: bfloat16 3.1e-3, float16 4.7e-4 (9.6x, 64x).
    diff = float(np.abs(np.asarray(probs) - np.asarray(reference(x))).max())
    record_property("max_abs_diff", float(f"{diff:.3g}"))
    record_property("bound:max_abs_diff", "< 0.03")
    np.testing.assert_allclose(np.asarray(probs), np.asarray(reference(x)), atol=3e-2)


@pytest.mark.slow
@pytest.mark.numerics
def test_jit_compiled_inference_matches_eager(tiny_kwargs, record_property):
    model = vit_keras.ViT(image_size=32, classes=5, classifier_activation=None, **tiny_kwargs)
    randomize_weights(model, seed=11)
    x = np.random.default_rng(1).uniform(0, 255, (4, 32, 32, 3)).astype(np.float32)
    model.compile(jit_compile=True)
    # XLA fuses and reorders the same float32 ops: logits of magnitude ~1 differ by float32 rounding (~1e-6);
    # 1e-5 leaves 21x over the worst measured across the 7 settings `make test-numerics` runs on an AVX2 EPYC
    # (4.8e-7).
    diff = float(np.abs(model.predict_on_batch(x) - np.asarray(model(x))).max())
    record_property("max_abs_diff", float(f"{diff:.3g}"))
    record_property("bound:max_abs_diff", "< 1e-05")
    np.testing.assert_allclose(model.predict_on_batch(x), np.asarray(model(x)), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["float32",
                                    pytest.param("mixed_bfloat16", marks=pytest.mark.half_precision("bfloat16"))])
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
