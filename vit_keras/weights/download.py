"""Download checkpoints into the Keras cache with an integrity check, and never load an unverified file.

- A pinned sha256 (from the registry, the caller, or an earlier verified download) is checked after the download
  (and on every later use of the cached file).
- Without one, the hash the server states for the object is used: Google Cloud Storage sends
  `x-goog-hash: md5=<base64>` (and `Content-Length`). The download is checked against it, then its sha256 is
  recorded in `<cache>/vit_keras/sha256_pins.json` and required from then on (trust on first use, verified).
- With neither, the download is refused: pass `sha256=`.
- Each URL has its own cache entry, `<cache>/vit_keras/<first 16 hex digits of sha256(url)>/<file name>`, so two
  URLs with the same file name never share (or delete) each other's file. A file cached by earlier versions
  directly under `<cache>/vit_keras/` is moved into its entry when it matches the pinned sha256, otherwise left
  alone.
- A download goes to `<name>.incomplete` and is renamed into place only once verified: a truncated, interrupted,
  stalled, overdue or mismatching download is deleted, never loaded or left in the cache.
- Connect and read timeouts (30 s and 120 s without a byte by default) bound every request; set
  `VIT_KERAS_DOWNLOAD_TIMEOUT` to `SECONDS` or `CONNECT,READ` to change them. An overall deadline (1 hour by
  default) bounds the whole transfer, headers included, so a server that trickles bytes cannot hold a call
  forever; set `VIT_KERAS_DOWNLOAD_DEADLINE` to `SECONDS` to change it.
- A progress bar is drawn on stderr when it is a terminal.

`file://` and `http://` URLs work the same way (handy for mirrors and tests).

Example (a `file://` URL here; `fetch("https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz")` is the
same with a download):
    >>> import pathlib
    >>> url = pathlib.Path("tests/fixtures/vitjax_token_raw/checkpoint.npz").absolute().as_uri()
    >>> fetch(url, cache_dir="cache")
    Traceback (most recent call last):
    ValueError: No checksum is known for 'file:///...checkpoint.npz' and the server states none, so its integrity ...
    >>> sha256 = file_digest("tests/fixtures/vitjax_token_raw/checkpoint.npz")
    >>> os.path.basename(fetch(url, sha256=sha256, cache_dir="cache"))
    'checkpoint.npz'
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

logger = logging.getLogger("vit_keras.weights")

CACHE_SUBDIR = "vit_keras"
PINS_FILE = "sha256_pins.json"
URL_SCHEMES = ("http", "https", "file")
TIMEOUT_ENV = "VIT_KERAS_DOWNLOAD_TIMEOUT"
DEFAULT_TIMEOUTS = (30.0, 120.0)  # seconds to connect; seconds a download may go without receiving a byte
DEADLINE_ENV = "VIT_KERAS_DOWNLOAD_DEADLINE"
# The largest published checkpoint (ViT-H/14, 2.5 GB) takes minutes on a slow link; an hour is ample.
DEFAULT_DEADLINE = 3600.0
INCOMPLETE_SUFFIX = ".incomplete"
CHUNK_BYTES = 1 << 20


def is_url(value: str) -> bool:
    """Whether `value` is a URL this module downloads.

    Example:
        >>> is_url("file:///tmp/x.npz"), is_url("/tmp/x.npz")
        (True, False)
    """
    return urllib.parse.urlsplit(value).scheme in URL_SCHEMES


def cache_directory(cache_dir: str | None = None) -> str:
    """Where downloads go: `<cache_dir or $KERAS_HOME or ~/.keras>/vit_keras`.

    Example:
        >>> cache_directory("/tmp/k")
        '/tmp/k/vit_keras'
    """
    base = cache_dir or os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(os.path.expanduser(base), CACHE_SUBDIR)


def file_digest(path: str, algorithm: str = "sha256") -> str:
    """Hex digest of a file, read in chunks.

    Example:
        >>> with open("hello.txt", "w") as f:
        ...     _ = f.write("hello")
        >>> file_digest("hello.txt")
        '2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824'
    """
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_pins(directory: str) -> dict[str, str]:
    try:
        with open(os.path.join(directory, PINS_FILE)) as f:
            return dict(json.load(f))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise ValueError(f"The pin file {os.path.join(directory, PINS_FILE)!r} is unreadable ({error}); "
                         "delete it to re-verify downloads.") from error


def _write_pins(directory: str, pins: dict[str, str]) -> None:
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, PINS_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(pins, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(directory, PINS_FILE))


def _write_pin(directory: str, url: str, sha256: str) -> None:
    _write_pins(directory, {**_read_pins(directory), url: sha256})


def _entry_directory(directory: str, url: str) -> str:
    """The cache entry of `url`: a sub-directory named by its hash, so equal file names never collide."""
    return os.path.join(directory, hashlib.sha256(url.encode("utf-8")).hexdigest()[:16])


def cached_path(url: str, cache_dir: str | None = None, filename: str | None = None) -> str:
    """Where the verified download of `url` is (or will be) kept: `<cache>/vit_keras/<url key>/<file name>`.

    Example:
        >>> cached_path("https://example.com/a/model.npz", cache_dir="/tmp/k")
        '/tmp/k/vit_keras/1981073be58d72be/model.npz'
    """
    directory = cache_directory(cache_dir)
    return os.path.join(_entry_directory(directory, url), filename or _filename(url))


def _remove_empty(directory: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(directory)


def forget(url: str, cache_dir: str | None = None, filename: str | None = None) -> None:
    """Remove a cached download (and its pin if it was pinned on first use), e.g. after it failed to load.

    Example:
        >>> forget("file:///nonexistent.npz", cache_dir="/tmp/k")
    """
    directory = cache_directory(cache_dir)
    path = cached_path(url, cache_dir, filename)
    if os.path.exists(path):
        os.remove(path)
    _remove_empty(os.path.dirname(path))
    pins = _read_pins(directory)
    if url in pins:
        del pins[url]
        _write_pins(directory, pins)


def _filename(url: str) -> str:
    name = os.path.basename(urllib.parse.urlsplit(url).path)
    if not name:
        raise ValueError(f"Cannot tell a file name from {url!r}.")
    return name


def server_md5(url: str) -> tuple[str | None, int | None]:
    """The md5 (hex) and size the server states for `url` (GCS `x-goog-hash` / `Content-MD5`), if any.

    Example:
        >>> server_md5("file:///tmp/x.npz")
        (None, None)
    """
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        return None, None
    try:
        allowed = deadline()
        response = _open_before(time.monotonic() + allowed, url, allowed, method="HEAD")
    except DeadlineExceeded:
        raise
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot reach {url!r} ({error}); check the address and your connection, or set "
                         f"{TIMEOUT_ENV} to wait longer.") from error
    headers = response.headers
    response.close()
    md5 = None
    for value in headers.get_all("x-goog-hash") or []:
        for part in value.split(","):
            algorithm, _, encoded = part.strip().partition("=")
            if algorithm == "md5":
                md5 = base64.b64decode(encoded).hex()
    if md5 is None and headers.get("Content-MD5"):
        md5 = base64.b64decode(headers["Content-MD5"]).hex()
    length = headers.get("Content-Length")
    return md5, int(length) if length and length.isdigit() else None


def timeouts() -> tuple[float, float]:
    """(connect, read) timeouts in seconds: `$VIT_KERAS_DOWNLOAD_TIMEOUT` as `SECONDS` (both) or `CONNECT,READ`,
    default 30 s to connect and 120 s without a byte before a download is abandoned.

    Example:
        >>> timeouts()  # with VIT_KERAS_DOWNLOAD_TIMEOUT unset
        (30.0, 120.0)
    """
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUTS
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        values = ()
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or not all(0 < value < float("inf") for value in values):
        raise ValueError(
            f"${TIMEOUT_ENV}={text!r} must be positive seconds: one number for both the connect and the read "
            "timeout, or CONNECT,READ (e.g. 30,120)."
        )
    return values


def deadline() -> float:
    """Seconds a whole download may take: `$VIT_KERAS_DOWNLOAD_DEADLINE`, default 3600 (an hour).

    Example:
        >>> deadline()  # with VIT_KERAS_DOWNLOAD_DEADLINE unset
        3600.0
    """
    text = os.environ.get(DEADLINE_ENV, "").strip()
    if not text:
        return DEFAULT_DEADLINE
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ValueError(f"${DEADLINE_ENV}={text!r} must be a positive number of seconds that a whole download may "
                         "take, e.g. 7200.")
    return value


class DeadlineExceeded(ValueError):
    """A download that did not finish within its overall deadline (the message names the URL and how to wait
    longer)."""


class TooLarge(ValueError):
    """A body larger than the caller's byte limit; `url`, `max_bytes` and `size` (stated or received so far)."""

    def __init__(self, url: str, max_bytes: int, size: int):
        super().__init__(f"{url!r} is larger than the limit of {max_bytes:,} bytes (at least {size:,} bytes)")
        self.url, self.max_bytes, self.size = url, max_bytes, size


def _socket_of(response):
    return getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)


def _open(url: str, method: str = "GET", limits: tuple[float, float] | None = None):
    """A urllib response for an http(s) `url` (proxies and redirects as urllib handles them), connected within the
    connect timeout, then with the read timeout on every socket read. `limits` is (connect, read), default
    `timeouts()`."""
    connect_timeout, read_timeout = limits or timeouts()
    request = urllib.request.Request(url, method=method, headers={"User-Agent": "vit-keras"})
    response = urllib.request.urlopen(request, timeout=connect_timeout)  # noqa: S310 (http/https/ftp only)
    # urllib has one timeout for connecting and reading; the connected socket gets the read timeout. (Should the
    # socket not be reachable, the connect timeout keeps bounding every read.)
    sock = _socket_of(response)
    if sock is not None:
        sock.settimeout(read_timeout)
    return response


class _Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, name: str, total: int | None, show: bool = True):
        self.name, self.total, self.done = name, total, 0
        self.enabled = show and sys.stderr.isatty()
        self.last = 0.0

    def update(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and now - self.last >= 0.2:
            self.last = now
            self._draw()

    def _draw(self, end: str = "") -> None:
        done = f"{self.done / 1e6:.1f}"
        if self.total:
            fraction = min(self.done / self.total, 1.0)
            bar = "#" * int(30 * fraction)
            line = f"\rDownloading {self.name} [{bar:<30}] {done}/{self.total / 1e6:.1f} MB {100 * fraction:3.0f}%"
        else:
            line = f"\rDownloading {self.name} {done} MB"
        sys.stderr.write(line + end)
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(end="\n")


def _overdue(url: str, allowed: float, received: int) -> DeadlineExceeded:
    return DeadlineExceeded(
        f"Downloading {url!r} did not finish within its overall deadline of {allowed:g} s ({received:,} bytes "
        f"received); nothing was kept. Allow more time with {DEADLINE_ENV}=SECONDS, or try again on a faster "
        "connection."
    )


def _open_before(expires: float, url: str, allowed: float, limits: tuple[float, float] | None = None,
                 method: str = "GET"):
    """`_open(url)`, abandoned with `DeadlineExceeded` when the response has not begun by `expires` (a
    `time.monotonic()`): a server that trickles its headers is bounded by the deadline too, not only by the
    timeouts of each socket operation. The request runs on a daemon thread that closes a response come too late."""
    lock, arrived = threading.Lock(), threading.Event()
    outcome: dict = {}

    def request():
        try:
            result = ("response", _open(url, method, limits))
        except Exception as error:  # handed to the caller below
            result = ("error", error)
        with lock:
            if outcome.get("abandoned"):
                if result[0] == "response":
                    result[1].close()
                return
            outcome["result"] = result
        arrived.set()

    threading.Thread(target=request, name=f"vit_keras download {url}", daemon=True).start()
    if not arrived.wait(max(expires - time.monotonic(), 0.0)):
        with lock:
            if "result" not in outcome:
                outcome["abandoned"] = True
                raise _overdue(url, allowed, 0)
    kind, value = outcome["result"]
    if kind == "error":
        raise value
    return value


def _stream(url: str, destination, name: str, *, max_bytes: int | None = None,
            limits: tuple[float, float] | None = None, show_progress: bool = True) -> None:
    """Copy `url` into `destination` (a file object), with timeouts, the overall `deadline()` and a progress bar
    (on a terminal, when `show_progress`). An interrupted, stalled or overdue transfer raises, as does one beyond
    `max_bytes` (`TooLarge`)."""
    connect_timeout, read_timeout = limits or timeouts()
    allowed = deadline()
    expires = time.monotonic() + allowed
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme == "file":
        source = open(urllib.request.url2pathname(urllib.parse.urlsplit(url).path), "rb")  # noqa: SIM115
        total = os.fstat(source.fileno()).st_size
    else:
        source = _open_before(expires, url, allowed, limits=(min(connect_timeout, allowed), read_timeout))
        length = source.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
    sock = _socket_of(source)
    # read1 returns what has arrived (read would wait for a whole chunk), so the deadline is checked as bytes come.
    read = getattr(source, "read1", source.read)
    progress = _Progress(name, total, show_progress)

    def overdue():
        return _overdue(url, allowed, progress.done)

    try:
        if max_bytes is not None and total is not None and total > max_bytes:
            raise TooLarge(url, max_bytes, total)
        while True:
            remaining = expires - time.monotonic()
            if remaining <= 0:
                raise overdue()
            wait = min(read_timeout, remaining)
            if sock is not None:
                sock.settimeout(wait)
            try:
                chunk = read(CHUNK_BYTES)
            except TimeoutError:
                if wait < read_timeout:
                    raise overdue() from None
                raise
            if not chunk:
                break
            if max_bytes is not None and progress.done + len(chunk) > max_bytes:
                raise TooLarge(url, max_bytes, progress.done + len(chunk))
            destination.write(chunk)
            progress.update(len(chunk))
    finally:
        source.close()
        progress.close()
    if total is not None and progress.done != total:
        raise ValueError(f"the connection closed after {progress.done} of {total} bytes")


def read_url(url: str, *, max_bytes: int, limits: tuple[float, float] | None = None) -> bytes:
    """The body of `url` (http, https, ftp or file) in memory, with the timeouts (`limits` = (connect, read), default
    `timeouts()`) and the overall `deadline()` of a download; `TooLarge` beyond `max_bytes`, counted as it
    streams (a stated Content-Length above it is refused before reading).

    Example:
        >>> import pathlib
        >>> pathlib.Path("labels.txt").write_text("cat dog")
        7
        >>> read_url(pathlib.Path("labels.txt").absolute().as_uri(), max_bytes=1000)
        b'cat dog'
    """
    buffer = io.BytesIO()
    _stream(url, buffer, url, max_bytes=max_bytes, limits=limits, show_progress=False)
    return buffer.getvalue()


def _get_file(url, filename, directory, file_hash, algorithm):
    """Download `url` to `<its entry>/<filename>.incomplete`, check its `algorithm` digest against `file_hash`,
    then rename it into place; a cached file that already matches is used as it is. Nothing unverified is ever
    left under the final name."""
    import http.client

    entry = _entry_directory(directory, url)
    target = os.path.join(entry, filename)
    if os.path.isfile(target):
        if file_digest(target, algorithm) == file_hash:
            return target
        os.remove(target)  # altered or stale: never loaded, replaced by a verified download
    legacy = os.path.join(directory, filename)  # where earlier versions cached it, shared by equal file names
    if algorithm == "sha256" and os.path.isfile(legacy) and file_digest(legacy) == file_hash:
        os.makedirs(entry, exist_ok=True)
        os.replace(legacy, target)
        return target
    os.makedirs(entry, exist_ok=True)
    partial = target + INCOMPLETE_SUFFIX
    connect_timeout, read_timeout = timeouts()
    try:
        with open(partial, "wb") as f:
            _stream(url, f, filename)
        found = file_digest(partial, algorithm)
        if found != file_hash:
            raise _Mismatch(found)
        os.replace(partial, target)
    except DeadlineExceeded:
        raise
    except _Mismatch as error:
        raise ValueError(
            f"The download of {url!r} does not match its {algorithm} {file_hash} (got {error}: truncated or "
            "altered); it was deleted. Try again; if it persists, the file at that address is not the one expected."
        ) from None
    except (OSError, ValueError, http.client.HTTPException) as error:
        if not isinstance(error, TimeoutError) and not isinstance(getattr(error, "reason", None), TimeoutError):
            raise ValueError(f"Downloading {url!r} failed ({error}); nothing was kept. Try again.") from error
        raise ValueError(
            f"Downloading {url!r} timed out ({connect_timeout:g} s to connect, {read_timeout:g} s without data); "
            f"nothing was kept. Try again, or allow more time with {TIMEOUT_ENV}=CONNECT,READ seconds."
        ) from error
    finally:
        with contextlib.suppress(OSError):
            os.remove(partial)
        if not os.path.isfile(target):
            _remove_empty(entry)
    return target


class _Mismatch(Exception):
    """A finished download whose digest is not the expected one (carries the digest found)."""


def fetch(url: str, *, sha256: str | None = None, cache_dir: str | None = None, filename: str | None = None) -> str:
    """Download `url` into the Keras cache (once) and return the local path of a verified file.

    Example:
        >>> import pathlib
        >>> pathlib.Path("weights.bin").write_bytes(b"weights")
        7
        >>> url = pathlib.Path("weights.bin").absolute().as_uri()
        >>> sha256 = file_digest("weights.bin")
        >>> path = fetch(url, sha256=sha256, cache_dir="cache")
        >>> open(path, "rb").read()
        b'weights'
    """
    if not is_url(url):
        raise ValueError(f"{url!r} is not an http(s):// or file:// URL.")
    timeouts(), deadline()  # a malformed setting is reported before anything is fetched
    directory = cache_directory(cache_dir)
    filename = filename or _filename(url)
    pinned = sha256 or _read_pins(directory).get(url)
    if pinned:
        path = _get_file(url, filename, directory, pinned.lower(), "sha256")
        if sha256 is None:
            logger.info("%s verified against its sha256 pinned on first use.", url)
        return path

    md5, size = server_md5(url)
    if md5 is None:
        raise ValueError(
            f"No checksum is known for {url!r} and the server states none, so its integrity cannot be checked. "
            "Pass sha256='<hex digest>' (e.g. from `sha256sum`)."
        )
    path = _get_file(url, filename, directory, md5, "md5")
    if size is not None and os.path.getsize(path) != size:
        found = os.path.getsize(path)
        os.remove(path)
        _remove_empty(os.path.dirname(path))
        raise ValueError(f"The download of {url!r} has {found} bytes, the server said {size}; deleted. Try again.")
    digest = file_digest(path)
    _write_pin(directory, url, digest)
    logger.warning("%s verified against the server's md5 and pinned with sha256 %s in %s.", url, digest,
                   os.path.join(directory, PINS_FILE))
    return path
