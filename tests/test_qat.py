"""Quantization-aware training (`vit_keras.quantization`) and its int8 TFLite file.

The fake-quantized matmuls are checked against TensorFlow's own ops (`tf.quantization.fake_quant_with_min_max_vars`
for the activations, `_per_channel` with `narrow_range` for the kernels, on the same ranges), forward and gradient,
on TensorFlow here and on JAX and PyTorch in a process each (tests/qat_worker.py). Bound 1e-6 (the
required agreement): both compute the same rounding of the same float32 values, and differ only in the order of the
matmul's float32 sums and, on JAX and PyTorch, in Keras' `(q - zero_point) * scale` for TensorFlow's
`q * scale + nudged_min`: a few float32 steps of values near 1 (1.2e-7 each). Measured: at most 6.3e-8 on every
backend (outputs and the gradients of input, kernel and bias).
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests import qat_worker
from tests.model_kinds import build, images
from vit_keras import export
from vit_keras.quantization import activation_ranges, calibrate, fake_quant_layers, quantize_aware

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 1e-6


def _tf_reference(name, kernel, bias, inputs, upstream):
    """The case's fake-quantized matmul written with TensorFlow's FakeQuant ops, and its gradients."""
    import tensorflow as tf

    (kind, arguments), _ = qat_worker.CASES[name]
    kernel, bias, inputs = (tf.constant(a) for a in (kernel, bias, inputs))
    equation = arguments.get("equation")
    if equation is None:
        output_axes = [1]
    else:
        spec_in, spec_out = equation.split("->")
        output_axes = [i for i, letter in enumerate(spec_in.split(",")[1]) if letter in spec_out]
    rank = len(kernel.shape)
    order = [i for i in range(rank) if i not in output_axes] + output_axes
    with tf.GradientTape() as tape:
        tape.watch([kernel, bias, inputs])
        x = tf.quantization.fake_quant_with_min_max_vars(inputs, *qat_worker.INPUT_RANGE)
        moved = tf.transpose(kernel, order)
        flat = tf.reshape(moved, (-1, int(np.prod([kernel.shape[i] for i in output_axes]))))
        bound = tf.stop_gradient(tf.reduce_max(tf.abs(flat), axis=0))
        flat = tf.quantization.fake_quant_with_min_max_vars_per_channel(flat, -bound, bound, narrow_range=True)
        rounded = tf.transpose(tf.reshape(flat, moved.shape), np.argsort(order))
        y = tf.einsum(equation, x, rounded) if equation else tf.matmul(x, rounded)
        y = tf.quantization.fake_quant_with_min_max_vars(y + bias, *qat_worker.OUTPUT_RANGE)
        loss = tf.reduce_sum(y * upstream)
    grads = tape.gradient(loss, [inputs, kernel, bias])
    return dict(zip(("outputs", "d_inputs", "d_kernel", "d_bias"), (t.numpy() for t in (y, *grads))))


def _check_against_tensorflow(results, backend, record_property=None):
    for name in qat_worker.CASES:
        case = {key: results[f"{name}/{key}"] for key in ("kernel", "bias", "inputs", "upstream")}
        expected = _tf_reference(name, case["kernel"], case["bias"], case["inputs"], case["upstream"])
        # The ranges clip: some inputs and outputs lie outside them, so the gradient has real zeros.
        assert 0 < np.mean(expected["d_inputs"] == 0) < 0.9, name
        for key, value in expected.items():
            if record_property is not None:
                record_property(f"{name}_{key}_max_abs_diff", float(np.abs(results[f"{name}/{key}"] - value).max()))
            np.testing.assert_allclose(results[f"{name}/{key}"], value, rtol=0, atol=TOLERANCE,
                                       err_msg=f"{name} {key} on {backend}")


def test_fake_quant_matmuls_equal_tensorflows_fake_quant_ops_forward_and_gradient(record_property):
    results = {f"{name}/{key}": value for name in qat_worker.CASES
               for key, value in qat_worker.run_case(name).items()}
    _check_against_tensorflow(results, "tensorflow", record_property)


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="launches the other backends from TensorFlow")
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_on_jax_and_torch_fake_quant_matmuls_equal_tensorflows_ops_and_models_train_and_reload(backend, tmp_path,
                                                                                               record_property):
    env = dict(os.environ, KERAS_BACKEND=backend,
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    if backend == "jax":  # compile time dominates for these tiny layers; unoptimised XLA gives the same numbers
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"]))
    done = subprocess.run([sys.executable, "-m", "tests.qat_worker", str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and f"KERAS_BACKEND={backend}" in done.stdout, done.stdout + done.stderr[-4000:]
    with np.load(tmp_path / f"{backend}.npz") as results:
        _check_against_tensorflow(dict(results), backend, record_property)
        # A zero-initialised head's all-zero kernel channels and empty first range stay finite (0 / 0 in the
        # rounding gave NaN here), every range saw both steps, and the .keras file reloads the same model.
        ranges = results["model/ranges"]
        assert np.isfinite(ranges).all() and (ranges[:, 2] == 2).all() and (ranges[:, 1] > ranges[:, 0]).all()
        assert results["model/reload_identical"]


KINDS = {
    "vit": {},
    "siglip_map_head": {},
    "dinov2_layerscale_registers": {},
    # EVA-02's parts: interleaved RoPE on q and k, a SwiGLU MLP with its own norm.
    "eva02_rope_swiglu": dict(rope="interleaved", rope_ref_grid_size=(2, 2), mlp="swiglu", mlp_norm="layernorm"),
}


def _float_model(kind):
    keras.utils.set_random_seed(0)  # the same weights whatever ran before
    model = build("vit", **KINDS[kind]) if kind == "eva02_rope_swiglu" else build(kind)
    # A zero-initialised head would give uniform probabilities whatever the quantized blocks compute.
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.5, head.kernel.shape).astype("float32"))
    return model


def _predict(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


@pytest.fixture(scope="module")
def calibrated():
    """A tiny ViT and its quantization-aware copy, its ranges set from 8 images."""
    model = _float_model("vit")
    qat = quantize_aware(model)
    calibrate(qat, images(8))
    return model, qat


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_matmul_is_fake_quantized_and_the_model_trains_saves_and_reloads(kind, tmp_path):
    """One `fit` step on the plain ViT (the others: one calibration pass, which updates the ranges the same way
    without compiling a training step)."""
    model = _float_model(kind)
    before = [np.array(v) for v in model.weights]
    qat = quantize_aware(model)
    matmuls = [layer for layer in model._flatten_layers() if type(layer) in (keras.layers.Dense,
                                                                             keras.layers.EinsumDense)]
    assert len(fake_quant_layers(qat)) == len(matmuls) > 0
    x, labels = images(4), np.arange(4) % 5
    if kind == "vit":
        qat.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
        qat.fit(x, labels, batch_size=4, epochs=1, verbose=0)
    else:
        calibrate(qat, x)
    ranges = activation_ranges(qat)
    assert len(ranges) == 2 * len(matmuls) and all(updates == 1 for _, _, updates in ranges.values())
    for old, new in zip(before, model.weights):  # the float model is left as it was
        np.testing.assert_array_equal(old, np.array(new))
    expected = _predict(qat, x)
    assert not np.allclose(expected, _predict(model, x), atol=1e-4)  # rounded (and, for the ViT, trained)

    path = str(tmp_path / "qat.keras")
    qat.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    assert activation_ranges(reloaded) == ranges
    np.testing.assert_array_equal(_predict(reloaded, x), expected)


@pytest.mark.slow
def test_int8_file_uses_the_learned_ranges_and_per_channel_kernels(calibrated, tmp_path):
    """Every int8 FULLY_CONNECTED reads and writes on a grid learned in training (scale (max - min) / 255 of one
    of the model's ranges, to float32 rounding: 1e-6 relative), with the kernel rounded per output channel as
    the Keras layer rounds it (scales max|w| / 127, one per channel), and takes uint8 pixels."""
    from ai_edge_litert.interpreter import Interpreter

    from vit_keras.quantization.layers import fake_quant_kernel

    _, qat = calibrated
    path = export.tflite(qat, str(tmp_path / "qat_int8.tflite"), quantization="int8", integer_io=True)
    interpreter = Interpreter(model_path=path)
    assert interpreter.get_input_details()[0]["dtype"] == np.uint8
    tensors = {t["index"]: t for t in interpreter.get_tensor_details()}
    learned = np.array([(high - low) / 255 for low, high, _ in activation_ranges(qat).values()])
    kernels = []  # each layer's rounded kernel as (inputs, outputs), as the converter lays it out
    for layer in fake_quant_layers(qat):
        kernel = keras.ops.convert_to_numpy(fake_quant_kernel(layer.kernel, layer.kernel_output_axes))
        outputs = [axis % kernel.ndim for axis in layer.kernel_output_axes]
        order = [axis for axis in range(kernel.ndim) if axis not in outputs] + outputs
        kernels.append(np.transpose(kernel, order).reshape(-1, np.prod([kernel.shape[a] for a in outputs])))
    int8_matmuls = 0
    for op in interpreter._get_ops_details():
        if op["op_name"] != "FULLY_CONNECTED" or tensors[op["outputs"][0]]["dtype"] != np.int8:
            continue
        int8_matmuls += 1
        for index in (op["inputs"][0], op["outputs"][0]):
            scale = tensors[index]["quantization"][0]
            assert np.min(np.abs(learned - scale) / scale) < 1e-6, tensors[index]["name"]
        weights = tensors[op["inputs"][1]]
        scales = weights["quantization_parameters"]["scales"]
        assert len(scales) == weights["shape"][0] > 1  # one per output channel
        dequantized = (interpreter.get_tensor(weights["index"]) * scales[:, None]).T
        # The file's kernel is the layer's: all but a weight lying within float32 rounding of a halfway point
        # between two steps (TensorFlow's kernel and the export's rounding order their float32 operations
        # differently; measured: 1 in 600,000 random weights) on the same step, none a step further.
        differences = [np.abs(dequantized - kernel) for kernel in kernels if kernel.shape == dequantized.shape]
        difference = min(differences, key=lambda d: np.mean(d > 1e-6))
        assert np.mean(difference > 1e-6) < 1e-3 and np.all(difference <= scales[None, :] + 1e-6)
    # Patch embedding, q/k/v/out of both blocks and the head (the MLPs' follow LayerNorm in float), at least.
    assert int8_matmuls >= 10, int8_matmuls


@pytest.mark.slow
@pytest.mark.parametrize("case", ["model.quantize", "quantize_aware twice"])
def test_quantize_aware_refuses_a_quantized_model(case, calibrated):
    if case == "model.quantize":
        model = _float_model("vit")
        model.quantize("int8", filters=lambda layer: layer.path == "head")  # one layer: quantize is slow
        with pytest.raises(ValueError, match=r"already quantized by model.quantize .*starts from the float model"):
            quantize_aware(model)
    else:
        with pytest.raises(ValueError, match="already quantization-aware"):
            quantize_aware(calibrated[1])
    with pytest.raises(ValueError, match=r"`momentum` must be in \[0, 1\)"):
        quantize_aware(calibrated[0], momentum=1.0)


@pytest.mark.slow
def test_int8_export_refuses_what_it_cannot_write_and_writes_nothing(calibrated, tmp_path):
    model, qat = calibrated
    path = tmp_path / "refused.tflite"
    with pytest.raises(ValueError, match=r"needs a representative_dataset.*or a quantization-aware model"):
        export.tflite(model, path, quantization="int8")
    with pytest.raises(ValueError, match=r"quantization-aware: export it with quantization='int8', not 'float16'"):
        export.tflite(qat, path, quantization="float16")
    with pytest.raises(ValueError, match="takes no representative_dataset"):
        export.tflite(qat, path, quantization="int8", representative_dataset=images(2))
    with pytest.raises(ValueError, match=r"never learned .*calibrate\(model, images\)"):
        export.tflite(quantize_aware(model), path, quantization="int8")
    collapsed = quantize_aware(model)
    calibrate(collapsed, images(2))
    output_range = fake_quant_layers(collapsed)[0].output_range
    output_range.minimum.assign(0.0)
    output_range.maximum.assign(0.0)
    with pytest.raises(ValueError, match=rf"{output_range.path}' .*collapsed to zero width"):
        export.tflite(collapsed, path, quantization="int8")
    assert os.listdir(tmp_path) == []


def _training_model():
    import vit_keras
    from tests.tiny import TINY_TRAINING

    keras.utils.set_random_seed(0)
    return vit_keras.ViT(image_size=16, classes=10, **TINY_TRAINING)


class _Interrupt(keras.callbacks.Callback):
    """Stops a run after its third step (the run's own callbacks, the step backup among them, have run by then)."""

    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            raise KeyboardInterrupt


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_quantize_aware_training_run_resumes_to_the_uninterrupted_weights(tmp_path):
    """Resume bound: the TensorFlow resume tests' 1e-5 (tests/test_cli_train.py); the ranges are variables like the
    weights, saved in the same backups."""
    import tensorflow as tf

    from vit_keras import training
    from vit_keras.quantization import QuantizeAwareModel

    labels = np.arange(64) % 10
    data = tf.data.Dataset.from_tensor_slices((
        np.random.default_rng(1).uniform(0, 255, (64, 16, 16, 3)).astype("uint8"), labels))
    config = training.finetune(total_steps=4, batch_size=8, warmup_steps=1, steps_per_epoch=4, backup_every=1,
                               precision="float32")
    common = dict(verbose=0, num_classes=10, quantize_aware=True)
    reference = training.train(_training_model, data, config, output_dir=str(tmp_path / "reference"), **common)
    with pytest.raises(KeyboardInterrupt):
        training.train(_training_model, data, config, output_dir=str(tmp_path / "run"), callbacks=[_Interrupt()],
                       **common)
    resumed = training.train(_training_model, data, config, output_dir=str(tmp_path / "run"), **common)
    assert isinstance(resumed.model, QuantizeAwareModel) and resumed.updates == reference.updates == 4
    ranges = activation_ranges(resumed.model)
    assert min(updates for _, _, updates in ranges.values()) == 4
    for (path, value), (_, expected) in zip(sorted(ranges.items()), sorted(activation_ranges(reference.model)
                                                                           .items())):
        np.testing.assert_allclose(value[:2], expected[:2], rtol=0, atol=1e-5, err_msg=path)
    for new, old in zip(resumed.model.weights, reference.model.weights):
        np.testing.assert_allclose(np.array(new), np.array(old), rtol=0, atol=1e-5, err_msg=new.path)
    last = keras.models.load_model(str(tmp_path / "run" / "checkpoints" / "last.keras"), safe_mode=True)
    assert activation_ranges(last) == activation_ranges(resumed.model)
    with pytest.raises(ValueError, match="quantize_aware=True and lora_rank"):
        training.train(_training_model, data, config, output_dir=str(tmp_path / "lora"), lora_rank=2, **common)


def test_cli_train_passes_quantize_aware(monkeypatch):
    from vit_keras import cli, training
    from vit_keras.training import data

    seen = {}

    class Stop(Exception):
        pass

    def fake_train(build, dataset, config, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(training, "train", fake_train)
    monkeypatch.setattr(data, "load", lambda *args, **kwargs: data.Split(None, 10, None, "digits"))
    for flag, expected in (([], False), (["--quantize-aware"], True)):
        with pytest.raises(Stop):
            cli.main(["train", "--model", "Ti/16", "--image-size", "32", "--dataset", "vit_keras_digits",
                      "--output-dir", "unused", *flag])
        assert seen["quantize_aware"] is expected
