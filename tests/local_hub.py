"""A Hugging Face hub on 127.0.0.1 with the part of its HTTP API that `hf_hub_download` and `HfApi.list_repo_files`
use (huggingface_hub 2.4.0), serving repositories made of local files.

- `HEAD|GET /{repo}/resolve/{revision}/{file}`: `X-Repo-Commit`, `ETag` (the git blob sha1), for LFS files
  (`*.safetensors`, `*.bin`) `X-Linked-Etag` (the sha256) and `X-Linked-Size`, `Content-Length`.
- `GET /api/models/{repo}/tree/{revision}`: the file list.
- Errors as the hub sends them: `X-Error-Code` RepoNotFound (401), GatedRepo (401 without the repository's token,
  403 with another), RevisionNotFound (404), EntryNotFound (404, with `X-Repo-Commit`).
- Faults: a repository can serve a file whose body does not match its stated hash (`corrupt`), or trickle a file
  one byte at a time (`trickle`: eight bytes, then the connection closes; the next request gets it whole).
  `StalledEndpoint` is an address that accepts connections and never answers.

Example:
    >>> import urllib.request
    >>> hub = LocalHub().start()
    >>> commit = hub.add("org/name", {"config.json": b"{}"})  # returns the commit hash
    >>> hub.endpoint.startswith("http://127.0.0.1:")
    True
    >>> urllib.request.urlopen(f"{hub.endpoint}/org/name/resolve/main/config.json").read()
    b'{}'
    >>> hub.stop()
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import socket
import threading
import time
import urllib.parse

LFS_SUFFIXES = (".safetensors", ".bin")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 (git's content id)


@dataclasses.dataclass
class Repo:
    commits: dict[str, dict[str, bytes]]  # commit hash -> {file name: content}
    refs: dict[str, str]  # branch or tag -> commit hash
    token: str | None = None  # gated: requests must carry `Authorization: Bearer <token>`
    corrupt: frozenset = frozenset()  # files whose body is altered after the hash is stated
    trickle: frozenset = frozenset()  # files sent one byte every TRICKLE_SECONDS
    forbidden: frozenset = frozenset()  # files answered with a bare 403 (as a proxy or firewall might)

    def commit_of(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.refs.get(revision)


TRICKLE_SECONDS = 0.5


class LocalHub:
    """The server; `add` repositories, `start()`, point `HF_ENDPOINT` at `endpoint`, `stop()`; `requests` lists
    (method, path) of what it served."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.trickled: set[tuple[str, str]] = set()
        self.server = None

    def add(self, repo_id: str, files: dict[str, bytes], *, branch: str = "main", commit: str | None = None,
            **faults) -> str:
        """Add a commit of `files` to `repo_id` (created if new), pointed to by `branch`; returns its hash."""
        commit = commit or hashlib.sha1(repr(sorted(files.items())).encode() + repo_id.encode()).hexdigest()  # noqa: S324
        repo = self.repos.setdefault(repo_id, Repo(commits={}, refs={}))
        repo.commits[commit] = dict(files)
        repo.refs[branch] = commit
        for name, value in faults.items():
            setattr(repo, name, frozenset(value) if name in ("corrupt", "trickle", "forbidden") else value)
        return commit

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> LocalHub:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._answer(self, body=False)

            def do_GET(self):
                hub._answer(self, body=True)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @staticmethod
    def _send(handler, status, headers=None, body=b"", send_body=True):
        handler.send_response(status)
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if send_body and body:
            handler.wfile.write(body)

    def _error(self, handler, status, code, send_body, commit=None):
        headers = {"X-Error-Code": code, "X-Error-Message": code}
        if commit:
            headers["X-Repo-Commit"] = commit
        self._send(handler, status, headers, json.dumps({"error": code}).encode(), send_body)

    def _answer(self, handler, body: bool):
        path = urllib.parse.urlsplit(handler.path).path
        self.requests.append((handler.command, path))
        parts = [urllib.parse.unquote(part) for part in path.strip("/").split("/")]
        tree = parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree"
        if tree:
            repo_id, revision, filename = "/".join(parts[2:4]), parts[5], None
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo_id, revision, filename = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        else:
            return self._send(handler, 404, body=b"not found", send_body=body)
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(handler, 401, "RepoNotFound", body)
        if repo.token is not None:
            given = handler.headers.get("Authorization", "")
            if given != f"Bearer {repo.token}":
                return self._error(handler, 403 if given else 401, "GatedRepo", body)
        commit = repo.commit_of(revision)
        if commit is None:
            return self._error(handler, 404, "RevisionNotFound", body)
        files = repo.commits[commit]
        if tree:
            listing = [{"type": "file", "path": name, "size": len(data), "oid": git_blob_sha1(data)}
                       for name, data in sorted(files.items())]
            return self._send(handler, 200, {"Content-Type": "application/json"}, json.dumps(listing).encode(), body)
        if filename not in files:
            return self._error(handler, 404, "EntryNotFound", body, commit)
        if filename in repo.forbidden:
            return self._send(handler, 403, body=b"Forbidden", send_body=body)
        data = files[filename]
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_sha1(data)}"'}
        if filename.endswith(LFS_SUFFIXES):
            headers.update({"X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"', "X-Linked-Size": str(len(data))})
        if filename in repo.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]  # same size, other content: only a hash check can tell
        if filename in repo.trickle and body and (repo_id, filename) not in self.trickled:
            self.trickled.add((repo_id, filename))  # once: the client's retry then ends quickly
            handler.send_response(200)
            for key, value in headers.items():
                handler.send_header(key, value)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            try:
                for index in range(min(len(data), 8)):  # then the connection closes, cut short
                    handler.wfile.write(data[index:index + 1])
                    handler.wfile.flush()
                    time.sleep(TRICKLE_SECONDS)
            except OSError:
                pass
            handler.close_connection = True
            return None
        return self._send(handler, 200, headers, data, body)


class StalledEndpoint:
    """An address that accepts TCP connections (the kernel's backlog) and never reads or answers them."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(64)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.socket.getsockname()[1]}"

    def close(self) -> None:
        self.socket.close()
