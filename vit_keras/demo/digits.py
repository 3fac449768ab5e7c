"""The demo's digits: their tfds name, and one split in memory at a model's resolution.

Example:
    >>> DATASET
    'vit_keras_digits'
"""

from __future__ import annotations

import numpy as np

from vit_keras.extras import require

DATASET = "vit_keras_digits"
DIGITS_MAX_VALUE = 16.0  # sklearn's digits are 8x8 images with intensities 0..16


def load_digits_rgb(seed: int = 0, test_fraction: float = 0.2):
    """The 1,797 digits as RGB [0, 255] float32 arrays, split into (train, test) with a fixed seed.

    For quick experiments in memory; the demo itself reads the same data through tfds ("vit_keras_digits").

    Example:
        >>> (x_train, y_train), (x_test, y_test) = load_digits_rgb()
        >>> x_train.shape[1:]
        (8, 8, 3)
    """
    purpose = "load_digits_rgb (scikit-learn's digits)"
    load_digits = require("sklearn.datasets", "train", purpose).load_digits
    train_test_split = require("sklearn.model_selection", "train", purpose).train_test_split
    digits = load_digits()
    images = digits.images.astype(np.float32) * (255.0 / DIGITS_MAX_VALUE)
    images = np.repeat(images[..., None], 3, axis=-1)
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target.astype(np.int32), test_size=test_fraction, random_state=seed, stratify=digits.target
    )
    return (x_train, y_train), (x_test, y_test)


def test_arrays(image_size: int, data_dir: str | None = None, split_name: str = "test"):
    """The held-out digits at `image_size`, as the eval pipeline feeds them: (float32 images, int labels).

    Example:
        >>> images, labels = test_arrays(16)
        >>> images.shape, images.dtype, labels.shape
        ((360, 16, 16, 3), dtype('float32'), (360,))
    """
    from vit_keras.training import data

    split = data.load(DATASET, split_name, data_dir=data_dir)
    return data.to_numpy(data.eval_pipeline(split.dataset, image_size=image_size, batch_size=512, num_classes=10))


def digits_at(image_size, split: str = "test"):
    """One split of the demo's digits at `image_size`, in memory: (float32 RGB images in [0, 255], int labels).

    The same images and labels `test_arrays` reads through tfds (uint8 digits, bilinear resize without crop, as
    the eval pipeline does; in scikit-learn's split order, where tfds stores them shuffled), without preparing a
    tfds directory: for notebooks, scripts and tests that score a model trained by the demo at its resolution.

    Example:
        >>> images, labels = digits_at(12)
        >>> images.shape, labels.shape
        ((360, 12, 12, 3), (360,))
    """
    from vit_keras.datasets.digits import digits_arrays
    from vit_keras.training import data

    images, labels = digits_arrays(split)
    return np.asarray(data.resize(images.astype(np.float32), image_size), np.float32), labels.astype(np.int32)
