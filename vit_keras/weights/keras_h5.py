"""Load a Keras `.weights.h5` strictly and all or nothing.

`model.load_weights` ignores arrays of layers the model does not have (a 3-layer file loads into a 2-layer model
without a word) and, for a file that does not fit, raises only after it assigned every layer before the first
mismatch. Here the file's structure is read with h5py first and compared with the arrays the model itself would
write (the same Keras walk as `model.save_weights`); every missing, unexpected and mis-shaped array is listed, and
nothing is assigned unless everything fits.

Only the model's weights are loaded: training state stored beside them (the `optimizer/` group that
`save_weights` writes for a compiled model) is not part of the comparison and is left out.

Example:
    >>> import vit_keras
    >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)
    >>> model.save_weights("vit.weights.h5")
    >>> load_keras_weights(model, "vit.weights.h5")
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from vit_keras.weights.safetensors_io import check_finite

# Top-level groups of a `.weights.h5` that hold the model's own weights: `layers/...` and the model's own `vars`.
MODEL_GROUPS = ("layers", "vars")


@dataclasses.dataclass(frozen=True)
class WeightsMismatch:
    """How a `.weights.h5` differs from a model, by file path (`layers/<layer>/.../vars/<i>`).

    Example:
        >>> WeightsMismatch(missing={}, unexpected={}, mis_shaped={}).fits
        True
    """

    missing: dict  # path -> (model variable path, shape)
    unexpected: dict  # path -> (layer name in the file, shape)
    mis_shaped: dict  # path -> (model variable path, model shape, file shape)

    @property
    def fits(self) -> bool:
        return not (self.missing or self.unexpected or self.mis_shaped)

    def describe(self) -> str:
        """One line per differing array."""
        lines = []
        lines += [f"  missing from the file: {path} ({name}, shape {shape})"
                  for path, (name, shape) in self.missing.items()]
        lines += [f"  not in the model: {path} (layer {name!r}, shape {shape})"
                  for path, (name, shape) in self.unexpected.items()]
        lines += [f"  shape differs: {path} ({name}): model {model_shape}, file {file_shape}"
                  for path, (name, model_shape, file_shape) in self.mis_shaped.items()]
        return "\n".join(lines)


def _is_model_path(path: str) -> bool:
    return path.split("/", 1)[0] in MODEL_GROUPS


def expected_arrays(model) -> dict:
    """The arrays `model.save_weights` would write, by file path, as `{path: variable}` (optimizer state left out).

    Recorded with Keras's own saving walk and a store that keeps the variables instead of writing them, so the
    paths are exactly those Keras reads back.

    Example:
        >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="head")])
        >>> sorted(expected_arrays(model))[0]
        'layers/dense/vars/0'
    """
    from keras.src.saving import saving_lib

    class RecordingStore(saving_lib.H5IOStore):
        def __init__(self):  # no HDF5 file: nothing is written
            self.mode = "w"
            self.archive = None
            self.recorded = {}
            self._entry_path = ""

        def __bool__(self):
            return True

        def make(self, path, metadata=None):
            self._entry_path = path
            return self

        def __setitem__(self, key, value):
            prefix = f"{self._entry_path}/vars" if self._entry_path else "vars"
            self.recorded[f"{prefix}/{key}"] = value

        def close(self):
            pass

    store = RecordingStore()
    optimizer = getattr(model, "optimizer", None)
    skip = {id(optimizer)} if optimizer is not None else set()
    saving_lib._save_state(model, weights_store=store, assets_store=None, inner_path="", visited_saveables=skip)
    return {path: value for path, value in store.recorded.items() if _is_model_path(path)}


def file_arrays(h5_file) -> dict:
    """`{path: (layer name, shape)}` of the model's arrays in an open `.weights.h5` (h5py.File).

    Example:
        >>> import h5py
        >>> model = keras.Sequential([keras.Input((768,)), keras.layers.Dense(1000, name="head")])
        >>> model.save_weights("vit.weights.h5")
        >>> with h5py.File("vit.weights.h5") as f:
        ...     file_arrays(f)["layers/dense/vars/0"]
        ('head', (768, 1000))
    """
    import h5py

    found = {}

    def layer_name(path):
        """The saved layers' own names along `path` (Keras stores them on each `vars` group), e.g.
        `Transformer_encoderblock_2/MultiHeadDotProductAttention_1/key`."""
        parts = path.split("/")[:-2]  # drop "vars/<i>"
        names = []
        for depth in range(2, len(parts) + 1):
            group = h5_file.get("/".join(parts[:depth] + ["vars"]))
            if group is not None and "name" in group.attrs:
                names.append(str(group.attrs["name"]))
        return "/".join(names) or os.path.dirname(path)

    def visit(path, item):
        if isinstance(item, h5py.Dataset) and _is_model_path(path):
            found[path] = (layer_name(path), tuple(item.shape))

    h5_file.visititems(visit)
    return found


def compare(model, h5_file) -> tuple[dict, WeightsMismatch]:
    """The model's variables by file path, and how the open `.weights.h5` differs from them.

    Example:
        >>> import h5py
        >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="head")])
        >>> model.save_weights("vit.weights.h5")
        >>> with h5py.File("vit.weights.h5") as f:
        ...     compare(model, f)[1].fits
        True
    """
    expected = expected_arrays(model)
    stored = file_arrays(h5_file)
    missing, mis_shaped = {}, {}
    for path, variable in expected.items():
        shape = tuple(variable.shape)
        name = getattr(variable, "path", path)
        if path not in stored:
            missing[path] = (name, shape)
        elif stored[path][1] != shape:
            mis_shaped[path] = (name, shape, stored[path][1])
    unexpected = {path: entry for path, entry in stored.items() if path not in expected}
    return expected, WeightsMismatch(missing=missing, unexpected=unexpected, mis_shaped=mis_shaped)


def _read(dataset) -> np.ndarray:
    value = dataset[()]
    if dataset.attrs.get("dtype") == "bfloat16":  # how Keras marks bfloat16 arrays
        import ml_dtypes

        value = np.array(value, dtype=ml_dtypes.bfloat16)
    return np.asarray(value)


def _quantization_hint(model) -> str:
    from vit_keras.layers.dtypes import quantized_layers

    if not quantized_layers(model):
        return (" (if they come from a quantized model: build this one with `dtype=` the quantized model's "
                "vit_keras.layers.dtypes.policy_map)")
    return ("; this model is quantized and the weights of a float model do not fit it: load them into the float "
            "model, then call model.quantize(...)")


def load_keras_weights(model, path) -> None:
    """Load a `.weights.h5` written by `model.save_weights` into `model`: all arrays, or none.

    Raises a `ValueError` that lists every array missing from the file, every array the model does not have and
    every shape that differs, before anything is assigned; and one naming the file when it is not readable HDF5.

    Example:
        >>> import vit_keras
        >>> tiny = dict(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)
        >>> vit_keras.ViT(**tiny).save_weights("tiny.weights.h5")
        >>> load_keras_weights(vit_keras.ViT(**tiny), "tiny.weights.h5")
        >>> load_keras_weights(vit_keras.ViT(**tiny, classes=10), "tiny.weights.h5")
        Traceback (most recent call last):
        ValueError: ...
    """
    import h5py
    import keras

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"Weights file {path!r} does not exist; check the path.")
    try:
        with h5py.File(path, "r") as h5_file:
            expected, mismatch = compare(model, h5_file)
            if not mismatch.fits:
                counts = (f"{len(mismatch.missing)} missing, {len(mismatch.unexpected)} unexpected, "
                          f"{len(mismatch.mis_shaped)} of another shape")
                raise ValueError(
                    f"{path!r} does not fit this model ({counts}); nothing was loaded. Build the model with the "
                    f"same arguments as the one that saved the weights{_quantization_hint(model)}.\n"
                    f"{mismatch.describe()}"
                )
            # Everything is read before anything is assigned, so a read error leaves the model untouched.
            values = {key: _read(h5_file[key]) for key in expected}
            check_finite(values, repr(path))
    except OSError as error:  # h5py: not HDF5, truncated, or unreadable
        raise ValueError(f"{path!r} is not a readable Keras weights file ({error}); save or download it "
                         "again.") from error
    if not all(isinstance(variable, keras.Variable) for variable in expected.values()):
        # A layer that saves computed arrays (not its variables): the layout is checked, Keras's reader loads it.
        from keras.src.saving import saving_lib

        optimizer = getattr(model, "optimizer", None)
        saving_lib.load_weights_only(model, path, objects_to_skip=[optimizer] if optimizer else None)
        return
    for key, variable in expected.items():
        variable.assign(values[key])
