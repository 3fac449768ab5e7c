"""One process on one Keras backend (KERAS_BACKEND is set by tests/test_backends.py before it starts).

It runs the backend-portable tests it is given with pytest, then writes to `<out>` what the TensorFlow process
compares with its own: the inspection results of a reference checkpoint (vit_jax's `vitjax_token_linen` fixture),
the weights after two optimizer steps from fixed weights, and (with --data-dir) a short `training.train` run,
uninterrupted and interrupted + resumed. Exit status: pytest's, or 3 when a later step fails.

Example:
    KERAS_BACKEND=jax python -m tests.backend_worker --out /tmp/run -- tests/test_weights_fixtures.py
"""

import argparse
import json
import os
import sys
import traceback

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


class _Interrupt(Exception):
    pass


def fit_and_resume(out: str, data_dir: str) -> dict:
    """The TF tests' tiny recipe (tests/training_worker.py) with 2 accumulated micro-batches, uninterrupted and
    interrupted in its second epoch then rerun with the same call; both runs' final weights and results."""
    import keras

    from tests.training_worker import config, tiny_vit, weights_of
    from vit_keras import training

    recipe = config().replace(accumulation_steps=2)
    reference = training.train(tiny_vit, "vit_keras_digits", recipe, output_dir=os.path.join(out, "reference"),
                               data_dir=data_dir, verbose=0)

    class InterruptInSecondEpoch(keras.callbacks.Callback):
        # Counted here: under JAX the optimizer's variables are synced back only at the end of an epoch.
        micro_batches = 0

        def on_train_batch_begin(self, batch, logs=None):
            self.micro_batches += 1
            if self.micro_batches > 2 * 4:  # two micro-batches per update: the 5th update
                raise _Interrupt

    run = os.path.join(out, "interrupted")
    try:
        training.train(tiny_vit, "vit_keras_digits", recipe, output_dir=run, data_dir=data_dir, verbose=0,
                       callbacks=[InterruptInSecondEpoch()])
        raise AssertionError("the interrupting callback did not stop the run")
    except _Interrupt:
        pass
    interrupted_results = os.path.exists(os.path.join(run, "results.json"))
    resumed = training.train(tiny_vit, "vit_keras_digits", recipe, output_dir=run, data_dir=data_dir, verbose=0)
    logs = os.path.join(out, "reference", "logs", "train")
    return dict(
        **{f"reference_{k}": v for k, v in weights_of(reference.model).items()},
        **{f"resumed_{k}": v for k, v in weights_of(resumed.model).items()},
        updates=np.array([reference.updates, resumed.updates]),
        results_after_interrupt=np.array(interrupted_results),
        event_files=np.array(len(os.listdir(logs)) if os.path.isdir(logs) else 0),
    )


def one_step_weights() -> dict:
    """Weights after one TraceSGD step (momentum 0.9, float32 trace, active global-norm clip) on a fixed batch,
    starting from fixed NumPy weights: the same on every backend up to float32 rounding."""
    import keras

    from tests.training_worker import tiny_vit, weights_of
    from vit_keras.training.optim import TraceSGD

    model = tiny_vit()
    rng = np.random.default_rng(7)
    start = [rng.normal(0, 0.1, w.shape).astype(np.float32) for w in model.get_weights()]
    model.set_weights(start)
    model.compile(optimizer=TraceSGD(learning_rate=0.1, momentum=0.9, trace_dtype="float32", global_clipnorm=0.5),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images = rng.uniform(-1, 1, (8, 16, 16, 3)).astype(np.float32)
    labels = np.arange(8) % 10
    for _ in range(2):  # the second step applies the momentum trace
        model.train_on_batch(images, labels)
    return {**weights_of(model), **{f"start_w{i}": w for i, w in enumerate(start)}}


def jax_parallel(out: str, data_dir: str, one_device: dict) -> dict:
    """On 2 logical CPU devices: a model built under `model_parallel(2)` (its shardings and its logits against
    the same weights unsharded), and `fit_and_resume`'s recipe trained with `data_parallel()`, whose weights
    must match `one_device` (that recipe's weights from one device)."""
    import jax
    import keras

    import vit_keras
    from tests.training_worker import config, tiny_vit, weights_of
    from vit_keras import training
    from vit_keras.training import parallel

    assert len(jax.devices()) == 2, jax.devices()
    # 4 heads, not tests/tiny.py's 3: model parallelism splits attention by heads, which must divide over 2 devices.
    kwargs = dict(image_size=16, patch_size=4, hidden_size=48, num_layers=1, num_heads=4, mlp_dim=96, classes=10,
                  classifier_activation=None)
    with parallel.model_parallel(model_devices=2).scope():
        sharded = vit_keras.ViT(**kwargs)
    plain = vit_keras.ViT(**kwargs)
    plain.set_weights(sharded.get_weights())
    images = np.random.default_rng(0).uniform(-1, 1, (4, 16, 16, 3)).astype(np.float32)
    specs = {v.path: str(tuple(v.value.sharding.spec)) for v in sharded.weights}
    data_parallel = training.train(tiny_vit, "vit_keras_digits", config().replace(accumulation_steps=2),
                                   output_dir=os.path.join(out, "data_parallel"), data_dir=data_dir, verbose=0,
                                   distribution=parallel.data_parallel())
    # Heads and MLP units split over the 2 devices (a 1 x 2 mesh: no data parallelism), same recipe.
    model_parallel = training.train(tiny_vit, "vit_keras_digits", config().replace(accumulation_steps=2),
                                    output_dir=os.path.join(out, "model_parallel"), data_dir=data_dir, verbose=0,
                                    distribution=parallel.model_parallel(model_devices=2))
    query = next(v for v in model_parallel.model.weights if v.path.endswith("query/kernel"))
    return dict(
        sharded_logits=keras.ops.convert_to_numpy(sharded(images)),
        plain_logits=keras.ops.convert_to_numpy(plain(images)),
        spec_names=np.array(list(specs)), spec_values=np.array(list(specs.values())),
        data_parallel_devices=np.array(min(len(v.value.sharding.device_set) for v in data_parallel.model.weights)),
        updates=np.array(data_parallel.updates),
        model_parallel_updates=np.array(model_parallel.updates),
        model_parallel_query_spec=np.array(str(tuple(query.value.sharding.spec))),
        **{f"single_{k}": v for k, v in one_device.items()},
        **{f"data_parallel_{k}": v for k, v in weights_of(data_parallel.model).items()},
        **{f"model_parallel_{k}": v for k, v in weights_of(model_parallel.model).items()},
    )


def cli_bfloat16(out: str, data_dir: str) -> dict:
    """`vit-keras train` on this backend in mixed bfloat16 (4 steps of a tiny ViT): its exit code, the policy
    its results.json reports and the final training loss."""
    import json

    from vit_keras.cli import main as cli

    output = os.path.join(out, "cli_bfloat16")
    code = cli(["train", "--model", "Ti/16", "--patch-size", "4", "--num-layers", "1", "--image-size", "16",
                "--dataset", "vit_keras_digits", "--data-dir", data_dir, "--eval-split", "", "--batch-size", "16",
                "--steps", "4", "--steps-per-epoch", "2", "--learning-rate", "0.05", "--warmup-steps", "1",
                "--precision", "mixed_bfloat16", "--seed", "5", "--output-dir", output])
    with open(os.path.join(output, "results.json")) as handle:
        results = json.load(handle)
    return dict(exit_code=np.array(code), policy=np.array(results["policy"]),
                loss=np.array(results["metrics"]["loss"]), updates=np.array(results["updates"]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--data-dir", help="tfds directory: also run fit + resume and write training.npz")
    parser.add_argument("tests", nargs="*")
    args = parser.parse_args(argv)
    import keras
    import pytest

    print(f"KERAS_BACKEND={keras.backend.backend()}", flush=True)
    status = int(pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not tf_only", *args.tests])) if args.tests else 0
    try:
        np.savez(os.path.join(args.out, "inspection.npz"), **inspection_results())
        np.savez(os.path.join(args.out, "one_step.npz"), **one_step_weights())
        if args.data_dir:
            training = fit_and_resume(args.out, args.data_dir)
            np.savez(os.path.join(args.out, "training.npz"), **training)
            np.savez(os.path.join(args.out, "cli_bfloat16.npz"), **cli_bfloat16(args.out, args.data_dir))
            if keras.backend.backend() == "jax":
                reference = {k[len("reference_"):]: v for k, v in training.items() if k.startswith("reference_")}
                np.savez(os.path.join(args.out, "parallel.npz"), **jax_parallel(args.out, args.data_dir, reference))
    except Exception:  # reported to the parent test with the backend's name
        print(f"failed on {keras.backend.backend()}:", flush=True)
        traceback.print_exc(file=sys.stdout)
        return 3
    return status


if __name__ == "__main__":
    sys.exit(main())
