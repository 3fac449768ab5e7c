"""A small synthetic dense-prediction dataset, made on the spot (no download): images of squares and discs on a
textured background, with a per-pixel class map (segmentation) and a depth map, for trying and testing the dense
heads (`vit_keras.dense`) offline.

Each 32x32 RGB image has a background that shades from top to bottom (a floor whose depth falls from 5 to 2 towards
the bottom of the image, with noise) and one to three objects: squares (class 1, warm colours) and discs (class 2,
cool colours) of 6 to 14 pixels, each at its own depth in [0.5, 1.8] (nearer than the floor), later ones drawn over
earlier ones. Splits: 512 train, 128 test, the same on every machine (seeded).

Example:
    >>> import tensorflow_datasets as tfds
    >>> import vit_keras.datasets
    >>> example = next(iter(tfds.load("vit_keras_shapes", split="test")))
    >>> example["image"].shape, example["segmentation"].shape, example["depth"].shape
    (TensorShape([32, 32, 3]), TensorShape([32, 32, 1]), TensorShape([32, 32, 1]))
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

SHAPES_NAME = "vit_keras_shapes"
SHAPES_SIZE = 32
SHAPES_CLASSES = ("background", "square", "disc")
SPLIT_SIZES = {"train": 512, "test": 128}
SPLIT_SEEDS = {"train": 0, "test": 1}


def _draw(rng, size):
    rows = np.arange(size)[:, None] / (size - 1)
    base = rng.uniform(60, 200, 3)
    image = base * (0.7 + 0.3 * rows[..., None]) + rng.normal(0, 12, (size, size, 3))
    depth = np.repeat(5.0 - 3.0 * rows, size, axis=1) + rng.normal(0, 0.05, (size, size))
    segmentation = np.zeros((size, size), np.uint8)
    yy, xx = np.mgrid[:size, :size]
    for _ in range(rng.integers(1, 4)):
        kind = int(rng.integers(1, 3))
        side = int(rng.integers(6, 15))
        top, left = rng.integers(0, size - side + 1, 2)
        if kind == 1:
            inside = (yy >= top) & (yy < top + side) & (xx >= left) & (xx < left + side)
            colour = [rng.uniform(180, 255), rng.uniform(40, 140), rng.uniform(0, 80)]
        else:
            radius = side / 2
            inside = (yy - top - radius + 0.5) ** 2 + (xx - left - radius + 0.5) ** 2 <= radius ** 2
            colour = [rng.uniform(0, 80), rng.uniform(60, 160), rng.uniform(180, 255)]
        image[inside] = np.asarray(colour) + rng.normal(0, 8, (int(inside.sum()), 3))
        depth[inside] = rng.uniform(0.5, 1.8)
        segmentation[inside] = kind
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), segmentation, depth.astype(np.float32)


def shapes_arrays(split: str):
    """One split as (uint8 images (N, 32, 32, 3), uint8 class maps (N, 32, 32), float32 depth maps (N, 32, 32)).

    Example:
        >>> images, segmentation, depth = shapes_arrays("test")
        >>> images.shape, sorted(np.unique(segmentation).tolist()), bool(depth.min() > 0)
        ((128, 32, 32, 3), [0, 1, 2], True)
    """
    if split not in SPLIT_SIZES:
        raise ValueError(f"{SHAPES_NAME} has the splits {sorted(SPLIT_SIZES)}, not {split!r}.")
    rng = np.random.default_rng(SPLIT_SEEDS[split])
    drawn = [_draw(rng, SHAPES_SIZE) for _ in range(SPLIT_SIZES[split])]
    return tuple(np.stack(parts) for parts in zip(*drawn, strict=True))


class VitKerasShapes(tfds.core.GeneratorBasedBuilder):
    """Synthetic squares and discs with class and depth maps (3 classes, 32x32 RGB), 512 train / 128 test."""

    name = SHAPES_NAME
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Seeded synthetic squares and discs with segmentation and depth."}

    def _info(self) -> tfds.core.DatasetInfo:
        size = (SHAPES_SIZE, SHAPES_SIZE)
        return self.dataset_info_from_configs(
            description="Synthetic squares and discs on a shaded floor, with per-pixel classes and depth.",
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(*size, 3), dtype=np.uint8),
                "segmentation": tfds.features.Image(shape=(*size, 1), dtype=np.uint8),
                "depth": tfds.features.Tensor(shape=(*size, 1), dtype=np.float32),
            }),
            supervised_keys=("image", "segmentation"),
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # made here: nothing to download
        return {split: self._generate_examples(split) for split in SPLIT_SIZES}

    def _generate_examples(self, split):
        images, segmentation, depth = shapes_arrays(split)
        for index in range(len(images)):
            yield index, {"image": images[index], "segmentation": segmentation[index][..., None],
                          "depth": depth[index][..., None]}
