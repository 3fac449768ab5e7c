"""The demo's two training stages: pre-training at 8x8, then fine-tuning at 12x12 from the pre-trained weights.

Example:
    >>> recipe = pretrain_recipe(steps=100, seed=0)
    >>> recipe.total_steps, recipe.warmup_steps, recipe.batch_size, recipe.crop
    (100, 10, 32, 'resize')
"""

from __future__ import annotations

import os

from vit_keras.demo.digits import DATASET
from vit_keras.demo.digits_model import FINETUNE_SIZE, PRETRAIN_SIZE, build_demo_model

# Batch 32 with twice the updates of batch 64 (the same compute): the extra, noisier updates generalise better on
# 1,293 training digits (docs/fine-tuning.md, "The demo", has the measurements).
PRETRAIN_STEPS, FINETUNE_STEPS = 2400, 600
BATCH_SIZE = 32
PRETRAIN_LR = 2e-3
FINETUNE_LR = 0.03
# Train-time crop of each stage (vit_keras.training.data CROPS). "resize" keeps every digit where it is: one-pixel
# random shifts ("shift") scored lower on the same seeds (docs/fine-tuning.md, "The demo").
PRETRAIN_CROP, FINETUNE_CROP = "resize", "resize"


def _common(seed: int) -> dict:
    # Digits are tiny and not mirror-symmetric: no inception crop (it cuts strokes off) or flip. float32: on CPU,
    # XLA gains nothing from bfloat16 (REFERENCE §12) and these matrices are too small for it to pay.
    # Label smoothing 0.1 in both stages: without it the model memorises the training digits and the weakest of
    # 10 measured runs scored 95.83% (docs/fine-tuning.md, "The demo").
    return {"flip": False, "precision": "float32", "seed": seed, "batch_size": BATCH_SIZE,
            "label_smoothing": 0.1, "shuffle_buffer": 2048, "log_images": 8}


def pretrain_recipe(steps: int, seed: int):
    """The `pretrain` recipe of the first stage: AdamW with weight decay 0.05, 10% warmup, dropout 0.1."""
    from vit_keras import training

    return training.pretrain(total_steps=steps, warmup_steps=steps // 10, learning_rate=PRETRAIN_LR,
                             weight_decay=0.05, steps_per_epoch=max(steps // 4, 1), crop=PRETRAIN_CROP,
                             **_common(seed))


def finetune_recipe(steps: int, seed: int):
    """The `finetune` recipe of the second stage: SGD with momentum, cosine decay, gradient clipping at 1.0.

    Example:
        >>> finetune_recipe(steps=40, seed=0).learning_rate
        0.03
    """
    from vit_keras import training

    return training.finetune(total_steps=steps, warmup_steps=steps // 10, learning_rate=FINETUNE_LR,
                             steps_per_epoch=max(steps // 4, 1), crop=FINETUNE_CROP, **_common(seed))


# Both stages validate on the last 10% of the training digits (train() holds them out by default): the test digits
# are scored once, at the end (`vit_keras.demo.report`).
def pretrain(output_dir: str, data_dir: str, steps: int, seed: int):
    """Stage 1: pre-train the demo's ViT at `PRETRAIN_SIZE` under `<output_dir>/pretrain`; the trained model."""
    from vit_keras import training

    recipe = pretrain_recipe(steps, seed)
    return training.train(
        lambda: build_demo_model(PRETRAIN_SIZE, dropout_rate=recipe.dropout_rate, name="vit-digits-8px"),
        DATASET, recipe, output_dir=os.path.join(output_dir, "pretrain"), validation_data=DATASET,
        data_dir=data_dir, verbose=2,
    ).model


def finetune(pretrained, output_dir: str, data_dir: str, steps: int, seed: int):
    """Stage 2: fine-tune `pretrained` at `FINETUNE_SIZE` under `<output_dir>/finetune`; the trained model."""
    from vit_keras import training

    def build_high_resolution():
        model = build_demo_model(FINETUNE_SIZE, name="vit-digits-12px")
        # A new zero-initialised head, as the paper fine-tunes; the 4x4 position grid is resampled to 6x6.
        report = training.transfer_weights(pretrained, model, reset_head=True)
        print(f"transferred weights: {report}")
        return model

    return training.train(
        build_high_resolution, DATASET, finetune_recipe(steps, seed), output_dir=os.path.join(output_dir, "finetune"),
        validation_data=DATASET, data_dir=data_dir, verbose=2,
    ).model
