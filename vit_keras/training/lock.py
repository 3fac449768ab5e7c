"""One run per output directory: a lock file that a second run is refused by, and that a crash cannot leave
held.

`output_dir_lock(path)` holds an exclusive `fcntl.flock` on `<path>/vit-keras.lock` for the duration of a
`with` block and writes who holds it (pid, host, start time, command) into it. The kernel drops the flock when
the process ends however it ends (SIGKILL included), so a lock file left by a dead run is taken over, with a
logged note; a live holder makes the second run fail at once with `OutputDirLockedError`, which says who holds
it and what to do. On file systems without `flock`, a lock whose recorded pid is dead on this host counts as
stale.

Example:
    >>> import tempfile
    >>> run = tempfile.mkdtemp()
    >>> with output_dir_lock(run):
    ...     pass  # logs/, checkpoints/ ... are written here; a second run on `run` is refused meanwhile
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import logging
import os
import socket
import sys

logger = logging.getLogger(__name__)

LOCK_NAME = "vit-keras.lock"


class OutputDirLockedError(RuntimeError):
    """Another live run holds the output directory's lock."""


def _describe(holder: dict) -> str:
    command = holder.get("command")
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, running since "
            f"{holder.get('since', '?')}" + (f" ({command})" if command else ""))


def _read_holder(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    try:
        holder = json.loads(raw.decode("utf-8", "replace")) if raw.strip() else {}
    except ValueError:
        holder = {}
    return holder if isinstance(holder, dict) else {}


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError, OverflowError):
        return True  # exists but belongs to someone else, or unreadable: assume held
    return True


def _flock(fd: int) -> bool | None:
    """True when the exclusive lock was taken, False when another process holds it, None when the file system
    does not support flock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as error:
        if error.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise
    return True


def _refusal(output_dir: str, path: str, holder: dict) -> OutputDirLockedError:
    return OutputDirLockedError(
        f"Output directory {output_dir!r} is in use by another run: {_describe(holder)}. Two runs writing one "
        f"directory would interleave their checkpoints and logs. Wait for that run to finish (or stop it), or "
        f"choose another output directory (--output-dir). If that process is gone and the lock is still refused "
        f"(e.g. it ran on another host), delete {path}."
    )


def _acquire(output_dir: str) -> tuple[int, str]:
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, LOCK_NAME)
    host = socket.gethostname()
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            locked = _flock(fd)
            holder = _read_holder(fd)
            if locked is False:
                raise _refusal(output_dir, path, holder)
            if locked is None and holder.get("host") == host and holder.get("pid") != os.getpid() and _pid_alive(
                    holder.get("pid")):
                raise _refusal(output_dir, path, holder)
            # The previous holder may have deleted the file (its release) between our open and our flock: then we
            # hold a lock on a file no other run can see, so start again on the file that is there now.
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            if current is None or not os.path.samestat(current, os.fstat(fd)):
                os.close(fd)
                continue
            if holder.get("pid") is not None:
                logger.warning("Taking over the lock of %s left by %s, which is no longer running.", output_dir,
                               _describe(holder))
            record = {"pid": os.getpid(), "host": host,
                      "since": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                      "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))}
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, (json.dumps(record) + "\n").encode("utf-8", "backslashreplace"))
            os.fsync(fd)
            return fd, path
        except BaseException:
            os.close(fd)
            raise


@contextlib.contextmanager
def output_dir_lock(output_dir):
    """Hold `<output_dir>/vit-keras.lock` for the block (creating `output_dir`); raise `OutputDirLockedError`
    naming the holder's pid, host and start time when another live run holds it. Released when the block ends,
    on an exception too; remote paths (`gs://...`) are not locked (flock needs a local or NFS file system).

    Example:
        >>> with output_dir_lock("runs/digits"):  # a second run into runs/digits now stops with the holder's pid
        ...     sorted(os.listdir("runs/digits"))
        ['vit-keras.lock']
    """
    output_dir = os.fspath(output_dir)
    if "://" in output_dir:
        yield
        return
    created = not os.path.isdir(output_dir)
    fd, path = _acquire(output_dir)
    try:
        yield
    finally:
        # Delete before unlocking: a run that opened this file meanwhile sees it gone and retries on a fresh one.
        with contextlib.suppress(OSError):
            os.remove(path)
        os.close(fd)
        if created:  # a run refused before writing anything leaves no empty directory behind
            with contextlib.suppress(OSError):
                os.rmdir(output_dir)
