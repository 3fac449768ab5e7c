"""Exports of a flexible (NaFlex) model: a SavedModel that serves encoded images of any sizes (each image decoded,
resized to its native-aspect-ratio size, cut into patches and padded inside the graph, with TensorFlow alone), and a
TFLite file of a fixed sequence length N, which takes any image of at most N patches padded to N.

Example:
    >>> siglip2 = "tests/fixtures/family2/hf_siglip2_naflex/checkpoint"  # a tiny SigLIP 2 NaFlex directory
    >>> model = vit_keras.from_pretrained(siglip2, flexible=True, include_top=False)
    >>> naflex_saved_model(model, "models/siglip2", max_num_patches=256)
    'models/siglip2/1'
    >>> naflex_tflite(model, "siglip2.tflite", num_patches=64)
    'siglip2.tflite'
"""

from __future__ import annotations

import os

import keras
import numpy as np

from vit_keras.configs import check_positive_int
from vit_keras.export.image_bytes import BYTES_INPUT, decode_each_image, mark_failed_images
from vit_keras.export.lite import write_tflite
from vit_keras.export.signatures import SERVE_BYTES, SERVING_DEFAULT, float32_model
from vit_keras.files import atomic_directory, refuse_existing
from vit_keras.layers.flexible import INPUT_KEYS, check_flexible_inputs, flexible_input_assertions
from vit_keras.naflex_data import naflex_example
from vit_keras.preprocessing import check_max_num_patches
from vit_keras.vision_transformer import config_of

OUTPUT_NAME = "outputs"


def _check_flexible(model) -> int:
    inputs = model.input
    if not isinstance(inputs, dict) or set(inputs) != set(INPUT_KEYS):
        raise ValueError("naflex_saved_model exports a flexible (NaFlex) model, whose input is a dict of "
                         f"{list(INPUT_KEYS)}; build it with flexible=True, or export an image model with "
                         "vit_keras.export.saved_model.")
    if keras.backend.backend() != "tensorflow":
        raise ValueError(f"naflex_saved_model runs under the TensorFlow backend, not {keras.backend.backend()!r}; "
                         "save the model (.keras) and export it from a process started with KERAS_BACKEND=tensorflow.")
    return int(inputs["patches"].shape[-1])


def build_naflex_module(model, max_num_patches: int, max_image_pixels=None):
    """A `tf.Module` holding `model` with its `serving_default` (the NaFlex dict) and `serve_bytes` (encoded images)
    `tf.function`s, and the signatures dict to save it with.

    Example:
        >>> siglip2 = "tests/fixtures/family2/hf_siglip2_naflex/checkpoint"  # a tiny SigLIP 2 NaFlex directory
        >>> model = vit_keras.from_pretrained(siglip2, flexible=True, include_top=False)
        >>> module, signatures = build_naflex_module(model, 256)
        >>> sorted(signatures)
        ['serve_bytes', 'serving_default']
    """
    import tensorflow as tf

    from vit_keras.images import max_image_pixels as default_max_pixels

    features = _check_flexible(model)
    max_num_patches = check_max_num_patches(max_num_patches, config_of(model).patch_size)
    limit = check_positive_int("max_image_pixels", default_max_pixels() if max_image_pixels is None
                               else max_image_pixels)
    patch_size = config_of(model).patch_size

    def run(batch):
        return {OUTPUT_NAME: model(batch, training=False)}

    @tf.function(input_signature=[{"patches": tf.TensorSpec((None, None, features), tf.float32, name="patches"),
                                   "grid": tf.TensorSpec((None, 2), tf.int32, name="grid"),
                                   "mask": tf.TensorSpec((None, None), tf.int32, name="mask")}], autograph=False)
    def serve_patches(batch):
        # A signature's caller can pass any shapes: checked first, with errors that name the key and the shapes.
        checks = flexible_input_assertions(batch["patches"], batch["grid"], batch["mask"], features)
        with tf.control_dependencies(checks):
            batch = {key: tf.identity(value) for key, value in batch.items()}
        return run(batch)

    @tf.function(input_signature=[tf.TensorSpec((None,), tf.string, name=BYTES_INPUT)], autograph=False)
    def serve_bytes(image_bytes):
        batch, image_ok, image_error = decode_each_image(
            image_bytes, lambda image: naflex_example(image, patch_size, max_num_patches), limit)
        return mark_failed_images(run(batch), image_ok, image_error)

    module = tf.Module(name="vit_naflex_serving")
    module.model_variables = list(model.variables)
    functions = {SERVING_DEFAULT: serve_patches, SERVE_BYTES: serve_bytes}
    for name, function in functions.items():
        setattr(module, name, function)
    return module, functions


def naflex_saved_model(model, export_dir, max_num_patches: int, version: int = 1, overwrite: bool = False,
                       max_image_pixels=None) -> str:
    """Export a flexible (NaFlex) model as a SavedModel at `<export_dir>/<version>/`, loadable with TensorFlow alone.

    Signatures, both returning `outputs` (the model's output):

    - `serve_bytes`: `image_bytes` string (batch,): encoded JPEG/PNG/GIF/BMP images of any sizes (RGB in
      [0, 255]; the model's own normalisation applies), each checked against `max_image_pixels` from its header
      before it is decoded, resized to `naflex_size`'s size for `max_num_patches` (bilinear, antialiased), cut into
      patches and padded to `max_num_patches`. Each image is answered on its own: `image_ok` bool (batch,) and
      `image_error` string (batch,) come with `outputs`; an image that is not a JPEG/PNG/GIF/BMP, is empty, is
      above `max_image_pixels`, that the decoder rejects (truncated, damaged header) or a JPEG whose segments are
      not where their lengths place them gets NaN `outputs`, `image_ok` False and an `image_error` naming it
      (`image_bytes[i]`) and the reason, and the other images' outputs are those they get alone. A JPEG whose
      compressed data is damaged inside, which libjpeg repairs with a warning only, is served as decoded (see
      `vit_keras.export.image_bytes.decode_each_image`);
    - `serving_default`: the NaFlex dict itself, `patches` (batch, N, P·P·3), `grid` (batch, 2), `mask` (batch, N).

    The directory is written beside its place and renamed into it; an existing version needs `overwrite=True`.

    Example:
        >>> siglip2 = "tests/fixtures/family2/hf_siglip2_naflex/checkpoint"  # a tiny SigLIP 2 NaFlex directory
        >>> model = vit_keras.from_pretrained(siglip2, flexible=True, include_top=False)
        >>> naflex_saved_model(model, "models/siglip2", max_num_patches=256)
        'models/siglip2/1'
    """
    import tensorflow as tf

    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"`version` must be a non-negative int, got {version!r}.")
    module, functions = build_naflex_module(model, max_num_patches, max_image_pixels)
    version_dir = os.path.join(os.fspath(export_dir), str(version))
    if os.path.lexists(version_dir) and not overwrite:
        raise ValueError(f"{version_dir} already exists; pass overwrite=True to replace it, or another version.")
    with atomic_directory(version_dir, overwrite=overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures=functions)
    return version_dir


# TFLite quantizations a NaFlex file takes: full-integer int8 would need representative NaFlex batches to calibrate.
NAFLEX_TFLITE_QUANTIZATIONS = (None, "float16", "dynamic_int8")


def naflex_tflite(model, path, num_patches: int, batch_size=1, quantization=None, overwrite: bool = False) -> str:
    """Convert a flexible (NaFlex) model to a TFLite file whose sequence length N is `num_patches`, with builtin
    TFLite ops only (as `vit_keras.export.tflite`).

    Its `serving_default` signature takes `patches` float32 (batch, N, P·P·C) as the model takes them (RGB in
    [0, 255] when it was built with its preprocessing), `grid` int32 (batch, 2) and `mask` int32 (batch, N): any image
    of at most N patches fits, padded and masked (`vit_keras.images.naflex_patches(images, patch_size, N)`); it
    returns `outputs`, the model's output. `batch_size`: the file's batch (None: any, resized at run time).
    TFLite drops the model's run-time checks of `grid` against `mask`: `naflex_tflite_predict` makes them before it
    runs the file.

    Args:
        model: a model built with `flexible=True` (TensorFlow backend).
        path: the `.tflite` file, written to a temporary name beside it and renamed into place.
        num_patches: N, the longest image (in patches) the file takes.
        batch_size: images per call (default 1), or None for any batch.
        quantization: None (float32), `"float16"` or `"dynamic_int8"` (`NAFLEX_TFLITE_QUANTIZATIONS`).
        overwrite: replace an existing `path` (otherwise a `ValueError`, raised before converting).

    Returns:
        `path`.

    Example:
        >>> siglip2 = "tests/fixtures/family2/hf_siglip2_naflex/checkpoint"  # a tiny SigLIP 2 NaFlex directory
        >>> model = vit_keras.from_pretrained(siglip2, flexible=True, include_top=False)
        >>> naflex_tflite(model, "siglip2.tflite", num_patches=64, batch_size=2)
        'siglip2.tflite'
    """
    import tensorflow as tf

    features = _check_flexible(model)
    num_patches = check_max_num_patches(num_patches, name="`num_patches`")
    batch_size = check_positive_int("batch_size", batch_size, allow_none=True)
    if quantization not in NAFLEX_TFLITE_QUANTIZATIONS:
        raise ValueError(f"`quantization` of a NaFlex TFLite file must be one of {NAFLEX_TFLITE_QUANTIZATIONS}, got "
                         f"{quantization!r} (full-integer int8 needs representative NaFlex batches to calibrate, "
                         "which this export does not take).")
    path = os.fspath(path)
    refuse_existing(path, overwrite)
    model = float32_model(model)

    @tf.function(input_signature=[tf.TensorSpec((batch_size, num_patches, features), tf.float32, name="patches"),
                                  tf.TensorSpec((batch_size, 2), tf.int32, name="grid"),
                                  tf.TensorSpec((batch_size, num_patches), tf.int32, name="mask")], autograph=False)
    def serve(patches, grid, mask):
        return {OUTPUT_NAME: model({"patches": patches, "grid": grid, "mask": mask}, training=False)}

    module = tf.Module(name="vit_naflex_tflite")
    module.model_variables = list(model.variables)
    module.serve = serve
    return write_tflite(module, serve, path, quantization, overwrite=overwrite)


def naflex_tflite_predict(path, batch, num_threads=None) -> np.ndarray:
    """Run a TFLite file from `naflex_tflite` on a NaFlex batch (a dict of `patches`, `grid`, `mask`, as
    `vit_keras.images.naflex_patches` makes it) with ai_edge_litert; returns its `outputs` as float32.

    The batch is checked first (`check_flexible_inputs`): its sequence length must be the file's N, and each image's
    `grid` must match its `mask`, with a `ValueError` that says which; a file of a fixed batch runs that many images
    at a time.

    Example:
        >>> from vit_keras.images import naflex_patches
        >>> siglip2 = "tests/fixtures/family2/hf_siglip2_naflex/checkpoint"  # patch 8, hidden size 48
        >>> model = vit_keras.from_pretrained(siglip2, flexible=True, include_top=False, pooling="map")
        >>> path = naflex_tflite(model, "siglip2.tflite", num_patches=64)
        >>> wide, tall = np.zeros((40, 200, 3), "uint8"), np.zeros((120, 60, 3), "uint8")
        >>> naflex_tflite_predict(path, naflex_patches([wide, tall], 8, 64)).shape
        (2, 48)
    """
    from ai_edge_litert.interpreter import Interpreter

    missing = sorted(set(INPUT_KEYS) - set(batch)) if isinstance(batch, dict) else list(INPUT_KEYS)
    if missing:
        raise ValueError(f"A NaFlex batch is a dict of {list(INPUT_KEYS)} (vit_keras.images.naflex_patches); "
                         f"{'got a ' + type(batch).__name__ if not isinstance(batch, dict) else f'missing {missing}'}.")
    patches = np.asarray(batch["patches"], np.float32)
    grid, mask = np.asarray(batch["grid"]), np.asarray(batch["mask"])  # checked before the int32 cast truncates
    interpreter = Interpreter(model_path=os.fspath(path), num_threads=num_threads)
    runner = interpreter.get_signature_runner(SERVING_DEFAULT)
    detail = runner.get_input_details()["patches"]
    length, features = int(detail["shape"][1]), int(detail["shape"][2])
    if patches.ndim != 3 or patches.shape[1:] != (length, features):
        raise ValueError(f"{os.fspath(path)} takes NaFlex `patches` of shape (batch, {length}, {features}): N={length} "
                         f"patches of {features} values; got {patches.shape}. Pad the images to N={length} "
                         f"(vit_keras.images.naflex_patches(images, patch_size, {length})), or export the model "
                         "with a longer num_patches.")
    check_flexible_inputs(patches, grid, mask, features=features)
    grid, mask = grid.astype(np.int32), mask.astype(np.int32)
    if not len(patches):
        raise ValueError("Got an empty NaFlex batch; pass at least one image.")
    fixed_batch = int(detail["shape_signature"][0])  # -1: any batch
    step = fixed_batch if fixed_batch > 0 else max(len(patches), 1)
    outputs = []
    for start in range(0, len(patches), step):
        part = slice(start, start + step)
        count = len(patches[part])
        pad = step - count if fixed_batch > 0 else 0
        inputs = {"patches": patches[part], "grid": grid[part], "mask": mask[part]}
        if pad:  # the last images of a fixed-batch file: repeated to fill it, their outputs dropped
            inputs = {key: np.concatenate([value, np.repeat(value[-1:], pad, axis=0)]) for key, value in inputs.items()}
        outputs.append(np.asarray(runner(**inputs)[OUTPUT_NAME], np.float32)[:count])
    return np.concatenate(outputs)
