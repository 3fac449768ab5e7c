"""Write files and directories so that a reader never sees half of one: a temporary name, then a rename.

A crash, a SIGKILL or an exception inside the block leaves the previous file (if any) untouched and no temporary
file behind (except after SIGKILL, when a dot-prefixed `*.tmp-*` sibling may remain; it is never read as the real
thing, and the next save of the same name removes it once its writer is gone: `STALE_SECONDS`). Used for
checkpoints, exported models and converted weights.

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
import logging
import os
import re
import shutil
import tempfile
import time

logger = logging.getLogger("vit_keras.files")

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


# A temporary's name ends in its writer's process id (`-<pid>` before the suffix), so that a later save can tell a
# leftover of a killed writer from the work of a running one. Digits reserved for it when a long name is shortened:
_PID_DIGITS = 10
# A leftover is removed only when its writer's process is gone *and* nothing in it changed for this long: the
# process id means nothing for a writer on another machine sharing the folder (NFS), whose files keep changing.
STALE_SECONDS = 600.0
_TMP, _OLD = ".tmp-", ".old-"


def _temporary_name_parts(name: str, marker: str, suffix: str = "") -> tuple[str, str]:
    """(prefix, suffix) for `mkstemp`/`mkdtemp` of this process's temporaries of `name`: the prefix is the same
    for every writer (so a later save finds them), the suffix carries this process's id."""
    prefix = temporary_prefix(name, marker, suffix=f"-{'9' * _PID_DIGITS}{suffix}")
    return prefix, f"-{os.getpid()}{suffix}"


def _leftovers(parent: str, name: str, marker: str, suffix: str = "") -> list[tuple[str, int | None]]:
    """The temporaries (`marker` ".tmp-" or ".old-") of `name` in `parent`, with their writer's process id (None for
    a name without one)."""
    prefix, _ = _temporary_name_parts(name, marker, suffix)
    writer = rf"(?:-(\d{{1,{_PID_DIGITS}}}))?"  # absent in the names earlier versions gave
    pattern = re.compile(re.escape(prefix) + r"[a-z0-9_]{8}" + writer + re.escape(suffix) + r"\Z")
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir(parent):
            match = pattern.match(entry)
            if match:
                found.append((os.path.join(parent, entry), int(match[1]) if match[1] else None))
    return found


def _writer_gone(pid: int | None) -> bool:
    """Whether the process that made a temporary has ended (True for an unknown one)."""
    if pid is None or pid == os.getpid():
        return pid is None
    if os.name == "nt":  # os.kill would end the process there; the age test alone decides
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # e.g. PermissionError: it runs, as another user
        return False
    return False


def _newest_change(path: str) -> float:
    """The latest modification time of `path` or anything under it (links not followed)."""
    newest = os.lstat(path).st_mtime
    for root, dirs, files in os.walk(path):
        for entry in dirs + files:
            with contextlib.suppress(OSError):
                newest = max(newest, os.lstat(os.path.join(root, entry)).st_mtime)
    return newest


def _is_stale(path: str, pid: int | None) -> bool:
    try:
        return _writer_gone(pid) and time.time() - _newest_change(path) > STALE_SECONDS
    except OSError:
        return False  # gone meanwhile (another save cleaned it)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.remove(path)


def _recover(final_path: str, suffix: str = "") -> None:
    """Before a save of `final_path`: put back a previous save that an interrupted swap left aside (in a
    `.NAME.old-*` folder, its writer gone, `final_path` missing), and remove the leftovers of killed writers of the
    same name (`_is_stale`). A running writer's temporaries are never touched."""
    parent, name = os.path.split(final_path)
    for trash, pid in _leftovers(parent, name, _OLD, suffix):
        held = os.path.join(trash, name)
        if _writer_gone(pid) and not os.path.lexists(final_path) and os.path.lexists(held):
            try:
                os.rename(held, final_path)
            except OSError as error:  # another save restored it first, or wrote a new one
                logger.info("Not restoring %s from %s: %s", final_path, held, error)
            else:
                logger.warning("%s was missing after an interrupted save; restored the previous one from %s.",
                               final_path, trash)
        if not os.path.lexists(held) and _writer_gone(pid):
            _remove(trash)  # emptied by the restore above
        elif _is_stale(trash, pid) and os.path.lexists(final_path):
            _remove(trash)
    for tmp, pid in _leftovers(parent, name, _TMP, suffix):
        if _is_stale(tmp, pid):
            logger.info("Removing %s, left by a save that did not finish.", tmp)
            _remove(tmp)


def _make_parent(parent: str, final_path: str) -> None:
    """Create `final_path`'s folder, or say which part of the path is a file rather than a folder."""
    try:
        os.makedirs(parent, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = parent
        while blocking and not os.path.isfile(blocking) and os.path.dirname(blocking) != blocking:
            blocking = os.path.dirname(blocking)
        raise ValueError(f"Cannot write {final_path!r}: {blocking!r} is a file, not a folder; choose another path, "
                         "or move that file.") from None


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
    _make_parent(parent, final_path)
    suffix = _suffix(name)
    _recover(os.path.join(parent, name), suffix)
    prefix, pid_suffix = _temporary_name_parts(name, _TMP, suffix)
    handle, tmp = tempfile.mkstemp(prefix=prefix, suffix=pid_suffix, dir=parent)
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
    half-written version; on error it is removed and an existing `final_path` is left untouched. Replacing a
    directory takes two renames (the old one aside, the new one in): an error or interrupt between them puts the
    old one back, and after a kill there the next save of `final_path` does (`_recover`), before anything else.

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
    _make_parent(parent, final_path)
    _recover(os.path.join(parent, name))
    refuse_existing(final_path, overwrite, flag)
    prefix, pid_suffix = _temporary_name_parts(name, _TMP)
    tmp = tempfile.mkdtemp(prefix=prefix, suffix=pid_suffix, dir=parent)
    try:
        yield tmp
        if os.path.lexists(final_path):
            _swap(tmp, final_path, parent, name)
        else:
            os.rename(tmp, final_path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap(tmp: str, final_path: str, parent: str, name: str) -> None:
    """Replace the directory `final_path` with `tmp`: the old one aside first (os.rename cannot replace a non-empty
    directory), then the new one in; whatever stops the second rename (an error, KeyboardInterrupt) puts the old one
    back."""
    prefix, pid_suffix = _temporary_name_parts(name, _OLD)
    trash = tempfile.mkdtemp(prefix=prefix, suffix=pid_suffix, dir=parent)
    aside = os.path.join(trash, name)
    try:
        os.rename(final_path, aside)
        os.rename(tmp, final_path)
    except BaseException:
        if os.path.lexists(aside) and not os.path.lexists(final_path):
            with contextlib.suppress(OSError):  # if even this fails, the next save of final_path restores it
                os.rename(aside, final_path)
        if not os.path.lexists(aside):
            shutil.rmtree(trash, ignore_errors=True)
        raise
    shutil.rmtree(trash, ignore_errors=True)
