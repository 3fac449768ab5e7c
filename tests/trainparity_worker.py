"""The fine-tune recipe's first three updates on the vit_jax fixture in tests/fixtures/trainparity/, for the parity
tests: `run_compiled` (compile + train_on_batch) and `run_train` (`vit_keras.training.train` on a `tf.data` of the
fixture's batch) return the parameters after every update.

`python tests/trainparity_worker.py OUT` runs `MIRRORED_RUNS` under MirroredStrategy on 2 logical CPUs (a
process-wide setting, hence a subprocess) and saves the snapshots to OUT/*.npz.
"""

import os
import sys

import numpy as np

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "trainparity")
UPDATES = 3
# What the MirroredStrategy subprocess runs: (kind, accumulation).
MIRRORED_RUNS = (("compiled", 1), ("compiled", 2), ("train", 1))


def fixture_batch():
    """(inputs in [-1, 1), one-hot labels, int labels) of the fixture's batch of 8."""
    return (np.load(os.path.join(FIXTURE, "inputs.npy")), np.load(os.path.join(FIXTURE, "labels_onehot.npy")),
            np.load(os.path.join(FIXTURE, "labels.npy")))


def build(path=None):
    """The fixture's model (patch 4, hidden 48, 2 layers, 3 heads, MLP 96, 10 classes) with the parameters of a
    vit_jax-named .npz (parameters, gradients or momentum of the fixture all load the same way)."""
    import vit_keras

    return vit_keras.ViT(image_size=16, patch_size=4, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
                         classes=10, include_preprocessing=False, classifier_activation=None,
                         weights=path or os.path.join(FIXTURE, "init_params.npz"))


def recipe(accumulation, trace_dtype="bfloat16"):
    """The fixture's recipe: base lr 0.03, 2 warmup steps of 10, cosine, clip 1, batch 8."""
    from vit_keras import training

    return training.finetune(total_steps=10, warmup_steps=2, learning_rate=0.03, batch_size=8,
                             accumulation_steps=accumulation, trace_dtype=trace_dtype, crop="resize", flip=False,
                             shuffle_buffer=1, precision="float32", log_images=1)


def parameters(model):
    return [np.array(v.numpy()) for v in model.trainable_variables]


def run_compiled(accumulation, trace_dtype="bfloat16", jit_compile=True, strategy=None):
    """(initial params, [params after update 1..3], [mean micro-batch loss of update 1..3])."""
    import contextlib

    import keras

    from vit_keras import training

    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        model = build()
        model.compile(optimizer=training.make_optimizer(recipe(accumulation, trace_dtype)),
                      loss=keras.losses.CategoricalCrossentropy(from_logits=True), jit_compile=jit_compile)
    inputs, onehot, _ = fixture_batch()
    micro = len(inputs) // accumulation
    initial, snapshots, losses = parameters(model), [], []
    for _ in range(UPDATES):
        step_losses = [float(model.train_on_batch(inputs[i * micro:(i + 1) * micro], onehot[i * micro:(i + 1) * micro]))
                       for i in range(accumulation)]
        losses.append(float(np.mean(step_losses)))
        snapshots.append(parameters(model))
    return initial, snapshots, losses


def run_train(accumulation, output_dir, strategy=None):
    """(initial params, [params after update 1..3]) of `training.train` on a tf.data of the fixture's batch,
    stopped after 3 of the schedule's 10 updates."""
    import keras
    import tensorflow as tf

    from vit_keras import training

    class Snapshots(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.initial, self.after = None, []

        def on_train_begin(self, logs=None):
            self.initial = parameters(self.model)

        def on_train_batch_end(self, batch, logs=None):
            if int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) > len(self.after):
                self.after.append(parameters(self.model))
            if len(self.after) >= UPDATES:
                self.model.stop_training = True

    inputs, _, labels = fixture_batch()
    dataset = tf.data.Dataset.from_tensor_slices((inputs, labels))
    snapshots = Snapshots()
    # Validation given explicitly, so that the 8 examples all train whatever the default validation split is.
    training.train(build, dataset, recipe(accumulation), output_dir=output_dir, validation_data=dataset,
                   num_classes=10, strategy=strategy, verbose=0, callbacks=[snapshots])
    return snapshots.initial, snapshots.after


def _save(path, initial, snapshots, losses=None, **extra):
    arrays = {f"initial_{i}": p for i, p in enumerate(initial)}
    for step, params in enumerate(snapshots, 1):
        arrays.update({f"step{step}_{i}": p for i, p in enumerate(params)})
    np.savez(path, losses=np.asarray(losses if losses is not None else [], np.float64), **arrays, **extra)


def load(path):
    """What `_save` wrote: (initial, snapshots, losses, archive)."""
    with np.load(path, allow_pickle=False) as archive:
        data = {key: archive[key] for key in archive.files}
    count = len([k for k in data if k.startswith("initial_")])
    initial = [data[f"initial_{i}"] for i in range(count)]
    snapshots = [[data[f"step{s}_{i}"] for i in range(count)] for s in range(1, UPDATES + 1)
                 if f"step{s}_0" in data]
    return initial, snapshots, list(data["losses"]), data


def main(out):
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    for kind, accumulation in MIRRORED_RUNS:
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        if kind == "compiled":
            # XLA cannot place MirroredStrategy's per-device variables in train_on_batch's step; train() plans
            # its own compilation (the "train" run).
            initial, snapshots, losses = run_compiled(accumulation, jit_compile=False, strategy=strategy)
        else:
            initial, snapshots = run_train(accumulation, os.path.join(out, f"run{accumulation}"), strategy=strategy)
            losses = None
        _save(os.path.join(out, f"{kind}_accum{accumulation}.npz"), initial, snapshots, losses,
              replicas=strategy.num_replicas_in_sync)


if __name__ == "__main__":
    main(sys.argv[1])
