"""TFLite files for devices: float32, float16, dynamic-range int8 and full-integer int8, builtin ops only."""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np

from vit_keras.export.forward import tensorflow_forward
from vit_keras.export.signatures import SERVING_DEFAULT, describe_model, float32_model, images_spec, model_outputs
from vit_keras.files import atomic_file, refuse_existing
from vit_keras.quantization import QuantizeAwareModel, check_learned_ranges, is_quantize_aware
from vit_keras.quantization.layers import kernels_rounded_for_converter

QUANTIZATIONS = (None, "float16", "dynamic_int8", "int8")
DEFAULT_CALIBRATION_SAMPLES = 100


def _check_quantization(quantization):
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"`quantization` must be one of {QUANTIZATIONS}, got {quantization!r}.")
    return quantization


def _as_image_array(element):
    """One element of a representative dataset as a float32 array (images only, labels dropped)."""
    if isinstance(element, dict):
        for key in ("images", "image"):
            if key in element:
                element = element[key]
                break
        else:
            raise ValueError(
                f"representative_dataset yields dicts with keys {sorted(element)}; it needs an 'image' or "
                "'images' key, or yield the images themselves."
            )
    elif isinstance(element, tuple | list):
        element = element[0]  # (images, labels) as `model.fit` takes them
    if hasattr(element, "numpy"):
        element = element.numpy()
    return np.asarray(element, dtype=np.float32)


def calibration_images(representative_dataset, image_size, max_samples=DEFAULT_CALIBRATION_SAMPLES):
    """Up to `max_samples` single images (1, H, W, 3) from a representative dataset, checked against the model.

    `representative_dataset` may be a `tf.data.Dataset` (e.g. a tfds pipeline, batched or not, of images,
    `(images, labels)` or `{"image": ...}` dicts), a NumPy array (N, H, W, 3), or any iterable of those, with
    RGB values in [0, 255] resized to the model's size.

    Example:
        >>> len(calibration_images(np.full((8, 32, 32, 3), 128.0), (32, 32)))
        8
    """
    if representative_dataset is None:
        raise ValueError(
            "quantization='int8' needs a representative_dataset: ~100 training images in [0, 255] at the model's "
            "size (a tf.data.Dataset, a NumPy array or an iterable of images), or a quantization-aware model "
            "(vit_keras.quantization.quantize_aware, fine-tuned), whose ranges were learned in training."
        )
    if isinstance(representative_dataset, np.ndarray):
        representative_dataset = [representative_dataset]
    expected = (*image_size, 3)
    images = []
    for element in representative_dataset:
        batch = _as_image_array(element)
        if batch.ndim == 3:
            batch = batch[None]
        if batch.ndim != 4 or batch.shape[1:] != expected:
            raise ValueError(
                f"representative_dataset yields images of shape {batch.shape[1:] if batch.ndim == 4 else batch.shape}"
                f", but the model takes {expected}; resize them to {image_size} (e.g. tf.image.resize) first."
            )
        images.extend(batch[i : i + 1] for i in range(len(batch)))
        if len(images) >= max_samples:
            break
    if not images:
        raise ValueError("representative_dataset yielded no images.")
    images = images[:max_samples]
    if max(float(image.max()) for image in images) <= 1.0:
        warnings.warn(
            "The representative images are all in [0, 1], but the exported model takes [0, 255]: the int8 "
            "ranges will be calibrated on nearly black images. Multiply them by 255.",
            stacklevel=3,
        )
    return images


def _tflite_module(model, spec):
    import keras
    import tensorflow as tf

    # A JAX model's graph is converted at batch 1: the TFLite converter cannot lower its dynamic-batch gathers.
    batch_size = None if keras.backend.backend() == "tensorflow" else 1
    forward, variables = tensorflow_forward(model, spec.image_size, batch_size)
    module = tf.Module(name="vit_tflite")
    # Track the model's variables, not the model: a compiled model would drag its optimizer state along.
    module.model_variables = variables

    @tf.function(input_signature=[images_spec(spec, batch_size)], autograph=False)
    def serve(images):
        return model_outputs(forward, spec, images)

    module.serve = serve
    return module, serve


def _converter(module, serve, workdir):
    """A converter for the module's float signature `serve`, read back from a SavedModel.

    Converting the in-memory Keras 3 model's concrete function leaves its weights as TFLite resource
    variables (unquantisable, and uninitialised at run time); the same function restored from a SavedModel
    has them frozen into constants.
    """
    import tensorflow as tf

    tf.saved_model.save(module, workdir, signatures={SERVING_DEFAULT: serve})
    loaded = tf.saved_model.load(workdir)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([loaded.signatures[SERVING_DEFAULT]], loaded)
    return converter, loaded


def write_tflite(module, serve, path, quantization=None, calibration=None, integer_io=False, overwrite=False,
                 learned_ranges=False):
    """Convert the `tf.function` `serve` of `module` (the `tf.Module` tracking its variables) to a TFLite file at
    `path` with builtin ops only (`TFLITE_BUILTINS`, `TFLITE_BUILTINS_INT8` for int8), refusing a result with custom
    ops, written to a temporary name and renamed into place. `calibration`: the int8 representative inputs, each a
    list of the signature's arguments. `learned_ranges`: int8 from the graph's FakeQuant ranges (a
    quantization-aware model), with `TFLITE_BUILTINS`: the ops without a range (LayerNorm, the attention scores)
    stay float between QUANTIZE and DEQUANTIZE. Returns `path`.

    Example:
        >>> import tensorflow as tf
        >>> module = tf.Module()
        >>> module.scale = tf.Variable(2.0)
        >>> module.serve = tf.function(lambda x: {"outputs": x * module.scale},
        ...                            input_signature=[tf.TensorSpec((1, 4), tf.float32)])
        >>> write_tflite(module, module.serve, "double.tflite")
        'double.tflite'
    """
    import tensorflow as tf

    with tempfile.TemporaryDirectory(prefix="vit_tflite_") as workdir:
        converter, _ = _converter(module, serve, workdir)
        integer_only = quantization == "int8" and not learned_ranges
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS_INT8 if integer_only else tf.lite.OpsSet.TFLITE_BUILTINS
        ]
        if quantization is not None:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantization == "float16":
            converter.target_spec.supported_types = [tf.float16]
        if calibration is not None:
            converter.representative_dataset = lambda: iter(calibration)
        if integer_io:
            converter.inference_input_type = tf.uint8
            converter.inference_output_type = tf.uint8
        try:
            flatbuffer = converter.convert()
        except Exception as error:  # the converter raises its own ConverterError types
            raise RuntimeError(
                f"TFLite conversion ({quantization or 'float32'}) with builtin ops only failed; the model needs an "
                f"op TFLite has no builtin kernel for (Flex/SELECT_TF_OPS is deliberately not used): "
                f"{_conversion_summary(error)}"
            ) from error

    custom = non_builtin_operators(flatbuffer)
    if custom:
        raise RuntimeError(f"The converted model contains non-builtin ops {custom}; refusing to write it.")
    with atomic_file(path, overwrite=overwrite) as tmp, open(tmp, "wb") as f:
        f.write(flatbuffer)
    return path


def tflite_operators(tflite_model) -> list[str]:
    """The operator names a TFLite flatbuffer uses (builtins like `FULLY_CONNECTED`; custom ops by their code).

    Flex (TensorFlow) ops show up as custom ops named `Flex...`.

    Example:
        >>> "FULLY_CONNECTED" in tflite_operators(tflite_file)
        True
    """
    from ai_edge_litert import schema_py_generated as schema

    if isinstance(tflite_model, str | os.PathLike):
        with open(tflite_model, "rb") as f:
            tflite_model = f.read()
    names = {value: key for key, value in vars(schema.BuiltinOperator).items() if not key.startswith("_")}
    flatbuffer = schema.Model.GetRootAs(bytearray(tflite_model), 0)
    operators = set()
    for i in range(flatbuffer.OperatorCodesLength()):
        code = flatbuffer.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == schema.BuiltinOperator.CUSTOM:
            operators.add((code.CustomCode() or b"").decode())
        else:
            operators.add(names.get(builtin, f"BUILTIN_{builtin}"))
    return sorted(operators)


def non_builtin_operators(tflite_model) -> list[str]:
    """The custom and Flex operators in a TFLite flatbuffer (empty for a builtins-only model).

    Example:
        >>> non_builtin_operators(tflite_file)
        []
    """
    from ai_edge_litert import schema_py_generated as schema

    builtin = {key for key in vars(schema.BuiltinOperator) if not key.startswith("_")} - {"CUSTOM"}
    return [name for name in tflite_operators(tflite_model) if name not in builtin]


def _conversion_summary(error) -> str:
    """The converter's one-line verdicts ("TF Select ops: Cumprod") without its pages of MLIR locations."""
    lines = [line.strip() for line in str(error).splitlines()]
    verdicts = [line for line in lines if line.startswith(("TF Select ops:", "Custom ops:"))]
    return "; ".join(dict.fromkeys(verdicts)) or (lines[0] if lines else repr(error))


def tflite(
    model,
    path,
    quantization=None,
    representative_dataset=None,
    max_calibration_samples=DEFAULT_CALIBRATION_SAMPLES,
    include_preprocessing=None,
    integer_io=False,
    overwrite=False,
):
    """Convert `model` to a TFLite file, with builtin TFLite ops only.

    The file has one signature, `serving_default`: input `images` float32 (batch, H, W, 3) RGB in [0, 255]
    (batch 1 by default; resize the input for larger batches, except in a file converted under the JAX backend,
    whose batch is fixed at 1), output `probabilities`, `logits` or `features`
    (and `tokens`), like the SavedModel's. Conversion runs through a SavedModel and concrete function, with
    `TFLITE_BUILTINS` (`TFLITE_BUILTINS_INT8` for int8): an op without a builtin kernel fails the conversion
    instead of silently becoming a Flex op, and the result is checked for custom ops.

    Args:
        model: a vit_keras model with a fixed image size.
        path: the `.tflite` file to write; written to a temporary name beside it and renamed into place, so a
            failure leaves neither a partial file nor a temporary one.
        quantization: None (float32), `"float16"` (float16 weights), `"dynamic_int8"` (int8 weights,
            activations quantised on the fly) or `"int8"` (full integer: weights and activations; float32
            input and output unless `integer_io`).
        representative_dataset: for `"int8"`: images in [0, 255] at the model's size to calibrate activation
            ranges, e.g. a `tf.data`/tfds pipeline of training images, a NumPy array or an iterable.
        max_calibration_samples: how many images to take from it.
        include_preprocessing: whether the model rescales [0, 255] itself; None detects it.
        integer_io: with `"int8"`, make the input uint8 pixels and the output uint8 too (for accelerators
            such as the Edge TPU that run integer-only graphs); the output's scale and zero point are in the
            interpreter's output details (`tflite_predict` dequantises it).
        overwrite: replace an existing `path` (otherwise it is a `ValueError`, raised before converting).

    Returns:
        `path`.

    Example:
        >>> import tensorflow as tf
        >>> train_ds = tf.data.Dataset.from_tensor_slices((images, labels))  # a few training images suffice
        >>> tflite(tiny_model, "vit_int8.tflite", quantization="int8",
        ...        representative_dataset=train_ds.map(lambda x, y: x).take(100))
        'vit_int8.tflite'
    """
    quantization = _check_quantization(quantization)
    path = os.fspath(path)
    refuse_existing(path, overwrite)
    if is_quantize_aware(model):
        return _quantize_aware_tflite(model, path, quantization, representative_dataset, include_preprocessing,
                                      integer_io, overwrite)
    spec = describe_model(model, include_preprocessing)
    calibration = None
    if quantization == "int8":
        calibration = calibration_images(representative_dataset, spec.image_size, max_calibration_samples)
    elif representative_dataset is not None:
        raise ValueError(f"representative_dataset is only used with quantization='int8', not {quantization!r}.")
    if integer_io and quantization != "int8":
        raise ValueError(f"integer_io=True needs quantization='int8' (full integer), not {quantization!r}.")

    module, serve = _tflite_module(float32_model(model), spec)
    calibration = None if calibration is None else [[image] for image in calibration]
    return write_tflite(module, serve, path, quantization, calibration, integer_io, overwrite)


def _quantize_aware_tflite(model, path, quantization, representative_dataset, include_preprocessing, integer_io,
                           overwrite):
    """A quantization-aware model's int8 file: every matmul's ranges are the ones learned in training."""
    if not isinstance(model, QuantizeAwareModel):
        raise ValueError(f"{model.name!r} holds fake-quantized layers but is not the model quantize_aware returned; "
                         "export that model (vit_keras.quantization.quantize_aware(float_model), fine-tuned).")
    if quantization != "int8":
        raise ValueError(
            f"{model.name!r} is quantization-aware: export it with quantization='int8', not {quantization!r}; for "
            "float32, float16 or dynamic_int8 files export the float model it was made from."
        )
    if representative_dataset is not None:
        raise ValueError(
            f"{model.name!r} is quantization-aware: its int8 ranges were learned in training, so it takes no "
            "representative_dataset; drop that argument."
        )
    import keras

    if keras.backend.backend() != "tensorflow":
        # Only TensorFlow's graph carries the ranges as FakeQuant ops, which the converter reads; elsewhere the
        # rounding is plain arithmetic and the file would come out float.
        raise ValueError(
            f"A quantization-aware model's int8 file is written under the TensorFlow backend, not "
            f"{keras.backend.backend()!r}: save it (model.save('vit_qat.keras')), then load and export it in a "
            "Python process started with KERAS_BACKEND=tensorflow (keras.models.load_model(..., safe_mode=True))."
        )
    check_learned_ranges(model)
    spec = describe_model(model.float_model, include_preprocessing)
    with kernels_rounded_for_converter():
        module, serve = _tflite_module(model, spec)
        return write_tflite(module, serve, path, quantization, None, integer_io, overwrite, learned_ranges=True)


def quantize_input(runner, images):
    """`images` as the signature runner's `images` input takes them: float32, or quantised for `integer_io`.

    Example:
        >>> from ai_edge_litert.interpreter import Interpreter
        >>> quantize_input(Interpreter(model_path=tflite_file).get_signature_runner(), images).dtype  # float input
        dtype('float32')
    """
    detail = runner.get_input_details()["images"]
    if not np.issubdtype(detail["dtype"], np.integer):
        return np.asarray(images, dtype=np.float32)
    scale, zero_point = detail["quantization"]
    info = np.iinfo(detail["dtype"])
    return np.clip(np.round(np.asarray(images) / scale + zero_point), info.min, info.max).astype(detail["dtype"])


def check_tflite_images(path, input_detail, images) -> None:
    """Raise a `ValueError` naming the file and both sizes unless `images` is (batch, H, W, C) as the TFLite
    file at `path` takes them (`input_detail`: the interpreter's input details); the interpreter would resize
    its input and reshape the image into a different number of rows, or fail deep inside a kernel.

    Example:
        >>> check_tflite_images("vit.tflite", {"shape": np.array([1, 32, 32, 3])}, np.zeros((2, 32, 32, 3)))
    """
    expected = tuple(int(size) for size in input_detail["shape"][1:])
    received = tuple(np.shape(images))
    if len(received) != 4 or received[1:] != expected:
        height, width = expected[:2]
        raise ValueError(
            f"{os.fspath(path)} takes images of shape (batch, {', '.join(map(str, expected))}), got {received}; "
            f"resize them to {height}x{width} (e.g. tf.image.resize) first."
        )


def tflite_predict(path, images, num_threads=None) -> dict:
    """Run a TFLite file from `tflite()` on float images (N, H, W, 3) in [0, 255] with ai_edge_litert.

    Returns its outputs by name (e.g. `{"probabilities": (N, classes)}`) as float32; integer inputs and
    outputs (`integer_io=True`) are quantised and dequantised with the file's scales and zero points.

    Example:
        >>> tflite_predict(tflite_file, images)["probabilities"].shape
        (8, 10)
    """
    from ai_edge_litert.interpreter import Interpreter

    images = np.asarray(images, dtype=np.float32)
    interpreter = Interpreter(model_path=os.fspath(path), num_threads=num_threads)
    detail = interpreter.get_input_details()[0]
    check_tflite_images(path, detail, images)
    fixed_batch = int(detail["shape_signature"][0])  # -1: any batch; 1 in a file converted under JAX
    if fixed_batch > 0 and len(images) != fixed_batch:
        parts = [tflite_predict(path, images[i : i + fixed_batch], num_threads)
                 for i in range(0, len(images), fixed_batch)]
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
    interpreter.resize_tensor_input(detail["index"], list(images.shape))
    interpreter.allocate_tensors()
    runner = interpreter.get_signature_runner(SERVING_DEFAULT)
    outputs = runner(images=quantize_input(runner, images))
    details = runner.get_output_details()
    results = {}
    for name, value in outputs.items():
        value = np.array(value)
        if np.issubdtype(value.dtype, np.integer):
            scale, zero_point = details[name]["quantization"]
            value = (value.astype(np.float32) - zero_point) * np.float32(scale)
        results[name] = value
    return results
