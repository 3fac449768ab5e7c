"""How far an exported model is from the Keras model: top-1 agreement, output differences, size, CPU latency."""

from __future__ import annotations

import dataclasses
import os
import statistics
import time

import numpy as np

from vit_keras import hardware
from vit_keras.export.lite import check_tflite_images, quantize_input, tflite, tflite_predict
from vit_keras.export.onnx import onnx_predict, onnx_session, to_onnx
from vit_keras.export.serving import saved_model
from vit_keras.export.signatures import SERVING_DEFAULT, describe_model

# The formats `export_and_compare` writes, by name: the file name (None: the SavedModel directory).
FORMATS = {
    "saved_model": None,
    "tflite_float32": "vit_float32.tflite",
    "tflite_float16": "vit_float16.tflite",
    "tflite_dynamic_int8": "vit_dynamic_int8.tflite",
    "tflite_int8": "vit_int8.tflite",
    "onnx": "vit.onnx",
}
# What `export_and_compare` writes unless told: ONNX needs the optional tf2onnx and onnxruntime (extra `[onnx]`).
DEFAULT_FORMATS = tuple(name for name in FORMATS if name != "onnx")
_QUANTIZATION = {
    "tflite_float32": None,
    "tflite_float16": "float16",
    "tflite_dynamic_int8": "dynamic_int8",
    "tflite_int8": "int8",
}
# Top-1 agreement with the Keras model that a well-trained classifier keeps after export. TFLite and ONNX float32
# may flip near-ties (and differ by bfloat16 rounding from a model trained under mixed_bfloat16). Quantised formats
# flip more, by an amount that depends on the CPU's float kernels: each target leaves at least twice the worst
# shortfall measured for the demo's model across oneDNN ISA caps, oneDNN off, TFLite with and without XNNPACK and
# 1 / 2 threads (dynamic int8: 99.44% at worst, so 98.5%; full int8: 98.89%, so 97%).
AGREEMENT_TARGETS = {
    "saved_model": 1.0,
    "tflite_float32": 0.99,
    "tflite_float16": 0.99,
    "tflite_dynamic_int8": 0.985,
    "tflite_int8": 0.97,
    "onnx": 0.99,
}


@dataclasses.dataclass(frozen=True)
class ExportCheck:
    """One exported format measured against the Keras model.

    Attributes:
        format: `"keras"`, `"saved_model"`, `"tflite_float32"`, `"tflite_float16"`, `"tflite_dynamic_int8"`,
            `"tflite_int8"` or `"onnx"`.
        path: the file or directory.
        size_bytes: its size on disk.
        num_images: how many images were compared.
        top1_agreement: fraction of images whose top class equals the Keras model's (None for embeddings).
        max_abs_diff, mean_abs_diff: of the main output against the Keras model's.
        accuracy: top-1 accuracy against the labels, when labels were given.
        latency_ms: median CPU time of one batch-1 call, when measured.
    """

    format: str
    path: str
    size_bytes: int
    num_images: int
    top1_agreement: float | None
    max_abs_diff: float
    mean_abs_diff: float
    accuracy: float | None = None
    latency_ms: float | None = None

    @property
    def meets_target(self) -> bool | None:
        """Whether top-1 agreement reaches `AGREEMENT_TARGETS` for this format (None if not applicable)."""
        target = AGREEMENT_TARGETS.get(self.format)
        if target is None or self.top1_agreement is None:
            return None
        return self.top1_agreement >= target


def path_size(path) -> int:
    """Bytes on disk of a file, or of all files under a directory.

    Example:
        >>> path_size(saved_model_dir) > path_size(tflite_file)  # the SavedModel keeps its graph's source too
        True
    """
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def _batches(images, batch_size):
    for start in range(0, len(images), batch_size):
        yield images[start : start + batch_size]


def keras_reference(model, images, include_preprocessing=None, batch_size=64):
    """The Keras model's main output for RGB `images` in [0, 255], as the exported signatures compute it.

    Example:
        >>> keras_reference(tiny_model, images).shape
        (8, 10)
    """
    spec = describe_model(model, include_preprocessing)
    images = np.asarray(images, dtype=np.float32)
    x = images if spec.model_rescales else images / np.float32(127.5) - np.float32(1.0)
    outputs = np.concatenate([np.asarray(model.predict_on_batch(b)) for b in _batches(x, batch_size)])
    if spec.output_name == "tokens":
        outputs = outputs[:, 0] if spec.num_prefix_tokens else outputs.mean(axis=1)
    return outputs.astype(np.float32)


def exported_predict(path, images, batch_size=64, num_threads=None):
    """The main output (probabilities, logits or features) of a SavedModel version dir, `.tflite` or `.onnx` file.

    Example:
        >>> exported_predict(saved_model_dir, images).shape
        (8, 10)
    """
    images = np.asarray(images, dtype=np.float32)
    if str(path).endswith(".tflite"):
        outputs = [tflite_predict(path, b, num_threads=num_threads) for b in _batches(images, batch_size)]
    elif str(path).endswith(".onnx"):
        session = onnx_session(path, num_threads)
        outputs = [onnx_predict(session, b) for b in _batches(images, batch_size)]
    else:
        import tensorflow as tf

        signature = tf.saved_model.load(os.fspath(path)).signatures[SERVING_DEFAULT]
        outputs = [
            {k: v.numpy() for k, v in signature(images=tf.constant(b)).items()} for b in _batches(images, batch_size)
        ]
    name = next(k for k in ("probabilities", "logits", "features") if k in outputs[0])
    return np.concatenate([o[name] for o in outputs]).astype(np.float32)


def _check(format_name, path, reference, predicted, labels, classifier, latency_ms=None) -> ExportCheck:
    diff = np.abs(predicted - reference)
    top1 = float(np.mean(predicted.argmax(-1) == reference.argmax(-1))) if classifier else None
    accuracy = None
    if labels is not None and classifier:
        accuracy = float(np.mean(predicted.argmax(-1) == np.asarray(labels).reshape(-1)))
    return ExportCheck(
        format=format_name,
        path=os.fspath(path),
        size_bytes=path_size(path) if path else 0,
        num_images=len(reference),
        top1_agreement=top1,
        max_abs_diff=float(diff.max()),
        mean_abs_diff=float(diff.mean()),
        accuracy=accuracy,
        latency_ms=latency_ms,
    )


def measure_agreement(model, exported_path, images, labels=None, include_preprocessing=None, format_name=None):
    """Compare an exported SavedModel version dir, `.tflite` or `.onnx` file with the Keras model on `images`.

    Args:
        model: the Keras model that was exported.
        exported_path: what `saved_model()`, `tflite()` or `to_onnx()` returned.
        images: float RGB (N, H, W, 3) in [0, 255], ideally held-out images.
        labels: optional (N,) class ids, to report accuracy too.

    Returns:
        An `ExportCheck` (top-1 agreement, max/mean abs difference, size, accuracy).

    Example:
        >>> check = measure_agreement(tiny_model, tflite_file, images, labels)  # a float32 TFLite file
        >>> check.format, check.num_images, check.top1_agreement
        ('tflite', 8, 1.0)
    """
    spec = describe_model(model, include_preprocessing)
    reference = keras_reference(model, images, include_preprocessing)
    predicted = exported_predict(exported_path, images)
    if format_name is None:
        suffix = os.path.splitext(str(exported_path))[1]
        format_name = {".tflite": "tflite", ".onnx": "onnx"}.get(suffix, "saved_model")
    return _check(format_name, exported_path, reference, predicted, labels, spec.is_classifier)


def _median_ms(call, runs, warmup=3):
    for _ in range(warmup):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


def measure_latency(model_or_path, image, runs=50, num_threads=None) -> float:
    """Median milliseconds of one batch-1 call on the CPU: a Keras model, a SavedModel dir, `.tflite` or `.onnx`.

    Example:
        >>> measure_latency(tflite_file, images[:1], runs=5) > 0
        True
    """
    import tensorflow as tf

    image = np.asarray(image, dtype=np.float32).reshape(1, *np.shape(image)[-3:])
    if isinstance(model_or_path, str | os.PathLike) and str(model_or_path).endswith(".tflite"):
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=os.fspath(model_or_path), num_threads=num_threads)
        check_tflite_images(model_or_path, interpreter.get_input_details()[0], image)
        interpreter.allocate_tensors()
        runner = interpreter.get_signature_runner(SERVING_DEFAULT)
        image = quantize_input(runner, image)
        return _median_ms(lambda: runner(images=image), runs)
    if isinstance(model_or_path, str | os.PathLike) and str(model_or_path).endswith(".onnx"):
        session = onnx_session(model_or_path, num_threads)
        return _median_ms(lambda: onnx_predict(session, image), runs)
    if isinstance(model_or_path, str | os.PathLike):
        signature = tf.saved_model.load(os.fspath(model_or_path)).signatures[SERVING_DEFAULT]
        tensor = tf.constant(image)
        return _median_ms(lambda: signature(images=tensor), runs)
    import keras

    if keras.backend.backend() != "tensorflow":  # JAX and PyTorch compile predict_on_batch themselves
        return _median_ms(lambda: model_or_path.predict_on_batch(image), runs)
    # XLA where it is faster for this model's precision on this hardware (the rule of `vit_keras.hardware`).
    jit_compile, _ = hardware.xla_pays(hardware.default_kind(), model_or_path.dtype_policy.name)
    function = tf.function(lambda x: model_or_path(x, training=False), autograph=False, jit_compile=jit_compile)
    tensor = tf.constant(image)
    return _median_ms(lambda: function(tensor), runs)


def export_and_compare(
    model,
    images,
    output_dir,
    labels=None,
    representative_dataset=None,
    class_names=None,
    formats=DEFAULT_FORMATS,
    latency_runs=0,
    num_threads=None,
    include_preprocessing=None,
    print_fn=print,
):
    """Export `model` to every deployment format and compare each with the Keras model on held-out `images`.

    Writes `<output_dir>/saved_model/1/` (TF Serving layout) and
    `<output_dir>/vit_{float32,float16,dynamic_int8,int8}.tflite` (and `<output_dir>/vit.onnx` when `"onnx"` is in
    `formats`), replacing earlier ones, then prints a table of
    size, top-1 agreement with Keras, max abs difference, accuracy (with `labels`) and, with `latency_runs > 0`, the
    median CPU latency of a batch-1 call.

    Args:
        model: a trained vit_keras model.
        images: held-out float RGB images (N, H, W, 3) in [0, 255].
        output_dir: where to write.
        labels: optional (N,) class ids.
        representative_dataset: calibration images for full int8 (training images; see `tflite`); defaults to
            `images` when not given, which flatters int8 slightly.
        class_names: served as `top_k_labels` by the SavedModel.
        formats: a subset of `FORMATS` (default `DEFAULT_FORMATS`: all but `"onnx"`).
        latency_runs: batch-1 calls to time per format (0: no timing). A `"keras"` row is added when timing.
        print_fn: where the table goes (None: print nothing).

    Returns:
        One `ExportCheck` per format.

    Example:
        >>> rows = export_and_compare(tiny_model, images, "export", labels=labels, formats=("tflite_float32",),
        ...                           print_fn=None)  # default: every format but ONNX
        >>> [(row.format, row.meets_target) for row in rows]
        [('tflite_float32', True)]
    """
    unknown = [name for name in formats if name not in FORMATS]
    if unknown:
        raise ValueError(f"Unknown formats {unknown}; choose from {list(FORMATS)}.")
    spec = describe_model(model, include_preprocessing)
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4 or images.shape[1:] != (*spec.image_size, 3) or not len(images):
        raise ValueError(f"images must be (N, {spec.image_size[0]}, {spec.image_size[1]}, 3), got {images.shape}.")
    if representative_dataset is None:
        representative_dataset = images
    os.makedirs(output_dir, exist_ok=True)
    reference = keras_reference(model, images, include_preprocessing)

    rows = []
    if latency_runs:
        # Size of the model alone, as `.keras`: a clone without the optimizer state a trained model carries.
        keras_path = os.path.join(output_dir, "vit.keras")
        clone = type(model).from_config(model.get_config())  # uncompiled: no optimizer variables
        clone.set_weights(model.get_weights())
        clone.save(keras_path)
        latency = measure_latency(model, images[:1], latency_runs, num_threads)
        rows.append(_check("keras", keras_path, reference, reference, labels, spec.is_classifier, latency))
    for name in formats:
        if FORMATS[name] is None:
            path = saved_model(
                model, os.path.join(output_dir, "saved_model"), version=1, class_names=class_names,
                overwrite=True, include_preprocessing=include_preprocessing,
            )
        elif name == "onnx":
            path = to_onnx(
                model, os.path.join(output_dir, FORMATS[name]), include_preprocessing=include_preprocessing,
                overwrite=True,
            )
        else:
            quantization = _QUANTIZATION[name]
            path = tflite(
                model, os.path.join(output_dir, FORMATS[name]), quantization=quantization,
                representative_dataset=representative_dataset if quantization == "int8" else None,
                include_preprocessing=include_preprocessing, overwrite=True,
            )
        latency = measure_latency(path, images[:1], latency_runs, num_threads) if latency_runs else None
        predicted = exported_predict(path, images, num_threads=num_threads)
        rows.append(_check(name, path, reference, predicted, labels, spec.is_classifier, latency))
    if print_fn is not None:
        print_fn(format_table(rows))
    return rows


def _percent(value):
    return "-" if value is None else f"{100 * value:.2f}%"


def format_table(rows) -> str:
    """A Markdown table of `ExportCheck` rows.

    Example:
        >>> print(format_table([measure_agreement(tiny_model, tflite_file, images, labels)]))
        | format | size | top-1 agreement | max abs diff | accuracy | CPU latency, batch 1 |
        |---|---:|---:|---:|---:|---:|
        | tflite | ... MiB | 100.00% | ... | ...% | - |
    """
    lines = [
        "| format | size | top-1 agreement | max abs diff | accuracy | CPU latency, batch 1 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        size = "-" if not row.path else f"{row.size_bytes / 2**20:.2f} MiB"
        latency = "-" if row.latency_ms is None else f"{row.latency_ms:.2f} ms"
        agreement = _percent(row.top1_agreement)
        if row.meets_target is False:
            agreement += f" (below {_percent(AGREEMENT_TARGETS[row.format])})"
        lines.append(
            f"| {row.format} | {size} | {agreement} | {row.max_abs_diff:.2e} | {_percent(row.accuracy)} | {latency} |"
        )
    return "\n".join(lines)
