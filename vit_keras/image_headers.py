"""What an encoded image's header says — its format, width, height and the pixels a decoder would produce —
read without decoding it, in Python (a file or bytes: `vit_keras.images`) and inside a TensorFlow graph (a scalar
`tf.string`: the `serve_bytes` signature, `vit_keras.export.image_bytes`).

The two readers are twins over one description of the formats: the bytes each format starts with (`SIGNATURES`),
where PNG and BMP store their size (`SIZE_FIELDS`), GIF's logical screen and block codes. JPEG's size is in its
frame header, found by walking its segments (in the graph: `tf.image.extract_jpeg_shape`); a GIF's pixels are
every frame's, found by walking its blocks (in the graph: a `tf.while_loop`), since a decoder reads them all.

Example:
    >>> import io
    >>> from PIL import Image
    >>> png = io.BytesIO(); Image.new("RGB", (640, 480)).save(png, "PNG"); _ = png.seek(0)
    >>> read_header(png)
    ('PNG', (640, 480), 307200)
"""

from __future__ import annotations

import dataclasses
import os

# The bytes a file of each format starts with; the first matching format wins.
SIGNATURES = {
    "JPEG": (b"\xff\xd8\xff",),
    "PNG": (b"\x89PNG\r\n\x1a\n",),
    "GIF": (b"GIF87a", b"GIF89a"),
    "BMP": (b"BM",),
}
ACCEPTED_FORMATS = tuple(SIGNATURES)
# The shortest data whose size can be read (GIF: signature and logical screen; BMP: its info header's width and
# height); shorter data is no image of the format.
MIN_LENGTH = {"GIF": 13, "BMP": 26}
# How many bytes of the start the fixed-offset fields below lie within.
HEAD_BYTES = 32


@dataclasses.dataclass(frozen=True)
class SizeFields:
    """Where a header stores (width, height): two integers of `size` bytes at `width_at` and `height_at`.
    `signed`: two's complement, read as its absolute value (BMP: a negative height means top-down rows)."""

    width_at: int
    height_at: int
    size: int
    byteorder: str
    signed: bool = False


# The formats whose size stands at fixed offsets: PNG's IHDR chunk, BMP's info header.
SIZE_FIELDS = {"PNG": SizeFields(16, 20, 4, "big"), "BMP": SizeFields(18, 22, 4, "little", signed=True)}
PNG_FIRST_CHUNK = (12, b"IHDR")  # a PNG's size is read only where its first chunk is the header chunk
GIF_SCREEN = SizeFields(6, 8, 2, "little")  # the logical screen descriptor, then its packed flags
GIF_SCREEN_FLAGS = 10
GIF_EXTENSION, GIF_IMAGE = 0x21, 0x2C  # the block codes; any other byte (the trailer, 0x3B) ends the image
GIF_FIRST_BLOCK = 13  # after the signature and the logical screen (before its global colour table)
GIF_FRAME = SizeFields(4, 6, 2, "little")  # in an image descriptor, after the frame's left and top


def format_of(head: bytes) -> str | None:
    """The format `head` (a file's first bytes) starts with, or None.

    Example:
        >>> format_of(b"GIF89a..."), format_of(b"RIFF....WEBP")
        ('GIF', None)
    """
    return next((name for name, prefixes in SIGNATURES.items() if head.startswith(prefixes)), None)


def _read_size(head: bytes, fields: SizeFields) -> tuple[int, int] | None:
    end = max(fields.width_at, fields.height_at) + fields.size
    if len(head) < end:
        return None
    return tuple(abs(int.from_bytes(head[at:at + fields.size], fields.byteorder, signed=fields.signed))
                 for at in (fields.width_at, fields.height_at))


def _colour_table_bytes(packed: int) -> int:
    """The colour table that follows a GIF screen or image descriptor whose packed flags are `packed`."""
    return 3 << ((packed & 7) + 1) if packed & 0x80 else 0


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
        length = int.from_bytes(length_bytes, "big")
        if 0xC0 <= code <= 0xCF and code not in (0xC4, 0xC8, 0xCC):  # SOFn
            frame = f.read(5)
            if len(frame) < 5:
                return None
            height, width = int.from_bytes(frame[1:3], "big"), int.from_bytes(frame[3:5], "big")
            return width, height
        if code == 0xDA or length < 2:  # image data before any frame header: not a valid JPEG
            return None
        f.seek(length - 2, os.SEEK_CUR)


def _skip_sub_blocks(f) -> None:
    while (length := f.read(1)) and length[0]:
        f.seek(length[0], os.SEEK_CUR)


def _gif_size(f) -> tuple[tuple[int, int], int] | None:
    """((width, height), pixels) of a GIF: the canvas holds the logical screen and every frame, and the pixels
    are what a decoder reads, every frame's (`tf.io.decode_image` reads them all, sized by their own descriptors,
    not by the screen). Walks the block structure, skipping the image data. `_gif_size_in_graph` is its twin."""
    f.seek(0)
    start = f.read(GIF_FIRST_BLOCK)
    if len(start) < GIF_FIRST_BLOCK:
        return None
    width, height = _read_size(start, GIF_SCREEN)
    f.seek(_colour_table_bytes(start[GIF_SCREEN_FLAGS]), os.SEEK_CUR)
    pixels = 0
    while block := f.read(1):
        if block[0] == GIF_EXTENSION:  # label, then sub-blocks
            f.seek(1, os.SEEK_CUR)
            _skip_sub_blocks(f)
        elif block[0] == GIF_IMAGE:  # image descriptor: left, top, width, height, packed
            descriptor = f.read(9)
            if len(descriptor) < 9:
                break
            frame_width, frame_height = _read_size(descriptor, GIF_FRAME)
            width, height = max(width, frame_width), max(height, frame_height)
            pixels += frame_width * frame_height
            f.seek(_colour_table_bytes(descriptor[8]), os.SEEK_CUR)  # the local colour table
            f.seek(1, os.SEEK_CUR)  # LZW minimum code size
            _skip_sub_blocks(f)
        else:  # the trailer, or data that is no GIF block: a decoder stops here
            break
    return (width, height), max(pixels, width * height)


def read_header(f) -> tuple[str | None, tuple[int, int] | None, int | None]:
    """The format (one of `ACCEPTED_FORMATS`, or None), (width, height) and the pixels a decoder would produce,
    from the header of a binary file object positioned at its start; the size and pixels are None where the
    header is truncated or corrupt. `header_in_graph` is its twin."""
    head = f.read(HEAD_BYTES)
    kind = format_of(head)
    if kind == "GIF":
        gif = _gif_size(f)
        return ("GIF", None, None) if gif is None else ("GIF", *gif)
    if kind is None or len(head) < MIN_LENGTH.get(kind, 0):
        return None, None, None
    if kind == "JPEG":
        size = _jpeg_size(f)
    elif kind == "PNG" and head[PNG_FIRST_CHUNK[0]:PNG_FIRST_CHUNK[0] + 4] != PNG_FIRST_CHUNK[1]:
        size = None
    else:
        size = _read_size(head, SIZE_FIELDS[kind])
    return kind, size, None if size is None else size[0] * size[1]


def _gif_size_in_graph(data):
    """`_gif_size` as TensorFlow ops: (width, height, pixels) of a GIF (a scalar `tf.string`). A `tf.while_loop`
    walks the blocks, one sub-block (at most 256 bytes) per step, skipping the image data."""
    import tensorflow as tf

    length = tf.cast(tf.strings.length(data), tf.int64)
    padded = tf.strings.join([data, b"\x00" * 16])  # every 10-byte read below stays inside

    def read10(position):
        return tf.cast(tf.io.decode_raw(tf.strings.substr(padded, position, 10), tf.uint8), tf.int64)

    def colour_table(packed):  # _colour_table_bytes
        return tf.where(tf.bitwise.bitwise_and(packed, 0x80) > 0,
                        tf.bitwise.left_shift(tf.constant(3, tf.int64), tf.bitwise.bitwise_and(packed, 7) + 1), 0)

    screen = read10(GIF_SCREEN.width_at)
    width, height = screen[0] + 256 * screen[1], screen[2] + 256 * screen[3]
    zero = tf.constant(0, tf.int64)
    # state: position, whether inside sub-blocks, width, height, frame pixels, finished
    state = (GIF_FIRST_BLOCK + colour_table(screen[GIF_SCREEN_FLAGS - GIF_SCREEN.width_at]), tf.constant(False),
             width, height, zero, tf.constant(False))

    def going(position, in_blocks, width, height, pixels, finished):
        return tf.logical_and(tf.logical_not(finished), position < length)

    def step(position, in_blocks, width, height, pixels, finished):
        b = read10(position)
        # Inside sub-blocks: a length byte, 0 ends them.
        block_position = position + 1 + b[0]
        # At a block: an extension (label, then sub-blocks); an image descriptor (then a local colour table,
        # the LZW code size and sub-blocks); anything else (the trailer) ends the image.
        is_extension, is_image = tf.equal(b[0], GIF_EXTENSION), tf.equal(b[0], GIF_IMAGE)
        frame = 1 + GIF_FRAME.width_at  # b[0] is the block code
        frame_width, frame_height = b[frame] + 256 * b[frame + 1], b[frame + 2] + 256 * b[frame + 3]
        after = tf.where(is_extension, position + 2, position + 11 + colour_table(b[9]))
        at_block = tf.logical_not(in_blocks)
        image = tf.logical_and(at_block, is_image)
        return (
            tf.where(in_blocks, block_position, after),
            tf.where(in_blocks, b[0] > 0, True),
            tf.where(image, tf.maximum(width, frame_width), width),
            tf.where(image, tf.maximum(height, frame_height), height),
            tf.where(image, pixels + frame_width * frame_height, pixels),
            tf.logical_and(at_block, tf.logical_not(tf.logical_or(is_extension, is_image))),
        )

    _, _, width, height, pixels, _ = tf.while_loop(going, step, state)
    return width, height, tf.maximum(pixels, width * height)


def formats_in_graph(data):
    """For a `tf.string` tensor of any shape, whether each string starts like each format: one bool tensor per
    format of `ACCEPTED_FORMATS`, in that order (`format_of`'s twin)."""
    import tensorflow as tf

    def starts(prefixes):
        matches = [tf.equal(tf.strings.substr(data, 0, len(prefix)), prefix) for prefix in prefixes]
        return tf.reduce_any(tf.stack(matches), axis=0)

    return [starts(prefixes) for prefixes in SIGNATURES.values()]


def header_in_graph(data):
    """(format code, width, height, pixels) of one encoded image (a scalar `tf.string`), read from its header in
    the graph, without decoding it: `read_header`'s twin. The format code indexes `ACCEPTED_FORMATS` (JPEG, PNG,
    GIF, BMP), -1 for any other data, whose sizes are 0. The pixels (float64: a header may claim up to
    2**32 x 2**32) are width x height, or for a GIF every frame's.

    Example:
        >>> import tensorflow as tf
        >>> import io
        >>> from PIL import Image
        >>> png = io.BytesIO(); Image.new("RGB", (640, 480)).save(png, "PNG")
        >>> [int(value) for value in header_in_graph(tf.constant(png.getvalue()))]
        [1, 640, 480, 307200]
    """
    import tensorflow as tf

    head = tf.strings.substr(tf.strings.join([tf.strings.substr(data, 0, HEAD_BYTES), b"\x00" * HEAD_BYTES]),
                             0, HEAD_BYTES)
    byte = tf.cast(tf.io.decode_raw(head, tf.uint8), tf.int64)  # the first bytes, zero-padded

    def field(at, fields: SizeFields):
        order = range(fields.size) if fields.byteorder == "little" else reversed(range(fields.size))
        value = sum(byte[at + i] * 256**power for power, i in enumerate(order))
        if fields.signed:  # read as unsigned: back to its absolute value
            bits = 8 * fields.size
            value = tf.abs(tf.where(value >= 2 ** (bits - 1), value - 2**bits, value))
        return value

    def size_of(kind):
        fields = SIZE_FIELDS[kind]
        return field(fields.width_at, fields), field(fields.height_at, fields)

    length = tf.strings.length(data)
    kinds = [tf.logical_and(starts, length >= MIN_LENGTH.get(name, 0))
             for name, starts in zip(ACCEPTED_FORMATS, formats_in_graph(data))]
    is_jpeg, is_gif = kinds[ACCEPTED_FORMATS.index("JPEG")], kinds[ACCEPTED_FORMATS.index("GIF")]

    def jpeg_size():
        height_width = tf.cast(tf.image.extract_jpeg_shape(data)[:2], tf.int64)
        return height_width[1], height_width[0]

    def zeros(count):
        return lambda: (tf.constant(0, tf.int64),) * count

    jpeg_width, jpeg_height = tf.cond(is_jpeg, jpeg_size, zeros(2))
    gif_width, gif_height, gif_pixels = tf.cond(is_gif, lambda: _gif_size_in_graph(data), zeros(3))
    sizes = {"JPEG": (jpeg_width, jpeg_height), "GIF": (gif_width, gif_height),
             **{kind: size_of(kind) for kind in SIZE_FIELDS}}
    code = tf.constant(-1, tf.int32)
    width = height = tf.constant(0, tf.int64)
    for index in reversed(range(len(kinds))):  # the first matching format wins
        kind_width, kind_height = sizes[ACCEPTED_FORMATS[index]]
        code = tf.where(kinds[index], index, code)
        width = tf.where(kinds[index], kind_width, width)
        height = tf.where(kinds[index], kind_height, height)
    pixels = tf.where(is_gif, tf.cast(gif_pixels, tf.float64), tf.cast(width, tf.float64) * tf.cast(height, tf.float64))
    return code, width, height, pixels
