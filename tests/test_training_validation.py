"""What `train()` and `vit-keras train` refuse before training, the held-out validation split, and the NaN stop."""

import hashlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import vit_keras
from tests.tiny import TINY_TRAINING
from vit_keras import training
from vit_keras.cli import main
from vit_keras.training.callbacks import NonFiniteLossError
from vit_keras.training.loop import holdout_splits


def tiny_vit(image_size=16, classes=10):
    return vit_keras.ViT(image_size=image_size, classes=classes, classifier_activation=None, **TINY_TRAINING)


def _config(**overrides):
    return training.finetune(**{"total_steps": 4, "steps_per_epoch": 2, "batch_size": 8, "warmup_steps": 0,
                                "precision": "float32", "log_images": 2, "learning_rate": 0.05, **overrides})


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tfds"))


# --- config ranges ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("learning_rate", float("nan")), ("learning_rate", float("inf")), ("learning_rate", 0.0),
    ("steps_per_epoch", -1), ("steps_per_epoch", 0), ("backup_every", 0),
    ("weight_decay", -0.1), ("weight_decay", float("nan")), ("mixup_alpha", -1.0),
    ("label_smoothing", -0.1), ("label_smoothing", 1.0), ("dropout_rate", 1.0), ("dropout_rate", -0.1),
    ("attention_dropout_rate", 1.5), ("momentum", 1.0), ("clipnorm", 0.0), ("clipnorm", float("nan")),
    ("end_learning_rate", -1e-3), ("shuffle_buffer", 0), ("image_size", 0), ("crop", "center"),
    ("randaugment", (0, 0.5)), ("randaugment", (2, 1.5)), ("randaugment", (2.5, 0.5)),
])
def test_config_refuses_values_that_would_train_nothing_for_ever_or_into_nan(field, value):
    with pytest.raises(ValueError, match=f"`{field.split('_')[0] if field == 'randaugment' else field}"):
        training.finetune(**{field: value})


def test_config_accepts_the_edges_that_make_sense():
    config = training.finetune(weight_decay=0.0, mixup_alpha=0.0, label_smoothing=0.1, dropout_rate=0.0,
                               clipnorm=None, steps_per_epoch=1, randaugment=(2, 1.0), image_size=(16, 24))
    assert config.updates_per_epoch == 1


# --- validation on a held-out slice of the training split -----------------------------------------------------------

def test_holdout_split_strings():
    assert holdout_splits("train") == ("train[:90%]", "train[90%:]")
    assert holdout_splits("train", 0.25) == ("train[:75%]", "train[75%:]")
    with pytest.raises(ValueError, match="validation_fraction must lie in"):
        holdout_splits("train", 1.0)
    with pytest.raises(ValueError, match="composite split 'train\\[:50%\\]'"):
        holdout_splits("train[:50%]")


@pytest.mark.slow
def test_validation_defaults_to_a_slice_of_the_training_split_never_the_test_split(tmp_path, tfds_dir, monkeypatch):
    from vit_keras.training import data

    loaded, real_load = [], data.load

    def recording_load(source, split="train", **kwargs):
        loaded.append(split)
        return real_load(source, split, **kwargs)

    monkeypatch.setattr(data, "load", recording_load)
    result = training.train(tiny_vit, "vit_keras_digits", _config(), output_dir=str(tmp_path / "default"),
                            validation_data="vit_keras_digits", data_dir=tfds_dir, verbose=0)
    assert loaded == ["train[:90%]", "train[90%:]"] and "test" not in loaded
    assert "val_accuracy" in result.history
    assert json.loads((tmp_path / "default" / "results.json").read_text())["best_checkpoint"]["monitor"] == \
        "val_accuracy"

    loaded.clear()  # an explicit split is still honoured
    training.train(tiny_vit, "vit_keras_digits", _config(total_steps=2), output_dir=str(tmp_path / "explicit"),
                   validation_data="vit_keras_digits", validation_split="test", data_dir=tfds_dir, verbose=0)
    assert loaded == ["train", "test"]
    with pytest.raises(ValueError, match="pass validation_split"):
        training.train(tiny_vit, "vit_keras_digits", _config(), output_dir=str(tmp_path / "other"),
                       validation_data="cifar10", data_dir=tfds_dir)


# --- a loss that turns NaN ------------------------------------------------------------------------------------------

def _digest(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


@pytest.mark.slow
def test_nan_loss_stops_with_a_clear_error_and_keeps_the_good_checkpoints(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, (32, 16, 16, 3)).astype(np.float32)
    labels = np.arange(32) % 10
    good = tf.data.Dataset.from_tensor_slices((images, labels))
    run = str(tmp_path / "run")
    training.train(tiny_vit, good, _config(), output_dir=run, validation_data=good, num_classes=10, verbose=0)
    checkpoints = [os.path.join(run, "checkpoints", name) for name in ("best.keras", "last.keras")]
    before = [_digest(path) for path in checkpoints]

    poisoned = tf.data.Dataset.from_tensor_slices((np.full_like(images, np.nan), labels))
    with pytest.raises(NonFiniteLossError, match=r"loss became nan at optimizer update 1.*lower learning rate"):
        training.train(tiny_vit, poisoned, _config(), output_dir=run, validation_data=good, num_classes=10,
                       verbose=0)
    assert [_digest(path) for path in checkpoints] == before  # neither best nor last holds NaN weights


# --- the command line: every given flag is used or refused ----------------------------------------------------------

@pytest.mark.parametrize("flags, message", [
    (["--num-layers", "0"], "argument --num-layers: must be a positive integer, got 0"),
    (["--patch-size", "0"], "argument --patch-size: must be a positive integer, got 0"),
    (["--patch-size", "-4"], "argument --patch-size: must be a positive integer, got -4"),
    (["--image-size", "0"], "argument --image-size: must be a positive integer, got 0"),
])
def test_cli_refuses_flags_it_used_to_ignore(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--dataset", "vit_keras_digits", "--output-dir", "unused", *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    # Refused while parsing, naming the flag (tests/test_cli_validation.py covers every flag of train and pretrain).
    (["--learning-rate", "nan"], "argument --learning-rate: must be a number in (0, inf), got nan"),
    (["--steps-per-epoch", "-1"], "argument --steps-per-epoch: must be a positive integer, got -1"),
    (["--mixup", "-0.5"], "argument --mixup: must be a number in [0, inf), got -0.5"),
    (["--weight-decay", "-1"], "argument --weight-decay: must be a number in [0, inf), got -1"),
    (["--dropout", "1"], "argument --dropout: must be a number in [0, 1), got 1"),
])
def test_cli_refuses_bad_recipe_values_before_training(flags, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--dataset", "vit_keras_digits", "--output-dir", str(tmp_path / "run"), *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.slow
def test_cli_uses_a_given_classes_flag(tmp_path, tfds_dir, capsys):
    # --classes used to be replaced by the dataset's 10 silently; now the head is built with it (and checked).
    command = ["train", "--model", "Ti/16", "--patch-size", "4", "--num-layers", "1", "--image-size", "16",
               "--dataset", "vit_keras_digits", "--data-dir", tfds_dir, "--steps", "2", "--batch-size", "8",
               "--precision", "float32", "--output-dir"]
    assert main([*command, str(tmp_path / "five"), "--classes", "5"]) == 2
    assert "has 10 classes but the model's head has 5" in capsys.readouterr().err
    assert main([*command, str(tmp_path / "twelve"), "--classes", "12", "--eval-split", ""]) == 0
    import keras

    model = keras.models.load_model(tmp_path / "twelve" / "checkpoints" / "last.keras", safe_mode=True)
    assert model.output_shape == (None, 12) and len(
        [layer for layer in model.layers if "encoderblock" in layer.name or "block" in layer.name]) >= 1


# --- options that used to be ignored or to damage the data ----------------------------------------------------------

@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    from vit_keras.training import local_data

    root = tmp_path_factory.mktemp("own") / "photos"
    local_data.write_colour_squares(root, per_class=4, size=16)
    return root


# A tiny model and one step: were the run not refused, it would end at once instead of training B/16.
TINY_RUN = ["--model", "Ti/16", "--patch-size", "4", "--num-layers", "1", "--image-size", "16", "--steps", "1",
            "--batch-size", "2", "--warmup-steps", "0", "--precision", "float32", "--no-xla"]


def test_lora_targets_without_lora_is_refused_not_a_whole_model_run(photos, tmp_path, capsys):
    assert main(["train", *TINY_RUN, "--dataset", str(photos), "--lora-targets", "attention",
                 "--output-dir", str(tmp_path / "run")]) == 2
    assert "lora_targets='attention' applies to LoRA, and no lora_rank is given" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("inside", ["", "runs/a"])
def test_an_output_dir_inside_the_image_folder_is_refused(photos, inside, capsys):
    output = photos / inside if inside else photos
    assert main(["train", *TINY_RUN, "--dataset", str(photos), "--output-dir", str(output)]) == 2
    err = capsys.readouterr().err
    assert "inside the image folder" in err and "would become classes" in err, err
    assert sorted(os.listdir(photos)) == ["blue", "red"]  # nothing written into it
    with pytest.raises(ValueError, match=r"is inside the image folder .*logs/, checkpoints/ and backup/ would become"):
        training.train(tiny_vit, str(photos), _config(), output_dir=str(output))


@pytest.mark.parametrize("flags, message", [
    (["--model", "X/99"], "--model 'X/99' is neither a paper variant (Ti/16, "),
    (["--model", "tests/fixtures/family/timm_avg_fcnorm/checkpoint", "--weights", "augreg-imagenet21k"],
     "--weights applies to a paper variant --model"),
    (["--model", "tests/fixtures/family/timm_avg_fcnorm/checkpoint", "--patch-size", "4"],
     "--patch-size applies to a paper variant --model; the checkpoint"),
])
def test_a_checkpoint_model_refuses_what_belongs_to_paper_variants(photos, flags, message, tmp_path, capsys):
    assert main(["train", "--dataset", str(photos), "--output-dir", str(tmp_path / "run"), *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*has 7 classes but the model asks for 2")
def test_cli_fine_tunes_a_checkpoint_directory(photos, tmp_path, capsys):
    """Not only the paper's variants: anything from_pretrained reads (a timm DINOv3 directory here)."""
    import keras

    checkpoint = "tests/fixtures/family2/timm_dinov3/checkpoint"
    assert main(["train", "--model", checkpoint, "--dataset", str(photos), "--steps", "1", "--batch-size", "4",
                 "--eval-split", "", "--warmup-steps", "1", "--learning-rate", "0.01", "--precision", "float32",
                 "--no-xla", "--output-dir", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed[printed.rindex("{\n"):])["updates"] == 1
    model = keras.models.load_model(tmp_path / "run" / "checkpoints" / "last.keras", safe_mode=True)
    base = vit_keras.from_pretrained(checkpoint, classes=2, any_image_size=False)  # what the CLI trains: its own size
    assert model.output_shape == (None, 2) and model.input_shape == base.input_shape
    assert model.count_params() == base.count_params()


def test_a_corrupt_backup_state_names_the_file_and_the_fix(tmp_path):
    from vit_keras.training.callbacks import BACKUP_STATE, StepBackup

    backup = tmp_path / "backup"
    backup.mkdir()
    for text, reason in [('{"step": 3, "weights": "backup-0', "it is not JSON"),
                         ('{"step": "3"}', "it lacks the step and weights file")]:
        (backup / BACKUP_STATE).write_text(text)
        with pytest.raises(ValueError, match=rf"state file .*backup.json is corrupt: {reason}.*Delete the folder "):
            StepBackup(str(backup)).restore(tiny_vit())
