"""Read `.safetensors` files with `safetensors.numpy`: plain tensors, no code, no torch.

Example:
    >>> tensors = read_safetensors("tests/fixtures/family/timm_deit_distilled/checkpoint/model.safetensors")
    >>> tensors.path
    'tests/fixtures/family/timm_deit_distilled/checkpoint/model.safetensors'
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

PICKLE_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt", ".pkl")
# Integer buffers a PyTorch state dict may carry next to the weights (not weights themselves); `summary_idxs` is
# RADIO's choice of class tokens for its summary (checked against its config by the transformers reader).
INDEX_BUFFERS = ("position_ids", "num_batches_tracked", "relative_position_index", "summary_idxs")


def refuse_pickle(path: str) -> None:
    """Raise for PyTorch pickle checkpoints, pointing at the safetensors twin.

    Example:
        >>> refuse_pickle("model.safetensors")
    """
    if path.lower().endswith(PICKLE_SUFFIXES):
        raise ValueError(
            f"{path!r} is a PyTorch pickle file; vit_keras does not load pickles (unpickling can run code). "
            "Use the checkpoint's .safetensors twin: timm and Hugging Face publish `model.safetensors` next to "
            "it on the Hub, or re-save with `safetensors.torch.save_file(model.state_dict(), 'model.safetensors')`."
        )


# Elements tested at a time for NaN and infinity: bounds the temporary mask of a large tensor (4 MiB of booleans).
_FINITE_CHUNK = 1 << 22


def _non_finite_counts(value: np.ndarray) -> tuple[int, int] | None:
    """(NaN count, infinite count) of a floating-point array, or None when every value is finite (or it is not a
    float array)."""
    if not (value.dtype == np.dtype(ml_dtypes.bfloat16) or np.issubdtype(value.dtype, np.floating)):
        return None
    flat = value.reshape(-1)
    chunks = [flat[start:start + _FINITE_CHUNK] for start in range(0, flat.size, _FINITE_CHUNK)]
    if all(np.isfinite(chunk).all() for chunk in chunks):
        return None
    nan = sum(int(np.isnan(chunk).sum()) for chunk in chunks)
    return nan, sum(int((~np.isfinite(chunk)).sum()) for chunk in chunks) - nan


def check_finite(tensors, path) -> None:
    """Refuse a checkpoint with a NaN or infinite value in any floating-point tensor, naming each such tensor (its
    key in the file) and the file. Every file reader (safetensors, Google .npz, Keras .weights.h5) passes its
    tensors here as read, before they are renamed or converted, so the message names what the file holds.

    Example:
        >>> check_finite({"blocks.0.attn.qkv.weight": np.array([1.0, np.nan, np.inf])}, "model.safetensors")
        Traceback (most recent call last):
        ValueError: model.safetensors: tensor 'blocks.0.attn.qkv.weight' has 1 NaN / 1 infinite values; ...
    """
    bad = []
    for name, value in tensors.items():
        counts = _non_finite_counts(np.asarray(value))
        if counts is not None:
            bad.append(f"tensor {name!r} has {counts[0]} NaN / {counts[1]} infinite values")
    if bad:
        shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more tensors" if len(bad) > 5 else "")
        raise ValueError(f"{path}: {shown}; the file is corrupt or was saved after training diverged. Nothing was "
                         "loaded: use an earlier checkpoint, or download the file again.")


_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "I64": np.int64,
           "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _read_raw(path: str) -> dict[str, np.ndarray]:
    """The safetensors layout read directly (8-byte header size, JSON header, raw little-endian data).

    Used for the dtypes `safetensors.numpy` cannot build (bfloat16 has no NumPy type name).
    """
    import json
    import struct

    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    base = 8 + size
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        if spec["dtype"] not in _DTYPES:
            raise ValueError(f"{path!r}: tensor {name!r} has unsupported dtype {spec['dtype']}.")
        start, end = spec["data_offsets"]
        dtype = np.dtype(_DTYPES[spec["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data[base + start : base + end], dtype=dtype).reshape(spec["shape"])
    return out


class TensorFile(dict):
    """The tensors of one file, `{name: array}`, knowing the `path` they were read from (for error messages).

    Example:
        >>> TensorFile({"a": np.zeros(2)}, path="m.safetensors").path
        'm.safetensors'
    """

    def __init__(self, tensors, path: str):
        super().__init__(tensors)
        self.path = path


def read_safetensors(path: str) -> TensorFile:
    """All tensors of a safetensors file as NumPy arrays (bfloat16 and float16 become float32) in a `TensorFile`, a
    dict that knows its path; an integer or boolean tensor is refused with a `ValueError` naming it, except
    PyTorch's index buffers (`INDEX_BUFFERS`), and so is a tensor holding NaN or infinity (`check_finite`).

    Example:
        >>> read_safetensors("tests/fixtures/family/timm_deit_distilled/checkpoint/model.safetensors")[
        ...     "cls_token"].shape
        (1, 1, 48)
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(path)
    except TypeError:  # bfloat16 tensors: safetensors.numpy cannot name the dtype
        try:
            tensors = _read_raw(path)
        except (OSError, ValueError, KeyError) as error:
            raise ValueError(f"{path!r} is not a readable safetensors file ({error}).") from error
    except (SafetensorError, OSError, ValueError) as error:
        raise ValueError(f"{path!r} is not a readable safetensors file ({error}).") from error
    out = {}
    for name, value in tensors.items():
        if value.dtype == np.dtype(ml_dtypes.bfloat16) or np.issubdtype(value.dtype, np.floating):
            out[name] = np.asarray(value, np.float32)
        elif name.rsplit(".", 1)[-1] in INDEX_BUFFERS:
            out[name] = value  # integer bookkeeping PyTorch saves beside the weights; never loaded as a weight
        else:
            # Weights are floating point; an integer or boolean array under a weight's name would be cast to
            # float in silence downstream (the .npz reader refuses them the same way).
            raise ValueError(
                f"{path!r}: tensor {name!r} has dtype {value.dtype}; expected floating-point weights. The file is "
                "not a float checkpoint (quantised or damaged); export the model's float weights again."
            )
    check_finite(out, path)
    return TensorFile(out, path)
