"""Training and evaluating ViTs the paper's way: recipes, strategy selection, resumable `model.fit`, probes.

Example:
    >>> from vit_keras import training
    >>> config = training.finetune(total_steps=500, batch_size=512, accumulation_steps=8)
    >>> config.learning_rate
    0.03
"""

from vit_keras.training import parallel  # noqa: F401  (training.parallel: keras.distribution on JAX)
from vit_keras.training.callbacks import (
    BestCheckpoint,
    LastCheckpoint,
    NonFiniteLossError,
    StepBackup,
    StopOnNonFiniteLoss,
    TrainingMonitor,
    checkpoint_callbacks,
    checkpoint_score,
    save_checkpoint,
)
from vit_keras.training.config import RECIPES, TrainConfig, finetune, pretrain
from vit_keras.training.evaluation import (
    evaluate,
    feature_extractor,
    few_shot_accuracy,
    few_shot_probe,
    fit_least_squares_probe,
    topk_accuracy,
)
from vit_keras.training.linear_probe import linear_probe, probe_model
from vit_keras.training.loop import VALIDATION_FRACTION, TrainResult, holdout_splits, train
from vit_keras.training.lora import load_lora, lora, lora_settings, merge_lora, save_lora
from vit_keras.training.masked_patch import MaskedPatchModel
from vit_keras.training.masked_pretrain import MaskedPatchResult, masked_patch, masked_patch_pretrain
from vit_keras.training.optim import WarmupDecay, make_optimizer, make_schedule
from vit_keras.training.strategy import (
    ExecutionPlan,
    connect_tpu,
    is_chief,
    plan_execution,
    plan_inference,
    select_strategy,
)
from vit_keras.training.transfer import resample_position_embeddings, transfer_weights

__all__ = [
    "RECIPES",
    "VALIDATION_FRACTION",
    "BestCheckpoint",
    "ExecutionPlan",
    "LastCheckpoint",
    "MaskedPatchModel",
    "MaskedPatchResult",
    "NonFiniteLossError",
    "StepBackup",
    "StopOnNonFiniteLoss",
    "TrainConfig",
    "TrainResult",
    "TrainingMonitor",
    "WarmupDecay",
    "checkpoint_callbacks",
    "checkpoint_score",
    "connect_tpu",
    "evaluate",
    "feature_extractor",
    "few_shot_accuracy",
    "few_shot_probe",
    "finetune",
    "fit_least_squares_probe",
    "holdout_splits",
    "is_chief",
    "linear_probe",
    "load_lora",
    "lora",
    "lora_settings",
    "make_optimizer",
    "make_schedule",
    "masked_patch",
    "masked_patch_pretrain",
    "merge_lora",
    "plan_execution",
    "plan_inference",
    "pretrain",
    "probe_model",
    "resample_position_embeddings",
    "save_checkpoint",
    "save_lora",
    "select_strategy",
    "topk_accuracy",
    "train",
    "transfer_weights",
]
