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


@pytest.mark.parametrize("name", [
    "m" * 232 + ".weights.h5",  # 243 bytes: the old ".{name}.tmp-XXXXXXXX.weights.h5" was 268
    "é" * 117 + ".keras",  # 240 bytes of two-byte characters: the cut must not split one
    "x" * 255,  # the longest name a file system takes
])
def test_any_valid_final_name_gets_a_valid_temporary_name(tmp_path, name):
    assert len(os.fsencode(name)) <= 255
    target = tmp_path / name
    with atomic_file(target) as tmp:
        assert len(os.fsencode(os.path.basename(tmp))) <= 255 and tmp.endswith(os.path.splitext(name)[1])
        with open(tmp, "w") as f:
            f.write("data")
    assert target.read_text() == "data" and os.listdir(tmp_path) == [name]
    directory = tmp_path / ("d" + name[1:])
    for _ in range(2):  # the second time moves the old directory aside under a temporary name too
        with atomic_directory(directory, overwrite=True) as tmp:
            open(os.path.join(tmp, "saved_model.pb"), "w").close()
    assert os.listdir(directory) == ["saved_model.pb"] and len(os.listdir(tmp_path)) == 2


def test_temporary_names_of_one_long_name_differ_from_another_s():
    from vit_keras.files import temporary_prefix

    # Two long names that share their first 230 bytes keep distinct temporary prefixes (a digest of the name).
    a, b = "a" * 240 + "1", "a" * 240 + "2"
    assert temporary_prefix(a) != temporary_prefix(b)
    assert temporary_prefix("best.keras") == ".best.keras.tmp-"
