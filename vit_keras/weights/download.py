"""Download checkpoints into the Keras cache with an integrity check, and never load an unverified file.

- A pinned sha256 (from the registry, the caller, or an earlier verified download) is checked after the download
  (and on every later use of the cached file).
- Without one, the hash the server states for the object is used: Google Cloud Storage sends
  `x-goog-hash: md5=<base64>` (and `Content-Length`). The download is checked against it, then its sha256 is
  recorded in `<cache>/vit_keras/sha256_pins.json` and required from then on (trust on first use, verified).
- With neither, the download is refused: pass `sha256=`.
- A download goes to `<name>.incomplete` and is renamed into place only once verified: a truncated, interrupted,
  stalled or mismatching download is deleted, never loaded or left in the cache.
- Connect and read timeouts (30 s and 120 s without a byte by default) bound every request; set
  `VIT_KERAS_DOWNLOAD_TIMEOUT` to `SECONDS` or `CONNECT,READ` to change them.
- A progress bar is drawn on stderr when it is a terminal.

`file://` and `http://` URLs work the same way (handy for mirrors and tests).

Example:
    >>> path = fetch("https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz")  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import sys
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
        >>> file_digest(__file__)  # doctest: +SKIP
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


def _write_pin(directory: str, url: str, sha256: str) -> None:
    pins = _read_pins(directory)
    pins[url] = sha256
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, PINS_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(pins, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(directory, PINS_FILE))


def forget(url: str, cache_dir: str | None = None, filename: str | None = None) -> None:
    """Remove a cached download (and its pin if it was pinned on first use), e.g. after it failed to load.

    Example:
        >>> forget("file:///nonexistent.npz", cache_dir="/tmp/k")
    """
    directory = cache_directory(cache_dir)
    path = os.path.join(directory, filename or _filename(url))
    if os.path.exists(path):
        os.remove(path)
    pins = _read_pins(directory)
    if url in pins:
        del pins[url]
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, PINS_FILE), "w") as f:
            json.dump(pins, f, indent=1, sort_keys=True)


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
        response = _open(url, method="HEAD")
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
        >>> timeouts()  # with VIT_KERAS_DOWNLOAD_TIMEOUT unset  # doctest: +SKIP
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


def _open(url: str, method: str = "GET"):
    """A urllib response for an http(s) `url` (proxies and redirects as urllib handles them), connected within the
    connect timeout, then with the read timeout on every socket read."""
    connect_timeout, read_timeout = timeouts()
    request = urllib.request.Request(url, method=method, headers={"User-Agent": "vit-keras"})
    response = urllib.request.urlopen(request, timeout=connect_timeout)  # noqa: S310 (http/https only)
    # urllib has one timeout for connecting and reading; the connected socket gets the read timeout. (Should the
    # socket not be reachable, the connect timeout keeps bounding every read.)
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(read_timeout)
    return response


class _Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, name: str, total: int | None):
        self.name, self.total, self.done = name, total, 0
        self.enabled = sys.stderr.isatty()
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


def _stream(url: str, destination, name: str) -> None:
    """Copy `url` into `destination` (a file object), with timeouts and a progress bar. An interrupted or stalled
    transfer raises."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme == "file":
        source = open(urllib.request.url2pathname(urllib.parse.urlsplit(url).path), "rb")  # noqa: SIM115
        total = os.fstat(source.fileno()).st_size
    else:
        source = _open(url)
        length = source.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
    progress = _Progress(name, total)
    try:
        while chunk := source.read(CHUNK_BYTES):
            destination.write(chunk)
            progress.update(len(chunk))
    finally:
        source.close()
        progress.close()
    if total is not None and progress.done != total:
        raise ValueError(f"the connection closed after {progress.done} of {total} bytes")


def _get_file(url, filename, directory, file_hash, algorithm):
    """Download `url` to `<directory>/<filename>.incomplete`, check its `algorithm` digest against `file_hash`,
    then rename it into place; a cached file that already matches is used as it is. Nothing unverified is ever
    left under the final name."""
    import http.client

    target = os.path.join(directory, filename)
    if os.path.isfile(target):
        if file_digest(target, algorithm) == file_hash:
            return target
        os.remove(target)  # altered or stale: never loaded, replaced by a verified download
    os.makedirs(directory, exist_ok=True)
    partial = target + INCOMPLETE_SUFFIX
    connect_timeout, read_timeout = timeouts()
    try:
        with open(partial, "wb") as f:
            _stream(url, f, filename)
        found = file_digest(partial, algorithm)
        if found != file_hash:
            raise _Mismatch(found)
        os.replace(partial, target)
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
    return target


class _Mismatch(Exception):
    """A finished download whose digest is not the expected one (carries the digest found)."""


def fetch(url: str, *, sha256: str | None = None, cache_dir: str | None = None, filename: str | None = None) -> str:
    """Download `url` into the Keras cache (once) and return the local path of a verified file.

    Example:
        >>> fetch("file:///data/ViT-B_16.npz", sha256="...")  # doctest: +SKIP
    """
    if not is_url(url):
        raise ValueError(f"{url!r} is not an http(s):// or file:// URL.")
    timeouts()  # a malformed $VIT_KERAS_DOWNLOAD_TIMEOUT is reported before anything is fetched
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
        raise ValueError(f"The download of {url!r} has {found} bytes, the server said {size}; deleted. Try again.")
    digest = file_digest(path)
    _write_pin(directory, url, digest)
    logger.warning("%s verified against the server's md5 and pinned with sha256 %s in %s.", url, digest,
                   os.path.join(directory, PINS_FILE))
    return path
