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
        >>> with atomic_file("out/model.keras") as tmp:  # doctest: +SKIP
        ...     model.save(tmp)
    """
    final_path = os.fspath(final_path)
    refuse_existing(final_path, overwrite, flag)
    parent, name = os.path.split(os.path.abspath(final_path))
    os.makedirs(parent, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{name}.tmp-", suffix=_suffix(name), dir=parent)
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
        >>> with atomic_directory("models/vit/3") as tmp:  # doctest: +SKIP
        ...     write_everything_into(tmp)
    """
    final_path = os.fspath(final_path)
    parent, name = os.path.split(os.path.abspath(final_path))
    os.makedirs(parent, exist_ok=True)
    refuse_existing(final_path, overwrite, flag)
    tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
    try:
        yield tmp
        if os.path.lexists(final_path):
            # Move the old one aside first: os.rename cannot replace a non-empty directory.
            trash = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
            os.rename(final_path, os.path.join(trash, name))
            os.rename(tmp, final_path)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(tmp, final_path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
