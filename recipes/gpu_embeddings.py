"""Run a ViT on a GPU: check the device, pick its precision, embed a folder of images in batches.

    KERAS_BACKEND=jax python recipes/gpu_embeddings.py photos --output embeddings.npy

Install a GPU build first, in the source tree: `pip install -e ".[jax-cuda,tensorflow]"` (JAX on
the GPU; TensorFlow's CPU build decodes the image files), or the `[gpu]` extra (TensorFlow on the
GPU): see "Running on a GPU". The script stops with an error when no GPU is visible,
since a silent fall back to the CPU is what it guards against; `--allow-cpu` runs it on the CPU
anyway (and says so), e.g. to try it on a laptop. It prints what vit_keras sees (GPUs, compute
capabilities, the attention path), the dtype policy chosen for the device (bfloat16 from compute
capability 8.0 on, float16 on 7.x, float32 below; `VIT_KERAS_PRECISION` overrides), and the images
per second of the embedding pass (the first batch, which compiles, left out).

Hardware and time: an NVIDIA GPU (bfloat16 from compute capability 8.0); not timed on a GPU here.
Measured with `--allow-cpu` on a 2-core Intel Xeon (AVX-512, AMX) whose cores other jobs shared
(load about 10), so an upper bound there: the test suite's test (a run refused for want of a GPU,
then 20 images of 32 px through a tiny checkpoint) took 39 s.
"""

import argparse
import glob
import os
import sys
import time

import keras
import numpy as np

import vit_keras
from vit_keras import hardware
from vit_keras.images import IMAGE_SUFFIXES, read_image

DEFAULT_MODEL = "hf-hub:facebook/dinov3-vits16-pretrain-lvd1689m"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a folder of images (searched recursively)")
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"hub id, directory or file (default {DEFAULT_MODEL})",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--output", default="embeddings.npy")
    parser.add_argument(
        "--allow-cpu", action="store_true", help="run on the CPU when no GPU is visible"
    )
    args = parser.parse_args(argv)

    summary = hardware.summary()
    kind = hardware.default_kind()
    print(
        f"backend {keras.backend.backend()}, "
        f"GPUs (compute capability): {summary['gpu_compute_capabilities']}"
    )
    if kind != "GPU":
        if not args.allow_cpu:
            sys.exit(
                "No GPU is visible to this process: "
                "install a GPU build (see the docstring) or pass --allow-cpu."
            )
        print("No GPU is visible: running on the CPU because --allow-cpu was given.")
    choice = hardware.choose_precision(kind)
    keras.config.set_dtype_policy(choice.policy)  # before the model is built
    print(f"precision: {choice.reason}")

    model = vit_keras.from_pretrained(args.model, include_top=False, pooling="token")
    print(
        f"attention path: {summary['attention'].get(choice.policy.removeprefix('mixed_'), 'keras')}"
    )
    # The size the checkpoint was made for (a RoPE-only model such as DINOv3
    # takes any size).
    size = model.vit_config.reference_image_size
    paths = sorted(
        path
        for path in glob.glob(os.path.join(args.folder, "**", "*"), recursive=True)
        if path.lower().endswith(IMAGE_SUFFIXES)
    )
    if not paths:
        sys.exit(f"No images under {args.folder!r}.")
    embeddings, timed_images, timed_seconds = [], 0, 0.0
    for start in range(0, len(paths), args.batch_size):
        batch = np.stack(
            [read_image(path, size) for path in paths[start : start + args.batch_size]]
        )
        began = time.perf_counter()
        output = keras.ops.convert_to_numpy(model(batch, training=False))
        if start:  # the first batch compiles
            timed_images, timed_seconds = (
                timed_images + len(batch),
                timed_seconds + time.perf_counter() - began,
            )
        embeddings.append(np.asarray(output, np.float32))
    embeddings = np.concatenate(embeddings)
    np.save(args.output, embeddings)
    speed = (
        f", {timed_images / timed_seconds:.1f} images/s after the first batch"
        if timed_images
        else ""
    )
    print(f"wrote {args.output} {embeddings.shape}{speed}")


if __name__ == "__main__":
    main()
