"""`vit_keras.dense.from_pretrained`: the published task models (EoMT, Depth Anything, ViTPose) against the reference
cases (tests/fixtures/tasks, made with transformers 5.23) within their tolerance (tests/task_cases.py: 1e-4 relative,
100x the float32 noise floor), on every backend (tests/test_backends.py runs the reference test on JAX and PyTorch);
the checkpoint's own preprocessing; and bad checkpoints refused by name before anything is built. Held-out cases
made with transformers: tests/test_dense_tasks_heldout.py."""

from __future__ import annotations

import json
import os
import shutil

import keras
import numpy as np
import pytest

from tests import task_cases as cases
from vit_keras import dense


@pytest.mark.slow  # EoMT's case builds and runs in over 1.5 s
@pytest.mark.parametrize("case", cases.CASES)
def test_reference_case_matches_transformers(case):
    model = dense.from_pretrained(cases.checkpoint(case), include_preprocessing=False)
    # JAX compiles each op of an eager call on its own; one XLA program for the whole model is several times faster
    # there (elsewhere the eager call is the faster one).
    outputs = model.predict(cases.inputs(case), verbose=0) if keras.backend.backend() == "jax" else \
        model(cases.inputs(case))
    assert sorted(outputs) == sorted(cases.expected(case))
    errors = cases.relative_errors(outputs, cases.expected(case))
    assert max(errors.values()) <= cases.RELATIVE_TOLERANCE, errors


def test_preprocessing_takes_rgb_in_0_255():
    # The fixture's input is already normalised with ImageNet's mean/std: the same images in [0, 255] through the
    # model's own preprocessing (the published processors' normalisation: the directory has none of its own).
    case = "vitpose_simple"
    meta = json.load(open(os.path.join(cases.case_dir(case), "meta.json")))["preprocess"]
    rgb = (cases.inputs(case) * np.array(meta["std"]) + np.array(meta["mean"])) * 255.0
    model = dense.from_pretrained(cases.checkpoint(case))
    errors = cases.relative_errors(model(rgb.astype("float32")), cases.expected(case))
    assert max(errors.values()) <= cases.RELATIVE_TOLERANCE, errors


# ---- bad checkpoints: refused by name, before a model is built

def _copy(case: str, tmp_path, edit=None) -> str:
    directory = tmp_path / case
    shutil.copytree(cases.checkpoint(case), directory)
    if edit is not None:
        config = json.loads((directory / "config.json").read_text())
        edit(config)
        (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def test_backbone_checkpoint_is_refused_with_the_other_loader():
    with pytest.raises(ValueError, match=r"'dinov2' model, not a task model .*use vit_keras.from_pretrained"):
        dense.from_pretrained(os.path.join(cases.ROOT, "tests", "fixtures", "family", "hf_dinov2", "checkpoint"))


def test_checkpoint_of_another_task_is_refused(tmp_path):
    directory = _copy("depth_anything", tmp_path, lambda c: c.update(architectures=["DepthAnythingForSomethingElse"]))
    with pytest.raises(ValueError, match=r"another task; vit_keras.dense.from_pretrained reads "
                                         r"DepthAnythingForDepthEstimation"):
        dense.from_pretrained(directory)


def test_dataset_index_is_checked_against_the_experts(tmp_path):
    directory = _copy("vitpose_simple", tmp_path, lambda c: c["backbone_config"].update(num_experts=6))
    for index in (None, 6, -1):
        with pytest.raises(ValueError, match=rf"dataset_index={index}: .* is a ViTPose\+\+ model with 6 experts, one "
                                             r"per training dataset; pass dataset_index=0...5"):
            dense.from_pretrained(directory, dataset_index=index)
    with pytest.raises(ValueError, match=r"dataset_index=2: .* is a ViTPose model with one expert \(not ViTPose\+\+\)"):
        dense.from_pretrained(cases.checkpoint("vitpose_simple"), dataset_index=2)
    with pytest.raises(ValueError, match=r"dataset_index=0 chooses a ViTPose\+\+ expert; .* holds a "
                                         r"EomtForUniversalSegmentation, which has none"):
        dense.from_pretrained(cases.checkpoint("eomt"), dataset_index=0)


def test_eomt_at_another_size_and_random_mask_annealing_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"image_size=\(64, 64\): EoMT runs at its configured image_size \(32, 32\)"):
        dense.from_pretrained(cases.checkpoint("eomt"), image_size=64)
    from safetensors.numpy import load_file, save_file

    directory = _copy("eomt", tmp_path)
    tensors = load_file(os.path.join(directory, "model.safetensors"))
    tensors["attn_mask_probs"] = np.array([1.0, 0.5], np.float32)
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    with pytest.raises(ValueError, match=r"attn_mask_probs \[1.0, 0.5\].*random queries"):
        dense.from_pretrained(directory)


def test_missing_head_tensor_is_refused_by_its_key(tmp_path):
    from safetensors.numpy import load_file, save_file

    directory = _copy("depth_anything", tmp_path)
    tensors = load_file(os.path.join(directory, "model.safetensors"))
    del tensors["neck.fusion_stage.layers.2.residual_layer1.convolution2.bias"]
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    with pytest.raises(ValueError, match=r"nothing was loaded.\nMissing \(1\): "
                                         r"neck.fusion_stage.layers.2.residual_layer1.convolution2.bias"):
        dense.from_pretrained(directory)


def test_save_pretrained_refuses_a_model_it_did_not_load(tmp_path):
    from vit_keras.dense import tasks

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="plain")
    with pytest.raises(ValueError, match=r"'plain' was not loaded by vit_keras.dense.from_pretrained"):
        tasks.save_pretrained(model, tmp_path / "out")
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.slow  # serves and downloads a repository
def test_hub_id_with_its_own_preprocessor_config(tmp_path, monkeypatch):
    # A hub repository (tests/local_hub.py on 127.0.0.1) holding the ViTPose case and a preprocessor_config.json
    # with mean = std = 0.5: the model is downloaded through the hub resolver and normalises as that file says.
    from huggingface_hub import constants

    from tests.local_hub import LocalHub

    files = {name: open(os.path.join(cases.checkpoint("vitpose_simple"), name), "rb").read()
             for name in ("config.json", "model.safetensors")}
    files["preprocessor_config.json"] = json.dumps({"image_mean": [0.5] * 3, "image_std": [0.5] * 3}).encode()
    server = LocalHub()
    server.add("org/vitpose_tiny", files)
    server.start()
    try:
        monkeypatch.setattr(constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf_cache"))
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no_token"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            monkeypatch.delenv(name, raising=False)
        model = dense.from_pretrained("hf-hub:org/vitpose_tiny")
    finally:
        server.stop()
    rgb = (cases.inputs("vitpose_simple") * 0.5 + 0.5) * 255.0
    errors = cases.relative_errors(model(rgb.astype("float32")), cases.expected("vitpose_simple"))
    assert max(errors.values()) <= cases.RELATIVE_TOLERANCE, errors


@pytest.mark.slow  # builds, saves and reloads a model
def test_keras_file_round_trip_keeps_the_outputs(tmp_path):
    # EoMT's graph has the most parts (queries, per-block attention masks, the shared mask heads): a .keras file
    # reloads it in safe mode with the same outputs.
    model = dense.from_pretrained(cases.checkpoint("eomt"), include_preprocessing=False)
    path = str(tmp_path / "eomt.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    errors = cases.relative_errors(reloaded(cases.inputs("eomt")), cases.expected("eomt"))
    assert max(errors.values()) <= cases.RELATIVE_TOLERANCE, errors
