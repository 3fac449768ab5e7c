"""Read image files for prediction, export checks and inspection, with errors that name the file.

The format is told from the first bytes (JPEG, PNG, GIF, BMP) and the image's width and height from its header,
before anything is decoded: an image above `max_pixels` is refused, as PIL refuses decompression bombs (a
16000x16000 PNG of a few hundred KB would otherwise be decoded to gigabytes). The limit is `DEFAULT_MAX_PIXELS`
(PIL's, about 89 megapixels); raise it with `max_pixels=` or the environment variable
`VIT_KERAS_MAX_IMAGE_PIXELS`. The same check guards files (`check_image_file`), encoded bytes already in memory
or downloaded (`check_image_bytes`) and, inside the exported graph, the SavedModel's `serve_bytes` signature.
An image read from a URL is also capped in bytes: `DEFAULT_MAX_IMAGE_BYTES`, or `$VIT_KERAS_MAX_IMAGE_BYTES`.

Example:
    >>> from PIL import Image
    >>> Image.new("RGB", (500, 375), "orange").save("cat.jpg")
    >>> read_image("cat.jpg", (224, 224)).shape
    (224, 224, 3)
"""

from __future__ import annotations

import io
import os
import re

# The header reader and its table of formats are shared with the in-graph reader of the `serve_bytes` signature.
from vit_keras.image_headers import ACCEPTED_FORMATS, read_header

# The size limits live in vit_keras.limits (preprocessing reads them too); their names stay importable from here.
from vit_keras.limits import (  # noqa: F401
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_MAX_PIXELS,
    MAX_BYTES_ENV,
    MAX_PIXELS_ENV,
    max_image_bytes,
    max_image_pixels,
)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp")


def image_header(path: str) -> tuple[str | None, tuple[int, int] | None]:
    """The format (one of `ACCEPTED_FORMATS`, or None) and (width, height) read from a file's header.

    Example:
        >>> from PIL import Image
        >>> Image.new("RGB", (640, 480)).save("cat.png")
        >>> image_header("cat.png")
        ('PNG', (640, 480))
    """
    with open(path, "rb") as f:
        return read_header(f)[:2]


def encoded_image_header(data: bytes) -> tuple[str | None, tuple[int, int] | None]:
    """The format (one of `ACCEPTED_FORMATS`, or None) and (width, height) read from encoded image bytes.

    Example:
        >>> import io
        >>> from PIL import Image
        >>> png = io.BytesIO(); Image.new("RGB", (640, 480)).save(png, "PNG")
        >>> encoded_image_header(png.getvalue())
        ('PNG', (640, 480))
    """
    return read_header(io.BytesIO(data))[:2]


def _describe_other(head: bytes) -> str:
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "a TIFF image"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "a WebP image"
    if not head:
        return "an empty file"
    try:
        head.decode("utf-8")
        return "a text file"
    except UnicodeDecodeError:
        return "not an image format vit_keras reads"


def check_pixel_count(name: str, kind: str, size: tuple[int, int], max_pixels: int | None = None,
                      pixels: int | None = None) -> None:
    """Raise a `ValueError` naming `name` (e.g. a quoted path) when a `kind` image of `size` (width, height) is
    above the pixel limit: `max_pixels`, or `max_image_pixels()` when None. `pixels` is what decoding produces
    when it is more than width x height (a GIF's frames), counted against the limit instead.

    Example:
        >>> check_pixel_count("'big.png'", "PNG", (20000, 20000))
        Traceback (most recent call last):
        ValueError: 'big.png' is a 20000x20000 PNG (400,000,000 pixels), above the limit of 89,478,485 pixels ...
    """
    limit = max_image_pixels() if max_pixels is None else max_pixels
    width, height = size
    pixels = width * height if pixels is None else pixels
    if pixels > limit:
        counted = f"{pixels:,} pixels" + ("" if pixels == width * height else " in all its frames")
        raise ValueError(
            f"{name} is a {width}x{height} {kind} ({counted}), above the limit of {limit:,} "
            f"pixels that guards against decompression bombs; if you trust the file, raise the limit with "
            f"{MAX_PIXELS_ENV}={pixels} (or max_pixels=), or downscale it first."
        )


def _check_header(name: str, kind, size, pixels, head: bytes, max_pixels) -> tuple[str, tuple[int, int]]:
    accepted = ", ".join(ACCEPTED_FORMATS)
    if kind is None:
        raise ValueError(f"{name} is {_describe_other(head)}; accepted image formats: {accepted}. "
                         "Convert it (e.g. to PNG) first.")
    if size is None:
        raise ValueError(f"{name} is not a readable {kind} image (its header is truncated or corrupt); "
                         f"accepted image formats: {accepted}.")
    check_pixel_count(name, kind, size, max_pixels, pixels)
    return kind, size


def check_image_file(path, max_pixels: int | None = None) -> tuple[str, tuple[int, int]]:
    """Raise a `ValueError` naming `path` unless it is a JPEG/PNG/GIF/BMP within the pixel limit; return its
    format and (width, height).

    Example:
        >>> from PIL import Image
        >>> Image.new("RGB", (500, 375)).save("cat.jpg")
        >>> check_image_file("cat.jpg")
        ('JPEG', (500, 375))
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"image file {path!r} does not exist")
    with open(path, "rb") as f:
        kind, size, pixels = read_header(f)
        f.seek(0)
        head = f.read(512)
    return _check_header(repr(path), kind, size, pixels, head, max_pixels)


def check_image_bytes(data: bytes, source: str = "the image", max_pixels: int | None = None
                      ) -> tuple[str, tuple[int, int]]:
    """Raise a `ValueError` naming `source` unless the encoded `data` is a JPEG/PNG/GIF/BMP within the pixel
    limit (read from its header; nothing is decoded); return its format and (width, height).

    Example:
        >>> import io
        >>> from PIL import Image
        >>> jpeg = io.BytesIO(); Image.new("RGB", (500, 375)).save(jpeg, "JPEG")
        >>> check_image_bytes(jpeg.getvalue(), "the image at 'https://example.com/cat.jpg'")
        ('JPEG', (500, 375))
    """
    kind, size, pixels = read_header(io.BytesIO(data))
    return _check_header(source, kind, size, pixels, bytes(data[:512]), max_pixels)


def read_image(path, size, max_pixels: int | None = None):
    """Decode an image file to a float32 (H, W, 3) RGB array in [0, 255], resized to `size` (height, width) with
    bilinear `tf.image.resize`, no crop, like vit_jax's evaluation.

    Raises a `ValueError` that names the file for a missing, unsupported, truncated, corrupt or oversized image.

    Example:
        >>> from PIL import Image
        >>> Image.new("RGB", (500, 375)).save("cat.jpg")
        >>> read_image("cat.jpg", (224, 224)).shape
        (224, 224, 3)
    """
    import tensorflow as tf

    path = os.fspath(path)
    kind, _ = check_image_file(path, max_pixels)
    try:
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
        # TF's message starts with the op's function name and ends with the op: keep the decoder's own words.
        reason = re.sub(r"\{\{[^}]*\}\}|\[Op:[^\]]*\].*", "", error.message or str(error)).strip().splitlines()[0]
        raise ValueError(f"{path!r} could not be decoded as a {kind} image ({reason}); it may be truncated or "
                         f"corrupt. Accepted image formats: {', '.join(ACCEPTED_FORMATS)}.") from None
    return tf.image.resize(tf.cast(image, tf.float32), size).numpy()


# The explanations of an image a NaFlex batch cannot take as it is, shared by the NumPy helpers and the tf.data path
# (`vit_keras.naflex_data.naflex_example`, which fills in the sizes inside the graph).
def smaller_than_a_patch(name: str, height, width, patch_size: int) -> str:
    return (f"{name} is {height}x{width}, smaller than one {patch_size}x{patch_size} patch; resize it first "
            "(vit_keras.preprocessing.naflex_size gives at least one patch per side).")


def not_whole_patches(name: str, height, width, patch_size: int) -> str:
    return (f"{name} is {height}x{width}, not a multiple of the patch size {patch_size} on each side; resize it "
            "first, to the size vit_keras.preprocessing.naflex_size gives.")


def too_many_patches(name: str, rows, cols, count, max_num_patches: int) -> str:
    return (f"{name} is {rows}x{cols} = {count} patches, more than max_num_patches {max_num_patches}; resize it "
            "(resize=True) or raise max_num_patches.")


# 16-bit images (e.g. 16-bit PNGs decoded with dtype uint16) hold 0..65535; the NaFlex helpers scale them to the
# [0, 255] every model takes: 65535 / 257 = 255.
UINT16_SCALE = 257


def naflex_pixels(image, name: str = "the image"):
    """An (H, W, C) image as float32 RGB values in [0, 255] for the NaFlex helpers: uint16 (16-bit) images are
    scaled by 1/257 (0..65535 to 0..255); every other numeric dtype is taken as values in [0, 255].

    Example:
        >>> import numpy as np
        >>> naflex_pixels(np.array([[[0, 257, 65535]]], np.uint16)).tolist()
        [[[0.0, 1.0, 255.0]]]
    """
    import numpy as np

    array = np.asarray(image)
    if array.dtype == np.uint16:
        return array.astype(np.float32) / np.float32(UINT16_SCALE)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be an array of RGB values in [0, 255], got dtype {array.dtype}.")
    return array.astype(np.float32)


def patchify(image, patch_size: int, name: str = "the image"):
    """Cut an (H, W, C) image whose sides are multiples of `patch_size` into `(rows · cols, P·P·C)` patches, each
    flattened in (row, column, channel) order, row-major over the grid (transformers' `convert_image_to_patches`,
    timm's `batch_patchify`); returns `(patches, (rows, cols))`.

    Example:
        >>> import numpy as np
        >>> patches, grid = patchify(np.zeros((24, 40, 3)), 8)
        >>> patches.shape, grid
        ((15, 192), (3, 5))
    """
    import numpy as np

    image = np.asarray(image)
    if image.ndim != 3:
        raise ValueError(f"{name}: expected an (height, width, channels) image, got shape {image.shape}.")
    height, width, channels = image.shape
    if height < patch_size or width < patch_size:
        raise ValueError(smaller_than_a_patch(name, height, width, patch_size))
    if height % patch_size or width % patch_size:
        raise ValueError(not_whole_patches(name, height, width, patch_size))
    rows, cols = height // patch_size, width // patch_size
    patches = image.reshape(rows, patch_size, cols, patch_size, channels).transpose(0, 2, 1, 3, 4)
    return patches.reshape(rows * cols, patch_size * patch_size * channels), (rows, cols)


def naflex_resize(image, patch_size: int, max_num_patches: int):
    """Resize an (H, W, C) image (NumPy array or tensor) to `vit_keras.preprocessing.naflex_size`'s size with
    bilinear, antialiased `tf.image.resize` (what the SigLIP 2 processors do with PIL's or torchvision's bilinear);
    a float32 NumPy array of values in [0, 255] (a uint16 image is scaled from 0..65535, see `naflex_pixels`).

    Example:
        >>> import numpy as np
        >>> naflex_resize(np.zeros((100, 700, 3)), 16, 256).shape
        (96, 672, 3)
    """
    import tensorflow as tf

    from vit_keras.preprocessing import check_max_num_patches, naflex_size

    image = naflex_pixels(image)
    if image.ndim != 3:
        raise ValueError(f"Expected an (height, width, channels) image, got shape {image.shape}.")
    size = naflex_size(image.shape[0], image.shape[1], patch_size, check_max_num_patches(max_num_patches, patch_size))
    if size == image.shape[:2]:
        return image
    return tf.image.resize(image, size, method="bilinear", antialias=True).numpy()


def naflex_patches(images, patch_size: int, max_num_patches: int, resize: bool = True) -> dict:
    """A NaFlex batch from images of any sizes: each (H, W, C) image resized to `naflex_size` (`resize=False`: taken
    as it is, its sides multiples of `patch_size`), cut into patches (`patchify`) and padded to `max_num_patches`.
    Returns the dict a flexible model takes: `patches` (batch, N, P·P·C) float32, `grid` (batch, 2) int32, `mask`
    (batch, N) int32.

    Pixel values are RGB in [0, 255]; uint16 (16-bit) images are scaled from 0..65535 to it (`naflex_pixels`).
    `max_num_patches` is at most `vit_keras.preprocessing.MAX_NUM_PATCHES`, checked before anything is allocated.

    Example:
        >>> import numpy as np
        >>> batch = naflex_patches([np.zeros((100, 700, 3)), np.zeros((64, 48, 3))], 16, 64)
        >>> batch["patches"].shape, batch["grid"].tolist()
        ((2, 64, 768), [[3, 21], [9, 7]])
    """
    import numpy as np

    from vit_keras.configs import check_positive_int
    from vit_keras.preprocessing import check_max_num_patches

    patch_size = check_positive_int("patch_size", patch_size)
    max_num_patches = check_max_num_patches(max_num_patches, patch_size)
    patches, grids, masks = [], [], []
    for index, image in enumerate(images):
        name = f"image {index}"
        image = naflex_pixels(image, name)
        if resize:
            image = naflex_resize(image, patch_size, max_num_patches)
        cut, grid = patchify(image, patch_size, name)
        if len(cut) > max_num_patches:
            raise ValueError(too_many_patches(name, grid[0], grid[1], len(cut), max_num_patches))
        padded = np.zeros((max_num_patches, cut.shape[1]), np.float32)
        padded[: len(cut)] = cut
        patches.append(padded)
        grids.append(grid)
        masks.append(np.arange(max_num_patches) < len(cut))
    if not patches:
        raise ValueError("`images` is empty; pass at least one image.")
    return {"patches": np.stack(patches), "grid": np.asarray(grids, np.int32),
            "mask": np.stack(masks).astype(np.int32)}
