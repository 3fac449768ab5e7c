"""Your own images: folders of class subfolders and CSV / JSON-lines files of path,label(s), through `data.load`, the
pipelines, `train` / `evaluate` and `vit-keras train / evaluate / predict`, with the class names kept in the
checkpoints."""

import json
import os

import numpy as np
import pytest

from tests.tiny import TINY_TRAINING
from vit_keras.cli import main
from vit_keras.training import data, local_data

COLOURS = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 200, 30)}
# The noise on each pixel of a colour square: small beside the ~190 between the colours' channels, so a tiny model
# separates the classes within a few steps, but every image is different.
NOISE = 20
# Float32 on one device, the resumed run replays the uninterrupted one's batches and updates exactly; only the
# order of float sums in re-built functions may differ (test_cli_train.py's tolerance).
WEIGHT_TOLERANCE = 1e-5


def _square(path, colour, rng, size=16, fmt=None):
    from PIL import Image

    pixels = np.asarray(COLOURS[colour], np.float32) + rng.normal(0, NOISE, (size, size, 3))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, fmt)


def _folder(root, per_class=12, colours=("red", "blue"), seed=0):
    rng = np.random.default_rng(seed)
    for colour in colours:
        for i in range(per_class):
            _square(os.path.join(root, colour, f"{i:03d}.jpg"), colour, rng)
    return str(root)


def _table(path, rows, header="path,label"):
    with open(path, "w") as handle:
        handle.write(header + "\n" + "".join(f"{image},{label}\n" for image, label in rows))
    return str(path)


def _labels(split):
    return np.stack([label for _, label in split.dataset.as_numpy_iterator()])


# -- reading sources ---------------------------------------------------------------------------------------------


def test_a_folder_gives_sorted_class_names_and_decodes_every_format_and_size(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    _square(str(tmp_path / "zebra" / "a.png"), "red", rng, size=40)
    _square(str(tmp_path / "zebra" / "deep" / "b.bmp"), "red", rng, size=7)  # found below the class folder too
    _square(str(tmp_path / "apple" / "c.jpeg"), "blue", rng, size=23)
    Image.new("L", (9, 5), 128).save(tmp_path / "apple" / "grey.gif")  # one channel: decoded as RGB
    (tmp_path / "apple" / "notes.txt").write_text("not an image")  # skipped, as image_dataset_from_directory does
    (tmp_path / "README.md").write_text("files beside the class folders are skipped")

    split = data.load(str(tmp_path), "train")
    assert split.class_names == ("apple", "zebra") and split.num_classes == 2 and not split.multi_label
    examples = {tuple(image.shape): int(label) for image, label in split.dataset.as_numpy_iterator()}
    assert examples == {(40, 40, 3): 1, (7, 7, 3): 1, (23, 23, 3): 0, (5, 9, 3): 0}
    pipeline = data.eval_pipeline(split.dataset, image_size=16, batch_size=4, num_classes=split.num_classes)
    images, labels = next(iter(pipeline))
    assert images.shape == (4, 16, 16, 3) and labels.shape == (4, 2)


def test_slices_are_a_seeded_disjoint_holdout_the_same_every_time(tmp_path):
    root = _folder(tmp_path / "images", per_class=10)
    train, held = data.load(root, "train[:90%]"), data.load(root, "train[90%:]")
    assert (train.num_examples, held.num_examples) == (18, 2)
    assert sorted(np.concatenate([_labels(train), _labels(held)]).tolist()) == [0] * 10 + [1] * 10
    # The held-out images are the last 10% of the files in a shuffle by the split seed: the same on every load.
    examples = local_data.read_examples(root)[0]
    order = np.random.default_rng(local_data.SPLIT_SEED).permutation(len(examples))
    expected = [int(examples[i][1][0] == "red") for i in order[18:]]
    assert _labels(held).tolist() == _labels(data.load(root, "train[90%:]")).tolist() == expected
    # validation_fraction=1/3 makes train[:66.6667%] / train[66.6667%:]: the cut is round(20 * 0.666667) = 13.
    assert data.load(root, "train[:66.6667%]").num_examples == 13
    assert data.load(root, "train[66.6667%:]").num_examples == 7
    # Another seed holds out other images: the seed decides, not the order of the files.
    assert _labels(local_data.load(root, "train[:50%]", seed=1)).tolist() != \
        _labels(data.load(root, "train[:50%]")).tolist()


def test_a_csv_of_relative_paths_and_a_jsonl_file_name_the_same_classes(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for i, label in enumerate(["2", "10", "2", "1"]):  # integer names sort as numbers: label 10 stays class 10's
        _square(str(tmp_path / "pictures" / f"{i}.png"), "red", rng)
        rows.append((f"pictures/{i}.png", label))
    os.makedirs(tmp_path / "lists")
    csv_file = _table(tmp_path / "lists" / "all.csv", [(f"../{path}", label) for path, label in rows])
    jsonl_file = tmp_path / "all.jsonl"
    jsonl_file.write_text("".join(json.dumps({"path": path, "label": int(label)}) + "\n" for path, label in rows))

    from_csv, from_jsonl = data.load(csv_file), data.load(str(jsonl_file))
    assert from_csv.class_names == from_jsonl.class_names == ("1", "2", "10")
    assert sorted(_labels(from_csv).tolist()) == sorted(_labels(from_jsonl).tolist()) == [0, 1, 1, 2]


def test_a_labels_column_is_multi_label_with_multi_hot_targets(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(3):
        _square(str(tmp_path / f"{i}.jpg"), "red", rng)
    csv_file = _table(tmp_path / "tags.csv", [("0.jpg", "cat|outdoor"), ("1.jpg", '"[""dog""]"'), ("2.jpg", "")],
                      header="path,labels")
    split = data.load(csv_file)
    assert split.multi_label and split.class_names == ("cat", "dog", "outdoor")
    targets = {tuple(label.tolist()) for label in _labels(split)}
    assert targets == {(1.0, 0.0, 1.0), (0.0, 1.0, 0.0), (0.0, 0.0, 0.0)}  # an image may have none of the labels
    batch = next(iter(data.train_pipeline(split.dataset, image_size=16, batch_size=3, num_classes=3, seed=0)))
    assert batch[1].shape == (3, 3) and set(np.unique(batch[1].numpy())) <= {0.0, 1.0}


# -- bad input -----------------------------------------------------------------------------------------------------


def test_bad_folders_say_what_to_do(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="'.*empty' is empty: put each class's images in a subfolder"):
        data.load(str(tmp_path / "empty"))
    flat = tmp_path / "flat"
    _square(str(flat / "a.jpg"), "red", np.random.default_rng(0))
    with pytest.raises(ValueError, match="has files but no class subfolders: move each image into a subfolder"):
        data.load(str(flat))
    (tmp_path / "no_images" / "cat").mkdir(parents=True)
    (tmp_path / "no_images" / "cat" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"class subfolders of .* \(cat\) hold no images"):
        data.load(str(tmp_path / "no_images"))
    with pytest.raises(ValueError, match="'.*missing.csv' does not exist: pass a folder of class subfolders"):
        data.load(str(tmp_path / "missing.csv"))
    root = _folder(tmp_path / "ok", per_class=2)
    with pytest.raises(ValueError, match=r"Cannot read the split 'train\[:half\]'.*'train\[:90%\]'"):
        data.load(root, "train[:half]")
    with pytest.raises(ValueError, match=r"split 'train\[4:\]' .* is empty: take a larger slice"):
        data.load(root, "train[4:]")


def test_bad_tables_name_the_file_and_line(tmp_path):
    rng = np.random.default_rng(0)
    _square(str(tmp_path / "a.jpg"), "red", rng)
    with pytest.raises(ValueError, match=r"has the columns \['file', 'class'\]; it needs a header row with `path`"):
        data.load(_table(tmp_path / "columns.csv", [("a.jpg", "cat")], header="file,class"))
    with pytest.raises(ValueError, match=r"missing.csv' line 3: image file '.*nowhere.jpg' does not exist"):
        data.load(_table(tmp_path / "missing.csv", [("a.jpg", "cat"), ("nowhere.jpg", "dog")]))
    (tmp_path / "notes.jpg").write_text("just text")
    with pytest.raises(ValueError, match=r"text.csv' line 2: '.*notes.jpg' is a text file; accepted image formats"):
        data.load(_table(tmp_path / "text.csv", [("notes.jpg", "cat")]))
    with pytest.raises(ValueError, match=r"empty.csv' line 2: a label is empty"):
        data.load(_table(tmp_path / "empty.csv", [("a.jpg", "")]))
    (tmp_path / "broken.jsonl").write_text('{"path": "a.jpg", "label": "cat"}\n{"path": "a.jpg"\n')
    with pytest.raises(ValueError, match=r"broken.jsonl' line 2 is not JSON"):
        data.load(str(tmp_path / "broken.jsonl"))
    with pytest.raises(ValueError, match=r"rows.csv' lists no images"):
        data.load(_table(tmp_path / "rows.csv", []))


def test_folders_that_would_make_a_wrong_class_list_are_refused_and_linked_folders_are_followed(tmp_path):
    root = _folder(tmp_path / "images", per_class=2)
    (tmp_path / "images" / "green").mkdir()  # a class folder without images: a class the model never sees
    with pytest.raises(ValueError, match=r"class folder\(s\) \['.*green'\] hold no images"):
        local_data.read_examples(root)
    os.rmdir(tmp_path / "images" / "green")
    # Images reached through a linked sub-folder are read, not silently skipped.
    _folder(tmp_path / "more", per_class=3, colours=("red",))
    os.symlink(tmp_path / "more" / "red", tmp_path / "images" / "red" / "linked")
    examples, names, _ = local_data.read_examples(root)
    assert names == ("blue", "red") and len(examples) == 2 + 2 + 3
    os.symlink(tmp_path / "images" / "red", tmp_path / "images" / "red" / "loop")  # back into itself
    with pytest.raises(ValueError, match=r"red/loop' is a link to .*a folder already read"):
        local_data.read_examples(root)
    os.remove(tmp_path / "images" / "red" / "loop")
    numbers = _folder(tmp_path / "numbers", per_class=1, colours=("red", "blue"))
    os.rename(os.path.join(numbers, "red"), os.path.join(numbers, "1"))
    os.rename(os.path.join(numbers, "blue"), os.path.join(numbers, "01"))
    with pytest.raises(ValueError, match=r"labels \['01', '1'\] are all the number 1 written differently"):
        local_data.read_examples(numbers)


@pytest.mark.parametrize("rows, message", [
    ('path,label\na.jpg,cat\nb.jpg,dog\na.jpg,cat\n', r"line 4 lists the image '.*a.jpg' again \('.*' line 2 has "
     r"it, with the same label"),
    ('path,label\na.jpg,cat\na.jpg,dog\n', r"line 3 lists the image .* \['cat'\] there and \['dog'\] here"),
    ('path,label\na.jpg,1\nb.jpg,01\nc.jpg,+1\n', r"labels \['\+1', '01', '1'\] are all the number 1 written "
     r"differently \('\+1' at '.*' line 4"),
    ('{"path": "a.jpg", "labels": [null]}\n', r"jsonl' line 1: the label null is not a class name"),
    ('{"path": "a.jpg", "label": true}\n', r"jsonl' line 1: the label true is not a class name"),
    ('{"path": "a.jpg", "labels": [["a"]]}\n', r"jsonl' line 1: the label \[\"a\"\] is not a class name"),
    ('{"path": "a.jpg", "label": "c\\u0000t"}\n', r"jsonl' line 1: the label 'c\\x00t' holds the control "
     r"character '\\x00'"),
])
def test_tables_that_would_make_wrong_labels_name_the_file_row_and_value(tmp_path, rows, message):
    rng = np.random.default_rng(0)
    for name in ("a", "b", "c"):
        _square(str(tmp_path / f"{name}.jpg"), "red", rng)
    path = tmp_path / ("labels.jsonl" if rows.startswith("{") else "labels.csv")
    path.write_text(rows)
    with pytest.raises(ValueError, match=message):
        local_data.read_examples(str(path))


@pytest.mark.parametrize("split", ["train[:200%]", "train[-150%:]"])
def test_a_slice_beyond_all_the_images_is_refused(tmp_path, split):
    root = _folder(tmp_path / "ok", per_class=2)
    with pytest.raises(ValueError, match=r"outside -100% to 100%"):
        local_data.load(root, split)


def test_a_corrupt_image_is_named_when_the_source_is_loaded_not_mid_epoch(tmp_path):
    root = _folder(tmp_path / "images", per_class=3)
    victim = os.path.join(root, "blue", "001.jpg")
    whole = open(victim, "rb").read()
    # The header (and so the format and size) is intact; the compressed data after it is cut off.
    with open(victim, "wb") as handle:
        handle.write(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"'.*blue/001.jpg' could not be decoded .*truncated or corrupt"):
        data.load(root)
    # With the header check alone the source loads; the decoding pass is what catches it.
    assert local_data.load(root, check="header").num_examples == 6


def test_an_unknown_label_in_a_validation_file_is_refused(tmp_path):
    rng = np.random.default_rng(0)
    _square(str(tmp_path / "a.jpg"), "red", rng)
    _square(str(tmp_path / "b.jpg"), "red", rng)
    validation = _table(tmp_path / "validation.csv", [("a.jpg", "red"), ("b.jpg", "purple")])
    with pytest.raises(ValueError, match=r"line 3: the class 'purple' is not one of the model's 2 classes"):
        data.load(validation, class_names=("blue", "red"))
    folder = _folder(tmp_path / "val", per_class=1, colours=("green",))
    with pytest.raises(ValueError, match=r"green/000.jpg': the class 'green' is not one of the model's 2 classes"):
        data.load(folder, class_names=("blue", "red"))


# -- metrics, checkpoints, printing --------------------------------------------------------------------------------


def test_mean_average_precision_agrees_with_scikit_learn():
    from sklearn.metrics import average_precision_score

    from vit_keras.training.evaluation import mean_average_precision

    rng = np.random.default_rng(0)
    labels = rng.random((60, 5)) < 0.3
    scores = labels * 0.8 + rng.normal(0, 0.5, labels.shape)
    expected = np.mean([average_precision_score(labels[:, k], scores[:, k]) for k in range(5)])
    assert mean_average_precision(scores, labels) == pytest.approx(expected, rel=1e-12)
    labels[:, 2] = False  # a class without positives has no precision to average: left out, as scikit-learn warns
    kept = [k for k in range(5) if k != 2]
    expected = np.mean([average_precision_score(labels[:, k], scores[:, k]) for k in kept])
    assert mean_average_precision(scores, labels) == pytest.approx(expected, rel=1e-12)


def test_checkpoints_keep_the_class_names(tmp_path):
    import keras

    from vit_keras.training.callbacks import save_checkpoint

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    save_checkpoint(model, str(tmp_path / "plain.keras"))
    assert local_data.read_labels(tmp_path / "plain.keras") is None
    local_data.attach_labels(model, {"class_names": ["blue", "red"], "multi_label": False})
    save_checkpoint(model, str(tmp_path / "named.keras"), {"monitor": "val_accuracy", "value": 1.0})
    assert local_data.read_labels(tmp_path / "named.keras") == {"class_names": ["blue", "red"], "multi_label": False}
    assert keras.models.load_model(tmp_path / "named.keras").output_shape == (None, 2)


def test_cli_help_names_your_own_images(capsys):
    from vit_keras.cli import build_parser

    for command, flags in (("train", ["--eval-data", "class subfolders", ".jsonl"]),
                           ("evaluate", ["class subfolders", "train[90%:]"])):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        text = capsys.readouterr().out
        for flag in flags:
            assert flag in text, (command, flag)


# -- training ------------------------------------------------------------------------------------------------------


class _Interrupted(Exception):
    pass


class _InterruptAfter:
    """A Keras callback that stops the run (as a crash would) once `steps` optimizer updates are backed up."""

    def __new__(cls, steps):
        import keras

        class Interrupt(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) >= steps:
                    raise _Interrupted

        return Interrupt()


def _config(**overrides):
    from vit_keras.training import finetune

    settings = dict(total_steps=20, steps_per_epoch=10, batch_size=8, warmup_steps=2, learning_rate=0.05,
                    precision="float32", backup_every=1, seed=3, jit_compile=False)
    return finetune(**{**settings, **overrides})


def _build(classes):
    import vit_keras

    return lambda: vit_keras.ViT(image_size=16, classes=classes, classifier_activation=None, **TINY_TRAINING)


def _cli_model_flags():
    return ["--model", "Ti/16", "--patch-size", "4", "--num-layers", "1", "--image-size", "16", "--precision",
            "float32", "--no-xla", "--seed", "3"]


def _printed_json(output: str) -> dict:
    """The JSON object a command prints last (`vit-keras train` prints Keras' progress bars before it)."""
    return json.loads(output[output.rindex("\n{") + 1:] if not output.startswith("{") else output)


def _predicted(output: str) -> dict:
    """{image path: (top class, its probability)} from `vit-keras predict`'s output."""
    tops, path = {}, None
    for line in output.splitlines():
        if not line.startswith(" "):
            path = line
        elif path not in tops:
            score, name = line.split()
            tops[path] = (name, float(score))
    return tops


@pytest.mark.slow
def test_a_folder_trains_resumes_and_is_evaluated_by_class_name_through_the_python_api(tmp_path, caplog):
    import keras

    from vit_keras.training import evaluate, train

    root = _folder(tmp_path / "images")
    whole = train(_build(2), root, _config(), output_dir=str(tmp_path / "whole"), validation_data=root, verbose=0)
    with pytest.raises(_Interrupted):
        train(_build(2), root, _config(), output_dir=str(tmp_path / "resumed"), validation_data=root, verbose=0,
              callbacks=[_InterruptAfter(13)])
    with caplog.at_level("WARNING"):
        resumed = train(_build(2), root, _config(), output_dir=str(tmp_path / "resumed"), validation_data=root,
                        verbose=0)
    assert "Resuming from micro-step 13 of 20" in caplog.text
    assert resumed.updates == whole.updates == 20
    for got, want in zip(resumed.model.get_weights(), whole.model.get_weights()):
        np.testing.assert_allclose(got, want, atol=WEIGHT_TOLERANCE)
    assert whole.metrics["val_accuracy"] == 1.0  # the held-out 10%: red vs blue squares
    assert json.load(open(tmp_path / "whole" / "results.json"))["labels"]["class_names"] == ["blue", "red"]

    # A test folder of red squares only: its own sorted subfolders would make red class 0; the checkpoint's names
    # make it class 1, so the score is 1.0 only when images are matched to the model's classes by name.
    test_root = _folder(tmp_path / "test", per_class=6, colours=("red",), seed=1)
    checkpoint = str(tmp_path / "whole" / "checkpoints" / "best.keras")
    model = keras.models.load_model(checkpoint, safe_mode=True)
    local_data.attach_labels(model, local_data.read_labels(checkpoint))
    assert evaluate(model, test_root) == {"top1": 1.0, "top5": 1.0, "examples": 6}


def _docs_section():
    """The Python block and the shell commands of docs/fine-tuning.md's "Your own images"."""
    import re
    import shlex

    text = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                             "fine-tuning.md")).read()
    section = text[text.index("## Your own images"):]
    section = section[:section.index("\n## ", 1)]
    python = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shell = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    return python, [shlex.split(line)[1:] for line in shell.splitlines() if line.startswith("vit-keras ")]


@pytest.mark.slow
def test_the_docs_your_own_images_section_runs_as_written(tmp_path, monkeypatch, capsys):
    python, commands = _docs_section()
    monkeypatch.chdir(tmp_path)
    exec(compile(python, "docs/fine-tuning.md", "exec"), {})
    accuracy, scores, labels = capsys.readouterr().out.splitlines()[-3:]  # after Keras' progress bars
    assert float(accuracy) == 1.0  # red vs blue squares, told apart on the held-out 10%
    assert scores == "{'top1': 1.0, 'top5': 1.0, 'examples': 2}"
    assert labels == "{'class_names': ['blue', 'red'], 'multi_label': False}"

    train, evaluate, predict = commands
    assert main(train) == 0
    metrics = _printed_json(capsys.readouterr().out)
    assert metrics["updates"] == 20 and metrics["val_accuracy"] == 1.0
    assert main(evaluate) == 0
    assert json.loads(capsys.readouterr().out) == {"top1": 1.0, "top5": 1.0, "examples": 2}
    assert main(predict) == 0
    tops = _predicted(capsys.readouterr().out)
    assert {path: name for path, (name, _) in tops.items()} == {"photos/red/0.jpg": "red", "photos/blue/0.jpg": "blue"}
    assert all(0.5 < probability <= 1.0 for _, probability in tops.values())  # softmax of the head's logits


def test_validating_on_all_of_the_training_images_is_refused(tmp_path):
    from vit_keras.training import train

    root = _folder(tmp_path / "images", per_class=2)
    with pytest.raises(ValueError, match=r"validation_split='test' of .* is all of its images, which also train"):
        train(_build(2), root, _config(), output_dir=str(tmp_path / "run"), validation_data=root,
              validation_split="test")


@pytest.mark.slow
def test_a_csv_trains_with_a_jsonl_validation_file_resumes_and_predicts(tmp_path, capsys, caplog):
    from vit_keras.training import train

    rng = np.random.default_rng(0)
    rows = []
    for i in range(24):
        colour = ("red", "blue")[i % 2]
        _square(str(tmp_path / "photos" / f"img{i:02d}.png"), colour, rng)
        rows.append((f"photos/img{i:02d}.png", colour))
    csv_file = _table(tmp_path / "train.csv", rows)
    validation = tmp_path / "validation.jsonl"
    validation.write_text("".join(json.dumps({"path": path, "label": label}) + "\n" for path, label in rows[:4]))

    output = str(tmp_path / "run")
    with pytest.raises(_Interrupted):
        train(_build(2), csv_file, _config(), output_dir=output, validation_data=str(validation), verbose=0,
              callbacks=[_InterruptAfter(7)])
    with caplog.at_level("WARNING"):
        result = train(_build(2), csv_file, _config(), output_dir=output, validation_data=str(validation), verbose=0)
    assert "Resuming from micro-step 7 of 20" in caplog.text
    assert result.updates == 20 and result.metrics["val_accuracy"] == 1.0

    checkpoint = os.path.join(output, "checkpoints", "last.keras")
    assert main(["evaluate", checkpoint, "--dataset", str(validation)]) == 0
    assert json.loads(capsys.readouterr().out)["top1"] == 1.0
    assert main(["predict", str(tmp_path / "photos" / "img00.png"), "--keras-model", checkpoint]) == 0
    assert list(_predicted(capsys.readouterr().out).values())[0][0] == "red"

    # The same file through the CLI, validated on the JSON-lines file.
    assert main(["train", *_cli_model_flags(), "--dataset", csv_file, "--eval-data", str(validation),
                 "--batch-size", "8", "--steps", "10", "--learning-rate", "0.05", "--warmup-steps", "2",
                 "--output-dir", str(tmp_path / "cli")]) == 0
    assert _printed_json(capsys.readouterr().out)["updates"] == 10
    assert local_data.read_labels(os.path.join(tmp_path, "cli", "checkpoints", "best.keras"))["class_names"] == \
        ["blue", "red"]


@pytest.mark.slow
def test_a_multi_label_csv_trains_with_sigmoid_outputs_and_reports_mean_average_precision(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = []
    # Two tags that the colour decides ("warm" for red, "cold" for blue and green) and one per colour.
    for i in range(30):
        colour = ("red", "blue", "green")[i % 3]
        _square(str(tmp_path / "images" / f"{i:02d}.jpg"), colour, rng)
        rows.append((f"images/{i:02d}.jpg", f"{colour}|{'warm' if colour == 'red' else 'cold'}"))
    csv_file = _table(tmp_path / "tags.csv", rows, header="path,labels")
    output = str(tmp_path / "run")
    assert main(["train", *_cli_model_flags(), "--dataset", csv_file, "--batch-size", "8", "--steps", "30",
                 "--steps-per-epoch", "15", "--learning-rate", "0.1", "--warmup-steps", "3",
                 "--output-dir", output]) == 0
    metrics = _printed_json(capsys.readouterr().out)
    assert {"map", "val_map", "loss"} <= set(metrics) and "accuracy" not in metrics
    events = b"".join(open(os.path.join(folder, name), "rb").read()
                      for folder, _, names in os.walk(os.path.join(output, "logs")) for name in names)
    assert b"epoch_map" in events  # TensorBoard's curves of the metric, per epoch
    checkpoint = os.path.join(output, "checkpoints", "best.keras")
    assert local_data.read_labels(checkpoint) == {"class_names": ["blue", "cold", "green", "red", "warm"],
                                                  "multi_label": True}
    assert main(["evaluate", checkpoint, "--dataset", csv_file, "--split", "train[90%:]"]) == 0
    scores = json.loads(capsys.readouterr().out)
    # Chance mAP here is about the share of positives, 0.47 (2 tags of 5 per image, 3 held-out images): a model
    # that learned the colours ranks every positive first.
    assert scores["examples"] == 3 and scores["mAP"] > 0.9

    red = os.path.join(tmp_path, "images", "00.jpg")
    assert main(["predict", red, "--keras-model", checkpoint, "--top", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    probabilities = {line.split()[1]: float(line.split()[0]) for line in lines}
    assert set(probabilities) == {"blue", "cold", "green", "red", "warm"}
    # One sigmoid per class: the two right tags are both likely (a softmax could not give both over 0.5).
    assert probabilities["red"] > 0.5 and probabilities["warm"] > 0.5


def test_a_split_lacking_a_class_is_scored_by_the_models_class_names(tmp_path):
    import keras

    from vit_keras.training import evaluate

    # A model that reads the colour straight from the mean pixel: R -> "red", G -> "green", B -> "blue".
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(3, use_bias=False)])
    model.layers[-1].set_weights([np.array([[0, 0, 1], [0, 1, 0], [1, 0, 0]], np.float32)])
    local_data.attach_labels(model, {"class_names": ["blue", "green", "red"], "multi_label": False})
    test = local_data.load(_folder(tmp_path / "test", per_class=2))  # red and blue only: red is its class 1
    assert test.class_names == ("blue", "red")
    assert evaluate(model, test)["top1"] == 1.0
    with pytest.raises(ValueError, match=r"has the class\(es\) \['red'\], which are not among the model's 2"):
        local_data.relabel(test, ("blue", "green"), "test data")
