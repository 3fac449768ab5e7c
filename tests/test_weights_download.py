"""Downloads: Keras cache, integrity checks, and refusal of anything truncated, altered or pickled.

Served from file:// URLs and from a local http.server on 127.0.0.1 that states an md5 like Google Cloud Storage
(`x-goog-hash: md5=<base64>`). The Keras cache points at tmp_path (KERAS_HOME).
"""

import base64
import hashlib
import http.server
import json
import os
import shutil
import threading

import keras
import numpy as np
import pytest

import vit_keras
from vit_keras.weights import download, registry

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "vitjax_token_raw")
# The architecture of the checkpoint in fixtures/vitjax_token_raw, fixed by that file (not tests/tiny.py's TINY).
ARCH = dict(image_size=64, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96, classes=7,
            include_preprocessing=False, classifier_activation=None)
# Reference: the float32 forward against the source framework's output (float64 NumPy, JAX or PyTorch) on O(1)
# logits. float32 rounding (2^-24 relative per op) accumulated over a few-layer chain of sums of at most a few
# hundred terms, under any summation order (oneDNN ISA, thread count), stays near 1e-6; 2e-5 keeps >= 10x over
# that.
TOLERANCE = 2e-5


@pytest.fixture
def cache(tmp_path, monkeypatch):
    home = tmp_path / "keras_home"
    monkeypatch.setenv("KERAS_HOME", str(home))
    return home / "vit_keras"


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / "served" / "checkpoint.npz"
    path.parent.mkdir()
    shutil.copy(os.path.join(FIXTURE, "checkpoint.npz"), path)
    return path


def _sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _expected_logits_ok(model):
    x = np.load(os.path.join(FIXTURE, "input.npy"))
    expected = np.load(os.path.join(FIXTURE, "expected.npy"))
    out = np.asarray(keras.ops.convert_to_numpy(model(x, training=False)))
    return np.abs(out - expected).max() <= TOLERANCE


def _cached_files(cache):
    """The names of the files cached (each in its URL's entry), without the pin file."""
    return sorted(name for root, _, names in os.walk(cache) for name in names if name != download.PINS_FILE)


class _Server:
    """127.0.0.1 HTTP server: path -> (body, md5 it states or None, 'ok' | 'interrupt')."""

    def __init__(self):
        self.routes = {}
        routes = self.routes

        class Handler(http.server.BaseHTTPRequestHandler):
            def _headers(self):
                body, md5, _ = routes[self.path]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                if md5 is not None:
                    self.send_header("x-goog-hash", "crc32c=AAAAAA==")
                    self.send_header("x-goog-hash", "md5=" + base64.b64encode(md5).decode())
                self.end_headers()

            def do_HEAD(self):  # noqa: N802
                self._headers()

            def do_GET(self):  # noqa: N802
                body, _, mode = routes[self.path]
                self._headers()
                self.wfile.write(body[: len(body) // 2] if mode == "interrupt" else body)
                if mode == "interrupt":
                    self.wfile.flush()
                    self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add(self, path, body, md5="auto", mode="ok"):
        self.routes[path] = (body, hashlib.md5(body).digest() if md5 == "auto" else md5, mode)
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def test_file_url_with_sha256_loads(cache, checkpoint):
    model = vit_keras.ViT(**ARCH)
    vit_keras.load_weights(model, checkpoint.as_uri(), sha256=_sha256(checkpoint))
    assert _expected_logits_ok(model)
    assert _cached_files(cache) == ["checkpoint.npz"]


def test_file_url_without_any_checksum_is_refused(cache, checkpoint):
    with pytest.raises(ValueError, match="No checksum is known.*sha256="):
        vit_keras.ViT(**ARCH, weights=checkpoint.as_uri())
    assert _cached_files(cache) == []


def test_wrong_sha256_is_refused_and_deleted(cache, checkpoint):
    with pytest.raises(ValueError, match="does not match its sha256.*deleted"):
        vit_keras.load_weights(vit_keras.ViT(**ARCH), checkpoint.as_uri(), sha256="0" * 64)
    assert _cached_files(cache) == []


def test_truncated_file_is_refused(cache, checkpoint, tmp_path):
    truncated = tmp_path / "served" / "truncated.npz"
    data = checkpoint.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="does not match"):
        vit_keras.load_weights(vit_keras.ViT(**ARCH), truncated.as_uri(), sha256=_sha256(checkpoint))
    assert _cached_files(cache) == []


def test_registered_name_downloads_verifies_and_loads(cache, checkpoint, monkeypatch):
    entry = registry.WeightsEntry("X/8", "tiny", checkpoint.as_uri(), 64, 7, sha256=_sha256(checkpoint))
    monkeypatch.setitem(registry.REGISTRY, entry.key, entry)
    model = vit_keras.ViT(**ARCH, weights="X/8:tiny")
    assert _expected_logits_ok(model)
    # A cached file that was altered afterwards is noticed and replaced by a verified download.
    cached = download.cached_path(entry.url, filename=entry.filename)
    open(cached, "wb").write(b"corrupted")
    model = vit_keras.ViT(**ARCH, weights="X/8:tiny")
    assert _expected_logits_ok(model)
    assert _sha256(cached) == entry.sha256


def test_http_server_md5_verified_then_sha256_pinned(cache, checkpoint, server):
    body = checkpoint.read_bytes()
    url = server.add("/vit_models/ckpt.npz", body)
    model = vit_keras.ViT(**ARCH, weights=url)
    assert _expected_logits_ok(model)
    with open(cache / download.PINS_FILE) as f:
        assert json.load(f) == {url: hashlib.sha256(body).hexdigest()}

    # The pin now rules: a different object at the same address (with a matching md5) is refused and removed.
    os.remove(download.cached_path(url))
    altered = body.replace(b"Transformer", b"Transformex", 1)
    server.add("/vit_models/ckpt.npz", altered)
    with pytest.raises(ValueError, match="does not match its sha256"):
        vit_keras.ViT(**ARCH, weights=url)
    assert _cached_files(cache) == []


def test_http_server_stating_a_wrong_md5_is_refused(cache, checkpoint, server):
    url = server.add("/bad_md5.npz", checkpoint.read_bytes(), md5=hashlib.md5(b"something else").digest())
    with pytest.raises(ValueError, match="does not match its md5"):
        vit_keras.ViT(**ARCH, weights=url)
    assert _cached_files(cache) == [] and not os.path.exists(cache / download.PINS_FILE)


def test_http_server_without_hash_is_refused(cache, checkpoint, server):
    url = server.add("/no_hash.npz", checkpoint.read_bytes(), md5=None)
    with pytest.raises(ValueError, match="states none"):
        vit_keras.ViT(**ARCH, weights=url)
    model = vit_keras.ViT(**ARCH)
    vit_keras.load_weights(model, url, sha256=_sha256(checkpoint))  # an explicit pin is enough
    assert _expected_logits_ok(model)


def test_interrupted_download_is_refused(cache, checkpoint, server):
    url = server.add("/interrupted.npz", checkpoint.read_bytes(), mode="interrupt")
    with pytest.raises(ValueError, match="failed|does not match"):
        vit_keras.ViT(**ARCH, weights=url)
    assert _cached_files(cache) == [] and not os.path.exists(cache / download.PINS_FILE)


def test_pickle_bearing_npz_is_refused_and_removed(cache, tmp_path, server):
    params = dict(np.load(os.path.join(FIXTURE, "checkpoint.npz")))
    params["cls"] = np.array([{"__reduce__": "payload"}], dtype=object)
    path = tmp_path / "pickled.npz"
    np.savez(path, **params)
    url = server.add("/pickled.npz", path.read_bytes())
    with pytest.raises(ValueError, match="pickled object array.*never unpickles"):
        vit_keras.ViT(**ARCH, weights=url)
    assert _cached_files(cache) == []
    assert json.load(open(cache / download.PINS_FILE)) == {}
    with pytest.raises(ValueError, match="pickled object array"):
        vit_keras.ViT(**ARCH, weights=str(path))  # a local file is refused the same way (and left alone)
    assert path.exists()


@pytest.mark.slow
def test_named_constructor_resolves_imagenet_through_the_registry(cache, tmp_path, monkeypatch):
    """ViTTi16(weights="imagenet") -> the registry's pick for Ti/16 at the model's size -> verified download ->
    every variable loaded (the served checkpoint is another random Ti/16 written in the Google layout)."""
    from vit_keras.weights.assign import model_slots

    source = vit_keras.ViTTi16(image_size=32, weights=None)
    rng = np.random.default_rng(0)
    params = {key: rng.normal(size=slot.shape).astype(np.float32) for key, slot in model_slots(source).items()}
    path = tmp_path / "ti16.npz"
    np.savez(path, **params)
    chosen = registry.find("Ti/16", "imagenet", (32, 32))
    assert chosen.name == "augreg-imagenet21k+imagenet2012-224"
    monkeypatch.setitem(registry.REGISTRY, chosen.key, registry.WeightsEntry(
        "Ti/16", chosen.name, path.as_uri(), 224, 1000, sha256=_sha256(path)))
    model = vit_keras.ViTTi16(image_size=32, weights="imagenet")
    for key, slot in model_slots(model).items():
        np.testing.assert_array_equal(slot.variable.numpy(), params[key].reshape(slot.variable.shape), err_msg=key)


def test_convert_a_registered_name_from_a_file_url(cache, checkpoint, monkeypatch, tmp_path, capsys):
    """`vit-keras convert VARIANT:name` downloads the registry's URL (here file://, no network), verifies its
    sha256 and writes a model with the fixture's vit_jax logits (2e-5)."""
    from vit_keras.cli import main as cli_main

    entry = registry.WeightsEntry("X/8", "tiny", checkpoint.as_uri(), 64, 7, sha256=_sha256(checkpoint))
    monkeypatch.setitem(registry.REGISTRY, entry.key, entry)
    out = str(tmp_path / "tiny.keras")
    assert cli_main(["convert", "X/8:tiny", out]) == 0
    assert "wrote" in capsys.readouterr().out
    model = keras.saving.load_model(out)
    x = np.load(os.path.join(FIXTURE, "input.npy"))
    expected = np.load(os.path.join(FIXTURE, "expected.npy"))
    assert np.abs(np.asarray(model(x * 127.5 + 127.5)) - expected).max() <= TOLERANCE
    assert _cached_files(cache) == [entry.filename]

    # A wrong pin in the registry is refused and leaves nothing behind.
    os.remove(download.cached_path(entry.url, filename=entry.filename))
    monkeypatch.setitem(registry.REGISTRY, entry.key, registry.WeightsEntry(
        "X/8", "tiny", checkpoint.as_uri(), 64, 7, sha256="0" * 64))
    assert cli_main(["convert", "X/8:tiny", str(tmp_path / "again.keras")]) == 2
    assert "does not match its sha256" in capsys.readouterr().err
    assert _cached_files(cache) == []


@pytest.mark.parametrize("content", ["garbage", "truncated"])
def test_corrupt_downloaded_keras_weights_are_removed_with_their_pin(cache, tmp_path, server, content):
    """A .weights.h5 the server states the right md5 for but which is no readable HDF5 (corrupt at the source)
    is refused with a ValueError, and neither the file nor its first-use sha256 pin stays in the cache."""
    model = vit_keras.ViT(**ARCH)
    good = tmp_path / "good.weights.h5"
    model.save_weights(str(good))
    body = good.read_bytes()
    body = b"not an hdf5 file" if content == "garbage" else body[: len(body) // 2]
    url = server.add(f"/{content}.weights.h5", body)
    with pytest.raises(ValueError, match="not a readable Keras weights file"):
        vit_keras.ViT(**ARCH, weights=url)
    assert _cached_files(cache) == []
    assert json.load(open(cache / download.PINS_FILE)) == {}


def test_downloaded_keras_weights_that_do_not_fit_stay_cached(cache, tmp_path, server):
    """A readable, verified .weights.h5 for another architecture is the caller's mismatch, not corruption: it
    stays cached (and pinned), and the error says how to fix the model."""
    other = vit_keras.ViT(**{**ARCH, "num_layers": 1})
    path = tmp_path / "other.weights.h5"
    other.save_weights(str(path))
    url = server.add("/other.weights.h5", path.read_bytes())
    with pytest.raises(ValueError, match="(?s)does not fit this model.*same arguments"):
        vit_keras.ViT(**ARCH, weights=url)
    assert _cached_files(cache) == ["other.weights.h5"]
    assert list(json.load(open(cache / download.PINS_FILE))) == [url]


# --- one cache entry per URL ----------------------------------------------------------------------------------


def test_urls_with_the_same_file_name_keep_their_own_cache_entries(cache, server):
    """/a/ckpt.bin and /b/ckpt.bin share a file name, not a cache entry: a failed download of one (interrupted, or
    not matching its pin) leaves the other's verified file intact, and each call returns its own content."""
    body_a, body_b = b"A" * 50_000, b"B" * 60_000
    sha_a, sha_b = hashlib.sha256(body_a).hexdigest(), hashlib.sha256(body_b).hexdigest()
    url_a = server.add("/a/ckpt.bin", body_a)
    url_b = server.add("/b/ckpt.bin", body_b, mode="interrupt")
    path_a = download.fetch(url_a, sha256=sha_a)
    for bad_pin in (sha_b, "0" * 64):
        with pytest.raises(ValueError, match=r"/b/ckpt.bin' failed|does not match"):
            download.fetch(url_b, sha256=bad_pin)
        assert open(path_a, "rb").read() == body_a and _cached_files(cache) == ["ckpt.bin"]
    server.add("/b/ckpt.bin", body_b)
    path_b = download.fetch(url_b, sha256=sha_b)
    assert path_b != path_a and os.path.basename(path_b) == os.path.basename(path_a) == "ckpt.bin"
    assert open(download.fetch(url_a, sha256=sha_a), "rb").read() == body_a
    assert open(download.fetch(url_b, sha256=sha_b), "rb").read() == body_b
    assert _cached_files(cache) == ["ckpt.bin", "ckpt.bin"]
    download.forget(url_b)  # removes B's file and its entry, not A's
    assert _cached_files(cache) == ["ckpt.bin"] and sorted(os.listdir(cache)) == [
        os.path.basename(os.path.dirname(path_a))]


def test_a_file_cached_under_the_old_shared_name_is_reused_only_when_it_matches_the_pin(cache, tmp_path):
    """Earlier versions cached `<cache>/vit_keras/<file name>`. A pinned download takes that file over (moved into
    its URL's entry, nothing fetched) when its sha256 matches; otherwise the file is left alone, for the URL
    it belongs to, and the download goes ahead."""
    served = tmp_path / "served" / "model.npz"
    served.parent.mkdir()
    served.write_bytes(b"the served checkpoint")
    legacy = cache / "model.npz"
    cache.mkdir(parents=True)
    legacy.write_bytes(b"another URL's checkpoint")
    path = download.fetch(served.as_uri(), sha256=_sha256(served))
    assert open(path, "rb").read() == b"the served checkpoint"
    assert legacy.read_bytes() == b"another URL's checkpoint"  # not deleted: it may be another URL's file

    legacy.write_bytes(b"the served checkpoint")
    os.remove(path)
    missing = (tmp_path / "gone" / "model.npz").as_uri()  # reading this URL would fail: the legacy file is used
    reused = download.fetch(missing, sha256=_sha256(served))
    assert reused == download.cached_path(missing) and open(reused, "rb").read() == b"the served checkpoint"
    assert not legacy.exists()
