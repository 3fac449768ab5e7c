"""NaFlex training: `vit-keras train --max-patches` on a tfds dataset of images of mixed sizes
(tests/naflex_dataset.py), killed and resumed like a fixed-size run; batches bucketed by patch count; the refusals
of what NaFlex cannot do."""

import json
import sys

import numpy as np
import pytest
import tensorflow as tf

import vit_keras
from tests import naflex_dataset
from tests.bounds import Bound
from tests.test_cli_train import _weights, killed_then_resumed
from tests.test_naflex import ALONE_TOLERANCE
from tests.test_training import _event_tags
from vit_keras import training
from vit_keras.cli import main
from vit_keras.naflex_data import bucket_boundaries, naflex_buckets, naflex_map
from vit_keras.training.naflex_pipelines import naflex_train_pipeline

PATCH, MAX_PATCHES = 8, 16
TOTAL_STEPS, STEPS_PER_EPOCH = 8, 4
# As tests/test_cli_train.py: the resumed run replays exactly the uninterrupted one's batches and updates, in float32
# on one device (and here without XLA), so the weights agree to rounding noise: measured exactly equal under each of
# the 7 `make test-numerics` settings (AVX2 EPYC).
WEIGHT_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return naflex_dataset.prepare(str(tmp_path_factory.mktemp("tfds")))


def _train_args(output_dir, data_dir, *extra):
    return ["train", "--model", "Ti/16", "--patch-size", str(PATCH), "--num-layers", "2",
            "--max-patches", str(MAX_PATCHES), "--naflex-buckets", "6", "10",
            "--dataset", naflex_dataset.NAME, "--data-dir", data_dir, "--eval-split", "test", "--batch-size", "8",
            "--steps", str(TOTAL_STEPS), "--steps-per-epoch", str(STEPS_PER_EPOCH), "--learning-rate", "0.05",
            "--warmup-steps", "2", "--precision", "float32", "--no-xla", "--backup-every", "1", "--seed", "3",
            "--output-dir", str(output_dir), *extra]


def _command(output_dir, data_dir):
    return [sys.executable, "-m", "vit_keras.cli", *_train_args(output_dir, data_dir)]


@pytest.mark.slow
@pytest.mark.numerics
def test_naflex_run_killed_mid_epoch_resumes_to_the_uninterrupted_weights(tmp_path, data_dir, capsys,
                                                                          record_property):
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"
    results = killed_then_resumed(lambda run: _command(run, data_dir), reference, interrupted,
                                  steps_per_epoch=STEPS_PER_EPOCH, total_steps=TOTAL_STEPS)
    assert results[0]["updates"] == results[1]["updates"] == TOTAL_STEPS
    assert results[0]["config"]["max_patches"] == MAX_PATCHES and "val_accuracy" in results[0]["metrics"]
    same_weights = Bound(WEIGHT_TOLERANCE, "relative_diff_weights", record_property)
    for a, b in zip(_weights(reference / "checkpoints" / "last.keras"),
                    _weights(interrupted / "checkpoints" / "last.keras")):
        same_weights(b, a)
    # TensorBoard has what a fixed-size run logs, the input images put back together from their patches included.
    assert {"learning_rate", "input_images", "hyperparameters", "epoch_loss", "batch_loss"} <= \
        _event_tags(reference / "logs")

    # The checkpoint is a flexible model: evaluate and predict take it with the same --max-patches.
    checkpoint = str(reference / "checkpoints" / "last.keras")
    capsys.readouterr()
    assert main(["evaluate", checkpoint, "--dataset", naflex_dataset.NAME, "--data-dir", data_dir,
                 "--max-patches", str(MAX_PATCHES), "--batch-size", "5"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["examples"] == 12 and 0 <= scores["top1"] <= scores["top5"] <= 1
    from PIL import Image

    paths = []
    for index, size in enumerate([(40, 16), (16, 40), (24, 24)]):
        paths.append(str(tmp_path / f"image{index}.png"))
        Image.new("RGB", size, (200, 40, 40)).save(paths[-1])
    assert main(["predict", *paths, "--keras-model", checkpoint, "--max-patches", str(MAX_PATCHES)]) == 0
    printed = capsys.readouterr().out
    assert all(path in printed for path in paths)
    assert main(["evaluate", checkpoint, "--dataset", naflex_dataset.NAME, "--data-dir", data_dir]) == 2
    assert "needs --max-patches N" in capsys.readouterr().err


@pytest.mark.parametrize("extra,words", [
    (["--model", "R50+B/16"], ["--max-patches 16", "--model R50+B/16", "hybrid", "Drop --max-patches"]),
    (["--image-size", "32"], ["`image_size` (32) and `max_patches` (16) exclude each other", "--image-size"]),
    (["--mixup", "0.2"], ["`mixup_alpha` (0.2)", "not available with `max_patches`", "--mixup"]),
    (["--randaugment", "2", "0.5"], ["`randaugment` ((2, 0.5))", "--randaugment"]),
    (["--naflex-buckets", "8", "32"], ["`naflex_buckets` must be increasing sequence lengths in [1, max_patches=16]"]),
])
def test_what_naflex_training_cannot_do_is_refused_naming_the_flag(tmp_path, data_dir, capsys, extra, words):
    args = _train_args(tmp_path / "run", data_dir)
    assert main([*args, *extra]) == 2
    error = capsys.readouterr().err
    assert error.startswith("vit-keras train: error: ") and "Traceback" not in error
    for word in words:
        assert word in error, (word, error)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_train_refuses_a_flexible_model_without_max_patches_and_max_patches_for_an_image_model(tmp_path, capsys):
    dataset = tf.data.Dataset.from_tensor_slices((np.zeros((4, 16, 16, 3), np.uint8), np.arange(4) % 3))
    config = training.finetune(total_steps=1, batch_size=4, warmup_steps=0, precision="float32")
    tiny = dict(patch_size=PATCH, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96, classes=3)
    with pytest.raises(ValueError, match=r"The model is flexible \(NaFlex\).*Set config.max_patches"):
        training.train(lambda: vit_keras.ViT(flexible=True, **tiny), dataset, config, output_dir=str(tmp_path),
                       num_classes=3)
    with pytest.raises(ValueError, match=r"this model takes images of one size: build it with flexible=True"):
        training.train(lambda: vit_keras.ViT(image_size=16, **tiny), dataset, config.replace(max_patches=16),
                       output_dir=str(tmp_path), num_classes=3)
    assert main(["train", "--dataset", "cifar10", "--naflex-buckets", "8", "--output-dir", "unused"]) == 2
    assert "`naflex_buckets` groups NaFlex batches by length: it needs `max_patches`" in capsys.readouterr().err
    assert main(["evaluate", "--model", "Ti/16", "--dataset", "cifar10", "--max-patches", "16", "--few-shot"]) == 2
    assert "--few-shot is not available for a flexible (NaFlex) model" in capsys.readouterr().err


# ---- bucketing


def _mixed_images(count=24, seed=0):
    rng = np.random.default_rng(seed)
    sizes = [(8, 8), (16, 40), (40, 16), (24, 24), (8, 48), (32, 32), (16, 16), (48, 8)]
    return [rng.uniform(0, 255, sizes[i % len(sizes)] + (3,)).astype(np.float32) for i in range(count)]


def _image_dataset(images):
    return tf.data.Dataset.from_generator(
        lambda: ((image, index) for index, image in enumerate(images)),
        output_signature=(tf.TensorSpec((None, None, 3), tf.float32), tf.TensorSpec((), tf.int32)))


@pytest.mark.slow
@pytest.mark.numerics
def test_bucketed_batches_give_each_image_the_output_of_padded_batches(record_property):
    images = _mixed_images()
    model = vit_keras.ViT(flexible=True, include_top=False, patch_size=PATCH, hidden_size=48, num_layers=2,
                          num_heads=3, mlp_dim=96)
    assert model.input["patches"].shape[1] is None  # any sequence length per batch
    examples = _image_dataset(images).map(naflex_map(PATCH, MAX_PATCHES, resize=False))

    def outputs(batches):
        tokens, lengths = {}, []
        for example, ids in batches:
            out = np.asarray(model(example, training=False))
            lengths.append(example["mask"].shape[1])
            for row, index in enumerate(ids.numpy()):
                # The image's real tokens (prefix + its patches); the padding's outputs mean nothing.
                tokens[int(index)] = out[row, : out.shape[1] - lengths[-1] + int(example["mask"][row].numpy().sum())]
        return tokens, lengths

    padded, padded_lengths = outputs(examples.batch(5))
    bucketed, bucket_lengths = outputs(examples.apply(naflex_buckets((4, 8), batch_size=5)))
    assert set(padded_lengths) == {MAX_PATCHES} and set(bucket_lengths) == {4, 8, MAX_PATCHES}
    assert sorted(bucketed) == list(range(len(images)))  # every image once
    same = Bound(ALONE_TOLERANCE, "relative_diff_alone", record_property)
    for index, tokens in padded.items():
        # ALONE_TOLERANCE (tests/test_naflex.py): masked keys weigh exactly zero, so only the matmul blocking of
        # another sequence length changes the float32 sums.
        same(bucketed[index], tokens, f"image {index}")


@pytest.mark.slow
@pytest.mark.parametrize("buckets", [None, (6, 10)])
def test_a_resumed_naflex_stream_continues_with_the_batches_an_uninterrupted_one_takes(buckets):
    dataset = _image_dataset(_mixed_images(16)).map(lambda image, index: (tf.cast(image, tf.uint8), index % 3))

    def stream(skip):
        return naflex_train_pipeline(dataset, patch_size=PATCH, max_num_patches=MAX_PATCHES, batch_size=4,
                                     num_classes=3, buckets=buckets, shuffle_buffer=8, seed=1, skip_batches=skip)

    whole = [tf.nest.map_structure(np.asarray, batch) for batch in stream(0).take(7)]
    resumed = [tf.nest.map_structure(np.asarray, batch) for batch in stream(3).take(4)]
    lengths = {x["mask"].shape[1] for x, _ in whole}
    assert lengths <= ({6, 10, MAX_PATCHES} if buckets else {MAX_PATCHES})
    for (x, y), (x2, y2) in zip(whole[3:], resumed):
        for key in x:
            np.testing.assert_array_equal(x[key], x2[key])
        np.testing.assert_array_equal(y, y2)


def test_bucket_boundaries_and_refusals():
    assert bucket_boundaries(256, 64) == (64, 128, 192, 256)
    examples = _image_dataset(_mixed_images(2)).map(naflex_map(PATCH, MAX_PATCHES))
    with pytest.raises(ValueError, match="boundary 32 is longer than the examples' length N=16"):
        examples.apply(naflex_buckets((8, 32), 2))
    with pytest.raises(ValueError, match="must increase"):
        naflex_buckets((8, 4), 2)
    with pytest.raises(ValueError, match="map the images with naflex_map"):
        _image_dataset(_mixed_images(2)).apply(naflex_buckets((8,), 2))
