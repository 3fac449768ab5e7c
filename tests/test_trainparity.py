"""The fine-tune recipe's update equals vit_jax's, step for step.

Reference: tests/fixtures/trainparity/ (see its README), made by running vit_jax's own model, learning-rate
schedule, `accumulate_gradient` and `make_update_fn` (optax `clip_by_global_norm(1)` + `sgd(momentum=0.9,
accumulator_dtype=bfloat16)`) for 3 updates, accumulation 1 and 2. Tolerance from that README (float32 reorderings
move vit_jax's own parameters by ≤ 5.3e-5 of their displacement): step 1 leaves the parameters unchanged (lr 0);
steps 2–3 relative L2 error ≤ 3e-4 over all parameters and ≤ 2e-3 per tensor (tensors with zero gradient, the
attention key biases, left out), max abs ≤ 2e-5, losses ≤ 1e-5.
"""

import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import trainparity_worker as worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELATIVE_ALL, RELATIVE_TENSOR, MAX_ABS, LOSS = 3e-4, 2e-3, 2e-5, 1e-5


@functools.cache
def reference(accumulation):
    """vit_jax's parameters after updates 1..3 (in the Keras model's variable order), losses, and which tensors
    have a gradient at all."""
    folder = os.path.join(worker.FIXTURE, f"accum{accumulation}")
    params = [worker.parameters(worker.build(os.path.join(folder, f"params_step{s}.npz")))
              for s in range(1, worker.UPDATES + 1)]
    gradient = worker.parameters(worker.build(os.path.join(folder, "grads_step1.npz")))
    has_gradient = [float(np.linalg.norm(g)) > 1e-5 for g in gradient]
    with open(os.path.join(folder, "metrics.json")) as handle:
        losses = [step["loss"] for step in json.load(handle)["steps"]]
    return params, losses, has_gradient


def parity_errors(accumulation, initial, snapshots):
    """Per update: (relative L2 over all params, worst per-tensor relative L2, max abs difference)."""
    ref_params, _, has_gradient = reference(accumulation)
    errors = []
    for mine, ref in zip(snapshots, ref_params):
        displacement = np.sqrt(sum(np.sum((r - p0) ** 2) for r, p0 in zip(ref, initial)))
        difference = np.sqrt(sum(np.sum((m - r) ** 2) for m, r in zip(mine, ref)))
        per_tensor = [np.linalg.norm(m - r) / np.linalg.norm(r - p0)
                      for m, r, p0, moved in zip(mine, ref, initial, has_gradient) if moved and np.any(r != p0)]
        max_abs = max(float(np.max(np.abs(m - r))) for m, r in zip(mine, ref))
        errors.append((difference / displacement if displacement else difference, max(per_tensor, default=0.0),
                       max_abs))
    return errors


def assert_matches_vit_jax(accumulation, initial, snapshots, losses=None):
    ref_params, ref_losses, has_gradient = reference(accumulation)
    assert len(snapshots) == worker.UPDATES and sum(has_gradient) == len(has_gradient) - 2  # the key biases
    for p0, r in zip(initial, worker.parameters(worker.build())):
        np.testing.assert_array_equal(p0, r)  # started from the fixture's parameters
    for mine, p0 in zip(snapshots[0], initial):
        np.testing.assert_array_equal(mine, p0)  # update 1 runs at lr 0 (optax counts from 0)
    for step, (relative, per_tensor, max_abs) in enumerate(parity_errors(accumulation, initial, snapshots), 1):
        if step == 1:
            continue
        assert relative <= RELATIVE_ALL, (step, relative)
        assert per_tensor <= RELATIVE_TENSOR, (step, per_tensor)
        assert max_abs <= MAX_ABS, (step, max_abs)
    if losses is not None:
        np.testing.assert_allclose(losses, ref_losses, rtol=0, atol=LOSS)


@pytest.mark.slow
@pytest.mark.parametrize("accumulation, jit_compile", [(1, True), (2, False)])
def test_finetune_updates_equal_vit_jax(accumulation, jit_compile):
    initial, snapshots, losses = worker.run_compiled(accumulation, jit_compile=jit_compile)
    assert_matches_vit_jax(accumulation, initial, snapshots, losses)


@pytest.mark.slow
def test_float32_trace_is_measurably_not_vit_jax():
    """The trace's dtype is part of the recipe: a float32 trace lands ~1.2e-3 (relative) from vit_jax's
    parameters, 4x the tolerance, while the bfloat16 trace passes."""
    initial, snapshots, _ = worker.run_compiled(1, trace_dtype="float32", jit_compile=False)
    relative = [e[0] for e in parity_errors(1, initial, snapshots)[1:]]
    assert min(relative) > 1e-3, relative


@pytest.mark.slow
def test_train_on_tf_data_equals_vit_jax(tmp_path):
    """Through `training.train` (input pipeline, XLA, accumulation 2; accumulation 1 runs in the MirroredStrategy
    test)."""
    initial, snapshots = worker.run_train(2, str(tmp_path / "run"))
    assert_matches_vit_jax(2, initial, snapshots)


@pytest.mark.slow
def test_mirrored_two_cpus_equal_vit_jax(tmp_path):
    """MirroredStrategy on 2 logical CPUs (4 examples per replica): compile + train_on_batch with accumulation 1
    and 2, train() with accumulation 1: clipping acts on the gradient summed over replicas, as vit_jax clips the
    pmean."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "trainparity_worker.py"), str(tmp_path)], env=env,
                   check=True, timeout=500)
    for kind, accumulation in worker.MIRRORED_RUNS:
        initial, snapshots, losses, archive = worker.load(tmp_path / f"{kind}_accum{accumulation}.npz")
        assert int(archive["replicas"]) == 2
        assert_matches_vit_jax(accumulation, initial, snapshots, losses or None)


@pytest.mark.slow
def test_trace_is_bfloat16_state_restored_bit_exact(tmp_path):
    """The trace is optimizer state: saved in a .keras file in bfloat16 and restored bit for bit, so a resumed
    run continues exactly as an uninterrupted one."""
    import keras

    from vit_keras import training

    inputs, onehot, _ = worker.fixture_batch()

    def compiled():
        model = worker.build()
        model.compile(optimizer=training.make_optimizer(worker.recipe(1)),
                      loss=keras.losses.CategoricalCrossentropy(from_logits=True))
        return model

    straight, interrupted = compiled(), compiled()
    for _ in range(2):
        straight.train_on_batch(inputs, onehot)
        interrupted.train_on_batch(inputs, onehot)
    interrupted.save(tmp_path / "resume.keras")
    resumed = keras.saving.load_model(tmp_path / "resume.keras")
    assert isinstance(resumed.optimizer, training.optim.TraceSGD)
    traces = resumed.optimizer._traces
    assert traces and all(t.dtype == "bfloat16" for t in traces)
    for saved, restored in zip(interrupted.optimizer.variables, resumed.optimizer.variables):
        assert saved.dtype == restored.dtype
        np.testing.assert_array_equal(np.asarray(saved.numpy()), np.asarray(restored.numpy()))
    straight.train_on_batch(inputs, onehot)
    resumed.train_on_batch(inputs, onehot)
    for a, b in zip(worker.parameters(straight), worker.parameters(resumed)):
        np.testing.assert_array_equal(a, b)


def test_trace_sgd_arithmetic_and_config():
    """optax's trace on two updates, in NumPy: t = g + 0.8984375·t (0.9 in bfloat16), Δ = −lr·t, the stored
    trace rounded to bfloat16; and the optimizer round-trips through its config."""
    import keras

    from vit_keras.training.optim import TraceSGD

    optimizer = TraceSGD(learning_rate=0.5, momentum=0.9)
    variable = keras.Variable(np.array([1.0, -2.0, 3.0], np.float32))
    g1, g2 = np.array([0.1, 0.2, -0.3], np.float32), np.array([1.0 / 3, -0.7, 0.05], np.float32)
    optimizer.apply([keras.ops.convert_to_tensor(g1)], [variable])
    optimizer.apply([keras.ops.convert_to_tensor(g2)], [variable])

    def bfloat16(x):  # round to nearest even on the upper 16 bits of the float32
        bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)

    decay = np.float32(0.8984375)
    trace1 = g1  # + decay · 0
    expected = np.array([1.0, -2.0, 3.0], np.float32) - np.float32(0.5) * trace1
    trace2 = g2 + decay * bfloat16(trace1)
    expected = expected - np.float32(0.5) * trace2
    np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(optimizer._traces[0].numpy(), np.float32), bfloat16(trace2))
    assert bfloat16(np.float32(0.9)) == decay

    config = keras.optimizers.serialize(optimizer)
    restored = keras.optimizers.deserialize(config)
    assert isinstance(restored, TraceSGD) and restored.trace_dtype == "bfloat16" and restored.momentum == 0.9
    with pytest.raises(ValueError, match="trace_dtype"):
        TraceSGD(trace_dtype="float16")


def test_recipe_trace_dtype_is_checked():
    from vit_keras import training

    assert training.finetune().trace_dtype == "bfloat16"
    assert training.make_optimizer(training.finetune(trace_dtype="float32")).trace_dtype == "float32"
    with pytest.raises(ValueError, match="trace_dtype"):
        training.finetune(trace_dtype="half")


def test_adamw_is_optax_adam_with_big_vision_decay():
    """big_vision's pre-training update in NumPy (float64): clip_by_global_norm → optax scale_by_adam (eps 1e-8
    inside, after the bias correction) → ×lr → + wd·param on kernels → ×schedule multiplier → ×−1, with
    big_vision's `wd = weight_decay · base lr`. Gradients of 1e-7 make epsilon's place visible: Keras' own AdamW
    (eps outside the correction) moves these parameters ~3% less."""
    import keras

    from vit_keras import training

    config = training.pretrain(total_steps=10, warmup_steps=2, learning_rate=1e-3, weight_decay=0.1, clipnorm=1.0)
    optimizer = training.make_optimizer(config)
    optimizer.global_clipnorm = None  # the clip is tested on the SGD path; here gradients stay below any bound
    # Parameters of order 1e-2 keep float32 rounding (~1e-9) far below the updates (~1e-3) and the decay (~1e-6).
    start = [np.linspace(-2e-2, 2e-2, 6).reshape(2, 3), np.linspace(1e-2, 3e-2, 3)]
    kernel = keras.Variable(start[0].astype(np.float32), name="kernel")
    bias = keras.Variable(start[1].astype(np.float32), name="bias")
    rng = np.random.default_rng(0)
    grads = [[(rng.normal(size=v.shape) * scale).astype(np.float32) for v in (kernel, bias)]
             for scale in (1e-7, 1e-7, 3e-7, 1e-7)]

    params = [kernel.numpy().astype(np.float64), bias.numpy().astype(np.float64)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    base, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-8, 0.1 * 1e-3
    schedule = training.make_schedule(config)
    for count, g in enumerate(grads):
        multiplier = float(schedule(count)) / base
        for i, gi in enumerate(g):
            m[i] = (1 - b1) * gi + b1 * m[i]
            v[i] = (1 - b2) * gi.astype(np.float64) ** 2 + b2 * v[i]
            m_hat, v_hat = m[i] / (1 - b1 ** (count + 1)), v[i] / (1 - b2 ** (count + 1))
            update = base * m_hat / (np.sqrt(v_hat) + eps) + (wd * params[i] if i == 0 else 0.0)
            params[i] = params[i] - multiplier * update
        optimizer.apply([keras.ops.convert_to_tensor(gi) for gi in g], [kernel, bias])
    for variable, expected, initial in zip((kernel, bias), params, start):
        # A few float32 ulps of the parameters (9e-10 at 2e-2); decay alone moves the kernel by ~5e-6.
        np.testing.assert_allclose(variable.numpy() - initial, expected - initial, rtol=1e-5, atol=5e-9)

    plain = keras.optimizers.AdamW(learning_rate=training.make_schedule(config), weight_decay=0.1)
    plain_bias = keras.Variable(start[1].astype(np.float32), name="bias")
    for g in grads:
        plain.apply([keras.ops.convert_to_tensor(g[1])], [plain_bias])
    ours, theirs = np.abs(bias.numpy() - start[1]).sum(), np.abs(plain_bias.numpy() - start[1]).sum()
    assert abs(theirs / ours - 1) > 0.01, (ours, theirs)
