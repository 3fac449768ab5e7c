"""Downloads that stall, trickle or break: bounded by timeouts and an overall deadline, never left under their final
name, and a progress bar on a terminal. Served by a 127.0.0.1 server that sends the headers and part of the body,
then stalls, trickles a byte at a time or hangs up."""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import threading

import pytest

from vit_keras.weights import download

BODY = os.urandom(200_000)
STALL_SECONDS = 8  # the server gives up by itself after this, so no test can hang
TRICKLE_INTERVAL = 0.2  # seconds between the trickling server's bytes: far below any read timeout used here


def _files(directory):
    """Every file under `directory`, as paths relative to it."""
    return sorted(os.path.relpath(os.path.join(root, name), directory)
                  for root, _, names in os.walk(directory) for name in names)


class _FaultyServer:
    """Serves BODY at /<mode>/ckpt.bin: mode 'ok', 'stall' (half, then silence), 'cut' (half, then hang up),
    'trickle' (half, then a byte every TRICKLE_INTERVAL seconds for STALL_SECONDS) or 'slow_headers' (the status
    line, then a header a byte every TRICKLE_INTERVAL seconds for STALL_SECONDS)."""

    def __init__(self, cache_dir):
        self.seen_during_stall = None
        self.trickled = 0  # bytes trickled so far
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                mode = self.path.split("/")[1]
                if mode == "slow_headers":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Padding: ")
                    self._trickle(b"x" * int(STALL_SECONDS / TRICKLE_INTERVAL))
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(BODY)))
                self.end_headers()
                if mode == "ok":
                    self.wfile.write(BODY)
                    return
                self.wfile.write(BODY[: len(BODY) // 2])
                self.wfile.flush()
                if mode == "stall":
                    threading.Event().wait(0.5)
                    server.seen_during_stall = _files(cache_dir)
                    threading.Event().wait(STALL_SECONDS)
                if mode == "trickle":
                    self._trickle(BODY[len(BODY) // 2 :][: int(STALL_SECONDS / TRICKLE_INTERVAL)])
                self.close_connection = True

            def _trickle(self, data):
                for i in range(len(data)):
                    try:
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                    except OSError:  # the client gave up
                        return
                    server.trickled = i + 1
                    threading.Event().wait(TRICKLE_INTERVAL)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, mode):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{mode}/ckpt.bin"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    return tmp_path / download.CACHE_SUBDIR


@pytest.fixture
def server(cache):
    cache.mkdir(parents=True)
    s = _FaultyServer(cache)
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


SHA256 = hashlib.sha256(BODY).hexdigest()


def test_a_server_that_stalls_after_the_headers_times_out(cache, server, monkeypatch):
    monkeypatch.setenv(download.TIMEOUT_ENV, "30,1")  # the server stalls for less than 30 s
    with pytest.raises(ValueError, match=r"ckpt.bin' timed out \(30 s to connect, 1 s without data\); nothing was "
                                         rf"kept.*{download.TIMEOUT_ENV}"):
        download.fetch(server.url("stall"), sha256=SHA256)
    # While it stalled, the partial file had its .incomplete name, never the final one; now nothing is left.
    partial = os.path.relpath(download.cached_path(server.url("stall")), cache) + download.INCOMPLETE_SUFFIX
    assert server.seen_during_stall == [partial]
    assert os.listdir(cache) == []


def test_a_connection_cut_short_keeps_nothing(cache, server):
    with pytest.raises(ValueError, match=r"failed \(.*100000 of 200000 bytes|IncompleteRead"):
        download.fetch(server.url("cut"), sha256=SHA256)
    assert os.listdir(cache) == []


def test_a_verified_download_is_renamed_into_place(cache, server):
    path = download.fetch(server.url("ok"), sha256=SHA256)
    assert path == download.cached_path(server.url("ok")) and open(path, "rb").read() == BODY
    assert _files(cache) == [os.path.relpath(path, cache)] and os.path.basename(path) == "ckpt.bin"
    # A cached file altered afterwards is never used: it is replaced by a verified download.
    open(path, "wb").write(b"altered")
    assert open(download.fetch(server.url("ok"), sha256=SHA256), "rb").read() == BODY


def test_a_mismatching_download_is_deleted(cache, server):
    with pytest.raises(ValueError, match="does not match its sha256"):
        download.fetch(server.url("ok"), sha256="0" * 64)
    assert os.listdir(cache) == []


def test_progress_bar_only_on_a_terminal(cache, server, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(download.sys, "stderr", terminal)
    download.fetch(server.url("ok"), sha256=SHA256)
    assert "Downloading ckpt.bin [" in terminal.getvalue() and "0.2/0.2 MB 100%" in terminal.getvalue()

    os.remove(download.cached_path(server.url("ok")))
    piped = io.StringIO()
    monkeypatch.setattr(download.sys, "stderr", piped)
    download.fetch(server.url("ok"), sha256=SHA256)
    assert piped.getvalue() == ""


@pytest.mark.parametrize("value, expected", [("", download.DEFAULT_TIMEOUTS), ("7", (7.0, 7.0)),
                                             ("3,45.5", (3.0, 45.5))])
def test_timeouts_come_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv(download.TIMEOUT_ENV, value)
    assert download.timeouts() == expected


@pytest.mark.parametrize("value", ["soon", "0", "-1,5", "1,2,3", "inf"])
def test_malformed_timeout_setting_is_refused_before_downloading(cache, monkeypatch, value):
    monkeypatch.setenv(download.TIMEOUT_ENV, value)
    with pytest.raises(ValueError, match=rf"\${download.TIMEOUT_ENV}=.*must be positive seconds"):
        download.fetch("http://127.0.0.1:9/never.bin", sha256=SHA256)


@pytest.mark.parametrize("mode", ["trickle", "stall", "slow_headers"])
def test_overall_deadline_ends_a_trickling_or_silent_download(cache, server, monkeypatch, mode):
    """A byte every 0.2 s, of the body or of the headers, never trips a 30 s timeout; the 1 s deadline ends the
    download all the same, and a silent server is abandoned at the deadline rather than at the read timeout."""
    monkeypatch.setenv(download.TIMEOUT_ENV, "30,30")
    monkeypatch.setenv(download.DEADLINE_ENV, "1")
    with pytest.raises(download.DeadlineExceeded) as caught:
        download.fetch(server.url(mode), sha256=SHA256)
    message = str(caught.value)
    assert server.url(mode) in message and f"{download.DEADLINE_ENV}=SECONDS" in message
    received = int(message.split("s (")[1].split(" bytes received")[0].replace(",", ""))
    assert "overall deadline of 1 s" in message
    assert received == 0 if mode == "slow_headers" else len(BODY) // 2 <= received < len(BODY)
    # The call ended while the server was still trickling (it stops after STALL_SECONDS / TRICKLE_INTERVAL bytes).
    assert mode == "stall" or server.trickled < STALL_SECONDS / TRICKLE_INTERVAL
    assert os.listdir(cache) == []  # neither the partial file nor its (empty) cache entry is kept


@pytest.mark.parametrize("value, expected", [("", download.DEFAULT_DEADLINE), ("7200", 7200.0), ("0.5", 0.5)])
def test_deadline_comes_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv(download.DEADLINE_ENV, value)
    assert download.deadline() == expected


@pytest.mark.parametrize("value", ["soon", "0", "-5", "inf", "nan", "1,2"])
def test_malformed_deadline_is_refused_before_downloading(cache, monkeypatch, value):
    monkeypatch.setenv(download.DEADLINE_ENV, value)
    with pytest.raises(ValueError, match=rf"\${download.DEADLINE_ENV}=.*must be a positive number of seconds"):
        download.fetch("http://127.0.0.1:9/never.bin", sha256=SHA256)
