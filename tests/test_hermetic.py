"""The suite is hermetic: every per-user location points into the run's own temporary directory (the repository's
`conftest.py`), and a run started from an empty home directory leaves it empty."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLEARED, ISOLATED_DIRECTORIES, REAL_HOME_ENV, RUN_DIRECTORY_ENV

REPOSITORY = Path(__file__).resolve().parent.parent


def _inside(path, directory) -> bool:
    return os.path.commonpath([os.path.realpath(path), os.path.realpath(directory)]) == os.path.realpath(directory)


def test_every_per_user_location_is_inside_the_run_directory():
    run_directory = os.environ[RUN_DIRECTORY_ENV]
    for name in ISOLATED_DIRECTORIES:
        assert _inside(os.environ[name], run_directory), (name, os.environ[name], run_directory)
        assert not _inside(os.environ[name], os.environ[REAL_HOME_ENV]), (name, os.environ[name])
    assert not set(CLEARED) & set(os.environ)
    assert _inside(os.path.expanduser("~"), run_directory)


def test_the_libraries_read_the_isolated_locations(tmp_path):
    from huggingface_hub import constants

    assert _inside(constants.HF_HUB_CACHE, os.environ[RUN_DIRECTORY_ENV]), constants.HF_HUB_CACHE
    from keras.src.backend import config  # keras_home() is not exported: the directory read at import

    assert _inside(config.keras_home(), os.environ[RUN_DIRECTORY_ENV]), config.keras_home()
    assert _inside(tmp_path, os.environ[RUN_DIRECTORY_ENV]), tmp_path


@pytest.mark.tf_only
def test_tfds_prepares_the_bundled_dataset_inside_the_run_directory():
    from tests.doctest_setup import prepare_bundled_dataset

    assert _inside(prepare_bundled_dataset(), os.environ["TFDS_DATA_DIR"])


# Files whose tests reach each library that keeps per-user state: tfds (the bundled dataset, prepared afresh),
# Keras (keras.json, saved models), huggingface_hub (hub ids over a local server), torch and timm (parity),
# matplotlib (figures), the CLI (subprocesses).
TOUCHING_EACH_LIBRARY = (
    "vit_keras/training/data.py",
    "vit_keras/datasets",
    "vit_keras/weights/hub.py",
    "tests/test_hub.py",
    "tests/test_weights_timm.py",
    "tests/test_inspection.py",
    "tests/test_cli_validation.py",
)


@pytest.mark.slow
@pytest.mark.tf_only
def test_a_run_from_an_empty_home_leaves_it_empty(tmp_path):
    """A user's first run: no home state at all (no tfds data, no Keras, Hugging Face or torch caches), the
    variables that point elsewhere unset. The tests pass, and the home directory is as empty as it was."""
    home = tmp_path / "home"
    home.mkdir()
    environment = {name: value for name, value in os.environ.items()
                   if name not in ISOLATED_DIRECTORIES and name not in (RUN_DIRECTORY_ENV, REAL_HOME_ENV)}
    environment["HOME"] = str(home)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *TOUCHING_EACH_LIBRARY],
        cwd=REPOSITORY, env=environment, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    left = sorted(str(path.relative_to(home)) for path in home.rglob("*"))
    assert left == [], f"the run wrote into the home directory: {left[:20]}"


@pytest.mark.slow
def test_a_pytest_started_by_a_test_keeps_the_running_tests_files(tmp_path):
    """tests/test_backends.py starts pytest in a subprocess with this run's environment: that pytest gets its own
    temporary directories, so it cannot empty the ones the running tests (all workers') are using."""
    mine = tmp_path / "still-here.txt"
    mine.write_text("x")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_hermetic.py::test_the_libraries_read_the_isolated_locations"],
        cwd=REPOSITORY, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert mine.read_text() == "x"


def test_preparing_a_bundled_dataset_prints_nothing(tmp_path, capfd):
    # tfds prints "Downloading and preparing dataset ..." on a data directory's first preparation; the bundled
    # datasets are generated, not downloaded, and a doctest that happened to prepare one first failed on that line.
    pytest.importorskip("tensorflow_datasets")
    from vit_keras.training import data

    split = data.load("vit_keras_digits", "test", data_dir=str(tmp_path))
    assert split.num_classes == 10
    assert "Downloading" not in capfd.readouterr().out
