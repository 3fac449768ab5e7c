"""ONNX files for ONNX Runtime: the SavedModel's `serving_default` contract, converted with tf2onnx.

The model's TensorFlow graph (the same function the SavedModel and TFLite files serve) is converted with tf2onnx
at a stated opset. A model built under the JAX or PyTorch backend is saved as `.keras` and converted by a
TensorFlow-backend Python process: the weights and the layers are the same, only the graph is TensorFlow's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

from vit_keras.export.forward import tensorflow_forward
from vit_keras.export.signatures import IMAGES_INPUT, describe_model, float32_model, images_spec, model_outputs
from vit_keras.extras import install_command, require
from vit_keras.files import atomic_file, refuse_existing

# ONNX opset of the files `to_onnx` writes: 17 (ONNX 1.12, 2022), which every current ONNX Runtime release runs.
DEFAULT_OPSET = 17
# A single ONNX protobuf holds at most 2 GiB; past that ONNX stores weights in side files, which we do not write.
MAX_ONNX_BYTES = 2**31 - 2**26
# How long the TensorFlow-backend conversion of a JAX/PyTorch model may take (a large variant takes minutes).
CONVERSION_TIMEOUT_S = 3600
# tf2onnx converts the TensorFlow graph, so the [onnx] extra goes with the [tensorflow] one.
_ONNX_PURPOSE = "ONNX export and checks (with the [tensorflow] extra as well)"


def _check_opset(opset) -> int:
    if isinstance(opset, bool) or not isinstance(opset, int) or not 13 <= opset <= 18:
        raise ValueError(f"`opset` must be an int from 13 to 18 (tf2onnx's range for ViTs), got {opset!r}.")
    return opset


def _import_tf2onnx():
    return require("tf2onnx", "onnx", _ONNX_PURPOSE)


def _convert_in_process(model, path, opset, include_preprocessing):
    """tf2onnx on the model's TensorFlow graph; the current backend must be TensorFlow."""
    import tensorflow as tf

    tf2onnx = _import_tf2onnx()
    spec = describe_model(model, include_preprocessing)
    forward, _ = tensorflow_forward(float32_model(model), spec.image_size)  # ONNX Runtime's CPU has no bf16 MatMul

    @tf.function(input_signature=[images_spec(spec)], autograph=False)
    def serve(images):
        return model_outputs(forward, spec, images)

    model_proto, _ = tf2onnx.convert.from_function(
        serve, input_signature=[images_spec(spec)], opset=opset, custom_op_handlers={"Erfc": (_erfc_as_erf, [])}
    )
    _name_batch_axis(model_proto)
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write(model_proto.SerializeToString())


def _erfc_as_erf(ctx, node, name, args):
    """tf2onnx handler for TensorFlow's `Erfc` (exact GELU is `0.5 x erfc(-x / sqrt 2)` there), which ONNX lacks:
    `1 - Erf(x)`. It loses relative precision only where erfc is below float32's epsilon, where GELU's output is
    about 0 anyway (absolute error under 1e-7 |x|)."""
    node.type = "Erf"
    one = ctx.make_const(f"{name}/one", np.array(1.0, dtype=np.float32))
    ctx.insert_new_node_on_output(
        "Sub", node.output[0], name=f"{name}/one_minus", inputs=[one.output[0], node.output[0]]
    )


def _name_batch_axis(model_proto):
    """Call the dynamic first axis of every input and output `batch` (tf2onnx names them `unk__<n>`)."""
    for value in (*model_proto.graph.input, *model_proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].dim_param = "batch"


def _convert_in_tensorflow_process(model, path, opset, include_preprocessing):
    """Save `model` as `.keras` and convert it in a `KERAS_BACKEND=tensorflow` Python process."""
    with tempfile.TemporaryDirectory(prefix="vit_onnx_") as workdir:
        keras_path = os.path.join(workdir, "model.keras")
        model.save(keras_path)
        # Not `-m vit_keras.export.onnx`: the package imports this module first, which runpy warns about.
        entry = "import sys; from vit_keras.export.onnx import _main; sys.exit(_main(sys.argv[1:]))"
        command = [sys.executable, "-c", entry, keras_path, path, "--opset", str(opset)]
        if include_preprocessing is not None:
            command += ["--include-preprocessing", str(bool(include_preprocessing)).lower()]
        # The child imports this same vit_keras, wherever it was imported from.
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "KERAS_BACKEND": "tensorflow", "PYTHONPATH": python_path}
        try:
            result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=CONVERSION_TIMEOUT_S)
        except subprocess.TimeoutExpired as error:
            raise RuntimeError(f"ONNX conversion of {path} took over {CONVERSION_TIMEOUT_S} s; stopped.") from error
    if result.returncode != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit status {result.returncode}"
        raise RuntimeError(
            f"ONNX conversion under the TensorFlow backend failed: {last}. It needs TensorFlow and tf2onnx in this "
            f"environment ({install_command('tensorflow,onnx')})."
        )


def to_onnx(model, path, opset=DEFAULT_OPSET, include_preprocessing=None, overwrite=False) -> str:
    """Export `model` as an ONNX file for ONNX Runtime (and any ONNX consumer).

    The file takes `images`, float32 (batch, H, W, 3) RGB in [0, 255] with a dynamic batch axis (a model built
    with `include_preprocessing=False` gets the `x / 127.5 - 1` rescaling inside the graph), and returns what the
    SavedModel's `serving_default` returns before top-k: `probabilities`, `logits` or `features` (plus `tokens`).
    The graph is the model's TensorFlow function converted by tf2onnx at `opset`, in float32 (a mixed-precision
    model is exported as float32). Under the JAX or PyTorch backend the model is saved as `.keras` and converted by
    a TensorFlow-backend process, so TensorFlow must be installed there too.

    Args:
        model: a vit_keras model with a fixed image size.
        path: the `.onnx` file to write; written to a temporary name beside it and renamed into place.
        opset: the ONNX opset (13 to 18; default `DEFAULT_OPSET`, 17).
        include_preprocessing: whether the model rescales [0, 255] itself; None detects it.
        overwrite: replace an existing `path` (otherwise it is a `ValueError`, raised before converting).

    Returns:
        `path`.

    Example:
        >>> to_onnx(tiny_model, "vit.onnx")  # a 10-class ViT on 32x32 images
        'vit.onnx'
        >>> onnx_predict("vit.onnx", images)["probabilities"].shape
        (8, 10)
    """
    import keras

    path = os.fspath(path)
    if not path.endswith(".onnx"):
        raise ValueError(f"The ONNX output should be a .onnx file, got {path!r}.")
    refuse_existing(path, overwrite)
    opset = _check_opset(opset)
    describe_model(model, include_preprocessing)  # a clear error before anything is saved or converted
    weight_bytes = 4 * model.count_params()
    if weight_bytes > MAX_ONNX_BYTES:
        raise ValueError(
            f"The model's float32 weights take {weight_bytes / 2**30:.2f} GiB; a single .onnx file holds at most "
            "2 GiB. Export a SavedModel instead (export.saved_model), or a smaller variant."
        )
    if keras.backend.backend() == "tensorflow":
        _convert_in_process(model, path, opset, include_preprocessing)
    else:
        _convert_in_tensorflow_process(model, path, opset, include_preprocessing)
    return path


def onnx_session(path, num_threads=None):
    """An ONNX Runtime CPU `InferenceSession` for an `.onnx` file (`num_threads`: intra-op threads; None: all).

    Example:
        >>> onnx_session(onnx_file).get_inputs()[0].name
        'images'
    """
    onnxruntime = require("onnxruntime", "onnx", _ONNX_PURPOSE)
    if not os.path.isfile(path):
        raise ValueError(f"{os.fspath(path)} does not exist; write it with export.to_onnx(model, path) first.")
    options = onnxruntime.SessionOptions()
    if num_threads:
        options.intra_op_num_threads = int(num_threads)
    return onnxruntime.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])


def onnx_predict(path_or_session, images, num_threads=None) -> dict:
    """Run an ONNX file from `to_onnx()` on float images (N, H, W, 3) in [0, 255] with ONNX Runtime.

    Returns its outputs by name (e.g. `{"probabilities": (N, classes)}`) as float32.

    Example:
        >>> onnx_predict(onnx_file, images)["probabilities"].shape
        (8, 10)
    """
    if isinstance(path_or_session, str | os.PathLike):
        session, where = onnx_session(path_or_session, num_threads), os.fspath(path_or_session)
    else:
        session, where = path_or_session, "the ONNX model"
    inputs = session.get_inputs()
    if [i.name for i in inputs] != [IMAGES_INPUT]:
        raise ValueError(f"{where} takes inputs {[i.name for i in inputs]}, not {IMAGES_INPUT!r}; write it with "
                         "export.to_onnx.")
    images = np.asarray(images, dtype=np.float32)
    expected = tuple(inputs[0].shape[1:])
    if images.ndim != 4 or images.shape[1:] != expected:
        height, width = expected[:2]
        raise ValueError(
            f"{where} takes images of shape (batch, {', '.join(map(str, expected))}), got {images.shape}; "
            f"resize them to {height}x{width} (e.g. tf.image.resize) first."
        )
    names = [output.name for output in session.get_outputs()]
    values = session.run(names, {IMAGES_INPUT: images})
    return {name: np.asarray(value, dtype=np.float32) for name, value in zip(names, values)}


def _main(argv=None) -> int:
    """The TensorFlow-backend side of `to_onnx` for a JAX or PyTorch model: `.keras` in, `.onnx` out."""
    parser = argparse.ArgumentParser(prog="vit_keras.export.onnx", description=__doc__)
    parser.add_argument("keras_model")
    parser.add_argument("output")
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    parser.add_argument("--include-preprocessing", choices=("true", "false"), default=None)
    args = parser.parse_args(argv)
    import keras

    import vit_keras.layers  # noqa: F401  (registers the layers safe_mode loading needs)

    if keras.backend.backend() != "tensorflow":
        raise SystemExit("run with KERAS_BACKEND=tensorflow")
    model = keras.models.load_model(args.keras_model, safe_mode=True)
    include = None if args.include_preprocessing is None else args.include_preprocessing == "true"
    to_onnx(model, args.output, opset=args.opset, include_preprocessing=include, overwrite=True)
    return 0
