"""Atomic writes: the final name appears only when the writer succeeded, and nothing is left behind otherwise."""

import os

import pytest

from vit_keras.files import atomic_directory, atomic_file


def test_atomic_file_replaces_only_on_success(tmp_path):
    target = tmp_path / "best.keras"
    target.write_text("good")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_file(target) as tmp:
            assert tmp.endswith(".keras") and os.path.dirname(tmp) == str(tmp_path)
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("disk full")
    assert target.read_text() == "good"
    assert sorted(os.listdir(tmp_path)) == ["best.keras"]
    with atomic_file(target) as tmp:
        with open(tmp, "w") as f:
            f.write("better")
    assert target.read_text() == "better"
    assert sorted(os.listdir(tmp_path)) == ["best.keras"]


def test_atomic_file_keeps_compound_suffix_and_refuses_existing(tmp_path):
    target = tmp_path / "m.weights.h5"
    with atomic_file(target) as tmp:
        assert tmp.endswith(".weights.h5")
        open(tmp, "w").close()
    with pytest.raises(ValueError, match=r"already exists; pass --overwrite"):
        with atomic_file(target, overwrite=False, flag="--overwrite"):
            pass


def test_atomic_file_requires_a_write(tmp_path):
    with pytest.raises(RuntimeError, match="Nothing was written"):
        with atomic_file(tmp_path / "x.tflite"):
            pass
    assert os.listdir(tmp_path) == []


def test_atomic_directory_swaps_whole_directories(tmp_path):
    target = tmp_path / "1"
    with atomic_directory(target) as tmp:
        open(os.path.join(tmp, "saved_model.pb"), "w").close()
    with pytest.raises(ValueError, match="already exists"):
        with atomic_directory(target):
            pass
    with pytest.raises(KeyError):
        with atomic_directory(target, overwrite=True) as tmp:
            raise KeyError("boom")
    assert os.listdir(target) == ["saved_model.pb"]
    assert sorted(os.listdir(tmp_path)) == ["1"]
