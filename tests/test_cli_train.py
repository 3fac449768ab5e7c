"""`vit-keras train` / `vit-keras evaluate`, including a run killed with SIGKILL and restarted."""

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from vit_keras.cli import build_parser, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOTAL_STEPS, STEPS_PER_EPOCH = 30, 10
# The resumed run replays exactly the uninterrupted one's examples and updates, in float32 on one device;
# only XLA re-compilation could reorder float sums, so the weights agree to rounding noise.
WEIGHT_TOLERANCE = 1e-5


def _command(output_dir, data_dir):
    return [
        sys.executable, "-m", "vit_keras.cli", "train", "--model", "Ti/16", "--patch-size", "4", "--num-layers", "1",
        "--image-size", "16",
        "--dataset", "vit_keras_digits", "--data-dir", data_dir, "--eval-split", "", "--batch-size", "16",
        "--steps", str(TOTAL_STEPS), "--steps-per-epoch", str(STEPS_PER_EPOCH), "--learning-rate", "0.05",
        "--warmup-steps", "3", "--precision", "float32", "--backup-every", "1", "--seed", "5",
        "--output-dir", str(output_dir),
    ]


def _env():
    return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")


def test_help_explains_the_flags(capsys):
    for command, words in (("train", ["--dataset", "--accumulation-steps", "--tpu", "--recipe", "resumes"]),
                           ("evaluate", ["--few-shot", "--split", "best.keras"])):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        text = capsys.readouterr().out
        for word in words:
            assert word in text, (command, word)


def test_bad_dataset_is_a_clear_error(capsys):
    assert main(["train", "--dataset", "cifar_10", "--output-dir", "unused"]) == 2
    assert "Unknown tfds dataset 'cifar_10'" in capsys.readouterr().err


def _weights(path):
    import keras

    return keras.models.load_model(path, safe_mode=True).get_weights()


def _kill_mid_epoch(process, state, steps_per_epoch=STEPS_PER_EPOCH, total_steps=TOTAL_STEPS):
    """SIGKILL `process` once its backup records a step inside an epoch after the first; return that step."""

    def backed_up_step():
        try:
            return json.loads(state.read_text())["step"]
        except (OSError, ValueError, KeyError):
            return 0

    def mid_epoch(step):
        return step > steps_per_epoch and step % steps_per_epoch != 0

    deadline = time.time() + 400
    try:
        while time.time() < deadline and process.poll() is None:
            if mid_epoch(backed_up_step()):
                # Freeze it first, so that the step read next is the one the kill leaves: the run may have
                # backed up an epoch's last step since the read above.
                process.send_signal(signal.SIGSTOP)
                if mid_epoch(backed_up_step()):
                    process.send_signal(signal.SIGKILL)
                    break
                process.send_signal(signal.SIGCONT)
            time.sleep(0.01)
    finally:
        if process.poll() is None:  # the deadline passed, or the test failed while it ran
            process.kill()
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    killed_at = backed_up_step()
    assert mid_epoch(killed_at) and killed_at < total_steps, killed_at
    return killed_at


def killed_then_resumed(command, reference, interrupted, **kill):
    """Run `command(interrupted)`, SIGKILL it mid-epoch (`_kill_mid_epoch(..., **kill)`) while `command(reference)`
    trains uninterrupted, then run `command(interrupted)` again to the end; return both runs' results.json.

    The reference trains in its own process while the other run goes on (and is killed), so that both cores work
    and it starts from the same process state as the resumed run: earlier tests in this process may have switched on
    TensorFlow's process-wide op determinism, which changes the float sums.
    """
    process = subprocess.Popen(command(interrupted), env=_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        killed = pool.submit(_kill_mid_epoch, process, interrupted / "backup" / "backup.json", **kill)
        subprocess.run(command(reference), env=_env(), check=True, timeout=400,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        killed.result()
    assert not (interrupted / "results.json").exists()
    subprocess.run(command(interrupted), env=_env(), check=True, timeout=400,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [json.loads((run / "results.json").read_text()) for run in (reference, interrupted)]


@pytest.mark.slow
def test_sigkill_mid_epoch_then_same_command_finishes_like_an_uninterrupted_run(tmp_path, capsys):
    import vit_keras.training.data

    data_dir = str(tmp_path / "tfds")
    vit_keras.training.data.load("vit_keras_digits", data_dir=data_dir)  # prepared once, then only read
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"
    results = killed_then_resumed(lambda run: _command(run, data_dir), reference, interrupted)
    assert results[0]["updates"] == results[1]["updates"] == TOTAL_STEPS
    for a, b in zip(_weights(reference / "checkpoints" / "last.keras"),
                    _weights(interrupted / "checkpoints" / "last.keras")):
        np.testing.assert_allclose(a, b, rtol=0, atol=WEIGHT_TOLERANCE)

    # `vit-keras evaluate` scores the checkpoint the run left.
    capsys.readouterr()
    assert main(["evaluate", str(reference / "checkpoints" / "last.keras"), "--dataset", "vit_keras_digits",
                 "--data-dir", data_dir, "--few-shot", "--batch-size", "128"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["examples"] == 360 and 0 <= scores["top1"] <= scores["top5"] <= 1
    assert set(scores) >= {"1shot", "5shot", "10shot", "25shot"}
