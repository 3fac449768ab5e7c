"""Read image files for prediction, export checks and inspection, with errors that name the file.

The format is told from the file's first bytes (JPEG, PNG, GIF, BMP: what `tf.io.decode_image` reads) and the
image's width and height from its header, before anything is decoded: an image above `max_pixels` is refused, as
PIL refuses decompression bombs (a 16000x16000 PNG of a few hundred KB would otherwise be decoded to gigabytes).
The limit is `DEFAULT_MAX_PIXELS` (PIL's, about 89 megapixels); raise it with `max_pixels=` or the environment
variable `VIT_KERAS_MAX_IMAGE_PIXELS`.

Example:
    >>> read_image("cat.jpg", (224, 224)).shape  # doctest: +SKIP
    (224, 224, 3)
"""

from __future__ import annotations

import os
import re
import struct

ACCEPTED_FORMATS = ("JPEG", "PNG", "GIF", "BMP")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
DEFAULT_MAX_PIXELS = 89_478_485  # PIL.Image.MAX_IMAGE_PIXELS: 1024 * 1024 * 1024 // 4 // 3
MAX_PIXELS_ENV = "VIT_KERAS_MAX_IMAGE_PIXELS"
_HEADER_BYTES = 64 * 1024  # JPEG frame headers come after EXIF/ICC segments; further ones are read as needed


def max_image_pixels() -> int:
    """The pixel limit: `$VIT_KERAS_MAX_IMAGE_PIXELS` when set, else `DEFAULT_MAX_PIXELS`.

    Example:
        >>> max_image_pixels()  # with the variable unset  # doctest: +SKIP
        89478485
    """
    text = os.environ.get(MAX_PIXELS_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_PIXELS
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"${MAX_PIXELS_ENV}={text!r} must be a positive whole number of pixels, e.g. 200000000.")
    return int(text)


def _jpeg_size(f) -> tuple[int, int] | None:
    """(width, height) from the first start-of-frame marker of a JPEG, reading segment headers only."""
    f.seek(2)
    while True:
        marker = f.read(2)
        while len(marker) == 2 and marker[0] == 0xFF and marker[1] == 0xFF:  # fill bytes
            marker = marker[1:] + f.read(1)
        if len(marker) < 2 or marker[0] != 0xFF:
            return None
        code = marker[1]
        if code in (0xD8, 0x01) or 0xD0 <= code <= 0xD7:  # markers without a length
            continue
        length_bytes = f.read(2)
        if len(length_bytes) < 2:
            return None
        (length,) = struct.unpack(">H", length_bytes)
        if 0xC0 <= code <= 0xCF and code not in (0xC4, 0xC8, 0xCC):  # SOFn
            frame = f.read(5)
            if len(frame) < 5:
                return None
            height, width = struct.unpack(">HH", frame[1:5])
            return width, height
        if code == 0xDA or length < 2:  # image data before any frame header: not a valid JPEG
            return None
        f.seek(length - 2, os.SEEK_CUR)


def image_header(path: str) -> tuple[str | None, tuple[int, int] | None]:
    """The format (one of `ACCEPTED_FORMATS`, or None) and (width, height) read from a file's header.

    Example:
        >>> image_header("cat.png")  # doctest: +SKIP
        ('PNG', (640, 480))
    """
    with open(path, "rb") as f:
        head = f.read(32)
        if head.startswith(b"\xff\xd8\xff"):
            return "JPEG", _jpeg_size(f)
        if head.startswith(b"\x89PNG\r\n\x1a\n"):
            size = struct.unpack(">II", head[16:24]) if head[12:16] == b"IHDR" else None
            return "PNG", size
        if head[:6] in (b"GIF87a", b"GIF89a"):
            return "GIF", struct.unpack("<HH", head[6:10])
        if head.startswith(b"BM") and len(head) >= 26:
            width, height = struct.unpack("<ii", head[18:26])
            return "BMP", (abs(width), abs(height))
    return None, None


def _describe_other(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(512)
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


def check_image_file(path, max_pixels: int | None = None) -> tuple[str, tuple[int, int]]:
    """Raise a `ValueError` naming `path` unless it is a JPEG/PNG/GIF/BMP within the pixel limit; return its
    format and (width, height).

    Example:
        >>> check_image_file("cat.jpg")  # doctest: +SKIP
        ('JPEG', (500, 375))
    """
    path = os.fspath(path)
    accepted = ", ".join(ACCEPTED_FORMATS)
    if not os.path.isfile(path):
        raise ValueError(f"image file {path!r} does not exist")
    kind, size = image_header(path)
    if kind is None:
        raise ValueError(f"{path!r} is {_describe_other(path)}; accepted image formats: {accepted}. "
                         "Convert it (e.g. to PNG) first.")
    if size is None:
        raise ValueError(f"{path!r} is not a readable {kind} image (its header is truncated or corrupt); "
                         f"accepted image formats: {accepted}.")
    limit = max_image_pixels() if max_pixels is None else max_pixels
    width, height = size
    if width * height > limit:
        raise ValueError(
            f"{path!r} is a {width}x{height} {kind} ({width * height:,} pixels), above the limit of {limit:,} "
            f"pixels that guards against decompression bombs; if you trust the file, raise the limit with "
            f"{MAX_PIXELS_ENV}={width * height} (or max_pixels=), or downscale it first."
        )
    return kind, size


def read_image(path, size, max_pixels: int | None = None):
    """Decode an image file to a float32 (H, W, 3) RGB array in [0, 255], resized to `size` (height, width) with
    bilinear `tf.image.resize`, no crop, like vit_jax's evaluation.

    Raises a `ValueError` that names the file for a missing, unsupported, truncated, corrupt or oversized image.

    Example:
        >>> read_image("cat.jpg", (224, 224)).shape  # doctest: +SKIP
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
