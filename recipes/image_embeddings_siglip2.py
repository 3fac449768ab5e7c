"""Image embeddings from SigLIP 2 (its image tower), loaded by its Hugging Face hub id.

    python recipes/image_embeddings_siglip2.py photos/red/0.jpg photos/blue/0.jpg --output embeddings.npy

Prints one line per image (the embedding's width and norm) and the cosine similarity of every pair,
and writes the embeddings to `--output` (float32, one row per image). The default model is timm's
copy of Google's SigLIP 2 ViT-B/16 image tower at 224 (`v2_webli`); the embedding is its
attention-pooling (MAP) head's output, the vector SigLIP 2 compares with its text tower's. `--model`
takes any hub id, directory or file `vit_keras.from_pretrained` reads.

Hardware and time: a CPU is enough. Measured on a 2-core Intel Xeon (AVX-512, AMX), TensorFlow,
float32, CPU time while the cores were shared: the ViT-B/16 image tower (93 million parameters,
about 370 MB, downloaded once) takes 0.34 CPU-seconds per 224-px image (11 s of CPU for a batch of
32), so a folder of 1,000 photos takes about 3 min on both cores.
"""

import argparse

import numpy as np

import vit_keras
from vit_keras.images import read_image

DEFAULT_MODEL = "hf-hub:timm/vit_base_patch16_siglip_224.v2_webli"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, GIF, BMP)")
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"hub id, directory or file (default {DEFAULT_MODEL})",
    )
    parser.add_argument(
        "--output", default="embeddings.npy", help="where to write the embeddings (.npy)"
    )
    args = parser.parse_args(argv)

    # include_top=False, pooling="map": the checkpoint's attention-pooling head
    # (SigLIP has no class token).
    # The model takes RGB in [0, 255] and applies the checkpoint's own normalisation.
    model = vit_keras.from_pretrained(args.model, include_top=False, pooling="map")
    # The size the checkpoint was made for (a RoPE-only model such as DINOv3
    # takes any size).
    size = model.vit_config.reference_image_size
    images = np.stack([read_image(path, size) for path in args.images])
    embeddings = np.asarray(model.predict(images, verbose=0), dtype=np.float32)

    for path, embedding in zip(args.images, embeddings):
        print(f"{path}: {embedding.shape[0]} values, norm {np.linalg.norm(embedding):.3f}")
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    print("cosine similarity:")
    print(np.array2string(unit @ unit.T, precision=3))
    np.save(args.output, embeddings)
    print(f"wrote {args.output} {embeddings.shape}")


if __name__ == "__main__":
    main()
