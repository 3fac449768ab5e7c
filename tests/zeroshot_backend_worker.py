"""One process on one Keras backend (KERAS_BACKEND set by tests/test_zeroshot_backends.py): every zero-shot
reference case through `vit_keras.zeroshot.from_pretrained`, then through a `.keras` round trip of both towers
(safe_mode), written to `<out>/<case>.npz` and `<case>_reloaded.npz`, with the tokenizer's ids.

Example:
    KERAS_BACKEND=jax python -m tests.zeroshot_backend_worker --out /tmp/zeroshot_jax
"""

import argparse
import os

import keras
import numpy as np

from tests import zeroshot_cases as cases


def main(out: str) -> None:
    from vit_keras import zeroshot

    os.makedirs(out, exist_ok=True)
    for case in cases.CASES:
        model = zeroshot.from_pretrained(os.path.join(cases.case_dir(case), "checkpoint"),
                                         include_preprocessing=False)
        images = cases.normalised_images(case)
        ids, mask = cases.token_inputs(case)
        tokens, _ = model.tokenize(cases.texts(case))
        np.savez(os.path.join(out, f"{case}.npz"), token_ids=tokens, **cases.outputs(model, images, ids, mask))
        for tower in ("image_model", "text_model"):
            path = os.path.join(out, f"{case}_{tower}.keras")
            getattr(model, tower).save(path)
            setattr(model, tower, keras.saving.load_model(path, safe_mode=True))
        np.savez(os.path.join(out, f"{case}_reloaded.npz"), **cases.outputs(model, images, ids, mask))
    print("backend", keras.backend.backend())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    main(parser.parse_args().out)
