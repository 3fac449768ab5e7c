"""A tiny tfds dataset of images of mixed sizes and aspect ratios, generated locally (no download), for NaFlex
training tests: 3 classes, 48 train and 12 test RGB images of six sizes from 16x40 (wide) to 40x16 (tall).

Each class has its own colour tint, so a model can learn it. Prepare it once into a data directory with
`prepare(data_dir)`; a process that never imports this module (the `vit-keras` command in a subprocess) then reads
it from that directory by name, as tfds reads any prepared dataset.
"""

import numpy as np
import tensorflow_datasets as tfds

NAME = "vit_keras_mixed_sizes"
CLASSES = 3
SIZES = ((16, 40), (40, 16), (24, 24), (16, 16), (32, 24), (8, 48))
SPLITS = {"train": (48, 0), "test": (12, 1)}  # (examples, seed)


def mixed_size_examples(split: str):
    """(image uint8 (H, W, 3), label) pairs of `split`, the same on every machine."""
    count, seed = SPLITS[split]
    rng = np.random.default_rng(seed)
    for index in range(count):
        label = index % CLASSES
        height, width = SIZES[index % len(SIZES)]
        image = rng.integers(0, 96, (height, width, 3))
        image[..., label] += 128  # the class's tint
        yield index, {"image": image.astype(np.uint8), "label": label}


class VitKerasMixedSizes(tfds.core.GeneratorBasedBuilder):
    """Images of six sizes and aspect ratios, three tinted classes."""

    name = NAME
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "48 train, 12 test images; seeded NumPy noise with a per-class tint."}

    def _info(self):
        return self.dataset_info_from_configs(
            description="Mixed-size tinted noise images for NaFlex training tests.",
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(None, None, 3), dtype=np.uint8),
                "label": tfds.features.ClassLabel(num_classes=CLASSES),
            }),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # generated here: nothing to download
        return {split: self._generate_examples(split) for split in SPLITS}

    def _generate_examples(self, split):
        yield from mixed_size_examples(split)


def prepare(data_dir: str) -> str:
    """Write the dataset into `data_dir` (once; later calls find it there) and return `data_dir`."""
    VitKerasMixedSizes(data_dir=data_dir).download_and_prepare()
    return data_dir
