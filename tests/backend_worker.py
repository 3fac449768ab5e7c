"""One process on one Keras backend (KERAS_BACKEND is set by tests/test_backends.py before it starts).

It runs the backend-portable tests it is given with pytest, then writes the inspection results of a reference
checkpoint (vit_jax's `vitjax_token_linen` fixture) to `<out>/inspection.npz`, so the TensorFlow process can
compare them with its own. Exit status: pytest's, or 3 when the inspection step fails.

Example:
    KERAS_BACKEND=jax python -m tests.backend_worker --out /tmp/run -- tests/test_weights_fixtures.py
"""

import argparse
import json
import os
import sys

import numpy as np

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "vitjax_token_linen")


def inspection_results() -> dict:
    """Attention weights, rollout, per-head maps, attention distances and position similarity, as NumPy arrays."""
    import vit_keras
    from vit_keras import inspection

    with open(os.path.join(FIXTURE, "meta.json")) as f:
        meta = json.load(f)
    model = vit_keras.ViT(**meta["kwargs"], weights=os.path.join(FIXTURE, meta["checkpoint"]),
                          classifier_activation=None)
    images = np.load(os.path.join(FIXTURE, "input.npy")).astype(np.float32)
    maps = inspection.attention_maps(model, images)
    results = dict(
        attention=inspection.attention_weights(model, images),
        rollout=maps.rollout,
        heads=maps.heads,
        rollout_image=maps.rollout_image,
        distances=inspection.attention_distances(model, images),
        position_similarity=inspection.position_embedding_similarity(model),
    )
    return {name: np.asarray(value, np.float64) for name, value in results.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("tests", nargs="*")
    args = parser.parse_args(argv)
    import keras
    import pytest

    print(f"KERAS_BACKEND={keras.backend.backend()}", flush=True)
    status = int(pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not tf_only", *args.tests])) if args.tests else 0
    try:
        np.savez(os.path.join(args.out, "inspection.npz"), **inspection_results())
    except Exception as error:  # reported to the parent test with the backend's name
        print(f"inspection failed on {keras.backend.backend()}: {error!r}", flush=True)
        return 3
    return status


if __name__ == "__main__":
    sys.exit(main())
