"""Checkpoints by Hugging Face hub id (`hf-hub:ORG/NAME`, `hf://ORG/NAME`), against a hub on 127.0.0.1
(tests/local_hub.py) serving the family fixtures; nothing here touches the internet.

In-process tests point huggingface_hub's constants (read from the environment at import) at the local hub and a
temporary cache; one subprocess test sets the real environment variables (HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE).
"""

import hashlib
import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
from huggingface_hub import constants
from safetensors.numpy import save_file

import vit_keras
from tests.local_hub import LocalHub, StalledEndpoint
from vit_keras.weights import download, hub
from vit_keras.weights.safetensors_io import read_safetensors

FAMILY = os.path.join(os.path.dirname(__file__), "fixtures", "family")
TIMM_CASE, HF_CASE = "timm_deit_distilled", "hf_dinov2"
TOKEN = "hf_localtesttoken"


def _files(case):
    directory = os.path.join(FAMILY, case, "checkpoint")
    return {name: open(os.path.join(directory, name), "rb").read() for name in sorted(os.listdir(directory))}


def _sharded(case, tmp_path):
    """The case's checkpoint as transformers writes a sharded one: an index and two shards."""
    tensors = read_safetensors(os.path.join(FAMILY, case, "checkpoint", "model.safetensors"))
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    files = {"config.json": _files(case)["config.json"]}
    for shard, keys in halves.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / shard))
        files[shard] = (tmp_path / shard).read_bytes()
    index = {"metadata": {}, "weight_map": {k: shard for shard, keys in halves.items() for k in keys}}
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    return files


@pytest.fixture(scope="module")
def local_hub(tmp_path_factory):
    server = LocalHub()
    timm_files, hf_files = _files(TIMM_CASE), _files(HF_CASE)
    server.add("timm/deit_tiny_test", timm_files)
    server.add("facebook/dinov2_tiny_test", hf_files)
    server.add("meta/gated_test", timm_files, token=TOKEN)
    server.commit_main = server.add("org/revisions", timm_files)
    server.commit_v2 = server.add("org/revisions", hf_files, branch="v2")
    server.add("org/pickle_only", {"config.json": hf_files["config.json"], "pytorch_model.bin": b"PK\x03\x04 pickle"})
    server.add("org/keras_preset", {"config.json": b'{"class_name": "ViTBackbone"}', "model.weights.h5": b"HDF"})
    server.add("org/forbidden", timm_files, forbidden={"model.safetensors"})
    server.add("org/no_config", {"model.safetensors": timm_files["model.safetensors"]})
    server.add("org/corrupt", timm_files, corrupt={"model.safetensors"})
    server.add("org/trickle", timm_files, trickle={"model.safetensors"})
    server.add("org/sharded", _sharded(HF_CASE, tmp_path_factory.mktemp("shards")))
    server.start()
    yield server
    server.stop()


def _point_at(monkeypatch, endpoint):
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")


@pytest.fixture
def hub_env(local_hub, tmp_path, monkeypatch):
    """huggingface_hub aimed at the local hub, with an empty cache, no token and online."""
    _point_at(monkeypatch, local_hub.endpoint)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no_token"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    return local_hub


def _go_offline(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _outputs(model, case):
    x = np.load(os.path.join(FAMILY, case, "input.npy")).astype(np.float32)
    with open(os.path.join(FAMILY, case, "meta.json")) as f:
        if json.load(f)["call"].get("include_preprocessing") is False:
            x = (x / 127.5 - 1.0).astype(np.float32)  # the dinov2 fixture's mean = std = 0.5
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)))


def _call(case):
    with open(os.path.join(FAMILY, case, "meta.json")) as f:
        return json.load(f)["call"]


def test_parse_ids_and_revisions():
    assert hub.parse("hf-hub:timm/vit_base_patch16_224.augreg_in21k") == ("timm/vit_base_patch16_224.augreg_in21k",
                                                                         None)
    assert hub.parse("hf://facebook/dinov2-small@v1.0") == ("facebook/dinov2-small", "v1.0")
    assert hub.parse("hf://facebook/dinov2-small", revision="abc") == ("facebook/dinov2-small", "abc")
    assert hub.parse("hf-hub:gpt2") == ("gpt2", None)
    assert [hub.is_hub_id(s) for s in ("hf-hub:a/b", "hf://a/b", "/tmp/a", "B/16:imagenet21k", None)] == [
        True, True, False, False, False]
    with pytest.raises(ValueError, match="pins revision 'v1' but revision='v2'"):
        hub.parse("hf-hub:a/b@v1", revision="v2")
    for bad in ("hf-hub:", "hf-hub:a/b/c", "hf://a/../b", "hf-hub:a b/c"):
        with pytest.raises(ValueError, match="not a hub repository id"):
            hub.parse(bad)
    with pytest.raises(ValueError, match="without a revision"):
        hub.parse("hf-hub:a/b@")
    with pytest.raises(ValueError, match="apply to hub ids"):
        hub.resolve("/tmp/some-dir", revision="main")
    assert hub.resolve("/tmp/some-dir") == "/tmp/some-dir"


def test_a_refs_revision_the_hub_does_not_serve_is_refused_naming_the_fix():
    assert hub.parse("hf-hub:a/b@refs/pr/1") == ("a/b", "refs/pr/1")
    assert hub.parse("hf-hub:a/b", revision="refs/convert/parquet") == ("a/b", "refs/convert/parquet")
    for bad in ("refs/main", "refs/heads/main", "refs/pr/x"):
        with pytest.raises(ValueError, match=rf"{re.escape(bad)}' is not a ref the hub serves.*write 'main'"):
            hub.parse(f"hf-hub:a/b@{bad}")


@pytest.mark.parametrize(("source", "case"), [("hf-hub:timm/deit_tiny_test", TIMM_CASE),
                                              ("hf://facebook/dinov2_tiny_test", HF_CASE)])
def test_from_pretrained_by_id_matches_the_local_directory(hub_env, source, case):
    by_id = vit_keras.from_pretrained(source, **_call(case))
    local = vit_keras.from_pretrained(os.path.join(FAMILY, case, "checkpoint"), **_call(case))
    # The same bytes read by the same code: the outputs are identical, not merely close.
    np.testing.assert_array_equal(_outputs(by_id, case), _outputs(local, case))
    # ...and the fixture's reference output (tests/fixtures/family/README.md: 5e-5 relative to max |reference|).
    expected = np.load(os.path.join(FAMILY, case, "expected.npy"))
    assert np.abs(_outputs(by_id, case) - expected).max() <= 5e-5 * max(1.0, float(np.abs(expected).max()))
    # Both spellings name the same cached snapshot, which holds only what vit_keras reads.
    other = source.replace("hf-hub:", "hf://") if source.startswith("hf-hub:") else source.replace("hf://", "hf-hub:")
    directory = hub.materialize(source)
    assert hub.materialize(other) == directory
    assert sorted(os.listdir(directory)) == ["config.json", "model.safetensors"]
    assert directory.startswith(constants.HF_HUB_CACHE)


def test_load_weights_by_id(hub_env):
    local = os.path.join(FAMILY, TIMM_CASE, "checkpoint")
    model = vit_keras.from_pretrained(local, **_call(TIMM_CASE))
    expected = _outputs(model, TIMM_CASE)
    for layer in model.layers:  # scramble, so only the load below can restore the outputs
        for weight in layer.weights:
            weight.assign(np.zeros(weight.shape, weight.dtype))
    vit_keras.weights.load_weights(model, "hf-hub:timm/deit_tiny_test@main", interpolation="bicubic")
    np.testing.assert_array_equal(_outputs(model, TIMM_CASE), expected)


def test_second_call_is_served_from_the_cache_with_the_server_stopped(hub_env, monkeypatch):
    own = LocalHub()
    own.add("timm/deit_tiny_test", _files(TIMM_CASE))
    own.start()
    _point_at(monkeypatch, own.endpoint)
    first = hub.materialize("hf-hub:timm/deit_tiny_test")
    gets = [path for method, path in own.requests if method == "GET"]
    assert sorted(p.rsplit("/", 1)[-1] for p in gets) == ["config.json", "model.safetensors"]
    own.stop()
    assert hub.materialize("hf-hub:timm/deit_tiny_test") == first
    model = vit_keras.from_pretrained("hf-hub:timm/deit_tiny_test", **_call(TIMM_CASE))
    reference = vit_keras.from_pretrained(os.path.join(FAMILY, TIMM_CASE, "checkpoint"), **_call(TIMM_CASE))
    np.testing.assert_array_equal(_outputs(model, TIMM_CASE), _outputs(reference, TIMM_CASE))


def test_offline_uses_the_cache_and_refuses_what_is_not_cached(hub_env, monkeypatch):
    online = hub.materialize("hf-hub:timm/deit_tiny_test")
    pinned = hub.materialize("hf-hub:org/revisions", revision=hub_env.commit_main)
    served = len(hub_env.requests)
    _go_offline(monkeypatch)
    assert hub.materialize("hf-hub:timm/deit_tiny_test") == online
    assert hub.materialize("hf-hub:org/revisions@" + hub_env.commit_main) == pinned
    with pytest.raises(ValueError, match=r"config.json of hf://facebook/dinov2_tiny_test is not in the Hugging Face "
                                         r"cache and HF_HUB_OFFLINE is set: run once online .* unset HF_HUB_OFFLINE"):
        hub.materialize("hf://facebook/dinov2_tiny_test")
    with pytest.raises(ValueError, match=r"org/revisions@v2 is not in the Hugging Face cache.*HF_HUB_OFFLINE"):
        hub.materialize("hf-hub:org/revisions@v2")
    assert len(hub_env.requests) == served  # offline means no request at all


def test_gated_repository_with_and_without_token(hub_env, monkeypatch):
    with pytest.raises(ValueError, match=r"meta/gated_test is a gated repository and no token was sent: accept "
                                         r"its licence on http://127\.0\.0\.1:\d+/meta/gated_test.*HF_TOKEN"):
        hub.materialize("hf-hub:meta/gated_test")
    with pytest.raises(ValueError, match="the token passed has no access to it: accept its licence"):
        hub.materialize("hf-hub:meta/gated_test", token="hf_wrong")
    directory = hub.materialize("hf-hub:meta/gated_test", token=TOKEN)
    assert sorted(os.listdir(directory)) == ["config.json", "model.safetensors"]
    monkeypatch.setattr(constants, "HF_HUB_CACHE", constants.HF_HUB_CACHE + "_env")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    model = vit_keras.from_pretrained("hf-hub:meta/gated_test", **_call(TIMM_CASE))
    assert model.count_params() > 0


def test_revision_pinning(hub_env):
    main = hub.materialize("hf-hub:org/revisions")
    assert os.path.basename(main) == hub_env.commit_main
    assert os.path.basename(hub.materialize("hf-hub:org/revisions@v2")) == hub_env.commit_v2
    assert os.path.basename(hub.materialize("hf://org/revisions", revision=hub_env.commit_v2)) == hub_env.commit_v2
    by_commit = vit_keras.from_pretrained("hf-hub:org/revisions", revision=hub_env.commit_v2, **_call(HF_CASE))
    local = vit_keras.from_pretrained(os.path.join(FAMILY, HF_CASE, "checkpoint"), **_call(HF_CASE))
    np.testing.assert_array_equal(_outputs(by_commit, HF_CASE), _outputs(local, HF_CASE))
    with pytest.raises(ValueError, match=r"org/revisions has no revision 'v9'; pass an existing branch"):
        hub.materialize("hf-hub:org/revisions@v9")
    with pytest.raises(ValueError, match=r"No repository org/missing on http://127\.0\.0\.1:\d+/org/missing"):
        hub.materialize("hf-hub:org/missing")


def test_sha256_pins_the_weights_of_a_hub_id(hub_env):
    digest = hashlib.sha256(_files(TIMM_CASE)["model.safetensors"]).hexdigest()
    assert hub.materialize("hf-hub:timm/deit_tiny_test", sha256=digest.upper())
    model = vit_keras.from_pretrained("hf-hub:timm/deit_tiny_test", sha256=digest, **_call(TIMM_CASE))
    assert model.count_params() > 0
    with pytest.raises(ValueError, match=f"model.safetensors of hf-hub:timm/deit_tiny_test has sha256 {digest}, "
                                         "not the pinned 00"):
        vit_keras.from_pretrained("hf-hub:timm/deit_tiny_test", sha256="00" * 32)
    with pytest.raises(ValueError, match="is sharded"):
        hub.materialize("hf-hub:org/sharded", sha256=digest)


def test_repository_without_safetensors_is_refused_naming_its_files(hub_env):
    with pytest.raises(ValueError, match=r"hf://org/keras_preset has no model\.safetensors.*its files are "
                                         r"\['config\.json', 'model\.weights\.h5'\]: vit_keras reads timm"):
        hub.materialize("hf://org/keras_preset")


def test_repository_without_config_and_refused_request_are_told_apart(hub_env):
    with pytest.raises(ValueError, match=r"hf-hub:org/no_config has no config\.json \(its files are "
                                         r"\['model\.safetensors'\]\): vit_keras reads timm"):
        hub.materialize("hf-hub:org/no_config")
    # A request the server refuses is not a missing file: the message names the URL and the status.
    with pytest.raises(ValueError, match=r"The hub refused http://127\.0\.0\.1:\d+/org/forbidden/resolve/\w+/"
                                         r"model\.safetensors: 403 Forbidden"):
        hub.materialize("hf-hub:org/forbidden")


def test_pickle_only_repository_is_refused_without_downloading_the_pickle(hub_env):
    with pytest.raises(ValueError, match=r"hf-hub:org/pickle_only has no model\.safetensors.*its files are "
                                         r"\['config\.json', 'pytorch_model\.bin'\]: its weights are pickle files "
                                         r"\(pytorch_model\.bin\), which vit_keras never loads"):
        vit_keras.from_pretrained("hf-hub:org/pickle_only")
    assert not [path for method, path in hub_env.requests if path.endswith("pytorch_model.bin")]


def test_corrupted_download_is_refused_and_deleted(hub_env):
    for _ in range(2):  # the second try downloads again (nothing bad was kept) and is refused again
        with pytest.raises(ValueError, match=r"The download of http://127\.0\.0\.1:\d+/org/corrupt/resolve/\w+/"
                                             r"model\.safetensors does not match the sha256 [0-9a-f]{64} the hub "
                                             r"states .* it was deleted"):
            hub.materialize("hf-hub:org/corrupt")
    blobs = os.path.join(constants.HF_HUB_CACHE, "models--org--corrupt", "blobs")
    assert all(len(name) == 40 for name in os.listdir(blobs))  # only config.json's blob (a git sha1) remains


_STALLED = []


def test_transport_errors_are_explained_naming_the_url():
    """What huggingface_hub raises when a request times out, cannot connect or is cut short (after its own retries,
    which take too long to wait for here) becomes a message naming the URL and what to do."""
    import httpx2
    from huggingface_hub import errors

    url = "https://hub.example/org/name/resolve/main/model.safetensors"

    def explained(error):
        return str(hub._explain(error, "org/name", None, url, None, "hf-hub:org/name"))

    def wrapped(cause):
        error = errors.LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub")
        error.__cause__ = cause
        return error

    timeout = httpx2.ReadTimeout("timed out")
    assert explained(timeout) == explained(wrapped(timeout))
    assert explained(timeout).startswith(f"{url} timed out (ReadTimeout)")
    assert "HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT" in explained(timeout)
    assert explained(wrapped(httpx2.ConnectError("[Errno 111] Connection refused"))).startswith(
        f"Cannot download {url} ([Errno 111] Connection refused); check the connection")
    cut = OSError("Consistency check failed: file should be of size 10 but has size 5 (model.safetensors).")
    assert explained(cut).startswith(f"The download of {url} was cut short (Consistency check failed")
    assert hub._explain(RuntimeError("other"), "org/name", None, url, None, "hf-hub:org/name") is None


@pytest.fixture
def stalled():
    # Open until the test process ends: the abandoned metadata request keeps waiting on it (huggingface_hub retries
    # it for minutes), and a refused connection would make huggingface_hub close the HTTP client that every other
    # download in the process shares.
    if not _STALLED:
        _STALLED.append(StalledEndpoint())
    return _STALLED[0]


def test_verify_names_the_blob_by_its_first_link(tmp_path):
    """A blob may link on into huggingface_hub's shared store (named by another hash): the name checked is the one
    the snapshot entry links to."""
    data = _files(TIMM_CASE)["model.safetensors"]
    digest = hashlib.sha256(data).hexdigest()
    store = tmp_path / "store" / ("0" * 64)
    store.parent.mkdir()
    store.write_bytes(data)
    (tmp_path / "blobs").mkdir()
    os.symlink(store, tmp_path / "blobs" / digest)
    (tmp_path / "snapshots" / "c").mkdir(parents=True)
    pointer = tmp_path / "snapshots" / "c" / "model.safetensors"
    os.symlink(os.path.join("..", "..", "blobs", digest), pointer)
    hub.verify(str(pointer), "http://hub/x")
    store.write_bytes(b"\0" + data[1:])
    with pytest.raises(ValueError, match=f"does not match the sha256 {digest}"):
        hub.verify(str(pointer), "http://hub/x")
    assert not os.path.lexists(pointer) and not os.path.lexists(tmp_path / "blobs" / digest)


@pytest.mark.slow
def test_stalled_server_gets_a_timeout_naming_the_url(hub_env, stalled, monkeypatch):
    _point_at(monkeypatch, stalled.endpoint)
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 1)
    monkeypatch.setenv(download.DEADLINE_ENV, "2")
    url = f"{stalled.endpoint}/timm/deit_tiny_test/resolve/main/config.json"
    with pytest.raises(download.DeadlineExceeded, match=f"Downloading {url} did not finish within its overall "
                                                        f"deadline of 2 s.*{download.DEADLINE_ENV}"):
        hub.materialize("hf-hub:timm/deit_tiny_test")


@pytest.mark.slow
def test_trickling_download_ends_at_the_deadline_and_leaves_nothing(hub_env, monkeypatch):
    monkeypatch.setenv(download.DEADLINE_ENV, "2")
    with pytest.raises(download.DeadlineExceeded, match=r"Downloading http://127\.0\.0\.1:\d+/org/trickle/resolve/"
                                                        r"\w+/model\.safetensors did not finish"):
        hub.materialize("hf-hub:org/trickle")
    snapshots = os.path.join(constants.HF_HUB_CACHE, "models--org--trickle", "snapshots")
    assert [os.listdir(os.path.join(snapshots, s)) for s in os.listdir(snapshots)] == [["config.json"]]
    # The partial file of the abandoned transfer is gone: only config.json's blob (named by its git sha1) is left.
    blobs = os.path.join(constants.HF_HUB_CACHE, "models--org--trickle", "blobs")
    assert os.listdir(blobs) == [hashlib.sha1(
        b"blob %d\0" % len(_files(TIMM_CASE)["config.json"]) + _files(TIMM_CASE)["config.json"]).hexdigest()]


def test_sharded_checkpoint_is_materialised_and_read_whole(hub_env):
    directory = hub.materialize("hf-hub:org/sharded")
    assert sorted(os.listdir(directory)) == ["config.json", "model-00001-of-00002.safetensors",
                                             "model-00002-of-00002.safetensors", "model.safetensors.index.json"]
    whole = read_safetensors(os.path.join(FAMILY, HF_CASE, "checkpoint", "model.safetensors"))
    merged = hub.read_shards(directory)
    assert sorted(merged) == sorted(whole)
    for name, value in whole.items():
        np.testing.assert_array_equal(merged[name], value)
    # from_pretrained reads the shards as one checkpoint: the same outputs as the unsharded directory, exactly.
    by_id = vit_keras.from_pretrained("hf-hub:org/sharded", **_call(HF_CASE))
    local = vit_keras.from_pretrained(os.path.join(FAMILY, HF_CASE, "checkpoint"), **_call(HF_CASE))
    np.testing.assert_array_equal(_outputs(by_id, HF_CASE), _outputs(local, HF_CASE))


_SUBPROCESS = """
import os, sys
from vit_keras.weights import hub
directory = hub.materialize("hf-hub:timm/deit_tiny_test")
assert directory.startswith(os.path.join(os.environ["HF_HOME"], "hub")), directory
os.environ["HF_HUB_OFFLINE"] = "1"
assert hub.materialize("hf://timm/deit_tiny_test") == directory
try:
    hub.materialize("hf-hub:facebook/dinov2_tiny_test")
except ValueError as error:
    print("REFUSED", error)
"""


@pytest.mark.slow
def test_environment_variables_are_honoured(local_hub, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "TRANSFORMERS_OFFLINE"))}
    env.update(HF_ENDPOINT=local_hub.endpoint, HF_HOME=str(tmp_path / "hf_home"), TF_CPP_MIN_LOG_LEVEL="2")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", _SUBPROCESS], env=env, cwd=root, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "REFUSED" in result.stdout and "HF_HUB_OFFLINE is set" in result.stdout, result.stdout


@pytest.mark.slow
def test_convert_takes_a_hub_id_and_a_revision(hub_env, tmp_path, capsys):
    from vit_keras.cli import main as cli_main

    out = str(tmp_path / "by_id.keras")
    assert cli_main(["convert", "hf-hub:org/revisions", out, "--revision", hub_env.commit_main]) == 0
    by_id = keras.models.load_model(out, safe_mode=True)
    local = vit_keras.from_pretrained(os.path.join(FAMILY, TIMM_CASE, "checkpoint"), **_call(TIMM_CASE))
    # Both give logits (convert writes classifier_activation=None; the fixture's call asks for the same). The
    # same graph on the same weights: only a summation order between two runs could differ (far below 1e-6).
    np.testing.assert_allclose(_outputs(by_id, TIMM_CASE), _outputs(local, TIMM_CASE), rtol=0, atol=1e-6)
    # --revision is for hub ids only: with a local path it is refused, not silently ignored.
    assert cli_main(["convert", os.path.join(FAMILY, TIMM_CASE, "checkpoint"), str(tmp_path / "x.keras"),
                     "--revision", "main"]) == 2
    assert "revision" in capsys.readouterr().err
