"""Encoded images inside a TensorFlow graph: checked from their headers before anything is decoded (another
format, or more pixels than the limit: a decompression bomb), their JPEG structure walked, decoded, and, for the
`serve_bytes` signature, each image answered for on its own (`image_ok`, `image_error`) instead of failing the
request. The headers are read by `vit_keras.image_headers.header_in_graph`, the twin of the reader that
`vit_keras.images` checks files with.
"""

from __future__ import annotations

from vit_keras.image_headers import ACCEPTED_FORMATS, formats_in_graph, header_in_graph
from vit_keras.limits import MAX_PIXELS_ENV, max_image_pixels

BYTES_INPUT = "image_bytes"  # the input of the signatures that take encoded images


# The most segments and scans the JPEG structure check follows (a real file has tens); a file of more is not judged,
# so that a file of millions of tiny segments cannot hold a request in the graph's loop.
_JPEG_WALK_STEPS = 4096


def jpeg_markers_in_place(data):
    """Whether a JPEG (a scalar `tf.string`) is whole in its structure: walked from its start, each segment's length
    leads to the next marker and the walk reaches the end-of-image marker, the compressed data of each scan
    running up to the next marker. Data after the end marker (camera trailers) is ignored.

    False for a truncated file and for bytes that belong to no segment: what libjpeg reports as "Corrupt JPEG data:
    N extraneous bytes before marker" and TensorFlow decodes anyway (e.g. a header region overwritten with zeros).
    Damage inside the compressed data (bytes overwritten between two markers) leaves the structure whole, and only
    a full Huffman decode would see it: not detected here.

    Example:
        >>> import tensorflow as tf
        >>> jpeg = tf.io.encode_jpeg(tf.zeros((16, 16, 3), tf.uint8)).numpy()
        >>> bool(jpeg_markers_in_place(tf.constant(jpeg))), bool(jpeg_markers_in_place(tf.constant(jpeg[:-2])))
        (True, False)
    """
    import tensorflow as tf

    size = tf.cast(tf.strings.length(data), tf.int64)
    byte = tf.io.decode_raw(tf.strings.join([data, b"\x00" * 4]), tf.uint8)  # every 4-byte read stays inside
    current, following = byte[:-1], byte[1:]
    # Where the marker after a scan may start: 0xFF and a marker code. Not 0xFF 0x00 (a 0xFF byte of compressed
    # data), 0xFF 0xFF (fill before a marker) or RST0..RST7 (restart markers inside compressed data).
    inside_data = tf.logical_or(tf.logical_or(tf.equal(following, 0x00), tf.equal(following, 0xFF)),
                                tf.logical_and(following >= 0xD0, following <= 0xD7))
    markers = tf.where(tf.logical_and(tf.equal(current, 0xFF), tf.logical_not(inside_data)))[:, 0]
    markers = tf.concat([markers, [size + 2]], 0)  # past the end: no marker left

    def at(position):
        return tf.cast(tf.gather(byte, tf.clip_by_value(position, 0, size + 3)), tf.int64)

    def going(position, finished, whole):
        return tf.logical_not(finished)

    def step(position, finished, whole):
        code, length = at(position + 1), at(position + 2) * 256 + at(position + 3)
        fill, end = tf.equal(code, 0xFF), tf.equal(code, 0xD9)
        standalone = tf.logical_or(tf.equal(code, 0x01), tf.logical_and(code >= 0xD0, code <= 0xD7))
        next_marker = tf.searchsorted(markers, [position + 2 + length], out_type=tf.int64)[0]
        after_scan = tf.gather(markers, tf.minimum(next_marker, tf.size(markers, out_type=tf.int64) - 1))
        broken = tf.logical_or(tf.logical_or(position + 2 > size, tf.not_equal(at(position), 0xFF)),
                               tf.logical_and(length < 2, tf.logical_not(tf.logical_or(tf.logical_or(fill, end),
                                                                                       standalone))))
        following = tf.where(fill, position + 1, tf.where(standalone, position + 2, tf.where(
            tf.equal(code, 0xDA), after_scan, position + 2 + length)))
        return following, tf.logical_or(broken, end), tf.logical_and(tf.logical_not(broken), end)

    start = (tf.constant(2, tf.int64), tf.constant(False), tf.constant(False))  # after the start-of-image marker
    _, finished, whole = tf.while_loop(going, step, start, maximum_iterations=_JPEG_WALK_STEPS)
    return tf.logical_or(whole, tf.logical_not(finished))


def check_encoded_image(data, max_pixels: int):
    """`data` (a scalar `tf.string`) behind run-time checks that it is a JPEG/PNG/GIF/BMP of at most `max_pixels`
    pixels, read from its header: the request fails with an `InvalidArgument` message before anything is decoded,
    so a decompression bomb (a PNG of a few hundred KB that decodes to gigabytes) is refused.

    Example:
        >>> import tensorflow as tf
        >>> import io
        >>> from PIL import Image
        >>> png = io.BytesIO(); Image.new("RGB", (640, 480)).save(png, "PNG")
        >>> checked = check_encoded_image(tf.constant(png.getvalue()), 89_478_485)  # the same bytes, checked
        >>> check_encoded_image(tf.constant(png.getvalue()), 1_000)
        Traceback (most recent call last):
        tensorflow.python.framework.errors_impl.InvalidArgumentError: ...
    """
    import tensorflow as tf

    code, width, height, pixels = header_in_graph(data)
    known = tf.debugging.Assert(
        code >= 0,
        [f"{BYTES_INPUT} must hold encoded {', '.join(ACCEPTED_FORMATS)} images; this one is in another format "
         "(e.g. WebP or TIFF), truncated, or not an image. Convert it (e.g. to PNG or JPEG) before sending."],
    )
    with tf.control_dependencies([known]):
        message = tf.strings.format(
            "image of {}x{} pixels exceeds the serving limit of {} pixels ({} pixels to decode, every GIF frame "
            "counted), a guard against decompression bombs; resize it before sending, or export again with a "
            f"higher max_image_pixels (or {MAX_PIXELS_ENV})",
            [width, height, tf.constant(max_pixels, tf.int64), tf.cast(tf.minimum(pixels, 2.0**62), tf.int64)],
        )
        small = tf.debugging.Assert(pixels <= float(max_pixels), [message])
    with tf.control_dependencies([small]):
        return tf.identity(data)


def decode_images(image_bytes, image_size, max_pixels: int | None = None):
    """Decode a batch of encoded JPEG/PNG/GIF/BMP strings to float RGB (batch, H, W, 3) in [0, 255].

    Each image's header is checked first (`check_encoded_image`): another format, or more than `max_pixels`
    pixels (default `vit_keras.images.max_image_pixels()`), fails the request before it is decoded, and so does an
    image the decoder rejects (`decode_each_image` answers for each image instead, as `serve_bytes` does). Resized
    with bilinear `tf.image.resize` to the model's size, no crop, like vit_jax's evaluation.

    Example:
        >>> import tensorflow as tf
        >>> import io
        >>> from PIL import Image
        >>> png = io.BytesIO(); Image.new("RGB", (640, 480)).save(png, "PNG")
        >>> tuple(decode_images(tf.constant([png.getvalue()]), (224, 224)).shape)
        (1, 224, 224, 3)
    """
    import tensorflow as tf

    limit = max_image_pixels() if max_pixels is None else int(max_pixels)

    def decode(data):
        data = check_encoded_image(data, limit)
        image = tf.io.decode_image(data, channels=3, expand_animations=False, dtype=tf.uint8)
        image = tf.image.resize(tf.cast(image, tf.float32), image_size)
        return tf.ensure_shape(image, (*image_size, 3))

    return tf.map_fn(decode, image_bytes, fn_output_signature=tf.TensorSpec((*image_size, 3), tf.float32))


# What `serve_bytes` answers for each image, besides the model's outputs.
IMAGE_OK = "image_ok"
IMAGE_ERROR = "image_error"
# Each image's outcome inside the graph: decoded, refused from its header, or refused by the decoder.
_DECODED, _NOT_AN_IMAGE, _TOO_LARGE, _UNREADABLE, _BROKEN_JPEG = 0, 1, 2, 3, 4


def _format_names(image_bytes):
    """The format named by each string's first bytes (a batch), `"image"` when none is recognised."""
    import tensorflow as tf

    names = tf.fill(tf.shape(image_bytes), "image")
    starts = formats_in_graph(image_bytes)
    for index in reversed(range(len(ACCEPTED_FORMATS))):  # the first matching format wins
        names = tf.where(starts[index], ACCEPTED_FORMATS[index], names)
    return names


def _error_messages(image_bytes, outcome, width, height, pixels, max_pixels: int):
    """One message per image (empty for a decoded one) that names the image by its index and says what to do."""
    import tensorflow as tf

    def text(values):
        return tf.strings.as_string(values)

    index = text(tf.range(tf.size(image_bytes)))
    empty = tf.equal(tf.strings.length(image_bytes), 0)
    not_an_image = tf.where(
        empty,
        "is empty (0 bytes); send the image file's contents",
        f"is not a {', '.join(ACCEPTED_FORMATS[:-1])} or {ACCEPTED_FORMATS[-1]} image (another format, e.g. WebP or "
        "TIFF, or not an image at all); convert it (e.g. to PNG or JPEG) before sending",
    )
    too_large = tf.strings.join([
        "is an image of ", text(width), "x", text(height), f" pixels, which exceeds the serving limit of {max_pixels} "
        "pixels (", text(tf.cast(tf.minimum(pixels, 2.0**62), tf.int64)), " pixels to decode, every GIF frame "
        "counted), a guard against decompression bombs; resize it before sending, or export again with a higher "
        f"max_image_pixels (or {MAX_PIXELS_ENV})",
    ])
    unreadable = tf.strings.join([
        "is a corrupt or truncated ", _format_names(image_bytes), " file that the decoder could not read; send the "
        "complete file, or re-encode it (e.g. as PNG or JPEG)",
    ])
    broken_jpeg = ("is a corrupt or truncated JPEG file: its markers are not where its segment lengths place them; "
                   "send the complete original file, or re-encode it")
    reason = tf.where(tf.equal(outcome, _NOT_AN_IMAGE), not_an_image,
                      tf.where(tf.equal(outcome, _TOO_LARGE), too_large,
                               tf.where(tf.equal(outcome, _BROKEN_JPEG), broken_jpeg, unreadable)))
    message = tf.strings.join([f"{BYTES_INPUT}[", index, "] ", reason])
    return tf.where(tf.equal(outcome, _DECODED), "", message)


def decode_each_image(image_bytes, prepare, max_pixels: int):
    """Decode a batch of encoded images one by one, answering for each: `(prepared, image_ok, image_error)`.

    `prepare` turns one decoded uint8 (height, width, 3) image into what the model takes (a tensor or a dict of
    tensors of fixed shapes). An image that cannot be served is refused on its own instead of failing the
    request: another format or an empty string, more than `max_pixels` pixels (read from its header, before
    anything is decoded: a guard against decompression bombs), or data the decoder rejects (a truncated file, a
    damaged header), or a JPEG whose structure is broken (`jpeg_markers_in_place`: bytes between its segments,
    which libjpeg skips with a "Corrupt JPEG data" warning and TensorFlow decodes anyway). Its row of `prepared`
    holds `prepare` of a black image, `image_ok` is False and `image_error` says which image (`image_bytes[i]`) and
    why; a served image's `image_error` is empty.

    Not detected: damage inside a JPEG's compressed data (bytes zeroed or altered between two markers, e.g. 300
    zeroed bytes in the middle of a photo). libjpeg repairs it with a warning only ("Corrupt JPEG data: premature
    end of data segment"), which TensorFlow's decoder does not expose to the graph, so such an image is served as
    decoded, with the damaged region in its pixels.

    The images go through a `tf.data` pipeline inside the graph whose `ignore_errors` drops an image the decoder
    rejects, each image carrying its index, so the others are scattered back to their rows; a SavedModel keeps
    this behaviour in TF Serving and `tf.saved_model.load`.

    Example:
        >>> import tensorflow as tf
        >>> import io
        >>> from PIL import Image
        >>> png = io.BytesIO(); Image.new("RGB", (64, 48)).save(png, "PNG")
        >>> images, ok, errors = decode_each_image(
        ...     tf.constant([png.getvalue(), b"not an image", png.getvalue()[:50]]),
        ...     lambda image: tf.image.resize(tf.cast(image, tf.float32), (32, 32)), 89_478_485)
        >>> tuple(images.shape), ok.numpy().tolist()
        ((3, 32, 32, 3), [True, False, False])
        >>> errors.numpy()[2].decode()[:52]
        'image_bytes[2] is a corrupt or truncated PNG file th'
    """
    import tensorflow as tf

    def examine(index, data):
        code, width, height, pixels = header_in_graph(data)
        whole = tf.cond(tf.equal(code, 0), lambda: jpeg_markers_in_place(data), lambda: tf.constant(True))
        outcome = tf.where(code < 0, _NOT_AN_IMAGE, tf.where(pixels > float(max_pixels), _TOO_LARGE,
                                                             tf.where(whole, _DECODED, _BROKEN_JPEG)))

        def decoded():
            return prepare(tf.io.decode_image(data, channels=3, expand_animations=False, dtype=tf.uint8))

        prepared = tf.cond(tf.equal(outcome, _DECODED), decoded, lambda: prepare(tf.zeros((8, 8, 3), tf.uint8)))
        return index, outcome, width, height, pixels, prepared

    count = tf.size(image_bytes, out_type=tf.int64)
    indexed = tf.data.Dataset.from_tensor_slices((tf.range(count), image_bytes))
    # An image whose header or data the decoder rejects raises inside `examine`: `ignore_errors` drops it. A last,
    # always valid element (index -1, an empty string refused from its header) keeps the batch from being empty
    # and carries the black image that fills the dropped rows.
    examined = indexed.map(examine, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()
    last = tf.data.Dataset.from_tensors((tf.constant(-1, tf.int64), tf.constant(b""))).map(examine)
    index, outcome, width, height, pixels, prepared = examined.concatenate(last).batch(count + 1).get_single_element()

    rows = index[:-1, None]  # the images that were examined, by their index in the request

    def scatter(values, filler):
        return tf.tensor_scatter_nd_update(filler, rows, values[:-1])

    outcome = scatter(outcome, tf.fill([count], _UNREADABLE))
    width, height = (scatter(values, tf.zeros([count], tf.int64)) for values in (width, height))
    pixels = scatter(pixels, tf.zeros([count], tf.float64))
    prepared = tf.nest.map_structure(
        lambda values: scatter(values, tf.repeat(values[-1:], count, axis=0)), prepared)
    ok = tf.equal(outcome, _DECODED)
    return prepared, ok, _error_messages(image_bytes, outcome, width, height, pixels, max_pixels)


def mark_failed_images(outputs, image_ok, image_error):
    """`outputs` (a dict of batch-first tensors) with the rows of images that were not served blanked (NaN for
    floats, -1 for integers, "" for strings), plus `image_ok` and `image_error`.

    Example:
        >>> import tensorflow as tf
        >>> marked = mark_failed_images({"probabilities": tf.constant([[0.2, 0.8], [0.5, 0.5]])},
        ...                             tf.constant([True, False]), tf.constant(["", "image_bytes[1] ..."]))
        >>> marked["probabilities"].numpy().tolist()
        [[0.20000000298023224, 0.800000011920929], [nan, nan]]
    """
    import tensorflow as tf

    def blank(values):
        ok = tf.reshape(image_ok, tf.concat([tf.shape(image_ok), tf.ones([tf.rank(values) - 1], tf.int32)], 0))
        if values.dtype.is_floating:
            filler = tf.constant(float("nan"), values.dtype)
        elif values.dtype == tf.string:
            filler = tf.constant("")
        else:
            filler = tf.constant(-1, values.dtype)
        return tf.where(ok, values, filler)

    return {**{name: blank(values) for name, values in outputs.items()}, IMAGE_OK: image_ok, IMAGE_ERROR: image_error}
