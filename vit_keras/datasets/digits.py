"""scikit-learn's bundled handwritten digits as a tfds dataset: real data, available offline, no download.

The 1,797 8x8 grey digits (intensities 0..16) become RGB uint8 images in [0, 255] so that they travel the
same tfds -> tf.data -> `model.fit` path as any image dataset. The train/test split is stratified and fixed
(20% test, seed 0), identical on every machine.

Example:
    >>> import tensorflow_datasets as tfds
    >>> import vit_keras.datasets
    >>> train = tfds.load("vit_keras_digits", split="train", as_supervised=True)
    >>> image, label = next(iter(train))
    >>> image.shape, image.dtype.name
    (TensorShape([8, 8, 3]), 'uint8')
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from vit_keras.extras import require

DIGITS_NAME = "vit_keras_digits"
DIGITS_MAX_VALUE = 16
TEST_FRACTION = 0.2
SPLIT_SEED = 0


def sklearn_digits():
    """scikit-learn's `load_digits` and `train_test_split`, or the ImportError that names the [train] extra."""
    purpose = "The bundled digits dataset (vit_keras_digits, the demo)"
    datasets = require("sklearn.datasets", "train", purpose)
    model_selection = require("sklearn.model_selection", "train", purpose)
    return datasets.load_digits, model_selection.train_test_split


def digits_arrays(split: str):
    """The digits of one split as (uint8 images (N, 8, 8, 3), int64 labels (N,)).

    Example:
        >>> images, labels = digits_arrays("test")
        >>> images.shape, images.dtype.name
        ((360, 8, 8, 3), 'uint8')
    """
    if split not in ("train", "test"):
        raise ValueError(f"The digits have the splits 'train' and 'test', not {split!r}.")
    load_digits, train_test_split = sklearn_digits()
    digits = load_digits()
    # 16 -> 255 with rounding: a linear map, so the relative intensities stay those of the scans.
    grey = np.rint(digits.images * (255.0 / DIGITS_MAX_VALUE)).astype(np.uint8)
    images = np.repeat(grey[..., None], 3, axis=-1)
    labels = digits.target.astype(np.int64)
    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels
    )
    return (train_x, train_y) if split == "train" else (test_x, test_y)


class VitKerasDigits(tfds.core.GeneratorBasedBuilder):
    """The UCI/scikit-learn handwritten digits (10 classes, 8x8 RGB uint8), split 1,437 train / 360 test."""

    name = DIGITS_NAME
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "sklearn.datasets.load_digits, stratified 80/20 split with seed 0."}

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            description="scikit-learn's bundled 8x8 handwritten digits as RGB uint8 images.",
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(shape=(8, 8, 3), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=10),
                }
            ),
            supervised_keys=("image", "label"),
            homepage="https://scikit-learn.org/stable/modules/generated/sklearn.datasets.load_digits.html",
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # the data ships with scikit-learn: nothing to download
        return {"train": self._generate_examples("train"), "test": self._generate_examples("test")}

    def _generate_examples(self, split):
        images, labels = digits_arrays(split)
        for index, (image, label) in enumerate(zip(images, labels)):
            yield index, {"image": image, "label": int(label)}
