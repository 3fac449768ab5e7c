"""Download checkpoints into the Keras cache with an integrity check, and never load an unverified file.

- A pinned sha256 (from the registry, the caller, or an earlier verified download) is checked by
  `keras.utils.get_file`.
- Without one, the hash the server states for the object is used: Google Cloud Storage sends
  `x-goog-hash: md5=<base64>` (and `Content-Length`). The download is checked against it, then its sha256 is
  recorded in `<cache>/vit_keras/sha256_pins.json` and required from then on (trust on first use, verified).
- With neither, the download is refused: pass `sha256=`.
- A truncated, interrupted or mismatching download is deleted, never loaded or left in the cache.

`file://` and `http://` URLs work the same way (handy for mirrors and tests).

Example:
    >>> path = fetch("https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz")  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request

logger = logging.getLogger("vit_keras.weights")

CACHE_SUBDIR = "vit_keras"
PINS_FILE = "sha256_pins.json"
URL_SCHEMES = ("http", "https", "file")


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


def server_md5(url: str, timeout: float = 30.0) -> tuple[str | None, int | None]:
    """The md5 (hex) and size the server states for `url` (GCS `x-goog-hash` / `Content-MD5`), if any.

    Example:
        >>> server_md5("file:///tmp/x.npz")
        (None, None)
    """
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        return None, None
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http/https only)
            headers = response.headers
    except (urllib.error.URLError, OSError) as error:
        raise ValueError(f"Cannot reach {url!r} ({error}).") from error
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


def _get_file(url, filename, directory, file_hash, algorithm):
    import keras

    target = os.path.join(directory, filename)
    # get_file silently falls back to /tmp/.keras when the cache directory does not exist yet.
    os.makedirs(directory, exist_ok=True)
    try:
        path = keras.utils.get_file(
            fname=filename, origin=url, file_hash=file_hash, hash_algorithm=algorithm,
            cache_dir=os.path.dirname(directory), cache_subdir=os.path.basename(directory),
        )
    except ValueError as error:
        if os.path.exists(target):
            os.remove(target)
        raise ValueError(
            f"The download of {url!r} does not match its {algorithm} {file_hash} (truncated or altered); it was "
            "deleted. Try again; if it persists, the file at that address is not the one expected."
        ) from error
    except Exception as error:
        if os.path.exists(target):
            os.remove(target)
        raise ValueError(f"Downloading {url!r} failed ({error}); nothing was kept. Try again.") from error
    return path


def fetch(url: str, *, sha256: str | None = None, cache_dir: str | None = None, filename: str | None = None) -> str:
    """Download `url` into the Keras cache (once) and return the local path of a verified file.

    Example:
        >>> fetch("file:///data/ViT-B_16.npz", sha256="...")  # doctest: +SKIP
    """
    if not is_url(url):
        raise ValueError(f"{url!r} is not an http(s):// or file:// URL.")
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
