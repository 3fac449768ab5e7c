"""Read a checkpoint's `config.json` with errors that name the file and the key (never a bare JSONDecodeError,
KeyError or ZeroDivisionError).

Example:
    >>> require({"patch_size": 16}, "patch_size", int, "config.json")
    16
"""

from __future__ import annotations

import json
import numbers

_MISSING = object()


def load(path: str) -> dict:
    """The JSON object in `path`.

    Example:
        >>> load("tests/fixtures/hf_dir/hf_model/config.json")["model_type"]
        'vit'
    """
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path!r} is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno}); "
                         "re-save the checkpoint's config.json.") from error
    except UnicodeDecodeError as error:
        raise ValueError(f"{path!r} is not UTF-8 JSON text; re-save the checkpoint's config.json.") from error
    if not isinstance(value, dict):
        raise ValueError(f"{path!r} must hold a JSON object, got {type(value).__name__}.")
    return value


def _describe(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
             list: "a list"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def require(config: dict, key: str, kind, path: str, default=_MISSING, positive: bool = False):
    """`config[key]` checked to be of `kind` (int, float, str, bool, dict, list); `default` when absent.

    Example:
        >>> require({}, "image_size", int, "config.json", default=224)
        224
    """
    if key not in config or config[key] is None:
        if default is _MISSING:
            raise ValueError(f"{path!r} has no {key!r}; it is needed to build the model. Re-save the checkpoint's "
                             "config.json.")
        return default
    value = config[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = False
    for k in kinds:
        if k is int:
            ok |= isinstance(value, numbers.Integral) and not isinstance(value, bool)
        elif k is float:
            ok |= isinstance(value, numbers.Real) and not isinstance(value, bool)
        elif k is bool:
            ok |= isinstance(value, bool)
        else:
            ok |= isinstance(value, k)
    if not ok:
        raise ValueError(f"{path!r}: {key!r} must be {_describe(kind)}, got {value!r}.")
    if positive and not (isinstance(value, numbers.Real) and value > 0):
        raise ValueError(f"{path!r}: {key!r} must be positive, got {value!r}.")
    return value


def size_pair(config: dict, key: str, path: str, default=_MISSING) -> tuple[int, int]:
    """An image size stored as an int or an [h, w] list.

    Example:
        >>> size_pair({"image_size": 32}, "image_size", "config.json")
        (32, 32)
    """
    value = require(config, key, (int, list), path, default=default)
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value, value]
    if (len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ValueError(f"{path!r}: {key!r} must be a positive int or [height, width], got {value!r}.")
    return int(value[0]), int(value[1])
