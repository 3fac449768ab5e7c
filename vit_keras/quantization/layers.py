"""Fake int8 quantization of the matmuls: the kernels per output channel, the activations per tensor.

A fake-quantized `Dense` or `EinsumDense` computes in float what the int8 kernel of a TFLite `FULLY_CONNECTED` or
`BATCH_MATMUL` will compute: its input rounded to one int8 grid per tensor, its kernel rounded to 255 symmetric
steps per output channel (`[-127, 127]`, zero point 0, the scale `max|w| / 127` of that channel, as TFLite's int8
spec requires of weights), and its output (after the bias) rounded to the output tensor's grid. Rounding uses
`keras.quantizers.fake_quant_with_min_max_vars`, which is `tf.quantization.fake_quant_with_min_max_vars` (and
`_per_channel`) on TensorFlow, so the TFLite converter reads the ranges from the graph, and the same arithmetic
with the same straight-through gradient on JAX and PyTorch: the gradient passes unchanged where the value lies
inside the range and is zero outside it.

Activation ranges are moving averages of each training batch's min and max (`ActivationRange`), not learned by
gradient descent: fine-tuning a float checkpoint, the averages settle on the distribution the layer sees within a
few dozen steps with no learning rate of their own to tune, and the gradient of a learned range (LSQ, PACT) is
only as good as that learning rate. This is also what TensorFlow's own quantization-aware training does.
"""

from __future__ import annotations

import contextlib
import math

import keras
from keras import ops

NUM_BITS = 8
DEFAULT_MOMENTUM = 0.99
# The range a layer starts from, before the first training batch (or calibration) sets it: wide enough that an
# untrained model still computes, and flagged by `updates == 0` so that export refuses it.
INITIAL_RANGE = (-6.0, 6.0)
# A range narrower than this cannot be an int8 grid of a real activation: every value would round to the same step.
MIN_RANGE_WIDTH = 1e-6


def fake_quant(x, minimum, maximum, axis=None, narrow_range=False):
    """`x` rounded to the int8 grid of `[minimum, maximum]` (per tensor, or per channel along `axis`), in float.

    Example:
        >>> round(float(fake_quant(ops.convert_to_tensor(0.3), -1.0, 1.0)), 4)  # steps of 2/255 from -256/255
        0.298
    """
    return keras.quantizers.fake_quant_with_min_max_vars(
        x, minimum, maximum, num_bits=NUM_BITS, narrow_range=narrow_range, axis=axis
    )


# The smallest channel range: an all-zero channel (a zero-initialised head) has no range of its own, and a zero
# step is 0 / 0 in the rounding on JAX and PyTorch (TensorFlow's kernel returns 0). Its weights stay exactly 0.
MIN_KERNEL_BOUND = 1e-12


def kernel_bounds(kernel_2d):
    """Each output channel's `max |w|` of a kernel laid out (inputs, outputs): the symmetric range of its int8
    weights. A range is a function of the weights, not a trained variable, so no gradient flows into it."""
    return ops.stop_gradient(ops.maximum(ops.max(ops.abs(kernel_2d), axis=0), MIN_KERNEL_BOUND))


# While a TFLite file is written: each kernel is rounded with plain arithmetic, which the converter folds into a
# constant it then quantizes per output channel itself, onto the same grid. A per-channel FakeQuant op on a
# `(inputs, outputs)` kernel stops the converter, which transposes it to `(outputs, inputs)` for FULLY_CONNECTED
# and cannot move the quantized axis along ("'tfl.transpose' op has mismatched quantized axes").
_ROUND_FOR_CONVERTER = [False]


@contextlib.contextmanager
def kernels_rounded_for_converter():
    """Within: kernels are rounded with `round(w / s) * s` (the same per-channel grid), not a FakeQuant op.

    Example:
        >>> with kernels_rounded_for_converter():
        ...     q = fake_quant_kernel(ops.convert_to_tensor([[1.0, 0.5], [-0.3, 0.25]]), output_axes=(1,))
        >>> [round(float(v), 4) for v in ops.convert_to_numpy(q)[:, 0]]
        [1.0, -0.2992]
    """
    _ROUND_FOR_CONVERTER[0] = True
    try:
        yield
    finally:
        _ROUND_FOR_CONVERTER[0] = False


def _round_to_grid(kernel_2d, bounds):
    """`fake_quant(kernel_2d, -bounds, bounds, axis=-1, narrow_range=True)` in TensorFlow's own arithmetic (its
    nudged range, `floor(x + 0.5)`), so that a weight exactly halfway between two steps rounds the same way."""
    steps = 2.0 ** NUM_BITS - 2.0  # narrow range: quantized values 1 ... 255
    scale = (2.0 * bounds) / steps
    zero_point = ops.round(1.0 + bounds / scale)  # 128, up to float32 rounding before it is rounded
    nudged_min = (1.0 - zero_point) * scale
    nudged_max = (steps + 1.0 - zero_point) * scale
    shifted = ops.clip(kernel_2d, nudged_min, nudged_max) - nudged_min
    return ops.floor(shifted * (1.0 / scale) + 0.5) * scale + nudged_min


def fake_quant_kernel(kernel, output_axes):
    """`kernel` with each output channel rounded to 255 symmetric int8 steps (`[-127, 127] x max|w| / 127`).

    `output_axes`: the kernel axes that index output channels (the last for a `Dense`; for an `EinsumDense`, the
    kernel axes that appear in the output, e.g. heads and head width of a query projection). They are moved last
    and flattened into one channel axis, as the TFLite converter lays the weights out.

    Example:
        >>> q = fake_quant_kernel(ops.convert_to_tensor([[1.0, 0.5], [-0.3, 0.25]]), output_axes=(1,))
        >>> [round(float(v), 4) for v in ops.convert_to_numpy(q)[:, 0]]
        [1.0, -0.2992]
    """
    rank = len(kernel.shape)
    output_axes = sorted(axis % rank for axis in output_axes)
    input_axes = [axis for axis in range(rank) if axis not in output_axes]
    order = input_axes + output_axes
    moved = kernel if order == list(range(rank)) else ops.transpose(kernel, order)
    moved_shape = [int(kernel.shape[axis]) for axis in order]
    inputs = math.prod(moved_shape[: len(input_axes)])
    flat = ops.reshape(moved, (inputs, -1))
    bounds = kernel_bounds(flat)
    if _ROUND_FOR_CONVERTER[0]:
        flat = _round_to_grid(flat, bounds)
    else:
        # Every weight lies inside its channel's range by construction, so the straight-through gradient is the
        # identity; written as such, since JAX and PyTorch nudge the range in their own float32 arithmetic and can
        # put a channel's largest weight a rounding outside it, which would zero that weight's gradient.
        rounded = fake_quant(flat, -bounds, bounds, axis=-1, narrow_range=True)
        flat = flat + ops.stop_gradient(rounded - flat)
    if len(moved_shape) == 2 and order == [0, 1]:
        return flat
    moved = ops.reshape(flat, moved_shape)
    if order == list(range(rank)):
        return moved
    inverse = [order.index(axis) for axis in range(rank)]
    return ops.transpose(moved, inverse)


@keras.saving.register_keras_serializable(package="vit_keras")
class PixelRange(keras.layers.Layer):
    """Images in [0, 255] rounded to whole pixel values: the uint8 grid an integer-input TFLite file reads
    (`integer_io=True`), and the range the converter gives the input tensor. Integer pixels pass unchanged.

    Example:
        >>> [float(v) for v in PixelRange()(ops.convert_to_tensor([0.0, 12.4, 300.0]))]
        [0.0, 12.0, 255.0]
    """

    def call(self, images):
        return fake_quant(images, 0.0, 255.0)

    def compute_output_shape(self, input_shape):
        return input_shape


# TFLite's int8 softmax output: scale 1/256, zero point -128, i.e. the 256 steps k/256 of [0, 255/256].
PROBABILITY_RANGE = (0.0, 255.0 / 256.0)


@keras.saving.register_keras_serializable(package="vit_keras")
class ProbabilityRange(keras.layers.Layer):
    """Probabilities rounded to TFLite's int8 softmax grid (steps of 1/256), as the int8 file computes them: the
    attention weights before their product with the values, and a classifier's output.

    Example:
        >>> [float(v) for v in ProbabilityRange()(ops.convert_to_tensor([0.0, 0.5, 0.0021]))]
        [0.0, 0.5, 0.00390625]
    """

    def call(self, probabilities, training=False):
        # Training reads the loss from the unrounded probabilities: a true class rounded to 0 would be clipped by
        # the cross-entropy and give no gradient at all.
        return probabilities if training else fake_quant(probabilities, *PROBABILITY_RANGE)

    def compute_output_shape(self, input_shape):
        return input_shape


class FakeQuantSoftmax(keras.layers.Softmax):
    """The attention's `Softmax` with its output on the int8 grid the converter gives it (`ProbabilityRange`):
    the int8 file multiplies int8 attention weights with the int8 values."""

    def call(self, inputs, mask=None):
        return fake_quant(super().call(inputs, mask=mask), *PROBABILITY_RANGE)


def make_fake_quant_attention(layer):
    """Round the attention weights of a `keras.layers.MultiHeadAttention` (vit_keras' attention layers included)
    to the int8 softmax grid, in place: its softmax becomes a `FakeQuantSoftmax`, and a vit_keras attention takes
    its explicit-scores path (`attention_path="einsum"`), the one that calls that softmax.

    Example:
        >>> attention = keras.layers.MultiHeadAttention(2, 4); attention.build((1, 3, 8), (1, 3, 8))
        >>> type(make_fake_quant_attention(attention)._softmax).__name__
        'FakeQuantSoftmax'
    """
    if type(layer._softmax) is keras.layers.Softmax:
        layer._softmax.__class__ = FakeQuantSoftmax
    if hasattr(layer, "attention_path"):
        layer.attention_path = "einsum"
    return layer


@keras.saving.register_keras_serializable(package="vit_keras")
class ActivationRange(keras.layers.Layer):
    """One tensor's int8 range, learned as moving averages of each training batch's min and max.

    In training it updates `minimum` / `maximum` (the first batch sets them, as does every batch while the range
    is empty; later ones move them by `1 - momentum`), then fake-quantizes its input on the updated range; in
    inference it only fake-quantizes. The range always contains 0, so that zero (padding, ReLU's floor) is exact.
    `updates` counts the batches seen: 0 means the range was never learned.

    Example:
        >>> activation_range = ActivationRange()
        >>> _ = activation_range(ops.convert_to_tensor([[-1.0, 2.0]]), training=True)
        >>> [float(v) for v in (activation_range.minimum, activation_range.maximum, activation_range.updates)]
        [-1.0, 2.0, 1.0]
    """

    def __init__(self, momentum=DEFAULT_MOMENTUM, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= float(momentum) < 1.0:
            raise ValueError(f"`momentum` must be in [0, 1), got {momentum!r}.")
        self.momentum = float(momentum)

    def build(self, input_shape=None):
        low, high = INITIAL_RANGE
        self.minimum = self.add_weight(shape=(), initializer=keras.initializers.Constant(low), trainable=False,
                                       name="minimum", dtype="float32")
        self.maximum = self.add_weight(shape=(), initializer=keras.initializers.Constant(high), trainable=False,
                                       name="maximum", dtype="float32")
        self.updates = self.add_weight(shape=(), initializer="zeros", trainable=False, name="updates",
                                       dtype="float32")
        self.built = True

    def observe(self, x):
        """Move the range towards `x`'s min and max (set it, on the first batch)."""
        x = ops.cast(ops.stop_gradient(x), "float32")
        low = ops.minimum(ops.min(x), 0.0)
        high = ops.maximum(ops.max(x), 0.0)
        # Set, not averaged, while the range is still empty: a zero-initialised head's first batch is all zeros,
        # and averaging up from that would clip the head's outputs (and zero their gradient) for hundreds of steps.
        first = ops.logical_or(ops.equal(self.updates, 0.0), self.maximum - self.minimum < MIN_RANGE_WIDTH)
        keep = self.momentum
        self.minimum.assign(ops.where(first, low, keep * self.minimum + (1.0 - keep) * low))
        self.maximum.assign(ops.where(first, high, keep * self.maximum + (1.0 - keep) * high))
        self.updates.assign(self.updates + 1.0)

    def call(self, x, training=False):
        if training:
            self.observe(x)
        # A zero-width range (a zero-initialised head's first batch) has no grid: the rounding would divide by a
        # zero step and give NaN. It is widened to MIN_RANGE_WIDTH; export refuses a range that stays that narrow.
        return fake_quant(x, self.minimum, ops.maximum(self.maximum, self.minimum + MIN_RANGE_WIDTH))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum}


class FakeQuantMatmul:
    """Mixin for `Dense` / `EinsumDense`: input, kernel and output fake-quantized around the layer's own matmul.

    A float layer becomes one in place (`enable_fake_quant`), keeping its variables, so that the model around it
    (a functional graph, a Transformer block) is unchanged; the ranges are two `ActivationRange` sub-layers,
    `input_range` and `output_range`. The activation (the `Dense`'s own, e.g. `pre_logits`' tanh) runs after the
    output's rounding, in float, as the int8 converter leaves an activation it cannot fuse.
    """

    def enable_fake_quant(self, momentum=DEFAULT_MOMENTUM):
        self._tracker.unlock()  # a built layer locks its state; new sub-layers need it open, as `quantize` does
        self.input_range = ActivationRange(momentum, name="input_range")
        self.output_range = ActivationRange(momentum, name="output_range")
        with self._open_name_scope():  # their variables' paths under this layer's, as if it had built them
            self.input_range.build()
            self.output_range.build()
        self._tracker.lock()

    def _fake_quant_matmul(self, inputs, training):
        x = self.input_range(inputs, training=training)
        y = self._matmul(x, fake_quant_kernel(self.kernel, self.kernel_output_axes))
        if self.bias is not None:
            y = ops.add(y, self.bias)
        y = self.output_range(y, training=training)
        if self.activation is not None:
            y = self.activation(y)
        return y


@keras.saving.register_keras_serializable(package="vit_keras")
class FakeQuantDense(FakeQuantMatmul, keras.layers.Dense):
    """A `Dense` whose matmul runs with fake int8 quantization (see `FakeQuantMatmul`)."""

    kernel_output_axes = (1,)

    def _matmul(self, x, kernel):
        return ops.matmul(x, kernel)

    def call(self, inputs, training=None):
        if len(inputs.shape) <= 2:
            return self._fake_quant_matmul(inputs, training)
        # Tokens as rows of one matrix: a rank-3 matmul becomes reshape, MatMul, reshape, and the bias and the
        # output's rounding after the second reshape would keep the converter from fusing them into an int8
        # FULLY_CONNECTED (it would run in float).
        leading = ops.shape(inputs)[:-1]
        outputs = self._fake_quant_matmul(ops.reshape(inputs, (-1, inputs.shape[-1])), training)
        return ops.reshape(outputs, (*leading, self.units))


@keras.saving.register_keras_serializable(package="vit_keras")
class FakeQuantEinsumDense(FakeQuantMatmul, keras.layers.EinsumDense):
    """An `EinsumDense` whose matmul runs with fake int8 quantization (see `FakeQuantMatmul`)."""

    @property
    def kernel_output_axes(self):
        inputs, outputs = self.equation.split("->")
        kernel = inputs.split(",")[1]
        return tuple(axis for axis, letter in enumerate(kernel) if letter in outputs)

    def _matmul(self, x, kernel):
        return ops.einsum(self.equation, x, kernel)

    def call(self, inputs, training=None):
        return self._fake_quant_matmul(inputs, training)


FAKE_QUANT_CLASSES = {keras.layers.Dense: FakeQuantDense, keras.layers.EinsumDense: FakeQuantEinsumDense}


def make_fake_quant(layer, momentum=DEFAULT_MOMENTUM):
    """Turn a built float `Dense` / `EinsumDense` into its fake-quantized class, in place, keeping its weights.

    Example:
        >>> dense = keras.layers.Dense(2); dense.build((None, 3))
        >>> type(make_fake_quant(dense)).__name__
        'FakeQuantDense'
    """
    layer.__class__ = FAKE_QUANT_CLASSES[type(layer)]
    layer.enable_fake_quant(momentum)
    return layer
