"""One run per output directory: a second run is refused naming the holder; a dead run's lock is taken over."""

import json
import logging
import os
import socket
import subprocess
import sys

import pytest

from vit_keras.training import lock
from vit_keras.training.lock import LOCK_NAME, OutputDirLockedError, output_dir_lock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLD = """
import sys
from vit_keras.training.lock import output_dir_lock
with output_dir_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes stdin
"""


@pytest.fixture
def holder(tmp_path):
    """Another process that holds the lock of tmp_path/run until the test ends."""
    run = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    try:
        assert process.stdout.readline().strip() == "held"
        yield run, process
    finally:
        process.stdin.close()
        process.wait(timeout=60)


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid  # reaped: no process has it now (pid reuse within this test is negligible)


@pytest.mark.slow
def test_second_run_is_refused_naming_the_holder(holder):
    run, process = holder
    with pytest.raises(OutputDirLockedError) as error:
        with output_dir_lock(run):
            pytest.fail("entered a directory another run holds")
    message = str(error.value)
    assert f"pid {process.pid} on host {socket.gethostname()}, running since 20" in message
    assert "--output-dir" in message and str(run / LOCK_NAME) in message
    process.stdin.close()
    process.wait(timeout=60)
    assert not (run / LOCK_NAME).exists()  # released (and removed) when the holder left its block
    with output_dir_lock(run):
        assert json.loads((run / LOCK_NAME).read_text())["pid"] == os.getpid()


@pytest.mark.slow
def test_cli_train_refuses_a_held_output_dir(holder, capsys):
    from vit_keras.cli import main

    run, process = holder
    code = main(["train", "--model", "Ti/16", "--patch-size", "4", "--num-layers", "1", "--image-size", "16",
                 "--dataset", "vit_keras_digits", "--data-dir", str(run.parent / "tfds"), "--steps", "2",
                 "--batch-size", "8", "--precision", "float32", "--output-dir", str(run)])
    assert code == 1
    err = capsys.readouterr().err
    assert f"is in use by another run: pid {process.pid} on host" in err
    assert sorted(os.listdir(run)) == [LOCK_NAME]  # nothing of the refused run was written


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    dead = _dead_pid()
    (run / LOCK_NAME).write_text(json.dumps({"pid": dead, "host": socket.gethostname(),
                                             "since": "2026-01-01T00:00:00+00:00"}))
    with caplog.at_level(logging.WARNING, logger=lock.__name__):
        with output_dir_lock(run):
            assert json.loads((run / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert f"Taking over the lock of {run} left by pid {dead} on host" in caplog.text
    assert os.listdir(run) == []


def test_lock_is_released_on_an_exception_and_refused_within_one_process(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(KeyError):
        with output_dir_lock(run):
            with pytest.raises(OutputDirLockedError, match=f"pid {os.getpid()} "):
                with output_dir_lock(run):
                    pass
            raise KeyError("boom")
    assert not run.exists()  # created by the lock, left empty: removed
    with output_dir_lock(run):
        pass


def test_without_flock_a_live_pid_holds_and_a_dead_one_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "_flock", lambda fd: None)  # a file system without flock
    run = tmp_path / "run"
    run.mkdir()
    record = {"host": socket.gethostname(), "since": "2026-01-01T00:00:00+00:00"}
    (run / LOCK_NAME).write_text(json.dumps({**record, "pid": os.getppid()}))
    with pytest.raises(OutputDirLockedError, match=f"pid {os.getppid()} on host"):
        with output_dir_lock(run):
            pass
    (run / LOCK_NAME).write_text(json.dumps({**record, "pid": _dead_pid()}))
    with output_dir_lock(run):
        assert json.loads((run / LOCK_NAME).read_text())["pid"] == os.getpid()


def test_remote_output_dirs_are_not_locked():
    with output_dir_lock("gs://bucket/run"):
        pass
