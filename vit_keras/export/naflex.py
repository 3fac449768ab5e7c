"""A SavedModel of a flexible (NaFlex) model that serves encoded images of any sizes: each image decoded, resized to
its native-aspect-ratio size, cut into patches and padded inside the graph, with TensorFlow alone.

Example:
    >>> siglip2 = "tests/fixtures/family2/hf_siglip2_naflex/checkpoint"  # a tiny SigLIP 2 NaFlex directory
    >>> model = vit_keras.from_pretrained(siglip2, flexible=True, include_top=False)
    >>> naflex_saved_model(model, "models/siglip2", max_num_patches=256)
    'models/siglip2/1'
"""

from __future__ import annotations

import os

import keras

from vit_keras.configs import check_positive_int
from vit_keras.export.signatures import BYTES_INPUT, SERVE_BYTES, SERVING_DEFAULT, check_encoded_image
from vit_keras.files import atomic_directory
from vit_keras.layers.flexible import INPUT_KEYS
from vit_keras.model_config import config_of
from vit_keras.naflex_data import naflex_example

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
    max_num_patches = check_positive_int("max_num_patches", max_num_patches)
    limit = check_positive_int("max_image_pixels", default_max_pixels() if max_image_pixels is None
                               else max_image_pixels)
    patch_size = config_of(model).patch_size
    example_spec = {"patches": tf.TensorSpec((max_num_patches, features), tf.float32),
                    "grid": tf.TensorSpec((2,), tf.int32), "mask": tf.TensorSpec((max_num_patches,), tf.int32)}

    def run(batch):
        return {OUTPUT_NAME: model(batch, training=False)}

    @tf.function(input_signature=[{"patches": tf.TensorSpec((None, None, features), tf.float32, name="patches"),
                                   "grid": tf.TensorSpec((None, 2), tf.int32, name="grid"),
                                   "mask": tf.TensorSpec((None, None), tf.int32, name="mask")}], autograph=False)
    def serve_patches(batch):
        return run(batch)

    @tf.function(input_signature=[tf.TensorSpec((None,), tf.string, name=BYTES_INPUT)], autograph=False)
    def serve_bytes(image_bytes):
        def prepare(data):
            data = check_encoded_image(data, limit)
            image = tf.io.decode_image(data, channels=3, expand_animations=False, dtype=tf.uint8)
            return naflex_example(image, patch_size, max_num_patches)

        return run(tf.map_fn(prepare, image_bytes, fn_output_signature=example_spec))

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
      patches and padded to `max_num_patches`;
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
