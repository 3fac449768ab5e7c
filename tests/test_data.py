"""Input pipelines and the bundled digits tfds dataset."""

from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from vit_keras.datasets.digits import digits_arrays
from vit_keras.training import data


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tfds"))


@pytest.mark.slow
def test_digits_builder_serves_scikit_learns_digits(digits):
    from sklearn.datasets import load_digits

    train, test = data.load("vit_keras_digits", "train", data_dir=digits), data.load("vit_keras_digits", "test",
                                                                                      data_dir=digits)
    assert (train.num_examples, test.num_examples, train.num_classes) == (1437, 360, 10)
    images, labels = map(np.stack, zip(*test.dataset.as_numpy_iterator()))
    assert images.shape == (360, 8, 8, 3) and images.dtype == np.uint8
    expected_images, expected_labels = digits_arrays("test")

    def canonical(x, y):  # tfds stores examples in its own order: compare as multisets
        order = np.argsort([f"{label}:{image.tobytes().hex()}" for image, label in zip(x, y)])
        return x[order], y[order]

    for ours, theirs in zip(canonical(images, labels), canonical(expected_images, expected_labels)):
        np.testing.assert_array_equal(ours, theirs)
    # The pixels are sklearn's 0..16 intensities scaled to 0..255, identical in the three channels.
    source = load_digits()
    scaled = np.rint(source.images * 255 / 16)
    matches = (scaled[:, None] == images[None, :, :, :, 0]).all(axis=(2, 3))
    assert matches.any(axis=0).all()
    both = np.concatenate([labels, train_labels := np.array([y for _, y in train.dataset.as_numpy_iterator()])])
    np.testing.assert_array_equal(np.bincount(both), np.bincount(source.target))
    assert len(train_labels) == 1437


def _grey_dataset(n=12, size=10):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, size, size, 1), dtype=np.uint8)
    return tf.data.Dataset.from_tensor_slices((images, np.arange(n) % 3)), images


@pytest.mark.slow
def test_train_pipeline_shapes_channels_labels_and_reproducibility():
    ds, _ = _grey_dataset()
    def pipeline():
        return data.train_pipeline(ds, image_size=(16, 12), batch_size=4, num_classes=3, seed=7, shuffle_buffer=12)

    first = [batch for _, batch in zip(range(5), pipeline().as_numpy_iterator())]
    again = [batch for _, batch in zip(range(5), pipeline().as_numpy_iterator())]
    images, labels = first[0]
    assert images.shape == (4, 16, 12, 3) and images.dtype == np.float32
    np.testing.assert_array_equal(images[..., 0], images[..., 2])  # grey became RGB
    assert labels.shape == (4, 3) and np.all(labels.sum(-1) == 1)
    assert 0 <= images.min() and images.max() <= 255
    for (a, la), (b, lb) in zip(first, again):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)
    other_seed = next(data.train_pipeline(ds, image_size=(16, 12), batch_size=4, num_classes=3, seed=8,
                                          shuffle_buffer=12).as_numpy_iterator())[0]
    assert not np.array_equal(other_seed, images)


def test_skipping_examples_continues_the_same_stream():
    ds, _ = _grey_dataset()
    kwargs = {"image_size": 8, "batch_size": 4, "num_classes": 3, "seed": 1, "shuffle_buffer": 12}
    full = [x for _, (x, _) in zip(range(6), data.train_pipeline(ds, **kwargs).as_numpy_iterator())]
    resumed = [x for _, (x, _) in zip(range(3), data.train_pipeline(ds, skip_examples=12, **kwargs)
                                      .as_numpy_iterator())]
    for a, b in zip(full[3:], resumed):
        np.testing.assert_array_equal(a, b)


def test_inception_crop_covers_part_of_the_image_and_is_seeded():
    # A ramp image: a crop's corner values reveal where the box lies.
    ramp = tf.cast(tf.tile(tf.range(100, dtype=tf.float32)[None, :, None], [100, 1, 3]), tf.float32)
    widths = []
    for seed in range(20):
        crop = data.inception_crop(ramp, (32, 32), tf.constant([seed, 0])).numpy()
        np.testing.assert_array_equal(crop, data.inception_crop(ramp, (32, 32), tf.constant([seed, 0])).numpy())
        widths.append(crop[0, -1, 0] - crop[0, 0, 0])
    assert min(widths) < 90 and len(set(np.round(widths, 3))) > 10  # random boxes, mostly smaller than the image


def _shifts_of(image, pixels=1):
    """Every translation of `image` (H, W, C) by up to `pixels` per axis, the uncovered border filled with zeros."""
    height, width = image.shape[:2]
    padded = np.pad(image, [(pixels, pixels), (pixels, pixels), (0, 0)])
    return {(dy, dx): padded[pixels - dy:pixels - dy + height, pixels - dx:pixels - dx + width]
            for dy in range(-pixels, pixels + 1) for dx in range(-pixels, pixels + 1)}


def _which_shift(image, source):
    matches = [shift for shift, shifted in _shifts_of(source).items() if np.array_equal(image, shifted)]
    assert matches, "the augmented image is not the source shifted by at most one pixel"
    return matches[0]


def test_random_shift_moves_the_image_by_at_most_one_pixel_and_is_seeded():
    rng = np.random.default_rng(1)
    image = rng.integers(1, 256, (8, 8, 3)).astype(np.float32)  # no zeros: a shift is told apart by its border
    seen = set()
    for seed in range(40):
        shifted = data.random_shift(tf.constant(image), 8, tf.constant([seed, 3])).numpy()
        assert shifted.shape == (8, 8, 3)
        np.testing.assert_array_equal(
            shifted, data.random_shift(tf.constant(image), 8, tf.constant([seed, 3])).numpy())
        seen.add(_which_shift(shifted, image))
    assert len(seen) == 9  # all nine shifts in [-1, 1]^2 occur, the unshifted image among them
    # At another size it resizes first, then shifts by whole pixels of the output.
    resized = tf.image.resize(image, (12, 12)).numpy()
    _which_shift(data.random_shift(tf.constant(image), 12, tf.constant([0, 0])).numpy(), resized)


def test_shift_crop_in_the_train_pipeline_is_deterministic_per_seed_and_absent_at_eval():
    rng = np.random.default_rng(2)
    images = rng.integers(1, 256, (6, 8, 8, 1), dtype=np.uint8)
    ds = tf.data.Dataset.from_tensor_slices((images, np.arange(6)))  # label i identifies image i

    def batches(seed):
        pipeline = data.train_pipeline(ds, image_size=8, batch_size=6, num_classes=6, crop="shift", flip=False,
                                       seed=seed, shuffle_buffer=6)
        return [batch for _, batch in zip(range(4), pipeline.as_numpy_iterator())]

    first, again, other = batches(0), batches(0), batches(1)
    shifts = set()
    for (x, y), (x_again, y_again) in zip(first, again):
        assert x.shape == (6, 8, 8, 3) and x.dtype == np.float32
        np.testing.assert_array_equal(x, x_again)
        np.testing.assert_array_equal(y, y_again)
        for image, label in zip(x, y.argmax(-1)):
            source = np.repeat(images[label].astype(np.float32), 3, axis=-1)
            shifts.add(_which_shift(image, source))
    assert len(shifts) > 3  # the examples really move
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(first, other))
    evaluated = np.concatenate([x for x, _ in data.eval_pipeline(ds, image_size=8, batch_size=6,
                                                                 num_classes=6).as_numpy_iterator()])
    np.testing.assert_array_equal(evaluated, np.repeat(images.astype(np.float32), 3, axis=-1))  # never shifted
    with pytest.raises(ValueError, match="`crop` must be one of .*'shift'"):
        data.train_pipeline(ds, image_size=8, batch_size=6, num_classes=6, crop="translate")


def test_eval_pipeline_is_a_plain_resize():
    ds, images = _grey_dataset(n=5)
    batches = list(data.eval_pipeline(ds, image_size=16, batch_size=4, num_classes=3).as_numpy_iterator())
    assert [len(x) for x, _ in batches] == [4, 1]
    expected = tf.image.resize(tf.image.grayscale_to_rgb(tf.cast(images, tf.float32)), (16, 16)).numpy()
    # Pixel values up to 255 in float32 (ulp 1.5e-5): the same resize in another graph, within a few ulps.
    np.testing.assert_allclose(np.concatenate([x for x, _ in batches]), expected, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(np.concatenate([y for _, y in batches]).argmax(-1), np.arange(5) % 3)


@pytest.mark.slow
def test_randaugment_and_mixup_run_inside_tf_data():
    ds, _ = _grey_dataset(n=16)
    pipeline = data.train_pipeline(ds, image_size=16, batch_size=8, num_classes=3, seed=0, randaugment=(2, 0.5),
                                   mixup_alpha=0.4, shuffle_buffer=16)
    images, labels = next(pipeline.as_numpy_iterator())
    assert images.shape == (8, 16, 16, 3) and np.isfinite(images).all()
    np.testing.assert_allclose(labels.sum(-1), 1.0, rtol=1e-5)  # mixed one-hot labels: float32 rounding of a sum
    assert ((labels > 0) & (labels < 1)).any()  # MixUp's soft labels


def test_bad_input_is_named(digits):
    with pytest.raises(ValueError, match="Unknown tfds dataset 'mnistt'.*mnist"):
        data.load("mnistt", "train")
    with pytest.raises(ValueError, match="no split 'valid'"):
        data.load("vit_keras_digits", "valid", data_dir=digits)
    ds, _ = _grey_dataset()
    split = data.load(ds, num_classes=None)
    with pytest.raises(ValueError, match=r"outside \[0, 2\)"):
        data.check_labels(split, classes=2)
    data.check_labels(split, classes=3)
    context = SimpleNamespace(num_replicas_in_sync=3, num_input_pipelines=1, input_pipeline_id=0,
                              get_per_replica_batch_size=lambda b: b // 3)
    with pytest.raises(ValueError, match="not divisible by the 3 replicas"):
        data.train_pipeline(ds, image_size=8, batch_size=8, num_classes=3, input_context=context)
    with pytest.raises(ValueError, match="1 \\(grey\\), 3 \\(RGB\\) or 4"):
        bad = tf.data.Dataset.from_tensor_slices((np.zeros((2, 8, 8, 2), np.uint8), [0, 1]))
        data.train_pipeline(bad, image_size=8, batch_size=2, num_classes=2)


def test_out_of_range_labels_never_become_silent_zero_rows():
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((4, 8, 8, 3), np.uint8), [0, 1, 2, 5]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="label out of range"):
        list(data.eval_pipeline(ds, image_size=8, batch_size=4, num_classes=3).as_numpy_iterator())
