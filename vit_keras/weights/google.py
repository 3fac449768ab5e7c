"""Read Google ViT `.npz` checkpoints (vit_jax, AugReg, big_vision) into the canonical parameter dict.

The canonical dict uses the raw names of the public `gs://vit_models` files (`Transformer/encoderblock_{i}/
MultiHeadDotProductAttention_1/...`, `MlpBlock_3`, `LayerNorm_0/2`), float32 arrays, GroupNorm parameters as
`(C,)` vectors. Every other Google layout is rewritten into it: Linen names, the `opt/target/` prefix, big_vision's
`params/` (or `params/img/`) prefix, top-level `pos_embedding`, scanned blocks stored with a leading layer axis and
arrays stored as bfloat16.

big_vision's ViT adds the position embedding to the patch tokens *before* it concatenates the class token
(models/vit.py: "Add posemb before adding extra token"), so its top-level `pos_embedding` is (1, N, D) for N grid
tokens and the class token has no position embedding. vit_jax stores (1, N+1, D) under
`Transformer/posembed_input/`. A big_vision class-token file therefore gets a zero row in front of its table: the
same function in vit_jax's layout, and resampling then touches the grid part only, as big_vision's does.

Example:
    >>> params = read_npz("tests/fixtures/vitjax_token_raw/checkpoint.npz")  # hidden 48, MLP 96
    >>> params["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"].shape
    (48, 96)
"""

from __future__ import annotations

import re
import zipfile

import ml_dtypes
import numpy as np

from vit_keras.weights import schema
from vit_keras.weights.safetensors_io import check_finite
from vit_keras.weights.schema import POS_EMBEDDING

POS_EMBEDDING_KEY = POS_EMBEDDING
_PREFIXES = ("opt/target/", "params/img/", "params/")
# Linen module names inside an encoder block -> the raw (pre-Linen) names of the public files.
_LINEN_TO_RAW = {
    "LayerNorm_0": "LayerNorm_0",
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}
_SCANNED_BLOCK = re.compile(r"^Transformer/encoderblock/(.+)$")
_BLOCK = re.compile(r"^(Transformer/encoderblock_\d+)/([^/]+)/(.+)$")
_GROUP_NORM = re.compile(r"(^|/)(gn_root|gn\d|gn_proj)/(scale|bias)$")


def _as_float32(name: str, array: np.ndarray) -> np.ndarray:
    if array.dtype == np.dtype("V2"):
        # bfloat16 has no NumPy type code, so np.save writes it as raw 2-byte records.
        array = array.view(ml_dtypes.bfloat16)
    if array.dtype == np.dtype(ml_dtypes.bfloat16) or np.issubdtype(array.dtype, np.floating):
        return np.asarray(array, dtype=np.float32)
    raise ValueError(f"Checkpoint entry {name!r} has dtype {array.dtype}; expected floating-point weights.")


def load_npz_arrays(path: str) -> dict[str, np.ndarray]:
    """Every array of an `.npz` file, read without pickle.

    Example:
        >>> arrays = load_npz_arrays("tests/fixtures/vitjax_token_raw/checkpoint.npz")
        >>> arrays["cls"].dtype
        dtype('float32')
    """
    try:
        npz = np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise ValueError(f"{path!r} is not a readable .npz file ({error}); it may be truncated. "
                         "Download it again.") from error
    except ValueError as error:  # numpy tried to read a pickle and was not allowed to
        raise ValueError(f"{path!r} is not an .npz archive (pickled or corrupt data); vit_keras never "
                         "unpickles checkpoints.") from error
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"{path!r} holds a single array, not an .npz archive of named weights.")
    arrays = {}
    with npz:
        try:
            for name in npz.files:
                arrays[name] = npz[name]
        except ValueError as error:
            if "allow_pickle" in str(error):
                raise ValueError(
                    f"{path!r} entry {name!r} is a pickled object array; vit_keras never unpickles "
                    "checkpoints (pickle can run code). Re-save the weights as plain numeric arrays."
                ) from error
            raise
        except (zipfile.BadZipFile, EOFError, OSError) as error:
            raise ValueError(f"{path!r} is corrupt or truncated ({error}); download it again.") from error
    return arrays


def _model_parameters(arrays: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """Keep the model parameters only: under `opt/target/` or `params/` when the file has such a prefix (the
    rest is optimizer state, step counters or other towers), with the prefix removed; float32 and finite (a NaN or
    infinity is refused naming its key in the file and `source`)."""
    kept = ""
    for prefix in _PREFIXES:
        if any(name.startswith(prefix) for name in arrays):
            arrays = {name[len(prefix) :]: value for name, value in arrays.items() if name.startswith(prefix)}
            kept = prefix
            break
    params = {name: _as_float32(kept + name, value) for name, value in arrays.items()}
    check_finite({kept + name: value for name, value in params.items()}, source)
    return params


def canonicalize(arrays: dict[str, np.ndarray], source: str = "the checkpoint") -> dict[str, np.ndarray]:
    """Rewrite any supported Google layout into the canonical raw-name dict (`source` names the file in errors).

    Example:
        >>> canonicalize({"params/pos_embedding": np.zeros((1, 4, 8))}).keys()
        dict_keys(['Transformer/posembed_input/pos_embedding'])
        >>> canonicalize({"params/pos_embedding": np.ones((1, 4, 8)), "params/cls": np.ones((1, 1, 8))})[
        ...     "Transformer/posembed_input/pos_embedding"][0, :, 0]
        array([0., 1., 1., 1., 1.], dtype=float32)
    """
    out: dict[str, np.ndarray] = {}
    big_vision_posemb = False

    def put(name, value):
        if name in out:
            raise ValueError(f"The checkpoint holds {name!r} twice (under two layouts); it is ambiguous.")
        out[name] = value

    for name, value in _model_parameters(arrays, source).items():
        if name == "pos_embedding":
            name = POS_EMBEDDING_KEY
            big_vision_posemb = True
        scanned = _SCANNED_BLOCK.match(name)
        if scanned:
            for i, layer_value in enumerate(value):
                put(f"Transformer/encoderblock_{i}/{scanned.group(1)}", layer_value)
            continue
        put(name, value)

    if big_vision_posemb and "cls" in out:
        table = out[POS_EMBEDDING_KEY]
        if table.ndim != 3 or table.shape[0] != 1:
            raise ValueError(f"`pos_embedding` must have shape (1, tokens, D), got {table.shape}.")
        # The class token joins after the position embedding in big_vision: its row is zero, not missing.
        out[POS_EMBEDDING_KEY] = np.concatenate([np.zeros_like(table[:, :1]), table], axis=1)

    result: dict[str, np.ndarray] = {}
    for name, value in out.items():
        block = _BLOCK.match(name)
        if block:
            prefix, module, rest = block.groups()
            module = _LINEN_TO_RAW.get(module, module)
            name = f"{prefix}/{module}/{rest}"
        if _GROUP_NORM.search(name):
            value = value.reshape(-1)  # pre-flax-0.3.6 files store GroupNorm params as (1, 1, 1, C)
        if name in result:
            raise ValueError(f"The checkpoint holds {name!r} under both Linen and raw names; it is ambiguous.")
        result[name] = value
    return result


# The weights every encoder block has (schema templates). A file lacking one is refused when read, since the
# architecture is read off them; every other mismatch is listed against the model when the arrays are assigned.
_BLOCK_WEIGHTS = tuple(f"{schema.BLOCK_ATTENTION}/{projection}/kernel" for projection in schema.PROJECTIONS) + (
    f"{schema.BLOCK_MLP_IN}/kernel", f"{schema.BLOCK_MLP_OUT}/kernel")
_BLOCK_INDEX = re.compile(r"^Transformer/encoderblock_(\d+)/")


def check_block_weights(params: dict, source: str) -> None:
    """Refuse a canonical dict whose encoder blocks lack a projection or MLP kernel, naming each one.

    Example:
        >>> params = {"Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel": np.zeros((2, 4))}
        >>> check_block_weights(params, "x.npz")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: x.npz does not hold every encoder block's weights; ... (5): ...query/kernel, ...
    """
    blocks = sorted({int(m.group(1)) for name in params if (m := _BLOCK_INDEX.match(name))})
    missing = [name for index in range(blocks[-1] + 1 if blocks else 0)
               for name in (template.format(i=index) for template in _BLOCK_WEIGHTS) if name not in params]
    if missing:
        raise ValueError(f"{source} does not hold every encoder block's weights; nothing was loaded. Missing from the "
                         f"checkpoint ({len(missing)}): {', '.join(missing)}")


def read_npz(path: str) -> dict[str, np.ndarray]:
    """Read a Google `.npz` checkpoint into the canonical parameter dict (float32, raw vit_jax names); a file whose
    encoder blocks lack a weight is refused (`check_block_weights`).

    Example:
        >>> read_npz("tests/fixtures/vitjax_token_raw/checkpoint.npz")["cls"].shape
        (1, 1, 48)
    """
    params = canonicalize(load_npz_arrays(path), source=path)
    check_block_weights(params, path)
    return params
