"""Checkpoints named by their Hugging Face hub id: `hf-hub:ORG/NAME` (timm's spelling) or `hf://ORG/NAME`
(keras-hub's), optionally pinned with `@REVISION` (a branch, tag or commit).

- Only what vit_keras reads is downloaded: `config.json` (and transformers' `preprocessor_config.json`, when the
  repository has one, for the normalisation) and `model.safetensors`, or a sharded checkpoint's
  `model.safetensors.index.json` and its shards; all from one commit. A repository with only pickle weights
  (`pytorch_model.bin`, ...) is refused, naming its files.
- Files go into the Hugging Face cache (`$HF_HOME/hub`, or `cache_dir`), downloaded by `huggingface_hub` (resumable,
  shared with timm and transformers). Every file is checked against the hash the hub states for it (the sha256 of
  an LFS file, the git blob sha1 of a small one), on every use: a mismatching file is deleted, never loaded. (The
  check reads the hash off the cache's symbolic links, huggingface_hub's default layout; a link that points outside
  the cache's `blobs/` is removed and refused, and the file it points to is left alone.) `sha256=` pins
  `model.safetensors` as it pins a URL.
- `HF_HUB_OFFLINE=1`: the cache only; a checkpoint that is not cached is refused with what to do.
- Gated and private repositories: the token is `token=`, else `$HF_TOKEN` (or `hf auth login`'s).
- Timeouts: `HF_HUB_ETAG_TIMEOUT` (seconds for the metadata request) and `HF_HUB_DOWNLOAD_TIMEOUT` (seconds without
  data), and the overall deadline of every vit_keras download (`VIT_KERAS_DOWNLOAD_DEADLINE`, an hour by default).

Example:
    >>> parse("hf-hub:timm/vit_base_patch16_224.augreg_in21k@main")
    ('timm/vit_base_patch16_224.augreg_in21k', 'main')
    >>> is_hub_id("hf://facebook/dinov2-small"), is_hub_id("/tmp/dinov2-small")
    (True, False)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time

from vit_keras.weights import download

PREFIXES = ("hf-hub:", "hf://")
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
PREPROCESSOR_NAME = "preprocessor_config.json"
OFFLINE_ENV = "HF_HUB_OFFLINE"
TOKEN_ENV = "HF_TOKEN"
# Weights vit_keras refuses to download: pickle (PyTorch, fastai) and other code-carrying formats.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# Seconds an abandoned transfer is given to end by itself (at its next chunk) before its partial file is deleted.
ABANDON_GRACE = 2.0
# An index lists shard file names; a few kilobytes per thousand tensors. Anything far larger is not an index.
MAX_INDEX_BYTES = 16 << 20
# The hub's repository names: an optional namespace, then the name; each part ASCII letters, digits, '-', '_' and
# '.', starting and ending with a letter or digit (the hub's rules, huggingface_hub's validate_repo_id). Matched
# whole (fullmatch): '$' would let a trailing newline through.
MAX_REPO_PART = 96
_REPO_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_REPO_ID = re.compile(rf"(?:{_REPO_PART}/)?{_REPO_PART}", re.ASCII)
# A revision: a branch or tag (git's ref-name rules, e.g. refs/pr/1) or a commit hash; never whitespace, control
# characters or the characters git forbids in a ref.
MAX_REVISION = 255
_REVISION = re.compile(r"[A-Za-z0-9_./+-]+", re.ASCII)
# The refs/ the hub resolves: pull requests and conversions (a branch is named without refs/heads/).
_HUB_REF = re.compile(r"refs/(?:pr/[0-9]+|convert/[A-Za-z0-9_.-]+)", re.ASCII)
_SHARD_NAME = re.compile(r"^[\w.-]+\.safetensors$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_SHA1 = re.compile(r"^[0-9a-f]{40}$")


class HubError(ValueError):
    """A hub checkpoint that cannot be had: the message names the id, the file or URL, and what to do."""


def is_hub_id(source) -> bool:
    """Whether `source` names a hub checkpoint (`hf-hub:ORG/NAME` or `hf://ORG/NAME`).

    Example:
        >>> is_hub_id("hf-hub:timm/vit_small_patch16_224.augreg_in21k"), is_hub_id("B/16:imagenet21k")
        (True, False)
    """
    return isinstance(source, str) and source.startswith(PREFIXES)


def parse(source: str, revision: str | None = None) -> tuple[str, str | None]:
    """(repo id, revision) of a hub id; `@REVISION` in the id and `revision=` must agree when both are given.

    Example:
        >>> parse("hf://facebook/dinov2-small", revision="v1.0")
        ('facebook/dinov2-small', 'v1.0')
    """
    if not is_hub_id(source):
        raise HubError(f"{source!r} is not a hub id; write hf-hub:ORG/NAME or hf://ORG/NAME (e.g. "
                       "hf-hub:timm/vit_base_patch16_224.augreg_in21k).")
    rest = source[len(next(p for p in PREFIXES if source.startswith(p))):]
    repo_id, _, pinned = rest.partition("@")
    _check_repo_id(source, repo_id)
    if "@" in rest and not pinned:
        raise HubError(f"{source!r} ends in '@' without a revision; write @BRANCH, @TAG or @COMMIT, or drop the '@'.")
    if pinned:
        _check_revision(pinned, f"{source!r} pins revision")
    if revision is not None:
        _check_revision(revision, "revision=")
    if pinned and revision is not None and pinned != revision:
        raise HubError(f"{source!r} pins revision {pinned!r} but revision={revision!r} was passed; give one.")
    return repo_id, pinned or revision


def _check_repo_id(source: str, repo_id: str) -> None:
    """Refuse a repository id the hub could not hold: empty parts, a stray '/', whitespace or control characters
    (a pasted newline), non-ASCII letters, parts over `MAX_REPO_PART` characters."""
    parts = repo_id.split("/")
    too_long = [part for part in parts if len(part) > MAX_REPO_PART]
    if too_long:
        raise HubError(f"{source!r}: {too_long[0][:20]!r}... is {len(too_long[0])} characters long; the hub's "
                       f"organisation and repository names have at most {MAX_REPO_PART}.")
    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id or "--" in repo_id:
        raise HubError(f"{source!r}: {repo_id!r} is not a hub repository id; write ORG/NAME (ASCII letters, digits, "
                       "'-', '_' and '.', no spaces or line breaks), e.g. "
                       "hf-hub:timm/vit_base_patch16_224.augreg_in21k.")


def _check_revision(revision, what: str) -> None:
    """Refuse a revision that no branch, tag or commit can have (whitespace, control characters, '..', '@{')."""
    if not isinstance(revision, str) or not revision:
        raise HubError(f"{what} {revision!r} is not a revision; pass a branch, tag or commit hash as a string.")
    if (len(revision) > MAX_REVISION or not _REVISION.fullmatch(revision) or ".." in revision
            or revision.startswith(("/", ".")) or revision.endswith(("/", ".", ".lock"))):
        raise HubError(f"{what} {revision!r} is not a branch, tag or commit hash (ASCII letters, digits, '-', '_', "
                       f"'.', '+' and '/', at most {MAX_REVISION} characters, no spaces or line breaks).")
    if revision.startswith("refs/") and not _HUB_REF.fullmatch(revision):
        raise HubError(f"{what} {revision!r} is not a ref the hub serves: it resolves branch and tag names as they "
                       "are (write 'main', not 'refs/main' or 'refs/heads/main'), and under refs/ only pull requests "
                       "(refs/pr/N) and conversions (refs/convert/NAME).")


def offline() -> bool:
    """Whether `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) asks for the cache only, as huggingface_hub reads it.

    Example:
        >>> offline()  # with HF_HUB_OFFLINE unset
        False
    """
    from huggingface_hub import constants

    text = os.environ.get(OFFLINE_ENV) or os.environ.get("TRANSFORMERS_OFFLINE")
    return constants.is_offline_mode() or (text or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def file_url(repo_id: str, filename: str, revision: str | None) -> str:
    """The URL huggingface_hub fetches `filename` of `repo_id` from (`$HF_ENDPOINT`, default huggingface.co).

    Example:
        >>> file_url("timm/vit_tiny_patch16_224.augreg_in21k", "config.json", None)  # with HF_ENDPOINT unset
        'https://huggingface.co/timm/vit_tiny_patch16_224.augreg_in21k/resolve/main/config.json'
    """
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, filename, revision=revision)


def _page(repo_id: str) -> str:
    from huggingface_hub import constants

    return f"{constants.ENDPOINT}/{repo_id}"


def _git_blob_sha1(path: str) -> str:
    """The id git gives a file's content (sha1 of `blob <size>\\0` + content): the hub's ETag of a non-LFS file."""
    digest = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode())  # noqa: S324 (git's content id, not security)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: str, url: str) -> None:
    """Check a cached hub file against the hash its blob is named by (the ETag the hub stated: sha256 for LFS
    files, the git blob sha1 for small ones); a mismatching file is deleted with its snapshot link, and refused.

    Example:
        A cache laid out as huggingface_hub's (`blobs/<sha256>`, linked from `snapshots/<commit>/`):

        >>> import hashlib, os
        >>> os.makedirs("blobs"); os.makedirs("snapshots/c0ffee")
        >>> etag = hashlib.sha256(b"weights").hexdigest()
        >>> with open(f"blobs/{etag}", "wb") as f:
        ...     _ = f.write(b"weights")
        >>> os.symlink(f"../../blobs/{etag}", "snapshots/c0ffee/model.safetensors")
        >>> url = "https://huggingface.co/org/name/resolve/main/model.safetensors"
        >>> verify("snapshots/c0ffee/model.safetensors", url)
        >>> with open(f"blobs/{etag}", "wb") as f:
        ...     _ = f.write(b"altered")
        >>> verify("snapshots/c0ffee/model.safetensors", url)
        Traceback (most recent call last):
        vit_keras.weights.hub.HubError: The download of https://huggingface.co/... does not match the sha256 ...
        >>> os.path.exists("snapshots/c0ffee/model.safetensors")
        False
    """
    # One link only: the snapshot entry points at `blobs/<etag>`, which may itself link into huggingface_hub's
    # shared blob store, under another name.
    blob = os.path.join(os.path.dirname(path), os.readlink(path)) if os.path.islink(path) else path
    etag = os.path.basename(blob)
    inside = _in_blobs(path, blob)
    if _SHA256.match(etag):
        algorithm, found = "sha256", download.file_digest(blob)
    elif _GIT_SHA1.match(etag):
        algorithm, found = "git blob sha1", _git_blob_sha1(blob)
    else:
        # Without symlinks (Windows without developer mode) huggingface_hub keeps no blob named by its hash.
        raise HubError(f"{path!r} (from {url}) is not linked to a blob named by its hash, so its integrity cannot "
                       "be checked; use a file system with symbolic links for the Hugging Face cache (HF_HOME).")
    if found != etag and not inside:
        # Not the cache's own blob (a link made by hand, or a cache copied with absolute links): the file it points
        # at belongs to someone else and is left alone; only the cache's link goes.
        with contextlib.suppress(OSError):
            os.remove(path)
        raise HubError(f"{path!r} (from {url}) links to {os.path.abspath(blob)!r}, outside the cache's blobs folder "
                       f"{_blobs_folder(path)!r}, and that file does not match the {algorithm} {etag} the hub states "
                       f"(got {found}). The link was removed and {os.path.abspath(blob)!r} left untouched; download "
                       "again to fetch the right file, or point the link at the right one.")
    if found != etag:
        for name in (path, blob):
            with contextlib.suppress(OSError):
                os.remove(name)
        raise HubError(f"The download of {url} does not match the {algorithm} {etag} the hub states for it (got "
                       f"{found}: truncated or altered); it was deleted. Try again; if it persists, the file on the "
                       "hub or a proxy between is at fault.")


def _blobs_folder(path: str) -> str:
    """The `blobs/` folder of the cache a snapshot file belongs to (`<repo folder>/snapshots/<commit>/<file>`)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(path)))), "blobs")


def _in_blobs(path: str, blob: str) -> bool:
    """Whether `blob` (what the snapshot entry `path` links to) is an entry of its own cache's `blobs/` folder,
    the only place a mismatching file may be deleted from (the entry itself, which may be a further link, not what
    it links to). Folders are compared resolved, so a cache reached through a linked directory still counts."""
    if blob == path:
        return True  # not a link: the cache's own file
    return os.path.realpath(os.path.dirname(os.path.abspath(blob))) == os.path.realpath(_blobs_folder(path))


def _explain(error: Exception, repo_id: str, revision: str | None, url: str, token, shown: str) -> HubError | None:
    """A HubError naming the id, file and fix for what huggingface_hub raised, or None for an unknown error."""
    import httpx2
    from huggingface_hub import errors

    filename = url.rsplit("/", 1)[-1]
    if isinstance(error, errors.GatedRepoError):
        from huggingface_hub import get_token

        sent = "the token passed" if token else "the token in $HF_TOKEN" if os.environ.get(TOKEN_ENV) else \
            "the stored token (hf auth login)" if get_token() else None
        why = f"{sent} has no access to it" if sent else "no token was sent"
        return HubError(f"{repo_id} is a gated repository and {why}: accept its licence on {_page(repo_id)} "
                        f"(logged in), then set {TOKEN_ENV} to a token of that account with read access (or pass "
                        "token=).")
    if isinstance(error, errors.RepositoryNotFoundError):
        return HubError(f"No repository {repo_id} on {_page(repo_id)} (or it is private and the token cannot see "
                        f"it): check the id, or set {TOKEN_ENV} (or pass token=) for a private repository.")
    if isinstance(error, errors.RevisionNotFoundError):
        return HubError(f"{repo_id} has no revision {revision!r}; pass an existing branch, tag or commit hash "
                        f"(see {_page(repo_id)}/tree/main).")
    if isinstance(error, errors.LocalEntryNotFoundError) and offline():
        return HubError(f"{filename} of {shown} is not in the Hugging Face cache and {OFFLINE_ENV} is set: run "
                        f"once online to download it, or unset {OFFLINE_ENV}.")
    cause, seen = error, set()
    while cause is not None and not isinstance(cause, httpx2.TransportError) and id(cause) not in seen:
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    if id(cause) in seen:
        cause = None
    if isinstance(cause, httpx2.TimeoutException):
        return HubError(f"{url} timed out ({type(cause).__name__}); nothing was kept. Try again, or wait longer "
                        "with HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT (seconds).")
    refused = error
    while refused is not None and not isinstance(refused, errors.HfHubHTTPError):
        refused = refused.__cause__
    if cause is None and refused is not None:
        return HubError(f"The hub refused {url}: {str(refused).splitlines()[0]} Check the id, revision and token "
                        f"({TOKEN_ENV}), or HF_ENDPOINT if set.")
    if isinstance(cause, httpx2.TransportError) or isinstance(error, errors.LocalEntryNotFoundError):
        return HubError(f"Cannot download {url} ({cause or error}); check the connection (and HF_ENDPOINT if set), "
                        f"or set {OFFLINE_ENV}=1 to use the cache only.")
    if isinstance(error, OSError) and "Consistency check failed" in str(error):
        return HubError(f"The download of {url} was cut short ({str(error).splitlines()[0]}); nothing was kept. "
                        "Try again.")
    return None


class _Abandoned(Exception):
    """Raised inside a transfer that outlived its deadline (its caller has already been told)."""


class _Fetcher:
    """Downloads one checkpoint's files on a worker thread, recording the URL in flight (for the deadline's message)
    and stopping between files once abandoned."""

    def __init__(self, repo_id, revision, cache_dir, token, shown):
        self.shown = shown
        self.repo_id, self.revision, self.cache_dir, self.token = repo_id, revision, cache_dir, token
        self.offline = offline()
        self.url = file_url(repo_id, CONFIG_NAME, revision)
        self.abandoned = False

    def get(self, filename: str, revision: str | None) -> str:
        """The verified cached path of `filename`; huggingface_hub's errors pass through (explained by the caller)."""
        from huggingface_hub import constants, hf_hub_download

        if self.abandoned:
            raise _Abandoned(self.url)
        self.url = file_url(self.repo_id, filename, revision)
        path = hf_hub_download(self.repo_id, filename, revision=revision, cache_dir=self.cache_dir, token=self.token,
                               local_files_only=self.offline, etag_timeout=constants.HF_HUB_ETAG_TIMEOUT,
                               tqdm_class=self.progress_class())
        verify(path, self.url)
        return path

    def progress_class(self):
        """huggingface_hub's progress bar, which also ends an abandoned transfer at its next chunk (huggingface_hub
        then deletes the partial file)."""
        from huggingface_hub.utils import tqdm

        fetcher = self

        class Progress(tqdm):
            def update(self, n=1):
                if fetcher.abandoned:
                    raise _Abandoned(fetcher.url)
                return super().update(n)

        return Progress

    def files(self, commit: str) -> list[str]:
        from huggingface_hub import HfApi

        if self.offline:
            return []
        with contextlib.suppress(Exception):  # only for the message of a refusal
            return sorted(HfApi().list_repo_files(self.repo_id, revision=commit, token=self.token))
        return []

    def run(self) -> str:
        from huggingface_hub import errors

        # Online, only the hub's answer that a file does not exist means it is absent (not a failed request).
        missing = errors.LocalEntryNotFoundError if self.offline else errors.RemoteEntryNotFoundError
        try:
            config = self.get(CONFIG_NAME, self.revision)
        except errors.RemoteEntryNotFoundError:
            listing = self.files(self.revision)
            raise HubError(f"{self.shown} has no {CONFIG_NAME} (its files are {listing or 'unknown'}): vit_keras "
                           "reads timm (save_for_hf) and transformers (save_pretrained) checkpoints, which have "
                           "one.") from None
        snapshot = os.path.dirname(config)
        commit = os.path.basename(snapshot)  # <cache>/models--ORG--NAME/snapshots/<commit>/config.json
        # transformers keeps the normalisation the model was trained with beside the weights; optional.
        with contextlib.suppress(missing):
            self.get(PREPROCESSOR_NAME, commit)
        try:
            self.get(WEIGHTS_NAME, commit)
            return snapshot
        except missing:
            pass
        try:
            index = self.get(INDEX_NAME, commit)
        except missing:
            if self.offline:
                raise HubError(f"{WEIGHTS_NAME} of {self.shown} is not in the Hugging Face cache and {OFFLINE_ENV} is "
                               f"set: run once online to download it, or unset {OFFLINE_ENV}.") from None
            listing = self.files(commit)
            pickles = [name for name in listing if name.endswith(PICKLE_SUFFIXES)]
            why = (f"its weights are pickle files ({', '.join(pickles)}), which vit_keras never loads (unpickling can "
                   "run code); use a repository that publishes model.safetensors" if pickles else
                   "vit_keras reads timm (save_for_hf) and transformers (save_pretrained) checkpoints in safetensors")
            raise HubError(f"{self.shown} has no {WEIGHTS_NAME} (nor a sharded {INDEX_NAME}); its files are "
                           f"{listing or 'unknown'}: {why}.") from None
        for shard in shard_names(index):
            self.get(shard, commit)
        return snapshot


def shard_names(index_path: str) -> list[str]:
    """The shard files a `model.safetensors.index.json` names (its `weight_map` values), checked to be plain
    safetensors file names next to it.

    Example:
        >>> import json
        >>> with open("model.safetensors.index.json", "w") as f:
        ...     json.dump({"weight_map": {"cls_token": "model-00001-of-00002.safetensors",
        ...                               "pos_embed": "model-00002-of-00002.safetensors"}}, f)
        >>> shard_names("model.safetensors.index.json")
        ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']
    """
    if os.path.getsize(index_path) > MAX_INDEX_BYTES:
        raise HubError(f"{index_path!r} is over {MAX_INDEX_BYTES:,} bytes, too large for a shard index.")
    try:
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise HubError(f"{index_path!r} is not a shard index with a 'weight_map' ({error!r}).") from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise HubError(f"{index_path!r}: 'weight_map' must map tensor names to shard files.")
    names = sorted({str(name) for name in weight_map.values()})
    bad = [name for name in names if not _SHARD_NAME.match(name)]
    if bad:
        raise HubError(f"{index_path!r} names shards {bad} that are not .safetensors files next to it.")
    return names


def read_shards(directory: str) -> dict:
    """All tensors of a sharded safetensors checkpoint (`model.safetensors.index.json` + its shards), as one dict;
    every tensor the index lists must be in the shard it names, and no tensor in two shards.

    Example:
        >>> import json, os
        >>> from safetensors.numpy import save_file
        >>> os.makedirs("sharded")
        >>> save_file({"cls_token": np.zeros((1, 1, 48), "float32")}, "sharded/model-00001-of-00002.safetensors")
        >>> save_file({"pos_embed": np.zeros((1, 17, 48), "float32")}, "sharded/model-00002-of-00002.safetensors")
        >>> with open("sharded/model.safetensors.index.json", "w") as f:
        ...     json.dump({"weight_map": {"cls_token": "model-00001-of-00002.safetensors",
        ...                               "pos_embed": "model-00002-of-00002.safetensors"}}, f)
        >>> sorted(read_shards("sharded"))
        ['cls_token', 'pos_embed']
    """
    from vit_keras.weights.safetensors_io import read_safetensors

    index_path = os.path.join(directory, INDEX_NAME)
    shard_names(index_path)
    with open(index_path) as f:
        weight_map = json.load(f)["weight_map"]
    tensors: dict = {}
    for shard in sorted(set(weight_map.values())):
        part = read_safetensors(os.path.join(directory, shard))
        twice = sorted(set(part) & set(tensors))
        if twice:
            raise HubError(f"{shard!r} in {directory!r} repeats tensors {twice[:5]} of another shard.")
        tensors.update(part)
    missing = sorted(name for name, shard in weight_map.items() if name not in tensors)
    if missing:
        raise HubError(f"{index_path!r} lists tensors {missing[:5]} that its shards do not hold; download the "
                       "checkpoint again.")
    return tensors


def check_pin(directory: str, sha256: str, source: str) -> None:
    """Refuse a materialised checkpoint whose `model.safetensors` is not the one `sha256` pins (its verified blob is
    named by its sha256, so nothing is hashed again).

    Example:
        >>> import hashlib, os
        >>> os.makedirs("blobs"); os.makedirs("snapshots/c0ffee")
        >>> etag = hashlib.sha256(b"weights").hexdigest()
        >>> with open(f"blobs/{etag}", "wb") as f:
        ...     _ = f.write(b"weights")
        >>> os.symlink(f"../../blobs/{etag}", "snapshots/c0ffee/model.safetensors")
        >>> check_pin("snapshots/c0ffee", etag, "hf-hub:org/name")
        >>> check_pin("snapshots/c0ffee", "ab12" * 16, "hf-hub:org/name")
        Traceback (most recent call last):
        vit_keras.weights.hub.HubError: model.safetensors of hf-hub:org/name has sha256 ..., not the pinned ab12...
    """
    weights = os.path.join(directory, WEIGHTS_NAME)
    if not os.path.lexists(weights):
        raise HubError(f"sha256= pins one {WEIGHTS_NAME} but {source} is sharded ({INDEX_NAME}); pin the revision "
                       "(a commit hash) instead.")
    found = os.path.basename(os.readlink(weights)) if os.path.islink(weights) else download.file_digest(weights)
    if found != sha256.strip().lower():
        raise HubError(f"{WEIGHTS_NAME} of {source} has sha256 {found}, not the pinned {sha256}; the repository has "
                       "changed since it was pinned: pin its revision (@COMMIT) or update the sha256.")


def _storage(repo_id: str, cache_dir: str | None) -> str:
    """The Hugging Face cache folder of a model repository (`<cache>/models--ORG--NAME`)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return os.path.join(cache_dir or constants.HF_HUB_CACHE, repo_folder_name(repo_id=repo_id, repo_type="model"))


def _partials(storage: str) -> set[str]:
    """The partial downloads (`blobs/*.incomplete`) in a repository's cache folder."""
    blobs = os.path.join(storage, "blobs")
    with contextlib.suppress(OSError):
        return {os.path.join(blobs, name) for name in os.listdir(blobs) if name.endswith(".incomplete")}
    return set()


def materialize(source: str, revision: str | None = None, cache_dir: str | None = None, token=None,
                sha256: str | None = None) -> str:
    """The local directory (a Hugging Face cache snapshot) holding the checkpoint `source` names, downloaded once.

    `source`: `hf-hub:ORG/NAME[@REVISION]` or `hf://ORG/NAME[@REVISION]`; `revision` pins a branch, tag or commit
    instead. `cache_dir`: the Hugging Face cache (default `$HF_HOME/hub`). `token`: for gated and private
    repositories (default `$HF_TOKEN`). `sha256`: the digest `model.safetensors` must have (as a pinned URL's). The
    whole download is bounded by `VIT_KERAS_DOWNLOAD_DEADLINE`.

    Example (downloads on first use, then reads the cache; offline with `HF_HUB_OFFLINE=1`)::

        materialize("hf-hub:timm/vit_small_patch16_224.augreg_in21k")
        # '/root/.cache/huggingface/hub/models--timm--vit_small_patch16_224.augreg_in21k/snapshots/<commit>'
    """
    repo_id, revision = parse(source, revision)
    allowed = download.deadline()  # a malformed setting is reported before anything is fetched
    # The id as the caller wrote it, with the revision it is fetched at.
    shown = source if "@" in source or revision is None else f"{source}@{revision}"
    fetcher = _Fetcher(repo_id, revision, cache_dir, token, shown)
    storage = _storage(repo_id, cache_dir)
    partials = _partials(storage)
    outcome: dict = {}

    def work():
        try:
            outcome["directory"] = fetcher.run()
        except BaseException as error:  # handed to the caller below
            outcome["error"] = error

    worker = threading.Thread(target=work, name=f"vit_keras hub download {repo_id}", daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(allowed)
    if worker.is_alive():
        # A transfer ends at its next chunk (huggingface_hub then deletes its partial file) and no further file is
        # started; the partial file of one that sends nothing more within the grace is deleted here. Whatever lands
        # in the cache later is verified again before any use.
        fetcher.abandoned = True
        worker.join(ABANDON_GRACE)
        for path in _partials(storage) - partials:
            with contextlib.suppress(OSError):
                os.remove(path)
        raise download.DeadlineExceeded(
            f"Downloading {fetcher.url} did not finish within its overall deadline of {allowed:g} s "
            f"({time.monotonic() - started:.0f} s spent on {shown}); nothing unverified is used. Allow more "
            f"time with {download.DEADLINE_ENV}=SECONDS, or try again on a faster connection.")
    error = outcome.get("error")
    if error is None:
        if sha256 is not None:
            check_pin(outcome["directory"], sha256, source)
        return outcome["directory"]
    if isinstance(error, ValueError):
        raise error
    explained = _explain(error, repo_id, revision, fetcher.url, token, shown) if isinstance(error, Exception) else None
    if explained is None:
        raise error
    raise explained from None


def resolve(source, *, revision: str | None = None, token=None, cache_dir: str | None = None,
            sha256: str | None = None):
    """`source` itself, or for a hub id the local directory `materialize` gives (checked against `sha256` when
    given); `revision` and `token` are refused for anything but a hub id (they would be silently ignored).

    Example:
        >>> resolve("/tmp/my-checkpoint")
        '/tmp/my-checkpoint'
    """
    if is_hub_id(source):
        return materialize(source, revision=revision, cache_dir=cache_dir, token=token, sha256=sha256)
    if revision is not None or token is not None:
        raise HubError(f"revision= and token= apply to hub ids (hf-hub:ORG/NAME), not to {source!r}.")
    return source
