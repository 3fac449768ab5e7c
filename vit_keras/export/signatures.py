"""What an exported ViT takes and returns, and the `tf.function`s that serve it.

Every exported artifact takes RGB images in [0, 255], whatever the model was built with: a model built with
`include_preprocessing=False` (it takes [-1, 1]) gets the `x / 127.5 - 1` rescaling inside the signature.
"""

from __future__ import annotations

import dataclasses
import numbers

import keras

from vit_keras.export.image_bytes import BYTES_INPUT, decode_each_image, mark_failed_images

IMAGES_INPUT = "images"
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
    from vit_keras.vision_transformer import config_among

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
