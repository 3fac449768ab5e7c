"""What every training run sets up around its work: the output directory's lock, and the seed, op determinism and
dtype policy its config and execution plan ask for.

`train` and `masked_patch_pretrain` both run inside `run_directory(...)` then `run_settings(...)`:

    with run_directory(output_dir, strategy):
        ...  # load the data (before seeding, so the seed governs the run itself)
        with run_settings(config, plan):
            ...  # build, compile and fit
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile

from vit_keras.training.lock import output_dir_lock
from vit_keras.training.strategy import is_chief, worker_index


@contextlib.contextmanager
def run_directory(output_dir: str, strategy):
    """Hold `output_dir`'s lock for the block when this process is the chief (the one that writes it): one run per
    output directory. Other workers write private scratch directories and take no lock.

    Example:
        >>> import tensorflow as tf
        >>> with run_directory(str(getfixture("tmp_path")), tf.distribute.get_strategy()):
        ...     pass
    """
    with output_dir_lock(output_dir) if is_chief(strategy) else contextlib.nullcontext():
        yield


@contextlib.contextmanager
def run_settings(config, plan):
    """Seed Python, NumPy and TensorFlow with `config.seed`, turn on TensorFlow's op determinism when
    `config.deterministic`, and set Keras' global dtype policy to `plan.policy` for the block (the previous policy
    is restored on the way out, also after an error).

    Example:
        >>> import keras
        >>> from vit_keras.training import finetune
        >>> from vit_keras.training.strategy import ExecutionPlan
        >>> with run_settings(finetune(), ExecutionPlan("mixed_float16", False, ())):
        ...     keras.config.dtype_policy().name
        'mixed_float16'
        >>> keras.config.dtype_policy().name
        'float32'
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(config.seed)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(plan.policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous_policy)


@dataclasses.dataclass(frozen=True)
class RunDirectories:
    """Where a process of a run writes: the chief writes `output_dir` itself; every other worker writes its logs
    and checkpoints into a private scratch `work_dir` (their files are identical and would race) and its step
    backup under `output_dir/backup/worker<i>`.

    Example:
        >>> import tensorflow as tf
        >>> dirs = RunDirectories.of("run", tf.distribute.get_strategy())
        >>> dirs.log_dir, dirs.checkpoint_dir, dirs.backup_dir
        ('run/logs', 'run/checkpoints', 'run/backup')
    """

    chief: bool
    work_dir: str
    log_dir: str
    checkpoint_dir: str
    backup_dir: str

    @classmethod
    def of(cls, output_dir: str, strategy) -> RunDirectories:
        """The directories of this process (a chief's under `output_dir`), with `log_dir` created."""
        import tensorflow as tf

        chief = is_chief(strategy)
        work_dir = output_dir if chief else tempfile.mkdtemp(prefix=f"worker{worker_index(strategy)}_")
        backup_dir = os.path.join(output_dir, "backup") if chief else os.path.join(
            output_dir, "backup", f"worker{worker_index(strategy)}")
        dirs = cls(chief, work_dir, os.path.join(work_dir, "logs"), os.path.join(work_dir, "checkpoints"),
                   backup_dir)
        tf.io.gfile.makedirs(dirs.log_dir)
        return dirs

    def remove_scratch(self) -> None:
        """Delete a non-chief worker's scratch `work_dir` once the run is done (the chief's is the output)."""
        if not self.chief:
            shutil.rmtree(self.work_dir, ignore_errors=True)
