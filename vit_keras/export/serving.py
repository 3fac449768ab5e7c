"""A SavedModel that TF Serving serves as it is: `<export_dir>/<version>/`, written atomically."""

from __future__ import annotations

import numbers
import os

from vit_keras.export.forward import tensorflow_forward
from vit_keras.export.signatures import (
    SERVING_DEFAULT,
    check_class_names,
    check_top_k,
    describe_model,
    serving_functions,
)
from vit_keras.files import atomic_directory


def _version_number(version) -> int:
    if isinstance(version, bool) or not isinstance(version, numbers.Integral) or version < 0:
        raise ValueError(
            f"`version` must be a non-negative int (TF Serving loads numbered sub-directories), got {version!r}."
        )
    return int(version)


def _next_free_version(export_dir: str) -> int:
    versions = [int(name) for name in os.listdir(export_dir) if name.isdigit()]
    return max(versions, default=0) + 1


def build_serving_module(model, top_k: int = 5, class_names=None, include_preprocessing=None, max_image_pixels=None):
    """A `tf.Module` holding `model` and its serving `tf.function`s, plus the signatures dict to save it with.

    Example:
        >>> module, signatures = build_serving_module(tiny_model)
        >>> sorted(signatures)  # save them with tf.saved_model.save(module, "vit/1", signatures=signatures)
        ['serve_bytes', 'serving_default']
    """
    import tensorflow as tf

    spec = describe_model(model, include_preprocessing, allow_any_size=True)
    names = check_class_names(spec, class_names)
    forward, variables = tensorflow_forward(model, spec.image_size)
    functions = serving_functions(forward, spec, check_top_k(spec, top_k), names, max_image_pixels)
    module = tf.Module(name="vit_serving")
    # Track the model's variables, not the model: a compiled model would drag its optimizer state along.
    module.model_variables = variables
    for name, function in functions.items():
        setattr(module, name, function)
    return module, functions


def saved_model(
    model,
    export_dir,
    version=1,
    class_names=None,
    top_k=5,
    overwrite=False,
    include_preprocessing=None,
    max_image_pixels=None,
):
    """Export `model` as a SavedModel for TF Serving at `<export_dir>/<version>/`.

    Signatures (all take RGB in [0, 255]; a model built with `include_preprocessing=False` gets the
    rescaling to [-1, 1] inside the signature):

    - `serving_default`: `images` float32 (batch, H, W, 3) (H and W None for a model built with
      `image_size=None`: any multiple of its patch stride) -> `probabilities` (or `logits` for a model built
      with `classifier_activation=None`), `top_k_classes` int32 (batch, k), `top_k_scores` float32 (batch, k)
      (top-k of the main output) and, when `class_names` are given, `top_k_labels` string (batch, k). A model
      built with `include_top=False` returns `features` (the pooled embedding) instead, plus `tokens` when it
      has no pooling.
    - `serve_bytes`: `image_bytes` string (batch,): encoded JPEG/PNG/GIF/BMP images (what REST's
      `{"b64": ...}` carries), decoded, resized to (H, W) with bilinear `tf.image.resize` and served as above
      (a model of any size: to the size its position embeddings are stored at). Each image is answered on its
      own, with two more outputs: `image_ok` bool (batch,) and `image_error` string (batch,), empty for a served
      image. An image that cannot be served gets `image_ok` False, an `image_error` that names it
      (`image_bytes[i]`) and says why, and NaN outputs (`top_k_classes` -1, `top_k_labels` empty), while the
      other images' outputs are those they get alone: an empty string or another format, more than
      `max_image_pixels` pixels (read from its header before anything is decoded), a file the decoder rejects
      (truncated, damaged), or a JPEG whose segments are not where their lengths place them. Not detected: bytes
      overwritten inside a JPEG's compressed data, which libjpeg repairs with a warning only that TensorFlow does
      not expose; such an image is served as decoded (`image_bytes.decode_each_image`).

    The directory is written to a hidden temporary directory beside it and renamed into place, so TF
    Serving never loads a half-written version. It loads with TensorFlow alone (`tf.saved_model.load`), no
    vit_keras needed. A model built under the JAX backend is exported through `jax2tf` (see
    `vit_keras.export.forward`); under PyTorch, save it and export from the TensorFlow backend.

    Args:
        model: a vit_keras model with a fixed image size.
        export_dir: the model's base directory (TF Serving's `--model_base_path`).
        version: the version sub-directory, a non-negative int.
        class_names: one name per class, served as `top_k_labels`.
        top_k: how many classes `top_k_*` return (at most the number of classes).
        overwrite: replace an existing version directory (otherwise it is a `ValueError`).
        include_preprocessing: whether the model rescales [0, 255] itself; None detects it.
        max_image_pixels: the most pixels `serve_bytes` decodes per image, fixed in the SavedModel; None takes
            `vit_keras.images.max_image_pixels()` at export (`$VIT_KERAS_MAX_IMAGE_PIXELS`, else about 89
            megapixels, PIL's decompression-bomb limit).

    Returns:
        The path of the version directory.

    Example:
        >>> saved_model(tiny_model, "models/vit", version=1, class_names=[str(i) for i in range(10)])
        'models/vit/1'
    """
    import tensorflow as tf

    version = _version_number(version)
    module, functions = build_serving_module(model, top_k, class_names, include_preprocessing, max_image_pixels)
    export_dir = os.fspath(export_dir)
    version_dir = os.path.join(export_dir, str(version))
    if os.path.lexists(version_dir) and not overwrite:
        raise ValueError(
            f"{version_dir} already exists; pass overwrite=True to replace it, or version="
            f"{_next_free_version(export_dir)} (the next free version)."
        )
    with atomic_directory(version_dir, overwrite=overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures=functions)
    return version_dir


def signature_summary(path: str) -> dict:
    """`{signature: {"inputs": {name: (dtype, shape)}, "outputs": {...}}}` of a SavedModel on disk.

    Example:
        >>> signature_summary(saved_model_dir)["serving_default"]["inputs"]  # a 32x32 model's SavedModel
        {'images': ('float32', (None, 32, 32, 3))}
    """
    import tensorflow as tf

    loaded = tf.saved_model.load(path)
    summary = {}
    for name, function in loaded.signatures.items():
        inputs = function.structured_input_signature[1]
        outputs = function.structured_outputs
        summary[name] = {
            "inputs": {k: (v.dtype.name, tuple(v.shape.as_list())) for k, v in sorted(inputs.items())},
            "outputs": {k: (v.dtype.name, tuple(v.shape.as_list())) for k, v in sorted(outputs.items())},
        }
    return dict(sorted(summary.items(), key=lambda item: item[0] != SERVING_DEFAULT))
