"""LoRA fine-tuning (vit_keras.training.lora): what trains, adapters saved alone, merging, the train() and CLI paths."""

import json
import os

import keras
import numpy as np
import pytest

import vit_keras
from tests.bounds import Bound
from tests.tiny import TINY_TRAINING
from vit_keras import training
from vit_keras.training.lora import read_metadata, restart_adapters, target_layers

# Merged x·(W + s·A·B) and unmerged x·W + s·(x·A)·B are the same sums in another order: in float32 each output of a
# projection of fan-in n differs by at most about 2·n·u·Σ|x||W| (u = 2^-24, n <= 64 here: ~1e-5 relative), carried
# through one block, its LayerNorms and the head (amplification of order 10). 1e-4 leaves that margin and is far
# below the change the adapters themselves make (checked to be > 1e-2 below).
MERGE_BOUND = 1e-4


def _model(**options):
    keras.utils.set_random_seed(0)
    return vit_keras.ViT(image_size=16, classes=10, **TINY_TRAINING, **options)


def _images(count=4):
    return np.random.default_rng(1).uniform(0, 255, (count, 16, 16, 3)).astype("float32")


def _randomise_adapters(model, seed=2):
    """B starts at zero (the adapted model equals the base); random B makes the comparisons below mean something."""
    rng = np.random.default_rng(seed)
    for variable in model.trainable_weights:
        variable.assign(rng.normal(0, 0.2, variable.shape).astype("float32"))


def _names(variables):
    return sorted(v.path for v in variables)


@pytest.mark.parametrize("targets, per_block", [("qv", 2), ("attention", 4), ("attention+mlp", 6)])
def test_only_adapters_and_head_train(targets, per_block):
    model = training.lora(_model(), rank=2, targets=targets)
    adapted = target_layers(model, targets)
    assert len(adapted) == per_block and all(layer.lora_enabled for layer in adapted)
    expected = [f"{layer.path}/{name}" for layer in adapted for name in ("lora_kernel_a", "lora_kernel_b")]
    assert _names(model.trainable_weights) == sorted(expected + ["head/bias", "head/kernel"])
    frozen = set(_names(model.weights)) - set(_names(model.trainable_weights))
    assert {"Transformer_encoderblock_0/MultiHeadDotProductAttention_1/query/kernel", "patch_encoder/cls"} <= frozen


def test_swiglu_mlp_is_adapted():
    model = training.lora(_model(mlp="swiglu"), rank=2, targets="attention+mlp")
    paths = {layer.path.rsplit("/", 1)[-1] for layer in target_layers(model, "attention+mlp")}
    assert {"Dense_0_gate", "Dense_0_value", "Dense_1"} <= paths


def test_a_few_steps_change_only_adapters_and_head():
    model = training.lora(_model(), rank=2, targets="attention")
    before = {v.path: np.array(v) for v in model.weights}
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    # The head starts at zero and B at zero: B moves from the second step, A from the third; four steps move all.
    model.fit(_images(8), np.arange(8) % 10, batch_size=2, epochs=1, verbose=0)
    changed = {v.path for v in model.weights if not np.array_equal(before[v.path], np.array(v))}
    assert changed == set(_names(model.trainable_weights))


def test_adapters_saved_alone_load_onto_a_fresh_base_model(tmp_path):
    model = training.lora(_model(), rank=2)
    _randomise_adapters(model)
    path = training.save_lora(model, tmp_path / "adapters.safetensors")
    assert not [name for name in os.listdir(tmp_path) if name != "adapters.safetensors"]  # no temporary left
    fresh = training.lora(_model(), rank=2)
    assert not np.allclose(fresh.predict(_images(), verbose=0), model.predict(_images(), verbose=0))
    training.load_lora(fresh, path)
    np.testing.assert_array_equal(fresh.predict(_images(), verbose=0), model.predict(_images(), verbose=0))
    from safetensors.numpy import load_file

    assert sorted(load_file(path)) == _names(model.trainable_weights)


def test_adapters_refuse_a_base_with_other_weights_unless_told(tmp_path):
    model = training.lora(_model(), rank=2)
    _randomise_adapters(model)
    path = training.save_lora(model, tmp_path / "adapters.safetensors")
    keras.utils.set_random_seed(7)  # the same architecture, other base weights
    other = training.lora(vit_keras.ViT(image_size=16, classes=10, **TINY_TRAINING), rank=2)
    with pytest.raises(ValueError, match="trained on other base weights.*check_base=False"):
        training.load_lora(other, path)
    training.load_lora(other, path, check_base=False)  # on purpose: loaded, and the outputs are not the model's
    assert not np.allclose(other.predict(_images(), verbose=0), model.predict(_images(), verbose=0))


@pytest.mark.parametrize("change, message", [
    (dict(rank=4), "rank=2, the model has rank=4"),
    (dict(targets="attention"), "targets=qv, the model has targets=attention"),
    (dict(alpha=8), "alpha=2.0, the model has alpha=8.0"),
])
def test_load_refuses_other_settings(tmp_path, change, message):
    path = training.save_lora(training.lora(_model(), rank=2), tmp_path / "a.safetensors")
    with pytest.raises(ValueError, match=message):
        training.load_lora(training.lora(_model(), **{"rank": 2, **change}), path)


def test_load_refuses_missing_extra_and_misshapen_tensors(tmp_path):
    from safetensors.numpy import load_file, save_file

    model = training.lora(_model(), rank=2)
    path = str(tmp_path / "a.safetensors")
    training.save_lora(model, path)
    tensors, metadata = load_file(path), read_metadata(path)
    head = "head/kernel"
    save_file({k: v for k, v in tensors.items() if k != head}, path, metadata=metadata)
    with pytest.raises(ValueError, match=r"missing tensors \['head/kernel'\]"):
        training.load_lora(model, path)
    save_file({**tensors, "extra/kernel": np.zeros(2, "float32")}, path, metadata=metadata)
    with pytest.raises(ValueError, match=r"extra tensors \['extra/kernel'\]"):
        training.load_lora(model, path)
    save_file({**tensors, head: np.zeros((32, 5), "float32")}, path, metadata=metadata)
    with pytest.raises(ValueError, match="tensor 'head/kernel' has shape \\(32, 5\\), the model's is \\(32, 10\\)"):
        training.load_lora(model, path)
    save_file(tensors, path, metadata={})
    with pytest.raises(ValueError, match="not a vit_keras LoRA file"):
        training.load_lora(model, path)


def test_merged_equals_unmerged_within_rounding(record_property):
    model = training.lora(_model(), rank=4, targets="attention+mlp")
    base = model.predict(_images(), verbose=0)
    _randomise_adapters(model)
    adapted = model.predict(_images(), verbose=0)
    assert np.abs(adapted - base).max() > 1e-2  # the adapters change the outputs
    merged = training.merge_lora(model)
    assert not any(getattr(layer, "lora_enabled", False) for layer in merged._flatten_layers())
    assert len(merged.weights) == len(_model().weights)
    Bound(MERGE_BOUND, "lora_merge", record_property)(merged.predict(_images(), verbose=0), adapted)


def test_keras_file_of_a_lora_model_loads_in_safe_mode_as_the_merged_model(tmp_path):
    """Keras saves LoRA layers with the update folded into the kernel: the .keras file is the merged plain model."""
    model = training.lora(_model(), rank=2)
    _randomise_adapters(model)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert training.lora_settings(loaded) is None
    Bound(MERGE_BOUND, "lora_keras_file")(loaded.predict(_images(), verbose=0), model.predict(_images(), verbose=0))


def test_restart_adapters_after_keras_zeroed_them(tmp_path):
    model = training.lora(_model(), rank=2)
    _randomise_adapters(model)
    expected = model.predict(_images(), verbose=0)
    model.save_weights(tmp_path / "w.weights.h5")
    model.load_weights(tmp_path / "w.weights.h5")  # as a resumed run: adapters zeroed, update in the kernel
    assert restart_adapters(model) == 2
    assert all(np.array(layer.lora_kernel_a).any() for layer in target_layers(model, "qv"))
    Bound(MERGE_BOUND, "lora_restart")(model.predict(_images(), verbose=0), expected)


@pytest.mark.parametrize("call, message", [
    (lambda m: training.lora(m, rank=0), "rank must be a positive integer, got 0"),
    (lambda m: training.lora(m, rank=2.5), "rank must be a positive integer"),
    (lambda m: training.lora(m, rank=17), r"LoRA rank 17 is larger than .*query's kernel \(32, 2, 16\).* at most 16"),
    (lambda m: training.lora(m, targets="mlp"), "LoRA targets must be one of"),
    (lambda m: training.lora(m, alpha=-1), "alpha must be a finite positive number"),
    (lambda m: training.lora(m, alpha=float("inf")), "alpha must be a finite positive number.*inf"),
    (lambda m: training.lora(m, alpha=float("nan")), "alpha must be a finite positive number.*nan"),
    (lambda m: training.lora(m, alpha=0), "alpha must be a finite positive number.*0"),
    (lambda m: training.lora(training.lora(m, rank=2), rank=2), "LoRA is already enabled"),
    (lambda m: training.merge_lora(m), "has no LoRA adapters"),
    (lambda m: training.save_lora(training.lora(m, rank=2), "a.npz"), "name the file \\*.safetensors"),
])
def test_bad_input_is_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call(_model())


def test_not_a_vit_keras_model_is_refused():
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="head")])
    with pytest.raises(ValueError, match="no vit_keras TransformerBlock"):
        training.lora(plain)


@pytest.mark.slow
def test_train_with_lora_rank_freezes_the_base(tmp_path):
    import tensorflow as tf

    labels = np.arange(32) % 10
    digits = tf.data.Dataset.from_tensor_slices((_images(32).astype("uint8"), labels))
    config = training.finetune(total_steps=2, batch_size=16, warmup_steps=1)
    base = _model()
    frozen = np.array(base.get_layer("patch_encoder").weights[0])
    result = training.train(lambda: _model(), digits, config, output_dir=str(tmp_path / "run"), verbose=0,
                            lora_rank=2, num_classes=10)
    assert result.updates == 2
    import warnings

    with warnings.catch_warnings():
        # The checkpoint holds no optimizer state for adapters it no longer has: loading it says nothing.
        warnings.filterwarnings("error", "Skipping variable loading for optimizer")
        last = keras.saving.load_model(tmp_path / "run" / "checkpoints" / "last.keras")
    np.testing.assert_array_equal(np.array(last.get_layer("patch_encoder").weights[0]), frozen)
    np.testing.assert_allclose(last.predict(_images(), verbose=0), result.model.predict(_images(), verbose=0),
                               atol=MERGE_BOUND)


@pytest.mark.slow
def test_cli_lora_flag_trains(tmp_path, capsys):
    from vit_keras.cli import main

    data_dir = str(tmp_path / "tfds")
    out = tmp_path / "run"
    assert main(["train", "--model", "Ti/16", "--patch-size", "4", "--num-layers", "1", "--image-size", "16",
                 "--dataset", "vit_keras_digits", "--data-dir", data_dir, "--eval-split", "", "--batch-size", "16",
                 "--steps", "4", "--steps-per-epoch", "2", "--learning-rate", "0.05", "--warmup-steps", "1",
                 "--precision", "float32", "--lora", "2", "--lora-targets", "attention",
                 "--output-dir", str(out)]) == 0
    out_text = capsys.readouterr().out
    printed = json.loads(out_text[out_text.rindex("\n{\n") + 1:])  # the last line "{" opens the result
    assert printed["updates"] == 4
    assert (out / "checkpoints" / "last.keras").exists()
    # The run says it used LoRA, and what it trained: Keras' factors of each adapted kernel, A (fan-in, rank) and
    # B (rank, fan-out), plus the head's kernel and bias.
    from vit_keras.configs import VARIANTS

    ti16 = {**VARIANTS["Ti/16"].model_kwargs(), "patch_size": 4, "num_layers": 1}
    base = training.lora(vit_keras.ViT(image_size=16, classes=10, **ti16), rank=2, targets="attention")
    adapters = sum(2 * (int(np.prod(layer.kernel.shape[:-1])) + int(layer.kernel.shape[-1]))
                   for layer in target_layers(base, "attention"))
    head = int(np.prod(base.get_layer("head").kernel.shape)) + 10
    want = {"rank": 2, "targets": "attention", "alpha": 2.0, "trainable_parameters": adapters + head}
    assert {key: printed["lora"][key] for key in want} == want, printed["lora"]
    assert json.loads((out / "results.json").read_text())["lora"] == printed["lora"]
    events = b"".join(path.read_bytes() for path in (out / "logs").rglob("events.out.tfevents.*"))
    assert b"lora_rank" in events and b"lora_trainable_parameters" in events


class _Interrupt(keras.callbacks.Callback):
    """Stops a run after its third step (the run's own callbacks, the step backup among them, have run by then)."""

    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            raise KeyboardInterrupt


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_an_interrupted_lora_run_resumes_with_live_adapters(tmp_path, caplog):
    import tensorflow as tf

    labels = np.arange(64) % 10
    images = tf.data.Dataset.from_tensor_slices((_images(64).astype("uint8"), labels))
    config = training.finetune(total_steps=6, batch_size=8, warmup_steps=1, steps_per_epoch=6, backup_every=1)
    run = dict(output_dir=str(tmp_path / "run"), verbose=0, lora_rank=2, num_classes=10)
    with pytest.raises(KeyboardInterrupt):
        training.train(_model, images, config, callbacks=[_Interrupt()], **run)
    with caplog.at_level("WARNING", logger="vit_keras.training.loop"):
        result = training.train(_model, images, config, **run)
    assert "fresh adapters continue" in caplog.text and "Resuming from micro-step" in caplog.text
    assert result.updates == 6
    adapted = target_layers(result.model, "qv")
    assert all(np.array(layer.lora_kernel_a).any() for layer in adapted)  # restarted, then trained on
    assert any(np.array(layer.lora_kernel_b).any() for layer in adapted)
    query = "Transformer_encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"
    base = {v.path: np.array(v) for v in _model().weights}
    resumed = {v.path: np.array(v) for v in result.model.weights}
    assert not np.array_equal(resumed[query], base[query])  # the first steps' update, folded in by the backup
    np.testing.assert_array_equal(resumed["patch_encoder/cls"], base["patch_encoder/cls"])  # frozen stays frozen


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*tf.lite.Interpreter is deprecated")
def test_merged_model_exports_to_tflite_and_agrees(tmp_path):
    import tensorflow as tf

    from vit_keras.export.lite import tflite

    model = training.lora(_model(classifier_activation=None), rank=2)
    _randomise_adapters(model)
    path = tmp_path / "merged.tflite"
    tflite(training.merge_lora(model), path)
    runner = tf.lite.Interpreter(model_path=str(path)).get_signature_runner("serving_default")
    image = _images(1)
    (out,) = runner(images=image).values()
    # The TFLite converter and its kernels reorder float32 sums again: the merge bound, not bit equality.
    Bound(MERGE_BOUND, "lora_tflite")(out, model.predict(image, verbose=0))
