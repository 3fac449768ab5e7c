"""The linear probe on cached frozen features (vit_keras.training.linear_probe) and `vit-keras probe`."""

import json
import os

import keras
import numpy as np
import pytest

import vit_keras
from tests.tiny import TINY
from vit_keras.training import linear_probe, probe_features, probe_model

pytestmark = pytest.mark.tf_only  # tf.data pipelines

# scikit-learn's L-BFGS optimum against the Keras heads (Adam, lr 0.1, 100 epochs of batch 256, cosine decay) on the
# tiny model's features of the digits: measured 98-99.4% of the 360 test predictions the same and top-1 within 0.6
# points (2 digits) for L2 strengths 1e-4..1e-2. The bounds leave room for other CPUs' float rounding.
PREDICTION_AGREEMENT = 0.97
TOP1_TOLERANCE = 0.02  # 7 of 360 test digits
# Chance is 0.1 on ten classes; the untrained tiny model's features scored 0.78-0.86 in those runs.
ABOVE_CHANCE = 0.5


@pytest.fixture(autouse=True)
def _empty_memory_cache():
    probe_features.clear_memory_cache()
    yield
    probe_features.clear_memory_cache()


def _tiny(**kwargs):
    keras.utils.set_random_seed(0)
    return vit_keras.ViT(image_size=32, **{"classes": 10, **TINY, **kwargs})


def _digits(split, count=None, num_classes=10):
    import tensorflow as tf

    pytest.importorskip("sklearn", reason="the digits come with scikit-learn (the [train] extra)")
    from vit_keras.datasets.digits import digits_arrays

    images, labels = digits_arrays(split)
    dataset = tf.data.Dataset.from_tensor_slices((images[:count], labels[:count]))
    return vit_keras.data.load(dataset, num_classes=num_classes)


@pytest.mark.slow
def test_probe_beats_chance_matches_scikit_learn_and_stacks_on_the_backbone():
    sklearn = pytest.importorskip("sklearn.linear_model")
    from threadpoolctl import threadpool_limits  # a dependency of scikit-learn
    model = _tiny()
    train, test = _digits("train"), _digits("test")
    # A hopeless L2 strength beside a sensible one: the validation split must pick the sensible one.
    result, head = linear_probe(model, train, test, pooling="token+avg", l2_values=(1e-3, 10.0),
                                learning_rates=(0.1,), epochs=100, return_head=True)
    assert result["l2"] == 1e-3 and result["learning_rate"] == 0.1
    sweep = {entry["l2"]: entry["validation_top1"] for entry in result["sweep"]}
    assert sweep[1e-3] > sweep[10.0]
    assert result["top1"] > ABOVE_CHANCE
    assert result["feature_dim"] == 2 * TINY["hidden_size"]
    assert result["examples"] == {"train": 1437, "validation": 144, "test": 360}

    # The reference: scikit-learn on the same cached features, standardised alike, the same objective.
    extractor, digest = probe_features.pooled_features(model, "token+avg"), probe_features.weights_digest(model)
    train_x, train_y, _, origin = probe_features.split_features(extractor, digest, train, pooling="token+avg")
    test_x, test_y, _, _ = probe_features.split_features(extractor, digest, test, pooling="token+avg")
    assert origin == "memory"  # what the probe computed
    mean, std = train_x.mean(0), train_x.std(0)
    reference = sklearn.LogisticRegression(C=1 / (2 * 1e-3 * len(train_y)), max_iter=1000)
    with threadpool_limits(1):  # NumPy's threads beside TensorFlow's would make L-BFGS 25x slower on 2 cores
        reference.fit((train_x - mean) / std, train_y)
    expected = reference.predict((test_x - mean) / std)
    predicted = head.predict(test_x, verbose=0).argmax(-1)
    assert np.mean(predicted == expected) >= PREDICTION_AGREEMENT
    assert abs(result["top1"] - np.mean(expected == test_y)) <= TOP1_TOLERANCE
    assert result["top1"] == pytest.approx(np.mean(predicted == test_y))

    # Backbone + head as one model: images in, the same predictions out.
    images, labels = vit_keras.data.to_numpy(vit_keras.data.eval_pipeline(
        test.dataset, image_size=32, batch_size=128, num_classes=10))
    classifier = probe_model(model, head, pooling="token+avg")
    scores = classifier.predict(images, verbose=0)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)  # probabilities
    assert np.mean(scores.argmax(-1) == predicted) >= 0.99  # batch-size rounding may flip a near tie
    with pytest.raises(ValueError, match="takes 96 features.*gives 48 with pooling='avg'"):
        probe_model(model, head, pooling="avg")


@pytest.mark.slow
def test_features_are_computed_once_cached_on_disk_and_recomputed_when_weights_or_files_change(tmp_path, monkeypatch):
    calls = []
    compute = probe_features.compute_features

    def counting(extractor, split, image_size, batch_size):
        calls.append(split.name)
        return compute(extractor, split, image_size, batch_size)

    monkeypatch.setattr(probe_features, "compute_features", counting)
    model, cache = _tiny(), tmp_path / "features"
    train, test = _digits("train", 120), _digits("test", 40)
    options = dict(cache_dir=str(cache), pooling="avg", l2_values=(1e-3,), learning_rates=(0.1,), epochs=2,
                   refit=False)

    first = linear_probe(model, train, test, **options)
    assert first["features"] == {"train": "computed", "test": "computed"} and len(calls) == 2
    files = sorted(os.listdir(cache))
    assert len(files) == 2 and all(name.endswith(".npz") for name in files)
    with np.load(cache / files[0], allow_pickle=False) as stored:  # plain arrays: readable without pickle
        assert stored["features"].shape[1] == TINY["hidden_size"]
    probe_features.clear_memory_cache()  # as a new process would start
    again = linear_probe(model, train, test, **options)
    assert again["features"] == {"train": "disk", "test": "disk"} and len(calls) == 2
    assert again["top1"] == first["top1"]

    extractor, digest = probe_features.pooled_features(model, "avg"), probe_features.weights_digest(model)

    def origins():
        return sorted(probe_features.split_features(extractor, digest, split, pooling="avg", cache_dir=str(cache))[3]
                      for split in (train, test))

    assert origins() == ["memory", "memory"]
    # A truncated file is not trusted: that split is computed again and its file rewritten.
    probe_features.clear_memory_cache()
    truncated = cache / files[0]
    truncated.write_bytes(truncated.read_bytes()[:100])
    assert origins() == ["computed", "disk"] and len(calls) == 3 and sorted(os.listdir(cache)) == files

    # New weights: nothing cached for the old ones is reused, in memory or on disk.
    kernel = model.get_layer("patch_encoder").weights[2]
    kernel.assign(kernel.numpy() * 1.5)
    digest = probe_features.weights_digest(model)
    assert origins() == ["computed", "computed"] and len(calls) == 5 and len(os.listdir(cache)) == 4


def test_the_memory_cache_keeps_the_newest_splits_within_its_byte_budget(monkeypatch):
    import tensorflow as tf

    def compute(extractor, split, image_size, batch_size):
        return np.zeros((1, 1000), np.float32), np.zeros((1,), np.int64)  # 4,008 bytes a split

    monkeypatch.setattr(probe_features, "compute_features", compute)
    monkeypatch.setattr(probe_features, "MEMORY_BYTES", 6000)  # room for one split
    splits = [vit_keras.data.load(tf.data.Dataset.from_tensor_slices((np.full((1, 8, 8, 3), i, np.uint8), [0])),
                                  num_classes=1) for i in range(3)]

    def origin(split):
        return probe_features.split_features(None, "w" * 64, split, pooling="avg", image_size=(8, 8))[3]

    assert [origin(split) for split in splits] == ["computed"] * 3
    assert [origin(splits[2]), origin(splits[1]), origin(splits[1])] == ["memory", "computed", "memory"]


def test_the_data_identity_follows_the_examples():
    import tensorflow as tf

    images = np.zeros((4, 8, 8, 3), np.uint8)
    labels = np.arange(4) % 2

    def identity(images):
        return probe_features.load_split(tf.data.Dataset.from_tensor_slices((images, labels)), "train")[1]

    changed = images.copy()
    changed[3, 7, 7, 2] = 1  # one value of one pixel
    assert identity(images) == identity(images.copy()) != identity(changed)


def test_the_cache_key_depends_on_every_input():
    key = probe_features.cache_key("w" * 64, "tfds:d:1.0.0:train", "avg", (32, 32))
    others = [probe_features.cache_key("v" * 64, "tfds:d:1.0.0:train", "avg", (32, 32)),
              probe_features.cache_key("w" * 64, "tfds:d:1.0.0:test", "avg", (32, 32)),
              probe_features.cache_key("w" * 64, "tfds:d:1.0.0:train", "token", (32, 32)),
              probe_features.cache_key("w" * 64, "tfds:d:1.0.0:train", "avg", (48, 48))]
    assert len({key, *others}) == 5


def test_weights_digest_changes_with_one_weight():
    model = _tiny()
    before = probe_features.weights_digest(model)
    assert probe_features.weights_digest(model) == before
    bias = model.get_layer("encoder_norm").weights[1]
    bias.assign(bias.numpy() + np.float32(1e-3))
    assert probe_features.weights_digest(model) != before


def test_poolings_give_the_widths_and_the_class_token():
    model = _tiny(include_top=False)
    images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    tokens = keras.ops.convert_to_numpy(model(images))  # after the final norm: (2, 1 + 16, 48)
    both = keras.ops.convert_to_numpy(probe_features.pooled_features(model, "token+avg")(images))
    np.testing.assert_allclose(both[:, :48], tokens[:, 0], atol=1e-6)
    np.testing.assert_allclose(both[:, 48:], tokens[:, 1:].mean(1), atol=1e-5)
    assert probe_features.pooled_features(_tiny(), "model").output_shape == (None, 48)


def _blank(count=16):
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((np.zeros((count, 8, 8, 3), np.uint8), np.arange(count) % 10))
    return vit_keras.data.load(dataset, num_classes=10)


def test_bad_arguments_are_clear_errors():
    model = _tiny()
    digits = _blank()
    with pytest.raises(ValueError, match="pooling='median' is not a probe pooling; use one of"):
        linear_probe(model, digits, digits, pooling="median")
    with pytest.raises(ValueError, match="pooling='model' reads the model's pooled output.*pooling='token'"):
        linear_probe(_tiny(include_top=False), digits, digits, pooling="model")
    with pytest.raises(ValueError, match="needs a class token.*pooling='avg'"):
        linear_probe(_tiny(classifier="gap"), digits, digits, pooling="token+avg")
    for bad, match in ((dict(l2_values=()), "l2_values"), (dict(l2_values=(-1.0,)), "l2_values"),
                       (dict(learning_rates=(0.0,)), "learning_rates"), (dict(epochs=0), "epochs=0"),
                       (dict(validation_fraction=1.0), "validation_fraction")):
        with pytest.raises(ValueError, match=match):
            linear_probe(model, digits, digits, **bad)


def test_an_empty_split_or_a_negative_label_is_a_clear_error():
    import tensorflow as tf

    model, digits = _tiny(), _blank()
    empty = vit_keras.data.load(digits.dataset.take(0))
    with pytest.raises(ValueError, match="The train split .* has no examples"):
        linear_probe(model, empty, digits)
    negative = tf.data.Dataset.from_tensor_slices((np.zeros((2, 8, 8, 3), np.uint8), np.array([0, -1])))
    with pytest.raises(ValueError, match="negative label"):
        linear_probe(model, negative, digits)


def test_validation_is_carved_by_seed():
    fit, validation = linear_probe_module().carve_validation(100, 0.1, seed=0)
    assert len(validation) == 10 and not set(fit) & set(validation)
    assert list(linear_probe_module().carve_validation(100, 0.1, seed=0)[1]) == list(validation)
    assert list(linear_probe_module().carve_validation(100, 0.1, seed=1)[1]) != list(validation)
    with pytest.raises(ValueError, match="at least 2 train examples"):
        linear_probe_module().carve_validation(1)


def linear_probe_module():
    import importlib

    return importlib.import_module("vit_keras.training.linear_probe")  # the package's name is the function


def test_cli_refuses_a_missing_checkpoint_an_existing_output_and_an_unknown_pooling(tmp_path, capsys):
    from vit_keras.cli import main

    output = str(tmp_path / "probe.json")
    assert main(["probe", "missing.keras", "--dataset", "vit_keras_digits", "--output", output]) == 2
    assert "Checkpoint 'missing.keras' does not exist" in capsys.readouterr().err
    (tmp_path / "probe.json").write_text("{}")  # an earlier result is not replaced unless asked, before any work
    assert main(["probe", "missing.keras", "--dataset", "vit_keras_digits", "--output", output]) == 2
    assert "probe.json already exists; pass --overwrite" in capsys.readouterr().err
    assert (tmp_path / "probe.json").read_text() == "{}"
    with pytest.raises(SystemExit):
        main(["probe", "--dataset", "vit_keras_digits", "--pooling", "mean"])
    assert "invalid choice: 'mean'" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_probes_writes_json_reuses_its_cache_and_saves_a_model(tmp_path, capsys):
    from vit_keras.cli import main

    data_dir = str(tmp_path / "tfds")
    vit_keras.training.data.load("vit_keras_digits", data_dir=data_dir)  # prepared once, then only read
    # A tfds split is known by name, version and split, without reading its examples.
    assert probe_features.load_split("vit_keras_digits", "test", data_dir)[1] == "tfds:vit_keras_digits:1.0.0:test"
    with pytest.raises(ValueError, match=r"Split 'train\[:0\]' of 'vit_keras_digits' selects no examples"):
        probe_features.load_split("vit_keras_digits", "train[:0]", data_dir)
    checkpoint = str(tmp_path / "tiny.keras")
    _tiny().save(checkpoint)
    command = ["probe", checkpoint, "--dataset", "vit_keras_digits", "--data-dir", data_dir,
               "--cache-dir", str(tmp_path / "features"),
               "--pooling", "token", "--l2", "1e-3", "--learning-rate", "0.1", "--epochs", "10"]
    saved = tmp_path / "probe.keras"
    capsys.readouterr()
    assert main([*command, "--output", str(tmp_path / "first.json"), "--save-model", str(saved)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "first.json").read_text())
    assert printed["dataset"] == "vit_keras_digits" and printed["features"]["train"] == "computed"
    assert printed["top1"] > ABOVE_CHANCE and printed["feature_dim"] == TINY["hidden_size"]

    probe_features.clear_memory_cache()  # a second command is a new process
    assert main([*command, "--output", str(tmp_path / "second.json")]) == 0
    second = json.loads((tmp_path / "second.json").read_text())
    assert second["features"] == {"train": "disk", "test": "disk"} and second["top1"] == printed["top1"]

    classifier = keras.models.load_model(saved, safe_mode=True)
    images = np.random.default_rng(0).uniform(0, 255, (3, 32, 32, 3)).astype("float32")
    assert classifier.predict(images, verbose=0).shape == (3, 10)


# -- your own images -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def colour_folders(tmp_path_factory):
    """train/ of three colours (6 squares each), test/ of two of them: a test folder lacking a class."""
    from vit_keras.training import local_data

    root = tmp_path_factory.mktemp("colours")
    local_data.write_colour_squares(root / "train", colours=("red", "green", "blue"), per_class=6)
    local_data.write_colour_squares(root / "test", colours=("red", "blue"), per_class=3)
    return root


ONE_SETTING = dict(pooling="avg", l2_values=(1e-3,), learning_rates=(0.1,), epochs=20)


@pytest.mark.slow
def test_folders_are_probed_a_test_folder_lacking_a_class_by_the_train_classes(colour_folders):
    """By path: read as your own images (not looked up as tfds names); test/ numbers red 1 by its own order, train/
    numbers it 2; and a sweep chosen on 2 validation images says so."""
    from vit_keras.training import local_data

    assert local_data.read_examples(colour_folders / "test")[1] == ("blue", "red")
    with pytest.warns(UserWarning, match=r"among 2 settings .* on 2 validation image\(s\) \(10% of 18 train"):
        result = linear_probe(_tiny(), str(colour_folders / "train"), str(colour_folders / "test"),
                              test_split="train", **{**ONE_SETTING, "l2_values": (0.0, 1e-3)})
    # Three well-separated colours: every test square right once its label names the right class.
    assert result["top1"] == 1.0 and result["classes"] == 3, result
    assert result["examples"] == {"train": 18, "validation": 2, "test": 6}


def test_probing_a_folder_refuses_a_test_class_the_train_data_lacks_and_testing_on_the_training_images(
        colour_folders):
    train, test = str(colour_folders / "train"), str(colour_folders / "test")
    # Both before any feature is computed (the model is never called).
    with pytest.raises(ValueError, match=r"has the class\(es\) \['green'\], which the train data lacks"):
        linear_probe(None, test, train, test_split="train", **ONE_SETTING)
    with pytest.raises(ValueError, match=r"scored on the images it is trained on.*'train\[:80%\]'"):
        linear_probe(None, train, train, test_split="train", **ONE_SETTING)


def test_cli_probe_cuts_a_folder_scored_on_itself_and_scores_a_separate_test_folder_whole(colour_folders):
    from vit_keras.cli import build_parser
    from vit_keras.cli.probe import probe_sources

    train, test = str(colour_folders / "train"), str(colour_folders / "test")
    assert probe_sources(build_parser().parse_args(["probe", "--dataset", train])) == (
        train, "train[:80%]", "train[80%:]")
    assert probe_sources(build_parser().parse_args(["probe", "--dataset", train, "--test-data", test])) == (
        test, "train", "train")
    assert probe_sources(build_parser().parse_args(["probe", "--dataset", "cifar10"])) == ("cifar10", "train", "test")
