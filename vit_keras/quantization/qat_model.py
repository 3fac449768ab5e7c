"""`quantize_aware(model)`: the same model, its matmuls fake-quantized to int8, to fine-tune for a full-integer
TFLite file.

The result is a `QuantizeAwareModel`: a functional `keras.Model` with the float model's inputs and outputs that
holds a copy of it, in which every `Dense` and `EinsumDense` (patch embedding, attention projections, MLP, MAP
head, classification head) is a `FakeQuantDense` / `FakeQuantEinsumDense` (see `vit_keras.quantization.layers`)
and everything else (LayerNorm, softmax, GELU, the attention's own score and value products, residual additions)
stays float. Its config is the float model's config plus the moving averages' momentum, so a `.keras` file reloads
with `safe_mode=True` into the same quantization-aware model, ranges included.

Example:
    >>> from vit_keras.quantization import fake_quant_layers, quantize_aware
    >>> qat = quantize_aware(tiny_model)
    >>> qat.output_shape == tiny_model.output_shape
    True
    >>> len(fake_quant_layers(qat))  # patch embedding, 2 blocks x (q, k, v, out, 2 MLP), head
    14
"""

from __future__ import annotations

import json

import keras

from vit_keras.quantization.layers import (
    DEFAULT_MOMENTUM,
    FAKE_QUANT_CLASSES,
    MIN_RANGE_WIDTH,
    ActivationRange,
    FakeQuantMatmul,
    PixelRange,
    ProbabilityRange,
    make_fake_quant,
    make_fake_quant_attention,
)


def fake_quant_layers(model) -> list:
    """The fake-quantized matmul layers in `model` (empty for a float model).

    Example:
        >>> fake_quant_layers(tiny_model)
        []
    """
    return [layer for layer in model._flatten_layers(include_self=True) if isinstance(layer, FakeQuantMatmul)]


def is_quantize_aware(model) -> bool:
    """Whether `model` runs fake-quantized matmuls (built by `quantize_aware`, or loaded from one's file).

    Example:
        >>> is_quantize_aware(tiny_model)
        False
    """
    return bool(fake_quant_layers(model))


def activation_ranges(model) -> dict[str, tuple[float, float, int]]:
    """`{path: (minimum, maximum, batches seen)}` of every activation range in a quantization-aware `model`.

    Example:
        >>> ranges = activation_ranges(quantize_aware(tiny_model))
        >>> sorted(ranges)[0], ranges[sorted(ranges)[0]]
        ('Transformer_encoderblock_0/MlpBlock_3/Dense_0/input_range', (-6.0, 6.0, 0))
    """
    ranges = {}
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, ActivationRange):
            values = [float(keras.ops.convert_to_numpy(v)) for v in (layer.minimum, layer.maximum, layer.updates)]
            ranges[layer.path or layer.name] = (values[0], values[1], int(values[2]))
    return ranges


def check_learned_ranges(model) -> None:
    """Raise a `ValueError` naming the layers unless every activation range of `model` was learned (it saw at
    least one training batch) and is wider than `MIN_RANGE_WIDTH`: an int8 file needs a real grid for each.

    Example:
        >>> check_learned_ranges(quantize_aware(tiny_model))
        Traceback (most recent call last):
        ...
        ValueError: ...never learned...
    """
    ranges = activation_ranges(model)
    unlearned = sorted(path for path, (_, _, updates) in ranges.items() if updates == 0)
    if unlearned:
        raise ValueError(
            f"The activation ranges of {len(unlearned)} of {len(ranges)} tensors in {model.name!r} were never "
            f"learned (e.g. {unlearned[0]!r}): fine-tune the quantization-aware model (model.fit or "
            "vit_keras.training.train(..., quantize_aware=True)) for at least one step, or call "
            "vit_keras.quantization.calibrate(model, images), before exporting it to int8."
        )
    collapsed = sorted(path for path, (low, high, _) in ranges.items() if high - low < MIN_RANGE_WIDTH)
    if collapsed:
        path = collapsed[0]
        raise ValueError(
            f"The activation range of {path!r} in {model.name!r} collapsed to zero width {ranges[path][:2]} "
            f"({len(collapsed)} tensor(s) in all): the layer's output is constant on the training data, so int8 has "
            "no grid for it. Check the inputs the model was fine-tuned on (all-black or constant images?), "
            "then fine-tune it again."
        )


def _check_float(model) -> None:
    if not isinstance(model, keras.Model):
        raise ValueError(
            f"quantize_aware takes a keras.Model (e.g. vit_keras.ViTB16(...)), got {type(model).__name__}.")
    if is_quantize_aware(model):
        raise ValueError(f"{model.name!r} is already quantization-aware; fine-tune it as it is.")
    quantized = {layer.path or layer.name: layer.quantization_mode
                 for layer in model._flatten_layers(include_self=True) if layer.quantization_mode}
    if quantized:
        path, mode = next(iter(quantized.items()))
        raise ValueError(
            f"{model.name!r} is already quantized by model.quantize ({path!r} is {mode}; {len(quantized)} layer(s) "
            "in all): quantization-aware training starts from the float model. Call quantize_aware on the model "
            "before model.quantize (or reload the float checkpoint)."
        )
    if not any(type(layer) in FAKE_QUANT_CLASSES for layer in model._flatten_layers(include_self=False)):
        raise ValueError(f"{model.name!r} has no Dense or EinsumDense layer to quantize.")


def _ends_in_softmax(model) -> bool:
    """Whether `model`'s output is a softmax's (its `predictions` layer, or a `Dense(n, activation="softmax")`)."""
    last = model.layers[-1]
    activation = getattr(last, "activation", None)
    return isinstance(last, keras.layers.Softmax) or getattr(activation, "__name__", None) == "softmax"


def _copy(model):
    """A copy of `model` with its own variables, so that the float model stays as it was."""
    copy = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    copy.set_weights(model.get_weights())
    return copy


@keras.saving.register_keras_serializable(package="vit_keras")
class QuantizeAwareModel(keras.Model):
    """A float model whose matmuls run fake-quantized to int8 (see the module): build it with `quantize_aware`.

    `float_model` is the inner copy (a vit_keras model), fake-quantized in place; its ranges and weights are the
    ones this model trains.
    """

    def __init__(self, model, momentum=DEFAULT_MOMENTUM, name=None, **kwargs):
        if isinstance(model, dict):  # from a config: the float model's, rebuilt and fake-quantized again
            model = keras.saving.deserialize_keras_object(model)
        float_config = json.dumps(keras.saving.serialize_keras_object(model))
        for layer in list(model._flatten_layers(include_self=False)):
            if type(layer) in FAKE_QUANT_CLASSES:
                make_fake_quant(layer, momentum)
            elif isinstance(layer, keras.layers.MultiHeadAttention):
                make_fake_quant_attention(layer)
        if not isinstance(model.input, keras.KerasTensor):
            raise ValueError(f"quantize_aware takes a model of one image input; {model.name!r} takes "
                             f"{keras.tree.map_structure(lambda x: tuple(x.shape), model.input)}.")
        images = keras.Input(batch_shape=model.input.shape, dtype=model.input.dtype, name=model.input.name)
        rescales = any(isinstance(layer, keras.layers.Rescaling) for layer in model._flatten_layers())
        # A model that rescales [0, 255] itself reads pixels, which an integer-input file takes as uint8; one that
        # takes [-1, 1] is left as it is (its signature rescales in float).
        outputs = model(PixelRange(name="pixel_range")(images) if rescales else images)
        if _ends_in_softmax(model):
            outputs = ProbabilityRange(name="probability_range")(outputs)
        super().__init__(images, outputs, name=name or f"{model.name}_qat", **kwargs)
        self._float_config = float_config
        self.momentum = float(momentum)

    @property
    def float_model(self):
        """The inner vit_keras model (fake-quantized in place)."""
        return next(layer for layer in self.layers if isinstance(layer, keras.Model))

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable, "model": json.loads(self._float_config),
                "momentum": self.momentum}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return cls(**config)


def quantize_aware(model, momentum=DEFAULT_MOMENTUM):
    """A quantization-aware copy of the float `model`, to fine-tune, then export with
    `vit_keras.export.tflite(qat, path, quantization="int8")` (no representative dataset needed).

    Each `Dense` / `EinsumDense` rounds its input and output to int8 per tensor, on ranges learned as moving
    averages of each training batch's min and max (`momentum`: how much of the old range each batch keeps; the
    first batch sets it), and its kernel symmetrically per output channel; the straight-through gradient trains
    the float weights under that rounding. `model` itself is left unchanged.

    Args:
        model: a float vit_keras model (any family, RoPE, MAP head, registers), not one quantized by
            `model.quantize`.
        momentum: the moving averages' momentum, in [0, 1).

    Returns:
        A `QuantizeAwareModel` with `model`'s inputs and outputs.

    Example:
        >>> qat = quantize_aware(tiny_model)
        >>> qat.compile(optimizer="adam", loss="sparse_categorical_crossentropy")  # then qat.fit(...)
        >>> len(activation_ranges(qat))  # an input and an output range per matmul
        28
    """
    _check_float(model)
    ActivationRange(momentum)  # checks it before copying the model
    return QuantizeAwareModel(_copy(model), momentum=momentum)


def calibrate(model, images, batch_size=32) -> None:
    """Set the activation ranges of a quantization-aware `model` from `images` (N, H, W, 3) in [0, 255] without
    training: each range is the moving average over the batches, as in training, with the weights unchanged.

    Example:
        >>> qat = quantize_aware(tiny_model)
        >>> calibrate(qat, images)
        >>> min(updates for _, _, updates in activation_ranges(qat).values()) > 0
        True
    """
    ranges = [layer for layer in model._flatten_layers(include_self=False) if isinstance(layer, ActivationRange)]
    if not ranges:
        raise ValueError(f"{model.name!r} is not quantization-aware: build it with quantize_aware(model) first.")
    for start in range(0, len(images), batch_size):
        model(images[start:start + batch_size], training=True)  # only the ranges move: no optimizer step
