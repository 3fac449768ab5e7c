"""The NaFlex suite measured in a worker: a flexible ViT over one fixed set of images of mixed sizes, padded to N
patches or bucketed by patch count."""

from __future__ import annotations

import sys

from .settings import ARCHITECTURES, CLASSES, PRECISIONS, REPO
from .timing import time_calls

NAFLEX_PATCHES = 256
NAFLEX_BUCKET_EVERY = 64
NAFLEX_IMAGES = 32
NAFLEX_SETS = ("fit to N", "native size")
NAFLEX_BATCHING = ("padded to N", "bucketed")


def naflex_image_sizes(image_set: str, count: int = NAFLEX_IMAGES, patch: int = 16,
                       budget: int = NAFLEX_PATCHES) -> list:
    """The (height, width) of the benchmark's images, the same on every run: photo-like aspect ratios (4:3, 3:4,
    16:9, 9:16, 1:1, 3:1, 1:3, 2:3) for "fit to N"; for "native size", sides that are multiples of `patch`, from a
    quarter of √budget to √budget patches each (4 to 16 for 256), at most `budget` patches.

    Example:
        >>> naflex_image_sizes("fit to N", 3)
        [(480, 640), (640, 480), (360, 640)]
    """
    if image_set == "fit to N":
        shapes = [(480, 640), (640, 480), (360, 640), (640, 360), (512, 512), (200, 600), (600, 200), (400, 600)]
        return [shapes[i % len(shapes)] for i in range(count)]
    import numpy as np

    rng = np.random.default_rng(0)
    side = int(budget**0.5)
    sizes = []
    while len(sizes) < count:
        rows, cols = (int(v) for v in rng.integers(max(side // 4, 1), side + 1, 2))
        if rows * cols <= budget:
            sizes.append((rows * patch, cols * patch))
    return sizes


def run_naflex(case, min_seconds, min_calls):
    """A flexible ViT over the image set of `case`, its batches padded to N or bucketed (one call: the whole set)."""
    import keras
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, REPO)
    import vit_keras
    from vit_keras.naflex_data import bucket_boundaries, naflex_buckets, naflex_map

    keras.mixed_precision.set_global_policy(PRECISIONS[case["precision"]])
    arch = {k: v for k, v in ARCHITECTURES[case["architecture"]].items() if k != "image_size"}
    patch = arch["patch_size"]
    budget = NAFLEX_PATCHES if case["architecture"] == "B/16" else 16  # --quick: the tiny model's small budget
    model = vit_keras.ViT(**arch, flexible=True, classes=CLASSES, classifier_activation=None,
                          include_preprocessing=False)
    rng = np.random.default_rng(0)
    sizes = naflex_image_sizes(case["image_set"], patch=patch, budget=budget)
    images = [rng.uniform(0, 255, (h, w, 3)).astype(np.float32) for h, w in sizes]
    dataset = tf.data.Dataset.from_generator(lambda: iter(images),
                                             output_signature=tf.TensorSpec((None, None, 3), tf.float32))
    examples = dataset.map(naflex_map(patch, budget, resize=case["image_set"] == "fit to N"))
    if case["library"] == "bucketed":
        boundaries = bucket_boundaries(budget, NAFLEX_BUCKET_EVERY if budget == NAFLEX_PATCHES else 4)
        batches = list(examples.apply(naflex_buckets(boundaries, case["batch"])))
    else:
        batches = list(examples.batch(case["batch"]))
    forward = tf.function(lambda x: model(x, training=False), jit_compile=case["xla"], reduce_retracing=True)

    def step():
        for batch in batches:
            forward(batch).numpy()

    result = time_calls(step, len(images), min_seconds, min_calls)
    computed = sum(int(np.prod(b["mask"].shape)) for b in batches)
    real = sum(int(np.asarray(b["mask"]).sum()) for b in batches)
    result.update(padding_share=1 - real / computed, tokens_per_image=computed / len(images),
                  lengths=sorted({int(b["mask"].shape[1]) for b in batches}))
    return result
