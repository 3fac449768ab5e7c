"""How a layer tells the weight loader which checkpoint array each of its variables holds.

Every vit_keras layer with variables has a `checkpoint_variables()` method returning
`{relative checkpoint name: CheckpointVariable}`; Keras' own `Dense`, `LayerNormalization`, `GroupNormalization` and
convolutions are described here once. The loader walks the model's layers and joins the names with each layer's
prefix, so it never reaches into a layer's attributes.

Example:
    >>> import keras
    >>> dense = keras.layers.Dense(4); dense.build((None, 3))
    >>> sorted(checkpoint_variables(dense))
    ['bias', 'kernel']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import keras
import numpy as np


def _identity(array: np.ndarray) -> np.ndarray:
    return array


@dataclasses.dataclass
class CheckpointVariable:
    """One model variable, the shape its checkpoint array has, how that array becomes the variable's value
    (`convert`) and back (`inverse`: the variable's value as the checkpoint array; needed whenever `convert` is
    not the identity).

    Example:
        >>> CheckpointVariable(None, (3,)).shape
        (3,)
    """

    variable: object
    shape: tuple
    convert: Callable[[np.ndarray], np.ndarray] = _identity
    inverse: Callable[[np.ndarray], np.ndarray] | None = None

    def checkpoint_value(self) -> np.ndarray:
        """The variable's current value in the checkpoint layout, as float32.

        Example:
            >>> plain(keras.Variable(np.ones(2))).checkpoint_value()
            array([1., 1.], dtype=float32)
        """
        value = np.asarray(keras.ops.convert_to_numpy(self.variable), np.float32)
        if self.inverse is not None:
            value = self.inverse(value)
        elif self.convert is not _identity:
            raise ValueError(f"The variable {getattr(self.variable, 'path', self.variable)!r} converts its checkpoint "
                             "array but declares no inverse; it cannot be written back.")
        if tuple(value.shape) != tuple(self.shape):
            raise ValueError(f"The variable {getattr(self.variable, 'path', self.variable)!r} gives a checkpoint "
                             f"array of shape {tuple(value.shape)}, not the declared {tuple(self.shape)}.")
        return value


def plain(variable) -> CheckpointVariable:
    """A variable stored in the checkpoint with its own shape.

    Example:
        >>> plain(keras.Variable(np.zeros(3))).shape
        (3,)
    """
    return CheckpointVariable(variable, tuple(variable.shape))


def _refuse_quantized(layer) -> None:
    """A quantized layer (`model.quantize`, or a quantized dtype policy) holds integer values and their scales, not
    a checkpoint's float arrays: nothing is read into it or written from it."""
    mode = getattr(layer, "quantization_mode", None)
    if mode:
        raise ValueError(
            f"{layer.path or layer.name!r} is quantized ({mode}): quantized layers hold {mode} values and scales, "
            "not a checkpoint's float arrays, so nothing was loaded into them or written from them. Load a float "
            f"checkpoint into the float model first, then quantize: vit_keras.load_weights(model, ...); "
            f"model.quantize({mode!r}); save or convert the float model, before model.quantize."
        )


def checkpoint_variables(layer) -> dict[str, CheckpointVariable]:
    """The checkpoint names (relative to the layer) of `layer`'s variables; a quantized layer is refused (its
    variables are not a checkpoint's float arrays).

    Example:
        >>> norm = keras.layers.LayerNormalization(); norm.build((None, 4))
        >>> sorted(checkpoint_variables(norm))
        ['bias', 'scale']
    """
    _refuse_quantized(layer)
    own = getattr(layer, "checkpoint_variables", None)
    if callable(own):
        return own()
    if isinstance(layer, keras.layers.LayerNormalization | keras.layers.GroupNormalization):
        out = {}
        if layer.gamma is not None:
            out["scale"] = plain(layer.gamma)
        if layer.beta is not None:
            out["bias"] = plain(layer.beta)
        return out
    if isinstance(layer, keras.layers.Dense | keras.layers.EinsumDense | keras.layers.Conv2D):
        out = {"kernel": plain(layer.kernel)}
        if getattr(layer, "bias", None) is not None:
            out["bias"] = plain(layer.bias)
        return out
    if layer.weights:
        raise ValueError(f"Layer {layer.name!r} ({type(layer).__name__}) does not declare its checkpoint names.")
    return {}


def nested(prefix: str, layer) -> dict[str, CheckpointVariable]:
    """`checkpoint_variables(layer)` with `prefix/` in front of every name.

    Example:
        >>> dense = keras.layers.Dense(2); dense.build((None, 2))
        >>> sorted(nested("head", dense))
        ['head/bias', 'head/kernel']
    """
    return {f"{prefix}/{name}": value for name, value in checkpoint_variables(layer).items()}
