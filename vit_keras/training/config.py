"""The two training recipes of the paper as overridable dataclasses: `finetune(...)` and `pretrain(...)`.

Example:
    >>> from vit_keras.training import finetune
    >>> config = finetune(learning_rate=0.01, total_steps=500, batch_size=512, accumulation_steps=8)
    >>> config.micro_batch_size
    64
"""

from __future__ import annotations

import dataclasses
import math

from vit_keras.training.data import CROPS  # the recipes accept exactly the crops the pipeline implements

SCHEDULES = ("cosine", "linear", "constant")
OPTIMIZERS = ("sgd", "adamw")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
TRACE_DTYPES = ("bfloat16", "float32")


def _not_integer(value) -> bool:
    return isinstance(value, bool) or not float(value).is_integer()


def _check_number(name: str, value, *, low: float, high: float | None = None, low_open: bool = False,
                  high_open: bool = True, hint: str = "") -> None:
    """Raise a `ValueError` naming `name` unless `value` is a finite number in the stated interval."""
    interval = ("(" if low_open else "[") + f"{low:g}, " + ("inf)" if high is None else
                                                            f"{high:g}" + (")" if high_open else "]"))
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    inside = math.isfinite(number) and (number > low if low_open else number >= low)
    if high is not None:
        inside = inside and (number < high if high_open else number <= high)
    if not inside or isinstance(value, bool):
        raise ValueError(f"`{name}` must be a finite number in {interval}, got {value!r}" + (f": {hint}." if hint
                                                                                             else "."))


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every hyper-parameter of a run. Steps count optimizer updates (one update = `batch_size` examples).

    Example:
        >>> TrainConfig(total_steps=100, warmup_steps=10).schedule
        'cosine'
    """

    recipe: str = "custom"
    # Optimisation
    optimizer: str = "sgd"
    learning_rate: float = 0.03
    schedule: str = "cosine"
    warmup_steps: int = 500
    total_steps: int = 10_000
    end_learning_rate: float = 0.0
    momentum: float = 0.9
    # SGD's momentum trace is stored in bfloat16 as vit_jax stores it (`accumulator_dtype`); "float32" keeps it exact
    trace_dtype: str = "bfloat16"
    beta_1: float = 0.9
    beta_2: float = 0.999
    weight_decay: float = 0.0
    clipnorm: float | None = 1.0
    batch_size: int = 512
    accumulation_steps: int = 1
    label_smoothing: float = 0.0
    # Model regularisation: fixed when the model is built; train() checks the built model carries these rates
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    # Input pipeline
    image_size: int | None = None
    crop: str = "inception"
    flip: bool = True
    randaugment: tuple[int, float] | None = None
    mixup_alpha: float = 0.0
    shuffle_buffer: int = 10_000
    cache: bool = True
    # NaFlex (a model built with flexible=True): each image keeps its aspect ratio, fit to at most `max_patches`
    # patches, the batch padded to max_patches (or, with `naflex_buckets`, to the smallest of those sequence
    # lengths that holds its longest image) and masked. None: fixed-size images of `image_size`.
    max_patches: int | None = None
    naflex_buckets: tuple[int, ...] | None = None
    # Execution
    seed: int = 0
    deterministic: bool = False
    jit_compile: bool = True
    precision: str = "auto"
    # Book-keeping: one "epoch" is a period of `steps_per_epoch` updates (logs, eval, best/last checkpoint).
    steps_per_epoch: int | None = None
    backup_every: int | None = None  # micro-steps between resume backups; default: 4 per epoch
    log_images: int = 8

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"`optimizer` must be one of {OPTIMIZERS}, got {self.optimizer!r}.")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"`schedule` must be one of {SCHEDULES}, got {self.schedule!r}.")
        if self.precision not in PRECISIONS:
            raise ValueError(f"`precision` must be one of {PRECISIONS}, got {self.precision!r}.")
        if self.trace_dtype not in TRACE_DTYPES:
            raise ValueError(f"`trace_dtype` must be one of {TRACE_DTYPES}, got {self.trace_dtype!r}.")
        for name in ("total_steps", "batch_size", "accumulation_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {getattr(self, name)}.")
        if not 0 <= self.warmup_steps <= self.total_steps:
            raise ValueError(
                f"`warmup_steps` ({self.warmup_steps}) must lie in [0, total_steps={self.total_steps}]."
            )
        if self.batch_size % self.accumulation_steps:
            raise ValueError(
                f"batch_size {self.batch_size} is not divisible by accumulation_steps {self.accumulation_steps}: "
                "each update averages accumulation_steps equal micro-batches."
            )
        self._check_ranges()

    def _check_ranges(self) -> None:
        """Refuse values that would train nothing, for ever, or into NaN, naming the field and what it takes."""
        _check_number("learning_rate", self.learning_rate, low=0.0, low_open=True,
                      hint="the peak learning rate, e.g. 0.03 (finetune) or 1e-3 (pretrain)")
        _check_number("end_learning_rate", self.end_learning_rate, low=0.0, hint="0 decays to zero")
        for name in ("weight_decay", "mixup_alpha"):
            _check_number(name, getattr(self, name), low=0.0, hint="0 turns it off")
        for name in ("label_smoothing", "dropout_rate", "attention_dropout_rate", "momentum", "beta_1", "beta_2"):
            _check_number(name, getattr(self, name), low=0.0, high=1.0, hint="a fraction in [0, 1)")
        if self.clipnorm is not None:
            _check_number("clipnorm", self.clipnorm, low=0.0, low_open=True, hint="None turns clipping off")
        for name in ("steps_per_epoch", "backup_every"):
            value = getattr(self, name)
            if value is not None and (_not_integer(value) or value < 1):
                raise ValueError(f"`{name}` must be a positive integer or None (the default), got {value!r}.")
        for name, low in (("shuffle_buffer", 1), ("log_images", 0), ("warmup_steps", 0)):
            value = getattr(self, name)
            if _not_integer(value) or value < low:
                raise ValueError(f"`{name}` must be an integer >= {low}, got {value!r}.")
        if self.image_size is not None:
            sizes = self.image_size if isinstance(self.image_size, tuple | list) else (self.image_size,)
            if any(_not_integer(size) or size < 1 for size in sizes):
                raise ValueError(f"`image_size` must be a positive integer (or None: the model's), got "
                                 f"{self.image_size!r}.")
        if self.crop not in CROPS:
            raise ValueError(f"`crop` must be one of {CROPS}, got {self.crop!r}.")
        self._check_naflex()
        if self.randaugment is not None:
            try:
                num_ops, factor = self.randaugment
            except (TypeError, ValueError):
                raise ValueError(f"`randaugment` must be (num_ops, factor) or None, got {self.randaugment!r}.") \
                    from None
            if _not_integer(num_ops) or num_ops < 1:
                raise ValueError(f"`randaugment` num_ops must be a positive integer, got {num_ops!r}.")
            _check_number("randaugment factor", factor, low=0.0, high=1.0, high_open=False,
                          hint="the strength of each operation in [0, 1]")

    def _check_naflex(self) -> None:
        """`max_patches` and `naflex_buckets` in range, and no fixed-size option beside them."""
        if self.max_patches is None:
            if self.naflex_buckets is not None:
                raise ValueError("`naflex_buckets` groups NaFlex batches by length: it needs `max_patches` (vit-keras "
                                 "train --max-patches N).")
            return
        if _not_integer(self.max_patches) or self.max_patches < 1:
            raise ValueError(f"`max_patches` must be a positive integer (patches per image), got "
                             f"{self.max_patches!r}.")
        if self.image_size is not None:
            raise ValueError(f"`image_size` ({self.image_size!r}) and `max_patches` ({self.max_patches}) exclude each "
                             "other: with max_patches each image keeps its own size, fit to that many patches; set "
                             "image_size=None (drop --image-size).")
        # Both mix whole images of one size: images of different grids have no pixel-to-pixel counterpart.
        for name, value, off in (("randaugment", self.randaugment, None), ("mixup_alpha", self.mixup_alpha, 0.0)):
            if value != off:
                raise ValueError(f"`{name}` ({value!r}) needs images of one fixed size and is not available with "
                                 f"`max_patches` (NaFlex); the crop ({self.crop!r}) and flip work at each image's "
                                 f"own size. Set {name}={off!r} (drop --{'mixup' if name == 'mixup_alpha' else name})"
                                 " or train at a fixed --image-size.")
        if self.naflex_buckets is not None:
            buckets = tuple(self.naflex_buckets) if isinstance(self.naflex_buckets, tuple | list) else None
            if not buckets or any(_not_integer(b) or not 1 <= b <= self.max_patches for b in buckets) or \
                    any(b <= a for a, b in zip(buckets, buckets[1:])):
                raise ValueError(f"`naflex_buckets` must be increasing sequence lengths in [1, max_patches="
                                 f"{self.max_patches}], e.g. (64, 128, 192), got {self.naflex_buckets!r}.")

    @property
    def micro_batch_size(self) -> int:
        """Examples per forward/backward pass (over all replicas): `batch_size / accumulation_steps`."""
        return self.batch_size // self.accumulation_steps

    @property
    def updates_per_epoch(self) -> int:
        return min(self.steps_per_epoch or self.total_steps, self.total_steps)

    @property
    def epochs(self) -> int:
        return -(-self.total_steps // self.updates_per_epoch)

    def replace(self, **overrides) -> TrainConfig:
        """A copy with some fields changed (`ValueError` for a field that does not exist).

        Example:
            >>> finetune().replace(learning_rate=0.01).learning_rate
            0.01
        """
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            known = [f.name for f in dataclasses.fields(self)]
            raise ValueError(f"Unknown training options {unknown}; known: {known}.")
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def finetune(**overrides) -> TrainConfig:
    """The paper's fine-tuning recipe (App. B.1.1) as vit_jax runs it: SGD momentum 0.9 (optax's trace, stored in
    bfloat16: `trace_dtype`), batch 512, cosine decay after 500 warmup steps, no weight decay, gradient clipping at
    global norm 1 of the averaged gradient, zero-initialised head, inception crop + flip.

    The learning rate is the paper's sweep value for CIFAR/ImageNet (0.03; VTAB uses 0.01). Use
    `accumulation_steps` to reach batch 512 on small hardware, as vit_jax does (`accum_steps=8`).

    Example:
        >>> finetune(total_steps=500).optimizer
        'sgd'
    """
    base = TrainConfig(
        recipe="finetune", optimizer="sgd", learning_rate=0.03, schedule="cosine", warmup_steps=500,
        total_steps=10_000, momentum=0.9, weight_decay=0.0, clipnorm=1.0, batch_size=512, dropout_rate=0.0,
    )
    return base.replace(**overrides)


def pretrain(**overrides) -> TrainConfig:
    """The paper's pre-training recipe (§4.1, App. B.1): AdamW (β = 0.9, 0.999), batch 4096, weight decay 0.1,
    10k linear warmup steps then linear decay, dropout 0.1, gradient clipping at global norm 1.

    Example:
        >>> pretrain(total_steps=20_000).optimizer
        'adamw'
    """
    base = TrainConfig(
        recipe="pretrain", optimizer="adamw", learning_rate=1e-3, schedule="linear", warmup_steps=10_000,
        total_steps=300_000, beta_1=0.9, beta_2=0.999, weight_decay=0.1, clipnorm=1.0, batch_size=4096,
        dropout_rate=0.1,
    )
    if "total_steps" in overrides and "warmup_steps" not in overrides:
        overrides["warmup_steps"] = min(base.warmup_steps, overrides["total_steps"] // 10)
    return base.replace(**overrides)


RECIPES = {"finetune": finetune, "pretrain": pretrain}
