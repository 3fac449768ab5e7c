"""What an exported ViT takes and returns, and the `tf.function`s that serve it.

Every exported artifact takes RGB images in [0, 255], whatever the model was built with: a model built with
`include_preprocessing=False` (it takes [-1, 1]) gets the `x / 127.5 - 1` rescaling inside the signature.
"""

from __future__ import annotations

import dataclasses
import numbers

import keras

IMAGES_INPUT = "images"
BYTES_INPUT = "image_bytes"
SERVING_DEFAULT = "serving_default"
SERVE_BYTES = "serve_bytes"


@dataclasses.dataclass(frozen=True)
class ServingSpec:
    """How a vit_keras model is served.

    Attributes:
        image_size: (height, width) the model takes; for a model of any size, the size its position embeddings
            are stored at (what `serve_bytes` resizes to).
        model_rescales: whether the model rescales [0, 255] itself (`include_preprocessing=True`).
        output_name: `"probabilities"`, `"logits"`, `"features"` (pooled embedding) or `"tokens"`
            (the encoder's token sequence, for `include_top=False, pooling=None`).
        output_size: classes, or the embedding width.
        num_prefix_tokens: 1 with a class token, 0 for `classifier="gap"` (used to pool `"tokens"`).
        size_multiple: for a model of any image size (`image_size=None`), what its height and width must be
            multiples of (the patch size, times the ResNet stride for hybrids); None for a fixed-size model.
    """

    image_size: tuple[int, int]
    model_rescales: bool
    output_name: str
    output_size: int
    num_prefix_tokens: int
    size_multiple: int | None = None

    @property
    def any_size(self) -> bool:
        """Whether `images` may have any height and width (multiples of `size_multiple`)."""
        return self.size_multiple is not None

    @property
    def is_classifier(self) -> bool:
        return self.output_name in ("probabilities", "logits")

    @property
    def output_names(self) -> tuple[str, ...]:
        """The model's own outputs as exported (before any top-k)."""
        return ("features", "tokens") if self.output_name == "tokens" else (self.output_name,)


def _walk_layers(model):
    """Every layer of `model`, descending into nested models."""
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from _walk_layers(layer)


def _is_softmax_dense(layer) -> bool:
    """A `Dense(n, activation="softmax")`, e.g. a user's head on a ViT feature extractor.

    Matched by the function's name, which is the same whether the user passed "softmax" or
    `keras.activations.softmax`, and after a `.keras` round trip.
    """
    activation = getattr(layer, "activation", None)
    return isinstance(layer, keras.layers.Dense) and getattr(activation, "__name__", None) == "softmax"


def _any_size_config(layers):
    """The `ViTConfig` of the ViT among `layers` if it was built for any image size, None otherwise."""
    from vit_keras.layers import Patches
    from vit_keras.model_class import config_among

    patches = [layer for layer in layers if isinstance(layer, Patches)]
    config = config_among(layers)
    if len(patches) != 1 or patches[0].flatten or config is None:
        return None
    # An unflattened patch grid also serves a fixed-size model whose table is resampled in the graph (RADIO's).
    return config if config.dynamic else None


def _model_input(model):
    """`model.input`, or None for a model that has none (a Sequential that was never called, a subclassed model)."""
    try:
        return model.input
    except (AttributeError, ValueError):
        return None


def describe_model(model, include_preprocessing=None, allow_any_size=False) -> ServingSpec:
    """Check that `model` is a vit_keras model with a fixed image size and say how to serve it.

    Args:
        model: a `keras.Model` built by `vit_keras.ViT` (or a named constructor, or loaded from a `.keras` file
            saved from one), possibly nested inside another functional model.
        include_preprocessing: whether the model rescales [0, 255] inputs itself; None detects it (a
            `Rescaling` layer in the model).
        allow_any_size: accept a model built for any image size (`image_size=None`), served with `None` height and
            width (a SavedModel can; TFLite cannot).

    The output is served as `"probabilities"` after a final softmax (the ViT's own, or a user's
    `Dense(n, activation="softmax")` head), as `"logits"` from vit_keras's linear `head` layer (or a distilled
    DeiT's average of its two heads), and as `"features"` otherwise: a user's linear `Dense` may be a projection
    as well as a classifier.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> describe_model(model).output_name
        'probabilities'
    """
    from vit_keras.layers import PatchEncoder, Patches
    from vit_keras.layers.flexible import INPUT_KEYS

    if not isinstance(model, keras.Model):
        raise ValueError(
            f"Expected a keras.Model built by vit_keras (e.g. vit_keras.ViTB16(...) or keras.models.load_model of "
            f"a .keras file saved from one), got {type(model).__name__}."
        )
    layers = list(_walk_layers(model))
    encoders = [layer for layer in layers if isinstance(layer, PatchEncoder)]
    if isinstance(_model_input(model), dict) and set(model.input) == set(INPUT_KEYS):
        raise ValueError(
            f"Model {model.name!r} is a flexible (NaFlex) model, whose input is a dict of {list(INPUT_KEYS)}, not "
            "images of one size; export it with vit_keras.export.naflex_saved_model (a SavedModel serving encoded "
            "images of any size) or vit_keras.export.naflex_tflite (a TFLite file of a fixed sequence length)."
        )
    if not any(isinstance(layer, Patches) for layer in layers) or not encoders:
        raise ValueError(
            f"Model {model.name!r} is not a vit_keras ViT (it has no Patches/PatchEncoder layers); export needs one "
            "to know its image size and preprocessing. Build it with vit_keras.ViT(...) or a named constructor, or "
            "load a .keras file saved from one."
        )
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise ValueError(
            f"Export expects a model with one image input and one output, got {len(model.inputs)} inputs and "
            f"{len(model.outputs)} outputs."
        )
    shape = tuple(model.inputs[0].shape)
    any_size_config = _any_size_config([model, *layers]) if allow_any_size else None
    if any_size_config is not None and len(shape) == 4:
        shape = (shape[0], *any_size_config.reference_image_size, shape[3])
    if len(shape) != 4 or shape[1] is None or shape[2] is None:
        raise ValueError(
            f"The model's input shape {shape} has an undefined image size; TFLite, and a SavedModel of a fixed-size "
            "ViT behind such an input, need a fixed one. Build the model with image_size=(height, width) (e.g. "
            "vit_keras.ViT(image_size=224, ...)); a SavedModel serves a ViT built with image_size=None as it is."
        )
    if shape[3] != 3:
        raise ValueError(f"Export serves RGB images, but the model takes {shape[3]} channels; build it with 3.")

    if include_preprocessing is None:
        include_preprocessing = any(isinstance(layer, keras.layers.Rescaling) for layer in layers)

    output = model.outputs[0]
    producer = output._keras_history.operation
    if len(output.shape) == 3:
        output_name = "tokens"
    elif len(output.shape) != 2:
        raise ValueError(f"Unexpected model output shape {tuple(output.shape)}; expected (batch, K) or (batch, T, D).")
    elif isinstance(producer, (keras.layers.Activation, keras.layers.Softmax)) or _is_softmax_dense(producer):
        output_name = "probabilities"
    elif isinstance(producer, keras.layers.Dense) and producer.name == "head":
        output_name = "logits"
    elif isinstance(producer, keras.layers.Average) and producer.name == "head_average":
        output_name = "logits"  # a distilled DeiT's two heads, averaged
    else:
        output_name = "features"
    return ServingSpec(
        image_size=(int(shape[1]), int(shape[2])),
        model_rescales=bool(include_preprocessing),
        output_name=output_name,
        output_size=int(output.shape[-1]),
        num_prefix_tokens=int(encoders[-1].num_prefix_tokens),
        size_multiple=None if any_size_config is None else any_size_config.stride,
    )


def _float32_dtypes(config):
    """`config` with every mixed-precision dtype policy replaced by float32 (weights are float32 already)."""
    if isinstance(config, dict):
        if config.get("class_name") == "DTypePolicy" and str(config.get("config", {}).get("name", "")).startswith(
            "mixed_"
        ):
            return "float32"
        return {key: _float32_dtypes(value) for key, value in config.items()}
    if isinstance(config, list):
        return [_float32_dtypes(value) for value in config]
    return config


def float32_model(model):
    """`model` itself, or a float32 copy with the same weights when it computes in bfloat16/float16.

    TFLite has no bfloat16 kernels, so a model trained under `mixed_bfloat16` is converted as float32 (and
    quantised from there).

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3,
        ...                       mlp_dim=96, classes=3)
        >>> float32_model(model) is model  # a float32 model
        True
    """
    if all(layer.compute_dtype == "float32" for layer in _walk_layers(model)):
        return model
    copy = type(model).from_config(_float32_dtypes(model.get_config()))
    copy.set_weights(model.get_weights())
    return copy


def check_class_names(spec: ServingSpec, class_names):
    """`class_names` as a tuple of str, checked against the model's classes (None stays None).

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3,
        ...                       mlp_dim=96, classes=3)
        >>> spec = describe_model(model)
        >>> check_class_names(spec, ["cat", "dog", "bird"])
        ('cat', 'dog', 'bird')
    """
    if class_names is None:
        return None
    if isinstance(class_names, str):
        raise ValueError("`class_names` must be a sequence of names, one per class, not a single string.")
    names = tuple(str(name) for name in class_names)
    if not spec.is_classifier:
        raise ValueError(
            f"`class_names` only apply to a classifier, but this model outputs {spec.output_name}; "
            "drop class_names or export a model with include_top=True."
        )
    if len(names) != spec.output_size:
        raise ValueError(f"`class_names` has {len(names)} names but the model has {spec.output_size} classes.")
    return names


def check_top_k(spec: ServingSpec, top_k) -> int:
    """`top_k` as an int no larger than the number of classes.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3,
        ...                       mlp_dim=96, classes=3)
        >>> spec = describe_model(model)
        >>> check_top_k(spec, 5)  # 3 classes
        3
    """
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise ValueError(f"`top_k` must be a positive int, got {top_k!r}.")
    return min(int(top_k), spec.output_size) if spec.is_classifier else int(top_k)


def model_outputs(forward, spec: ServingSpec, images):
    """The model's outputs, by exported name, for float RGB `images` in [0, 255] (a `tf.Tensor`).

    `forward` runs the model on a `tf.Tensor` (`export.forward.tensorflow_forward`, for any backend).

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3,
        ...                       mlp_dim=96, classes=3)
        >>> import tensorflow as tf
        >>> from vit_keras.export.forward import tensorflow_forward
        >>> forward, _ = tensorflow_forward(model, (32, 32))
        >>> tuple(model_outputs(forward, describe_model(model), tf.zeros((1, 32, 32, 3)))["probabilities"].shape)
        (1, 3)
    """
    import tensorflow as tf

    x = images if spec.model_rescales else images / 127.5 - 1.0
    y = forward(x)
    if spec.output_name != "tokens":
        return {spec.output_name: tf.cast(y, tf.float32)}
    tokens = tf.cast(y, tf.float32)
    if spec.num_prefix_tokens:
        features = tokens[:, 0]
    else:
        features = tf.reduce_mean(tokens, axis=1)
    return {"features": features, "tokens": tokens}


def with_top_k(outputs, spec: ServingSpec, top_k: int, class_names):
    """Add `top_k_classes`, `top_k_scores` (and `top_k_labels`) over a classifier's main output.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3,
        ...                       mlp_dim=96, classes=3)
        >>> spec = describe_model(model)
        >>> import tensorflow as tf
        >>> probs = tf.constant([[0.2, 0.5, 0.3]])
        >>> sorted(with_top_k({"probabilities": probs}, spec, 2, None))
        ['probabilities', 'top_k_classes', 'top_k_scores']
    """
    import tensorflow as tf

    if not spec.is_classifier:
        return outputs
    scores, classes = tf.math.top_k(outputs[spec.output_name], k=top_k)
    outputs = {**outputs, "top_k_classes": classes, "top_k_scores": scores}
    if class_names is not None:
        outputs["top_k_labels"] = tf.gather(tf.constant(class_names, dtype=tf.string), classes)
    return outputs


def images_spec(spec: ServingSpec, batch_size=None):
    """The `tf.TensorSpec` of the `images` input: float32 (batch, H, W, 3), H and W None for a model of any size.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3,
        ...                       mlp_dim=96, classes=3)
        >>> spec = describe_model(model)
        >>> images_spec(spec).name
        'images'
    """
    import tensorflow as tf

    size = (None, None) if spec.any_size else spec.image_size
    return tf.TensorSpec((batch_size, *size, 3), tf.float32, name=IMAGES_INPUT)


def check_image_size(images, spec: ServingSpec):
    """`images` behind a run-time check that they are (batch, H, W, 3) at the model's size.

    A SavedModel's signature states its input shape, but TF Serving and a loaded signature feed tensors of any
    shape into the graph; without this check a 64x64 image given to a 32x32 model would come back as 4 rows.
    The request fails instead, with a message (relayed by TF Serving) that says the size the model takes.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3,
        ...                       mlp_dim=96, classes=3)
        >>> spec = describe_model(model)
        >>> import tensorflow as tf
        >>> tuple(check_image_size(tf.zeros((1, 32, 32, 3)), spec).shape)
        (1, 32, 32, 3)
    """
    import tensorflow as tf

    if spec.any_size:
        multiple = spec.size_multiple
        shape = tf.shape(images)
        check = tf.debugging.Assert(
            tf.logical_and(tf.equal(shape[3], 3), tf.reduce_all(tf.equal(shape[1:3] % multiple, 0))),
            [f"'{IMAGES_INPUT}' must be float32 (batch, height, width, 3) RGB images in [0, 255] with height and "
             f"width multiples of {multiple} (the model's patch stride); resize them. Received shape:", shape],
            summarize=4,
        )
        with tf.control_dependencies([check]):
            return tf.identity(images)
    height, width = spec.image_size
    expected = tf.constant([height, width, 3], dtype=tf.int32)
    check = tf.debugging.assert_equal(
        tf.shape(images)[1:], expected,
        message=(f"'{IMAGES_INPUT}' must be float32 (batch, {height}, {width}, 3) RGB images in [0, 255]; resize "
                 f"them to {height}x{width} (the received height, width, channels are x below)"),
    )
    with tf.control_dependencies([check]):
        return tf.identity(images)


def _gif_size(data):
    """(width, height, pixels) of a GIF (a scalar `tf.string`) in the graph, as `vit_keras.images` reads a file:
    the canvas holds the logical screen and every frame, the pixels are every frame's (the decoder reads them all).
    A `tf.while_loop` walks the blocks, one sub-block (at most 256 bytes) per step, skipping the image data."""
    import tensorflow as tf

    length = tf.cast(tf.strings.length(data), tf.int64)
    padded = tf.strings.join([data, b"\x00" * 16])  # every 10-byte read below stays inside

    def read10(position):
        return tf.cast(tf.io.decode_raw(tf.strings.substr(padded, position, 10), tf.uint8), tf.int64)

    def colour_table(packed):
        return tf.where(tf.bitwise.bitwise_and(packed, 0x80) > 0,
                        tf.bitwise.left_shift(tf.constant(3, tf.int64), tf.bitwise.bitwise_and(packed, 7) + 1), 0)

    screen = read10(6)
    width, height = screen[0] + 256 * screen[1], screen[2] + 256 * screen[3]
    zero = tf.constant(0, tf.int64)
    # state: position, whether inside sub-blocks, width, height, frame pixels, finished
    state = (13 + colour_table(screen[4]), tf.constant(False), width, height, zero, tf.constant(False))

    def going(position, in_blocks, width, height, pixels, finished):
        return tf.logical_and(tf.logical_not(finished), position < length)

    def step(position, in_blocks, width, height, pixels, finished):
        b = read10(position)
        # Inside sub-blocks: a length byte, 0 ends them.
        block_position = position + 1 + b[0]
        # At a block: 0x21 extension (label, then sub-blocks); 0x2C image descriptor (then a local colour table,
        # the LZW code size and sub-blocks); anything else (the trailer) ends the image.
        is_extension, is_image = tf.equal(b[0], 0x21), tf.equal(b[0], 0x2C)
        frame_width, frame_height = b[5] + 256 * b[6], b[7] + 256 * b[8]
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


def encoded_image_size(data):
    """(format code, width, height, pixels) of one encoded image (a scalar `tf.string`), read from its header in
    the graph, without decoding it: the format code indexes `images.ACCEPTED_FORMATS` (JPEG, PNG, GIF, BMP), -1
    for any other data, whose sizes are 0. The pixels are width x height, or for a GIF every frame's.

    Read like `vit_keras.images` reads a file: the JPEG frame header (`tf.image.extract_jpeg_shape`), PNG's IHDR
    (big-endian uint32 at bytes 16..24), GIF's logical screen and frame descriptors, BMP's info header
    (little-endian int32 at 18..26, negative for top-down rows).

    Example:
        >>> import tensorflow as tf
        >>> import io
        >>> from PIL import Image
        >>> png = io.BytesIO(); Image.new("RGB", (640, 480)).save(png, "PNG")
        >>> [int(value) for value in encoded_image_size(tf.constant(png.getvalue()))]
        [1, 640, 480, 307200]
    """
    import tensorflow as tf

    head = tf.strings.substr(tf.strings.join([tf.strings.substr(data, 0, 32), b"\x00" * 32]), 0, 32)
    byte = tf.cast(tf.io.decode_raw(head, tf.uint8), tf.int64)  # the first 32 bytes, zero-padded

    def little_endian(start, count):
        return sum(byte[start + i] * 256**i for i in range(count))

    def big_endian(start, count):
        return sum(byte[start + i] * 256 ** (count - 1 - i) for i in range(count))

    def signed(value):  # a little-endian int32 read as unsigned
        return tf.abs(tf.where(value >= 2**31, value - 2**32, value))

    is_jpeg = tf.equal(tf.strings.substr(data, 0, 3), b"\xff\xd8\xff")
    is_png = tf.equal(tf.strings.substr(data, 0, 8), b"\x89PNG\r\n\x1a\n")
    is_gif = tf.logical_and(tf.logical_or(tf.equal(tf.strings.substr(data, 0, 6), b"GIF87a"),
                                          tf.equal(tf.strings.substr(data, 0, 6), b"GIF89a")),
                            tf.strings.length(data) >= 13)
    is_bmp = tf.logical_and(tf.equal(tf.strings.substr(data, 0, 2), b"BM"), tf.strings.length(data) >= 26)

    def jpeg_size():
        height_width = tf.cast(tf.image.extract_jpeg_shape(data)[:2], tf.int64)
        return height_width[1], height_width[0]

    def zeros(count):
        return lambda: (tf.constant(0, tf.int64),) * count

    jpeg_width, jpeg_height = tf.cond(is_jpeg, jpeg_size, zeros(2))
    gif_width, gif_height, gif_pixels = tf.cond(is_gif, lambda: _gif_size(data), zeros(3))
    kinds = [is_jpeg, is_png, is_gif, is_bmp]
    widths = [jpeg_width, big_endian(16, 4), gif_width, signed(little_endian(18, 4))]
    heights = [jpeg_height, big_endian(20, 4), gif_height, signed(little_endian(22, 4))]
    code = tf.constant(-1, tf.int32)
    width = height = tf.constant(0, tf.int64)
    for index in reversed(range(len(kinds))):  # the first matching format wins
        code = tf.where(kinds[index], index, code)
        width = tf.where(kinds[index], widths[index], width)
        height = tf.where(kinds[index], heights[index], height)
    # float64: a header may claim up to 2**32 x 2**32 pixels, beyond int64.
    pixels = tf.where(is_gif, tf.cast(gif_pixels, tf.float64), tf.cast(width, tf.float64) * tf.cast(height, tf.float64))
    return code, width, height, pixels


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

    from vit_keras.images import ACCEPTED_FORMATS, MAX_PIXELS_ENV

    code, width, height, pixels = encoded_image_size(data)
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

    from vit_keras.images import max_image_pixels

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

    from vit_keras.images import ACCEPTED_FORMATS

    magic = {"JPEG": (b"\xff\xd8\xff",), "PNG": (b"\x89PNG\r\n\x1a\n",), "GIF": (b"GIF87a", b"GIF89a"), "BMP": (b"BM",)}
    names = tf.fill(tf.shape(image_bytes), "image")
    for name in reversed(ACCEPTED_FORMATS):  # the first matching format wins
        matches = [tf.equal(tf.strings.substr(image_bytes, 0, len(prefix)), prefix) for prefix in magic[name]]
        names = tf.where(tf.reduce_any(tf.stack(matches), axis=0), name, names)
    return names


def _error_messages(image_bytes, outcome, width, height, pixels, max_pixels: int):
    """One message per image (empty for a decoded one) that names the image by its index and says what to do."""
    import tensorflow as tf

    from vit_keras.images import ACCEPTED_FORMATS, MAX_PIXELS_ENV

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
        code, width, height, pixels = encoded_image_size(data)
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


def serving_functions(forward, spec: ServingSpec, top_k: int = 5, class_names=None, max_image_pixels=None):
    """The `serving_default` (float images) and `serve_bytes` (encoded images) `tf.function`s around `forward`
    (the model as a TensorFlow callable: `export.forward.tensorflow_forward`). `serve_bytes` answers for each image
    (`decode_each_image`): it adds `image_ok` (bool) and `image_error` (string) per image, and an image it cannot
    serve (not an image, corrupt, or more than `max_image_pixels` pixels, default
    `vit_keras.images.max_image_pixels()`, fixed at export) gets NaN outputs (-1 classes, empty labels) while the
    other images are answered as if sent alone.

    Example:
        >>> from vit_keras.export.forward import tensorflow_forward
        >>> forward, variables = tensorflow_forward(tiny_model, (32, 32))
        >>> sorted(serving_functions(forward, describe_model(tiny_model)))
        ['serve_bytes', 'serving_default']
    """
    import tensorflow as tf

    from vit_keras.images import max_image_pixels as default_max_pixels

    pixel_limit = default_max_pixels() if max_image_pixels is None else max_image_pixels
    if isinstance(pixel_limit, bool) or not isinstance(pixel_limit, numbers.Integral) or pixel_limit < 1:
        raise ValueError(f"`max_image_pixels` must be a positive int, got {max_image_pixels!r}.")

    @tf.function(input_signature=[images_spec(spec)], autograph=False)
    def serve_images(images):
        images = check_image_size(images, spec)
        return with_top_k(model_outputs(forward, spec, images), spec, top_k, class_names)

    def resized(image):
        image = tf.image.resize(tf.cast(image, tf.float32), spec.image_size)
        return tf.ensure_shape(image, (*spec.image_size, 3))

    @tf.function(input_signature=[tf.TensorSpec((None,), tf.string, name=BYTES_INPUT)], autograph=False)
    def serve_bytes(image_bytes):
        images, image_ok, image_error = decode_each_image(image_bytes, resized, int(pixel_limit))
        outputs = with_top_k(model_outputs(forward, spec, images), spec, top_k, class_names)
        return mark_failed_images(outputs, image_ok, image_error)

    return {SERVING_DEFAULT: serve_images, SERVE_BYTES: serve_bytes}
