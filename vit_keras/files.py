"""Write files and directories so that a reader never sees half of one: a temporary name, then a rename.

A crash, a SIGKILL or an exception inside the block leaves the previous file (if any) untouched and no temporary
file behind (except after SIGKILL, when a dot-prefixed `*.tmp-*` sibling may remain; it is never read as the real
thing). Used for checkpoints, exported models and converted weights.

Example:
    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "model.weights.h5")
    >>> with atomic_file(target) as tmp:
    ...     _ = open(tmp, "w").write("data")
    >>> open(target).read()
    'data'
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile

# Compound suffixes Keras checks for on the path it is given (model.save refuses other names).
_COMPOUND_SUFFIXES = (".weights.h5", ".weights.json")


def _suffix(name: str) -> str:
    for suffix in _COMPOUND_SUFFIXES:
        if name.endswith(suffix):
            return suffix
    return os.path.splitext(name)[1]


# File names are limited to 255 bytes (NAME_MAX on Linux and macOS); a temporary name adds its dot, marker,
# random part and suffix to the final one, so it is shortened where the final name is long.
NAME_MAX = 255
_RANDOM_PART = 8  # tempfile's random characters
_DIGEST_CHARS = 12


def temporary_prefix(name: str, marker: str = ".tmp-", suffix: str = "") -> str:
    """The `prefix` for `tempfile.mkstemp`/`mkdtemp` beside `name`: `.{name}{marker}`, with `name` cut short
    and a digest of it added when the whole temporary name would pass `NAME_MAX` bytes.

    Example:
        >>> temporary_prefix("best.keras", suffix=".keras")
        '.best.keras.tmp-'
        >>> len(temporary_prefix("x" * 234 + ".keras", suffix=".keras").encode()) + 8 + len(".keras") <= 255
        True
    """
    budget = NAME_MAX - _RANDOM_PART - len(os.fsencode(suffix)) - len(os.fsencode(marker)) - 1
    encoded = os.fsencode(name)
    if len(encoded) <= budget:
        return f".{name}{marker}"
    digest = hashlib.sha256(encoded).hexdigest()[:_DIGEST_CHARS]
    head = encoded[:budget - _DIGEST_CHARS - 1].decode("utf-8", "ignore")  # never split a UTF-8 character
    return f".{head}~{digest}{marker}"


def refuse_existing(path: str, overwrite: bool, flag: str = "overwrite=True") -> None:
    """Raise a `ValueError` when `path` exists and `overwrite` is false; `flag` names how to allow it.

    Example:
        >>> refuse_existing("/nonexistent/file.tflite", overwrite=False)
    """
    if os.path.lexists(path) and not overwrite:
        raise ValueError(f"{path} already exists; pass {flag} to replace it, or choose another path.")


@contextlib.contextmanager
def atomic_file(final_path, overwrite: bool = True, flag: str = "overwrite=True"):
    """Yield a temporary path beside `final_path` (same suffix, so Keras accepts it); rename it into place when the
    block succeeds, remove it when the block fails.

    `overwrite=False` refuses an existing `final_path` before anything is written (`flag` says, in the error, how
    the caller allows it: "overwrite=True" for a function, "--overwrite" for the CLI).

    Example:
        >>> import os
        >>> os.makedirs("out")
        >>> with atomic_file("out/model.keras") as tmp:
        ...     keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]).save(tmp)
        >>> os.listdir("out")
        ['model.keras']
    """
    final_path = os.fspath(final_path)
    refuse_existing(final_path, overwrite, flag)
    parent, name = os.path.split(os.path.abspath(final_path))
    os.makedirs(parent, exist_ok=True)
    suffix = _suffix(name)
    handle, tmp = tempfile.mkstemp(prefix=temporary_prefix(name, suffix=suffix), suffix=suffix, dir=parent)
    os.close(handle)
    os.remove(tmp)  # writers such as h5py and Keras want to create the file themselves
    try:
        yield tmp
        if not os.path.exists(tmp):
            raise RuntimeError(f"Nothing was written for {final_path}.")
        os.replace(tmp, final_path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(final_path, overwrite: bool = False, flag: str = "overwrite=True"):
    """Yield a temporary directory beside `final_path` that becomes `final_path` only if the block succeeds.

    The temporary name starts with a dot, so TF Serving (which loads numbered directories) never sees a
    half-written version; on error it is removed and an existing `final_path` is left untouched.

    Example:
        >>> import os
        >>> with atomic_directory("models/vit/3") as tmp:
        ...     with open(os.path.join(tmp, "saved_model.pb"), "wb") as f:
        ...         _ = f.write(b"...")
        >>> os.listdir("models/vit"), os.listdir("models/vit/3")
        (['3'], ['saved_model.pb'])
    """
    final_path = os.fspath(final_path)
    parent, name = os.path.split(os.path.abspath(final_path))
    os.makedirs(parent, exist_ok=True)
    refuse_existing(final_path, overwrite, flag)
    tmp = tempfile.mkdtemp(prefix=temporary_prefix(name), dir=parent)
    try:
        yield tmp
        if os.path.lexists(final_path):
            # Move the old one aside first: os.rename cannot replace a non-empty directory.
            trash = tempfile.mkdtemp(prefix=temporary_prefix(name, ".old-"), dir=parent)
            os.rename(final_path, os.path.join(trash, name))
            os.rename(tmp, final_path)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(tmp, final_path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
