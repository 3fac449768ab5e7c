"""The size limits that every decode path checks before it allocates: pixels per image and bytes per downloaded
image, each with an environment variable that raises it. They sit below `images` and `preprocessing`, which both
read them.

Example:
    >>> max_image_pixels(), max_image_bytes()  # with the variables unset
    (89478485, 268435456)
"""

from __future__ import annotations

import os

DEFAULT_MAX_PIXELS = 89_478_485  # PIL.Image.MAX_IMAGE_PIXELS: 1024 * 1024 * 1024 // 4 // 3
MAX_PIXELS_ENV = "VIT_KERAS_MAX_IMAGE_PIXELS"
# An image URL's body is read into memory: far above any photograph's file, far below what would exhaust memory.
DEFAULT_MAX_IMAGE_BYTES = 256 * 1024 * 1024
MAX_BYTES_ENV = "VIT_KERAS_MAX_IMAGE_BYTES"


def max_image_pixels() -> int:
    """The pixel limit: `$VIT_KERAS_MAX_IMAGE_PIXELS` when set, else `DEFAULT_MAX_PIXELS`.

    Example:
        >>> max_image_pixels()  # with the variable unset
        89478485
    """
    text = os.environ.get(MAX_PIXELS_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_PIXELS
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"${MAX_PIXELS_ENV}={text!r} must be a positive whole number of pixels, e.g. 200000000.")
    return int(text)


def max_image_bytes() -> int:
    """The byte limit on an image read from a URL: `$VIT_KERAS_MAX_IMAGE_BYTES` when set, else
    `DEFAULT_MAX_IMAGE_BYTES` (256 MiB).

    Example:
        >>> max_image_bytes()  # with the variable unset
        268435456
    """
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_IMAGE_BYTES
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"${MAX_BYTES_ENV}={text!r} must be a positive whole number of bytes, e.g. 500000000.")
    return int(text)
