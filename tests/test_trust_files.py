"""Files that are not the library's to lose: a hub cache's links that point outside it, a directory swap cut short
between its two renames, leftovers of killed saves, a save over a symbolic link, and hub ids with stray characters.
"""

import hashlib
import os
import subprocess
import sys
import time

import pytest

from vit_keras import files
from vit_keras.files import atomic_directory, atomic_file
from vit_keras.weights import hub


def _snapshot_link(cache, target):
    """A Hugging Face cache entry `snapshots/c0ffee/model.safetensors` linking to `target`."""
    snapshot = cache / "models--org--name" / "snapshots" / "c0ffee"
    snapshot.mkdir(parents=True)
    (cache / "models--org--name" / "blobs").mkdir()
    link = snapshot / "model.safetensors"
    os.symlink(target, link)
    return link


def test_verify_never_deletes_a_file_outside_the_cache(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    mine = elsewhere / hashlib.sha256(b"what the hub states").hexdigest()  # named by a hash, holding other bytes
    mine.write_bytes(b"my own file")
    link = _snapshot_link(tmp_path / "cache", mine)
    with pytest.raises(hub.HubError, match=f"model.safetensors.*links to '{mine}', outside the cache's blobs folder"):
        hub.verify(str(link), "https://huggingface.co/org/name/resolve/main/model.safetensors")
    assert mine.read_bytes() == b"my own file"
    assert not os.path.lexists(link)  # the cache's own entry goes, so the next use downloads again


def test_verify_still_deletes_a_corrupt_blob_inside_the_cache(tmp_path):
    etag = hashlib.sha256(b"weights").hexdigest()
    cache = tmp_path / "cache"
    link = _snapshot_link(cache, os.path.join("..", "..", "blobs", etag))
    blob = cache / "models--org--name" / "blobs" / etag
    blob.write_bytes(b"altered")
    with pytest.raises(hub.HubError, match="does not match the sha256"):
        hub.verify(str(link), "https://huggingface.co/org/name/resolve/main/model.safetensors")
    assert not os.path.lexists(link) and not os.path.lexists(blob)


@pytest.mark.parametrize("source", [
    "hf-hub:timm/vit_base\n", "hf-hub:timm/vit_base ", "hf-hub:timm/vit\tbase", "hf-hub: timm/vit_base",
    "hf-hub:timm/", "hf-hub:/vit_base", "hf-hub:timm//vit_base", "hf://timm/vit_base/", "hf-hub:timm/vit\x00base",
    "hf-hub:timm/vit_bäse", "hf-hub:timm/-vit", "hf-hub:timm/vit--base", "hf-hub:" + "a" * 97 + "/vit",
    "hf-hub:timm/" + "v" * 97,
])
def test_hub_ids_are_checked_whole(source):
    with pytest.raises(hub.HubError, match="not a hub repository id|characters long"):
        hub.parse(source)


def test_longest_hub_names_pass():
    assert hub.parse("hf-hub:" + "a" * 96 + "/" + "b" * 96) == ("a" * 96 + "/" + "b" * 96, None)


@pytest.mark.parametrize("source, revision", [
    ("hf-hub:timm/vit_base@main\n", None), ("hf-hub:timm/vit_base@ma in", None), ("hf-hub:timm/vit_base", "main\n"),
    ("hf-hub:timm/vit_base", ""), ("hf-hub:timm/vit_base@a..b", None), ("hf-hub:timm/vit_base", "x" * 256),
])
def test_revisions_are_checked_whole(source, revision):
    with pytest.raises(hub.HubError, match="not a branch, tag or commit|not a revision"):
        hub.parse(source, revision=revision)


def test_usual_revisions_pass():
    assert hub.parse("hf-hub:timm/vit_base@refs/pr/1")[1] == "refs/pr/1"
    assert hub.parse("hf-hub:timm/vit_base", revision="a" * 40)[1] == "a" * 40


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _age(path, seconds):
    """Set the times of `path` and everything under it `seconds` in the past."""
    then = time.time() - seconds
    for root, dirs, names in os.walk(path):
        for name in dirs + names:
            os.utime(os.path.join(root, name), (then, then))
    os.utime(path, (then, then))


def _save(target, text):
    with atomic_directory(target, overwrite=True) as tmp:
        with open(os.path.join(tmp, "saved_model.pb"), "w") as f:
            f.write(text)


def test_an_interruption_between_the_renames_puts_the_old_directory_back(tmp_path, monkeypatch):
    target = tmp_path / "1"
    _save(target, "old")
    renames = []
    real_rename = os.rename

    def rename(source, destination):
        renames.append(source)
        if len(renames) == 2:  # the new directory into place
            raise KeyboardInterrupt
        return real_rename(source, destination)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        _save(target, "new")
    monkeypatch.setattr(os, "rename", real_rename)
    assert (target / "saved_model.pb").read_text() == "old"
    assert os.listdir(tmp_path) == ["1"]


def test_the_next_save_restores_a_directory_left_aside_and_removes_stale_leftovers(tmp_path):
    target = tmp_path / "model"
    pid = _dead_pid()
    # A save killed between its renames: the old directory aside, the new one never in place.
    trash = tmp_path / f".model.old-abcd1234-{pid}"
    (trash / "model").mkdir(parents=True)
    (trash / "model" / "saved_model.pb").write_text("old")
    # Killed writers' temporaries: one with its pid, one named as earlier versions did; both long untouched.
    stale = [tmp_path / f".model.tmp-efgh5678-{pid}", tmp_path / ".model.tmp-ijkl9012"]
    for path in stale:
        (path / "variables").mkdir(parents=True)
        _age(path, files.STALE_SECONDS + 60)
    # A running writer's temporary (this process), however old, and a recent one of an ended writer, stay.
    running = tmp_path / f".model.tmp-mnop3456-{os.getpid()}"
    recent = tmp_path / f".model.tmp-qrst7890-{pid}"
    for path in (running, recent):
        path.mkdir()
    _age(running, files.STALE_SECONDS + 60)
    with pytest.raises(ValueError, match="already exists"):  # the previous save is back, so it is not overwritten
        with atomic_directory(target):
            pass
    assert (target / "saved_model.pb").read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == sorted(["model", running.name, recent.name])
    _save(target, "new")
    assert (target / "saved_model.pb").read_text() == "new"


def test_a_stale_temporary_file_is_removed_by_the_next_save(tmp_path):
    stale = tmp_path / f".best.keras.tmp-abcd1234-{_dead_pid()}.keras"
    stale.write_text("half")
    _age(stale, files.STALE_SECONDS + 60)
    with atomic_file(tmp_path / "best.keras") as tmp:
        assert tmp.endswith(f"-{os.getpid()}.keras")
        with open(tmp, "w") as f:
            f.write("whole")
    assert os.listdir(tmp_path) == ["best.keras"]


def test_save_pretrained_refuses_a_symbolic_link(tmp_path):
    import vit_keras

    model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96,
                          classes=3)
    real = tmp_path / "real"
    vit_keras.save_pretrained(model, real)
    link = tmp_path / "current"
    os.symlink(real, link)
    before = sorted(os.listdir(real))
    for path in (link, f"{link}/"):
        with pytest.raises(ValueError, match=f"is a symbolic link to '{real}'.*Pass the target path"):
            vit_keras.save_pretrained(model, path, overwrite=True)
    assert os.path.islink(link) and os.readlink(link) == str(real) and sorted(os.listdir(real)) == before
