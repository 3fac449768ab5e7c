"""vit-keras 0.2.0's `utils` module (`read`, `get_imagenet_classes`, weight loading), on today's functions.

Every function warns once (FutureWarning) with what to use instead; see the README's migration table.

Example:
    >>> from PIL import Image
    >>> from vit_keras import utils
    >>> Image.new("RGB", (64, 48), "orange").save("cat.jpg")
    >>> image = utils.read("cat.jpg", 224)
    >>> image.shape, image.dtype
    ((224, 224, 3), dtype('uint8'))
"""

from __future__ import annotations

import http.client
import numbers
import os
import urllib.parse

import numpy as np

from vit_keras import images
from vit_keras import weights as weights_lib
from vit_keras.migration import warn_once
from vit_keras.models import imagenet_classes
from vit_keras.weights import download
from vit_keras.weights.resample import resample_position_embeddings

# 0.2.0 waited forever by default; a URL that does not answer must not hang the caller.
DEFAULT_TIMEOUT_S = 30.0
URL_SCHEMES = ("http", "https", "ftp")


def get_imagenet_classes() -> list[str]:
    """The 1,000 ImageNet-1k class names, in the order of the checkpoints' heads.

    Example:
        >>> from vit_keras import utils
        >>> utils.get_imagenet_classes()[285]
        'Egyptian_cat'
    """
    warn_once("vit_keras.utils.get_imagenet_classes",
              "[name for _, name in vit_keras.imagenet_classes()] or vit_keras.decode_predictions")
    return [name for _, name in imagenet_classes()]


def _check_size(size) -> tuple[int, int]:
    if isinstance(size, numbers.Integral) and not isinstance(size, bool) and size >= 1:
        return int(size), int(size)
    if (isinstance(size, tuple | list) and len(size) == 2
            and all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and s >= 1 for s in size)):
        return int(size[0]), int(size[1])
    raise ValueError(f"`size` must be a positive int (a square image) or a (height, width) pair, got {size!r}.")


def _decode(data: bytes, source: str, max_pixels) -> np.ndarray:
    import tensorflow as tf

    images.check_image_bytes(data, source, max_pixels)  # format and pixel limit from the header, before decoding
    try:
        image = tf.io.decode_image(data, channels=3, expand_animations=False)
    except (tf.errors.InvalidArgumentError, ValueError) as error:
        raise ValueError(f"Cannot decode {source} as an image (JPEG, PNG, BMP or GIF): "
                         f"{str(error).splitlines()[0]}") from error
    return image.numpy()


def _read_url(url: str, timeout) -> bytes:
    """The body of an image URL: `timeout` seconds to connect and between bytes, the download deadline overall,
    and at most `images.max_image_bytes()` bytes, counted as they arrive."""
    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    limit = images.max_image_bytes()
    try:
        return download.read_url(url, max_bytes=limit, limits=(timeout, timeout))
    except download.TooLarge as error:
        raise ValueError(f"The image at {url!r} is larger than the limit of {limit:,} bytes for an image read from a "
                         f"URL (at least {error.size:,} bytes); if you trust it, raise the limit with "
                         f"{images.MAX_BYTES_ENV}=BYTES, or download it first and pass the file's path.") from None
    except download.DeadlineExceeded:
        raise
    except (OSError, ValueError, http.client.HTTPException) as error:
        raise ValueError(f"Cannot download the image at {url!r} ({error}); check the address and the network, "
                         "or download it first and pass the file's path.") from error


def _resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    import tensorflow as tf

    if tuple(image.shape[:2]) == size:
        resized = np.asarray(image, np.float64)
    else:
        # Bilinear with half-pixel centres, no antialiasing: what 0.2.0's cv2.resize did, and vit_jax's eval resize.
        resized = tf.image.resize(tf.convert_to_tensor(image, tf.float32), size, method="bilinear",
                                  antialias=False).numpy()
    return np.ascontiguousarray(np.clip(np.round(resized), 0, 255), dtype=np.uint8)


def _is_url(value: str) -> bool:
    return urllib.parse.urlsplit(value).scheme in URL_SCHEMES


def _load_rgb(filepath_or_buffer, timeout, max_pixels) -> np.ndarray:
    try:
        import PIL.Image
    except ImportError:  # pragma: no cover (Pillow ships with matplotlib, a dependency)
        PIL = None
    if PIL is not None and isinstance(filepath_or_buffer, PIL.Image.Image):
        # Image.open reads the header only; convert() decodes, so the size is checked first.
        images.check_pixel_count("the PIL image", filepath_or_buffer.format or filepath_or_buffer.mode,
                                 filepath_or_buffer.size, max_pixels)
        return np.asarray(filepath_or_buffer.convert("RGB"))
    if isinstance(filepath_or_buffer, np.ndarray):
        if filepath_or_buffer.ndim != 3 or filepath_or_buffer.shape[-1] != 3:
            raise ValueError(f"An image array must be (height, width, 3) RGB, got shape {filepath_or_buffer.shape}.")
        return filepath_or_buffer
    if hasattr(filepath_or_buffer, "read"):
        data = filepath_or_buffer.read()
        if not isinstance(data, bytes | bytearray):
            raise ValueError(f"{type(filepath_or_buffer).__name__}.read() returned {type(data).__name__}, not bytes; "
                             "open the file in binary mode ('rb').")
        return _decode(bytes(data), f"the {type(filepath_or_buffer).__name__} contents", max_pixels)
    if isinstance(filepath_or_buffer, str) and _is_url(filepath_or_buffer):
        url = filepath_or_buffer
        return _decode(_read_url(url, timeout), f"the image at {url!r}", max_pixels)
    if not isinstance(filepath_or_buffer, str | os.PathLike):
        raise ValueError(f"Cannot read an image from {type(filepath_or_buffer).__name__}: pass a file path, an "
                         "http(s) URL, a binary file object (io.BytesIO), a PIL image or an (H, W, 3) array.")
    path = os.fspath(filepath_or_buffer)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Could not find image at path: {path}")
    images.check_image_file(path, max_pixels)  # before the whole file is read
    with open(path, "rb") as f:
        return _decode(f.read(), repr(path), max_pixels)


def read(filepath_or_buffer, size, timeout=None, max_pixels=None) -> np.ndarray:
    """Read an image (path, http(s) URL, binary file object, PIL image or array) into an RGB uint8 array
    resized to `size` x `size` (or a (height, width) pair).

    `timeout` (seconds, for URLs: to connect and between bytes) defaults to 30; a whole download is bounded by
    `$VIT_KERAS_DOWNLOAD_DEADLINE` (an hour by default) and `$VIT_KERAS_MAX_IMAGE_BYTES` (256 MiB). An encoded
    image above `max_pixels` (default `$VIT_KERAS_MAX_IMAGE_PIXELS`, else about 89 megapixels, PIL's limit) is
    refused from its header, before it is decoded. Scale the result with `vit_keras.vit.preprocess_inputs`
    (or `vit_keras.preprocess_input`) before a model that takes [-1, 1] images.

    Example:
        >>> from vit_keras import utils
        >>> utils.read(np.zeros((48, 64, 3), np.uint8), 384).shape  # or a path, URL, file object, PIL image
        (384, 384, 3)
    """
    warn_once("vit_keras.utils.read",
              "numpy.asarray(keras.utils.load_img(path, target_size=(size, size), interpolation='bilinear'))")
    size = _check_size(size)
    return _resize(_load_rgb(filepath_or_buffer, timeout, max_pixels), size)


def _reset_head(model) -> None:
    """pretrained_top=False: the head starts fresh, zero-initialised as vit_jax's fine-tuning does."""
    try:
        head = model.get_layer("head")
    except ValueError:
        return
    for variable in head.weights:
        variable.assign(np.zeros(tuple(variable.shape), variable.dtype))


def _grid_of(model, num_x_patches, num_y_patches) -> tuple[int, int]:
    grid = tuple(model.get_layer("patch_encoder").grid_size)
    if (num_y_patches, num_x_patches) != grid:
        raise ValueError(f"num_y_patches x num_x_patches = {num_y_patches}x{num_x_patches} but the model's patch "
                         f"grid is {grid[0]}x{grid[1]} (rows x columns); pass the model's grid.")
    return grid


def load_weights_numpy(model, params_path, pretrained_top, num_x_patches, num_y_patches):
    """Load a Google `.npz` checkpoint into a model built by `vit_keras.vit`; position embeddings are resampled
    to the model's grid. `pretrained_top=False` leaves the head fresh (zero-initialised).

    Example:
        >>> from vit_keras import utils, vit
        >>> model = vit.build_model(image_size=64, patch_size=8, num_layers=2, hidden_size=48, num_heads=3,
        ...                         name="tiny", mlp_dim=96, classes=7)
        >>> utils.load_weights_numpy(model, "tests/fixtures/vitjax_token_raw/checkpoint.npz", pretrained_top=False,
        ...                          num_x_patches=8, num_y_patches=8)
    """
    warn_once("vit_keras.utils.load_weights_numpy", "vit_keras.load_weights(model, params_path)")
    _grid_of(model, num_x_patches, num_y_patches)
    weights_lib.load_weights(model, os.fspath(params_path))
    if not pretrained_top:
        _reset_head(model)


def apply_embedding_weights(target_layer, source_weights, num_x_patches, num_y_patches):
    """Set a model's position embeddings (its `patch_encoder` layer) from a (1, tokens, D) table, resampled
    bilinearly (vit_jax's `interpolate_posembed`) to `num_y_patches` x `num_x_patches`.

    Example:
        >>> from vit_keras import utils, vit
        >>> model = vit.build_model(image_size=32, patch_size=8, num_layers=2, hidden_size=48, num_heads=3,
        ...                         name="tiny", mlp_dim=96, classes=10)
        >>> table = np.zeros((1, 1 + 8 * 8, 48), "float32")  # class token + an 8x8 grid
        >>> utils.apply_embedding_weights(model.get_layer("patch_encoder"), table, 4, 4)
    """
    warn_once("vit_keras.utils.apply_embedding_weights",
              "vit_keras.load_weights (resamples position embeddings) or vit_keras.weights.resample")
    variable = getattr(target_layer, "pos_embedding", None)
    if variable is None:
        raise ValueError(f"{getattr(target_layer, 'name', target_layer)!r} has no learned position embeddings; pass "
                         "the model's 'patch_encoder' layer (model.get_layer('patch_encoder')).")
    grid = tuple(target_layer.grid_size)
    if (num_y_patches, num_x_patches) != grid:
        raise ValueError(f"num_y_patches x num_x_patches = {num_y_patches}x{num_x_patches} but the layer's patch "
                         f"grid is {grid[0]}x{grid[1]}; pass the layer's grid.")
    source_weights = np.asarray(source_weights, dtype=np.float32)
    if source_weights.shape != tuple(variable.shape):
        source_weights = resample_position_embeddings(source_weights, grid,
                                                      num_prefix_tokens=target_layer.num_prefix_tokens)
    variable.assign(source_weights.astype(variable.dtype))
