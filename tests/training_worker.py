"""Subprocess entry for the distributed and resume tests: `python tests/training_worker.py MODE OUT [DATA_DIR]`.

MODE "mirrored": trains the same tiny ViT on 1 and on 2 logical CPU devices (MirroredStrategy) and saves both
final weight sets; "accumulation": for SGD (momentum, active clip) and AdamW (weight decay), one batch of 16 on one
device and 2 accumulated micro-batches of 8 on 2 logical CPUs (MirroredStrategy); "multiworker": one worker of a
TF_CONFIG cluster trains and saves its weights; "naflex_mirrored": a flexible (NaFlex) ViT on the mixed-size dataset
(tests/naflex_dataset.py), batches padded to N, on 1 and on 2 logical CPUs (MirroredStrategy).
"""

import os
import sys

import numpy as np


def tiny_vit():
    import vit_keras
    from tests.tiny import TINY_TRAINING

    return vit_keras.ViT(image_size=16, classes=10, classifier_activation=None, name="tiny", **TINY_TRAINING)


def config():
    from vit_keras import training

    return training.finetune(total_steps=6, steps_per_epoch=3, batch_size=16, warmup_steps=2, learning_rate=0.1,
                             precision="float32", seed=3, shuffle_buffer=64, log_images=2)


def weights_of(model):
    return {f"w{i}": np.asarray(w) for i, w in enumerate(model.get_weights())}


def main(mode, out, data_dir):
    import tensorflow as tf

    if mode in ("mirrored", "accumulation", "naflex_mirrored"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from vit_keras import training

    if mode == "mirrored":
        single = training.train(tiny_vit, "vit_keras_digits", config(), output_dir=os.path.join(out, "single"),
                                data_dir=data_dir, verbose=0)
        mirrored = training.train(tiny_vit, "vit_keras_digits", config(), output_dir=os.path.join(out, "mirrored"),
                                  data_dir=data_dir, verbose=0,
                                  strategy=tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
        np.savez(os.path.join(out, "single.npz"), **weights_of(single.model))
        np.savez(os.path.join(out, "mirrored.npz"), **weights_of(mirrored.model),
                 replicas=mirrored.model.distribute_strategy.num_replicas_in_sync, updates=mirrored.updates)
    elif mode == "accumulation":
        recipes = {
            # A clip norm this small is active on every update, so its place (after averaging) matters.
            # float32 trace: a bfloat16 one turns float32 reordering noise into whole bfloat16 rounding steps.
            "sgd": config().replace(clipnorm=0.05, trace_dtype="float32"),
            "adamw": config().replace(optimizer="adamw", learning_rate=3e-3, weight_decay=0.1),
        }
        for name, recipe in recipes.items():
            single = training.train(tiny_vit, "vit_keras_digits", recipe, output_dir=os.path.join(out, name + "1"),
                                    data_dir=data_dir, verbose=0)
            accumulated = training.train(tiny_vit, "vit_keras_digits", recipe.replace(accumulation_steps=2),
                                         output_dir=os.path.join(out, name + "2"), data_dir=data_dir, verbose=0,
                                         strategy=tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
            np.savez(os.path.join(out, f"{name}_single.npz"), **weights_of(single.model))
            np.savez(os.path.join(out, f"{name}_accumulated.npz"), **weights_of(accumulated.model),
                     replicas=accumulated.model.distribute_strategy.num_replicas_in_sync,
                     updates=accumulated.updates)
    elif mode == "naflex_mirrored":
        from tests import naflex_dataset

        naflex_dataset.prepare(data_dir)

        def flexible_vit():
            import vit_keras
            from tests.tiny import TINY_TRAINING

            # Patches of 8: the mixed-size dataset's images are 8..48 pixels a side.
            return vit_keras.ViT(flexible=True, classes=naflex_dataset.CLASSES, classifier_activation=None,
                                 name="tiny", **dict(TINY_TRAINING, patch_size=8))

        recipe = config().replace(max_patches=16)
        runs = {"single": None, "mirrored": tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])}
        for name, strategy in runs.items():
            result = training.train(flexible_vit, naflex_dataset.NAME, recipe, output_dir=os.path.join(out, name),
                                    validation_split="test", data_dir=data_dir, verbose=0, strategy=strategy)
            np.savez(os.path.join(out, f"naflex_{name}.npz"), **weights_of(result.model), updates=result.updates,
                     replicas=result.model.distribute_strategy.num_replicas_in_sync)
    else:
        strategy = training.select_strategy()
        result = training.train(tiny_vit, "vit_keras_digits", config(), output_dir=os.path.join(out, "run"),
                                data_dir=data_dir, verbose=0, strategy=strategy)
        index = strategy.cluster_resolver.task_id
        np.savez(os.path.join(out, f"worker{index}.npz"), **weights_of(result.model), updates=result.updates,
                 replicas=strategy.num_replicas_in_sync, chief=training.is_chief(strategy))


if __name__ == "__main__":
    main(*sys.argv[1:4])
