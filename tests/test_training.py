"""Recipes, optimizers, weight transfer, evaluation, strategy selection and the checks `train()` makes first."""

import json
import os
from unittest import mock

import keras
import numpy as np
import pytest
import scipy.ndimage
import tensorflow as tf

import vit_keras
from tests.tiny import TINY_TRAINING
from vit_keras import hardware, training
from vit_keras.training import strategy as strategy_module


def tiny_vit(image_size=16, classes=10, **kwargs):
    return vit_keras.ViT(image_size=image_size, classes=classes, classifier_activation=None,
                         **{**TINY_TRAINING, **kwargs})


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tfds"))


# --- recipes and optimizers -------------------------------------------------------------------------------------

def test_schedule_follows_vit_jax_formula():
    schedule = training.WarmupDecay(0.03, warmup_steps=50, total_steps=500, schedule="cosine")
    steps = np.arange(0, 501, 7)
    progress = np.clip((steps - 50) / 450, 0, 1)
    expected = 0.03 * np.minimum(1, steps / 50) * 0.5 * (1 + np.cos(np.pi * progress))
    # The float32 schedule against the float64 formula: cos of a float32 progress, rounding ~1e-7 relative.
    np.testing.assert_allclose([float(schedule(s)) for s in steps], expected, rtol=1e-5, atol=1e-8)
    linear = training.WarmupDecay(1e-3, warmup_steps=10, total_steps=110, schedule="linear")
    assert float(linear(60)) == pytest.approx(0.5e-3, rel=1e-5)


def test_recipes_are_the_papers_and_overridable():
    fine = training.finetune()
    assert (fine.optimizer, fine.momentum, fine.weight_decay, fine.clipnorm, fine.batch_size) == ("sgd", 0.9, 0.0,
                                                                                                    1.0, 512)
    assert (fine.schedule, fine.warmup_steps) == ("cosine", 500)
    pre = training.pretrain(total_steps=1000)
    assert (pre.optimizer, pre.weight_decay, pre.dropout_rate, pre.schedule) == ("adamw", 0.1, 0.1, "linear")
    assert training.finetune(learning_rate=0.01, accumulation_steps=8).micro_batch_size == 64
    with pytest.raises(ValueError, match="Unknown training options"):
        training.finetune(learning_rat=0.01)
    with pytest.raises(ValueError, match="not divisible by accumulation_steps"):
        training.finetune(batch_size=100, accumulation_steps=8)


def _one_hot(labels, classes=10):
    return np.eye(classes, dtype=np.float32)[labels]


@pytest.mark.slow
def test_gradient_accumulation_of_k_micro_batches_equals_one_big_batch():
    """k=4 micro-batches of 4 examples == one batch of 16, with momentum and an active global-norm clip."""
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, (2, 16, 16, 16, 3)).astype(np.float32)  # two updates of 16 examples
    labels = _one_hot(rng.integers(0, 10, (2, 16)))
    keras.utils.set_random_seed(0)
    reference = tiny_vit()
    start = reference.get_weights()
    start[-1] = rng.normal(0, 1, start[-1].shape).astype(np.float32)  # a non-zero head: gradients everywhere
    start[-2] = rng.normal(0, 1, start[-2].shape).astype(np.float32)

    def trained(accumulation, micro):
        model = tiny_vit()
        model.set_weights(start)
        config = training.finetune(learning_rate=0.5, warmup_steps=0, total_steps=10, batch_size=16,
                                   accumulation_steps=accumulation)
        model.compile(training.make_optimizer(config), keras.losses.CategoricalCrossentropy(from_logits=True),
                      jit_compile=False)
        for update in range(2):
            for part in range(16 // micro):
                chunk = slice(part * micro, (part + 1) * micro)
                model.train_on_batch(images[update, chunk], labels[update, chunk])
        assert int(model.optimizer.iterations) == 2
        return model.get_weights()

    big, accumulated = trained(1, 16), trained(4, 4)
    # The clip is active (the first gradient norm is far above 1), so this also checks it acts on the mean.
    loss = keras.losses.CategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        model = tiny_vit()
        model.set_weights(start)
        value = loss(labels[0], model(images[0]))
    assert float(tf.linalg.global_norm(tape.gradient(value, model.trainable_variables))) > 1.0
    for a, b in zip(big, accumulated):
        # float32 sums of 4 partial means vs one mean over 16: a few ulps after two momentum steps.
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-5)
    assert max(float(np.abs(a - s).max()) for a, s in zip(big, start)) > 1e-3  # the weights did move


# --- weight transfer --------------------------------------------------------------------------------------------

def test_transfer_to_higher_resolution_resamples_position_embeddings_and_resets_head():
    keras.utils.set_random_seed(1)
    low = tiny_vit(image_size=16, classes=10)
    encoder = low.get_layer("patch_encoder")
    encoder.pos_embedding.assign(np.random.default_rng(1).normal(size=encoder.pos_embedding.shape))
    high = tiny_vit(image_size=24, classes=5)
    report = training.transfer_weights(low, high)
    assert report == {"resampled": True, "head": "zero-init"}
    old = encoder.pos_embedding.numpy()[0]
    new = high.get_layer("patch_encoder").pos_embedding.numpy()[0]
    np.testing.assert_array_equal(new[0], old[0])  # the class token is kept apart
    # vit_jax: scipy.ndimage.zoom(order=1) on the (gh, gw, D) grid, 4x4 -> 6x6.
    expected = scipy.ndimage.zoom(old[1:].reshape(4, 4, -1), (6 / 4, 6 / 4, 1), order=1).reshape(36, -1)
    np.testing.assert_allclose(new[1:], expected, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(new[1], old[1])  # corner-aligned: corners are copied
    assert not np.any(high.get_layer("head").kernel.numpy())
    for name in ("Transformer_encoderblock_0", "encoder_norm"):
        for a, b in zip(low.get_layer(name).get_weights(), high.get_layer(name).get_weights()):
            np.testing.assert_array_equal(a, b)


def test_transfer_at_same_resolution_reproduces_predictions():
    keras.utils.set_random_seed(2)
    source = tiny_vit()
    head = source.get_layer("head")
    head.kernel.assign(np.random.default_rng(2).normal(size=head.kernel.shape))
    target = tiny_vit()
    assert training.transfer_weights(source, target) == {"resampled": False, "head": "copied"}
    images = np.random.default_rng(3).uniform(0, 255, (2, 16, 16, 3)).astype(np.float32)
    np.testing.assert_array_equal(source.predict_on_batch(images), target.predict_on_batch(images))
    with pytest.raises(ValueError, match="reset_head"):
        training.transfer_weights(source, tiny_vit(classes=3), reset_head=False)
    with pytest.raises(ValueError, match="no counterpart|do not fit"):
        training.transfer_weights(source, tiny_vit(num_layers=2))


# --- evaluation -------------------------------------------------------------------------------------------------

def test_topk_accuracy_matches_scikit_learn():
    from sklearn.metrics import top_k_accuracy_score

    rng = np.random.default_rng(0)
    scores, labels = rng.normal(size=(200, 10)), rng.integers(0, 10, 200)
    ours = training.topk_accuracy(scores, labels, ks=(1, 5))
    assert ours["top1"] == pytest.approx(top_k_accuracy_score(labels, scores, k=1, labels=range(10)))
    assert ours["top5"] == pytest.approx(top_k_accuracy_score(labels, scores, k=5, labels=range(10)))


@pytest.mark.parametrize("dims", [8, 300])  # primal (D < N) and dual (D > N) solves
def test_least_squares_probe_matches_scikit_learn_ridge(dims):
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(dims)
    x, y = rng.normal(size=(60, dims)), rng.integers(0, 4, 60)
    test = rng.normal(size=(50, dims))
    targets = 2 * np.eye(4)[y] - 1  # the paper's {-1, 1}^K targets
    ridge = Ridge(alpha=3.0, fit_intercept=True).fit(x, targets)
    predict = training.fit_least_squares_probe(x, y, 4, l2_reg=3.0)
    np.testing.assert_array_equal(predict(test), ridge.predict(test).argmax(1))


def test_few_shot_accuracy_separable_features():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(5, 16)) * 10
    train_y, test_y = np.repeat(np.arange(5), 30), np.repeat(np.arange(5), 10)
    train_x, test_x = centres[train_y] + rng.normal(size=(150, 16)), centres[test_y] + rng.normal(size=(50, 16))
    result = training.few_shot_accuracy(train_x, train_y, test_x, test_y, 5)
    assert set(result) == {"1shot", "5shot", "10shot", "25shot"} and result["25shot"] == 1.0
    with pytest.raises(ValueError, match="fewer than 40 shots"):
        training.few_shot_accuracy(train_x, train_y, test_x, test_y, 5, shots=(40,))


# --- strategy and precision -------------------------------------------------------------------------------------

class FakeStrategy:
    def __init__(self, replicas):
        self.num_replicas_in_sync = replicas


# A CPU without bfloat16 instructions (AVX2) and one with them (AVX-512 BF16), as /proc/cpuinfo describes them.
AVX2_CPU = hardware.Machine(hardware.parse_cpuinfo("model name : AMD EPYC\nflags : avx2 fma"))
BF16_CPU = hardware.Machine(hardware.parse_cpuinfo("flags : avx2 avx512f avx512_bf16"))


@pytest.mark.parametrize(
    "kind, replicas, precision, bf16_gpu, expected",
    [
        ("CPU", 1, "auto", None, ("float32", True)),  # emulated bfloat16 is slower than float32 + XLA
        ("CPU", 1, "float32", None, ("float32", True)),
        ("CPU", 1, "mixed_bfloat16", None, ("mixed_bfloat16", True)),  # emulated: XLA is the faster of the two
        ("TPU", 8, "auto", None, ("mixed_bfloat16", True)),
        ("GPU", 1, "auto", None, ("mixed_float16", True)),
        ("GPU", 8, "auto", True, ("mixed_bfloat16", True)),  # avoids the MirroredStrategy+XLA+fp16 crash
        ("GPU", 8, "auto", False, ("mixed_float16", False)),  # no bf16 on the GPU: XLA goes instead
        ("GPU", 8, "mixed_float16", True, ("mixed_float16", False)),  # explicit fp16 is honoured, XLA off
        ("CPU", 2, "float32", None, ("float32", False)),
    ],
)
def test_plan_execution(kind, replicas, precision, bf16_gpu, expected):
    plan = training.plan_execution(FakeStrategy(replicas), precision, True, kind=kind, bfloat16_gpu=bf16_gpu,
                                   machine=AVX2_CPU, environ={})
    assert (plan.policy, plan.jit_compile) == expected
    assert plan.loss_scaling == (plan.policy == "mixed_float16")


@pytest.mark.parametrize(
    "replicas, precision, expected",
    [
        (1, "auto", ("mixed_bfloat16", False)),  # oneDNN's bf16 kernels beat XLA's where they are native
        (1, "mixed_bfloat16", ("mixed_bfloat16", False)),
        (1, "float32", ("float32", True)),
        (2, "auto", ("mixed_bfloat16", False)),
    ],
)
def test_plan_execution_on_a_cpu_with_bfloat16_instructions(replicas, precision, expected):
    plan = training.plan_execution(FakeStrategy(replicas), precision, True, kind="CPU", machine=BF16_CPU,
                                   environ={})
    assert (plan.policy, plan.jit_compile) == expected


def test_select_strategy_connects_a_named_tpu_with_the_resolver_mocked():
    calls = []
    resolver = mock.MagicMock(name="resolver")
    resolver.num_accelerators.return_value = {"TPU": 8}
    with mock.patch.object(tf.distribute.cluster_resolver, "TPUClusterResolver",
                           side_effect=lambda tpu: calls.append(("resolve", tpu)) or resolver), \
         mock.patch.object(tf.config, "experimental_connect_to_cluster",
                           side_effect=lambda r: calls.append(("connect", r))), \
         mock.patch.object(tf.tpu.experimental, "initialize_tpu_system",
                           side_effect=lambda r: calls.append(("initialize", r))), \
         mock.patch.object(tf.distribute, "TPUStrategy", side_effect=lambda r: ("TPUStrategy", r)):
        assert training.select_strategy(tpu="local") == ("TPUStrategy", resolver)
        assert calls == [("resolve", "local"), ("connect", resolver), ("initialize", resolver)]
        calls.clear()
        assert training.select_strategy(environ={"TPU_NAME": "my-tpu"}) == ("TPUStrategy", resolver)
        assert calls[0] == ("resolve", "my-tpu")
        calls.clear()
        with mock.patch.object(strategy_module, "on_tpu_vm", return_value=True):  # found without a name
            assert training.select_strategy(environ={}) == ("TPUStrategy", resolver)
            assert calls[0] == ("resolve", "local")
            assert training.select_strategy(tpu="none", environ={}) is tf.distribute.get_strategy()
    with mock.patch.object(tf.distribute.cluster_resolver, "TPUClusterResolver", side_effect=ValueError("none")):
        with pytest.raises(ValueError, match="tpu='local'"):
            training.select_strategy(tpu="nowhere")


def test_select_strategy_multi_worker_from_tf_config_and_default_otherwise():
    environ = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                                        "task": {"type": "worker", "index": 0}})}
    with mock.patch.object(tf.distribute, "MultiWorkerMirroredStrategy", return_value="MWMS") as mwms:
        assert training.select_strategy(environ=environ) == "MWMS"
        mwms.assert_called_once_with()
    assert training.select_strategy(environ={}) is tf.distribute.get_strategy()
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        strategy_module.tf_config_workers({"TF_CONFIG": "{oops"})


# --- checks before training -------------------------------------------------------------------------------------

def _config(**overrides):
    return training.finetune(**{"total_steps": 2, "batch_size": 8, "warmup_steps": 0, "precision": "float32",
                                "log_images": 2, **overrides})


@pytest.mark.slow
def test_bad_input_fails_before_training(tmp_path, tfds_dir):
    built = []

    def build():
        built.append(1)
        return tiny_vit()

    with pytest.raises(ValueError, match="Unknown tfds dataset 'cifar_10'.*cifar10"):
        training.train(build, "cifar_10", _config(), output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="no split 'validation'.*'test', 'train'"):
        training.train(build, "vit_keras_digits", _config(), output_dir=str(tmp_path), data_dir=tfds_dir,
                       train_split="validation")
    assert not built
    labels_out_of_range = tf.data.Dataset.from_tensor_slices((np.zeros((20, 16, 16, 3), np.uint8),
                                                              np.arange(20) % 12))
    with pytest.raises(ValueError, match=r"labels in \[0, 11\], outside \[0, 10\)"):
        training.train(build, labels_out_of_range, _config(), output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="has 10 classes but the model's head has 5"):
        training.train(lambda: tiny_vit(classes=5), "vit_keras_digits", _config(), output_dir=str(tmp_path),
                       data_dir=tfds_dir)
    with pytest.raises(ValueError, match="not divisible by the 3 replicas"):
        training.train(build, "vit_keras_digits", _config(), output_dir=str(tmp_path), data_dir=tfds_dir,
                       strategy=mock.MagicMock(num_replicas_in_sync=3))
    with pytest.raises(ValueError, match="not divisible by the patch size|divisible"):
        training.train(lambda: tiny_vit(image_size=18), "vit_keras_digits", _config(), output_dir=str(tmp_path),
                       data_dir=tfds_dir)
    with pytest.raises(ValueError, match="differs from the model's input"):
        training.train(build, "vit_keras_digits", _config(image_size=24), output_dir=str(tmp_path),
                       data_dir=tfds_dir)
    # pretrain() asks for dropout 0.1; a model built without it would silently train another recipe.
    with pytest.raises(ValueError, match="build it with dropout_rate=config.dropout_rate, attention_dropout_rate"):
        training.train(build, "vit_keras_digits", _config(dropout_rate=0.1), output_dir=str(tmp_path),
                       data_dir=tfds_dir)
    with pytest.raises(ValueError, match="'attention_dropout_rate': 0.2"):
        training.train(lambda: tiny_vit(dropout_rate=0.1), "vit_keras_digits",
                       _config(dropout_rate=0.1, attention_dropout_rate=0.2), output_dir=str(tmp_path),
                       data_dir=tfds_dir)
    assert not os.path.exists(tmp_path / "checkpoints")  # nothing trained, nothing written


# --- a named tfds dataset end to end (mocked data) --------------------------------------------------------------

def _event_tags(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set()
    for root, _, files in os.walk(log_dir):
        if any(name.startswith("events.out") for name in files):
            accumulator = EventAccumulator(root, size_guidance={"tensors": 0})
            accumulator.Reload()
            for kind in accumulator.Tags().values():
                if isinstance(kind, list):
                    tags.update(kind)
    return tags


@pytest.mark.slow
def test_mock_cifar10_trains_end_to_end(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    # precision "auto" with the environment override: mixed bfloat16 on any CPU, with the float32 head and loss.
    monkeypatch.setenv("VIT_KERAS_PRECISION", "bfloat16")
    config = _config(total_steps=6, steps_per_epoch=3, batch_size=8, learning_rate=0.05, precision="auto")
    with tfds.testing.mock_data(num_examples=40):
        result = training.train(lambda: tiny_vit(image_size=32), "cifar10", config, output_dir=str(tmp_path),
                                validation_data="cifar10", verbose=0)
        scores = training.evaluate(result.model, "cifar10", "test", batch_size=16)
    assert result.updates == 6 and len(result.history["loss"]) == 2
    assert result.plan.policy == "mixed_bfloat16" and result.model.dtype_policy.name == "mixed_bfloat16"
    assert result.model.get_layer("head").dtype_policy.name == "float32"
    assert all(w.dtype == "float32" for w in result.model.weights)  # bf16 compute, float32 variables
    assert np.isfinite(result.history["loss"]).all()
    assert keras.config.dtype_policy().name == "float32"  # the global policy is restored after the run
    assert set(result.history) >= {"loss", "accuracy", "top5_accuracy", "val_loss", "val_accuracy"}
    assert scores["examples"] == 40 and 0 <= scores["top1"] <= scores["top5"] <= 1
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["updates"] == 6 and saved["config"]["recipe"] == "finetune"
    assert saved["policy"] == "mixed_bfloat16" and "from VIT_KERAS_PRECISION" in saved["notes"][0]  # and why
    for name in ("best.keras", "last.keras"):
        reloaded = keras.models.load_model(tmp_path / "checkpoints" / name, safe_mode=True)
        assert reloaded.output_shape == (None, 10)
    tags = _event_tags(tmp_path / "logs")
    assert {"learning_rate", "throughput_images_per_second", "input_images", "hyperparameters",
            "epoch_loss", "epoch_accuracy", "batch_loss", "batch_accuracy"} <= tags, tags
    # Batch curves are keyed by optimizer updates (not fit()'s batch counter, which restarts on each resume).
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train_events = EventAccumulator(str(tmp_path / "logs" / "train"), size_guidance={"tensors": 0})
    train_events.Reload()
    assert [event.step for event in train_events.Tensors("batch_loss")] == [1, 2, 3, 4, 5, 6]
    assert not os.listdir(tmp_path / "backup")  # the resume backup is removed once the run completes


def test_resumed_runs_are_cut_into_epochs_that_add_up():
    from vit_keras.training.loop import _segments

    # (first epoch, end epoch, steps per epoch, first step): fresh, mid-epoch resume, ragged last epoch.
    assert _segments(0, 30, 10) == [(0, 3, 10, 0)]
    assert _segments(13, 30, 10) == [(1, 2, 7, 13), (2, 3, 10, 20)]
    assert _segments(0, 25, 10) == [(0, 2, 10, 0), (2, 3, 5, 20)]
    assert _segments(30, 30, 10) == []


def test_resume_restores_the_best_score_so_a_worse_epoch_keeps_best_checkpoint(tmp_path):
    def fresh_callbacks(model):
        best, last = training.checkpoint_callbacks(str(tmp_path / "checkpoints"), "val_accuracy", "max")
        backup = training.StepBackup(str(tmp_path / "backup"), every=None, best_checkpoint=best)
        for callback in (best, last, backup):
            callback.set_model(model)
        return best, backup

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    best, backup = fresh_callbacks(model)
    best.on_epoch_end(0, {"val_accuracy": 0.8})
    backup.on_train_batch_end(0)
    backup.on_epoch_end(0)
    best_path = tmp_path / "checkpoints" / "best.keras"
    epoch_0_kernel = model.get_layer(index=0).kernel.numpy()

    def best_kernel():
        return keras.models.load_model(best_path).get_layer(index=0).kernel.numpy()

    # A new process resumes: new callbacks, state from the backup only.
    best, backup = fresh_callbacks(model)
    assert backup.restore(model) == 1 and best.best == pytest.approx(0.8)
    model.get_layer(index=0).kernel.assign(np.full((2, 1), 5.0, np.float32))  # later epochs' weights differ
    best.on_epoch_end(1, {"val_accuracy": 0.5})
    np.testing.assert_array_equal(best_kernel(), epoch_0_kernel)  # worse than before the resume: kept
    best.on_epoch_end(2, {"val_accuracy": 0.9})
    np.testing.assert_array_equal(best_kernel(), 5.0)
    assert best.best == pytest.approx(0.9)
    # Nothing scored yet (Keras starts at None/-inf): the state holds no "best", and restoring leaves Keras' start.
    empty_best = training.checkpoint_callbacks(str(tmp_path / "c2"), "accuracy", "max")[0]
    empty_backup = training.StepBackup(str(tmp_path / "b2"), best_checkpoint=empty_best)
    empty_backup.set_model(model)
    empty_backup.on_train_batch_end(0)
    empty_backup.on_epoch_end(0)
    assert "best" not in json.loads((tmp_path / "b2" / "backup.json").read_text())
