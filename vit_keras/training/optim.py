"""Learning-rate schedules and optimizers of the recipes, built from a `TrainConfig`."""

from __future__ import annotations

import math

import keras
from keras import ops

from vit_keras.training.config import TRACE_DTYPES

# Biases, norm parameters, the class token and position embeddings carry no weight decay: big_vision decays the
# parameters named `kernel` only (`wd_mults = [(".*/kernel$", 1.0)]`); matched as substrings of the variable names.
NO_DECAY = ("bias", "gamma", "beta", "cls", "pos_embedding")


@keras.saving.register_keras_serializable(package="vit_keras")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """vit_jax's schedule: linear warmup from 0 to `learning_rate`, then cosine/linear decay to `end`.

    `lr(step) = base · min(1, step / warmup) · decay(progress)`, `progress = (step − warmup) / (total − warmup)`,
    with `decay = 0.5 (1 + cos(π p))` (cosine), `1 − p` (linear) or 1 (constant), scaled between base and end.

    Example:
        >>> schedule = WarmupDecay(0.1, warmup_steps=10, total_steps=110)
        >>> [round(float(schedule(s)), 4) for s in (0, 5, 10, 60, 110)]
        [0.0, 0.05, 0.1, 0.05, 0.0]
    """

    def __init__(self, learning_rate, warmup_steps, total_steps, schedule="cosine", end_learning_rate=0.0):
        self.learning_rate = float(learning_rate)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.schedule = schedule
        self.end_learning_rate = float(end_learning_rate)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = ops.minimum(1.0, step / float(max(self.warmup_steps, 1))) if self.warmup_steps else 1.0
        progress = ops.clip((step - self.warmup_steps) / float(max(self.total_steps - self.warmup_steps, 1)), 0, 1)
        if self.schedule == "cosine":
            decay = 0.5 * (1.0 + ops.cos(math.pi * progress))
        elif self.schedule == "linear":
            decay = 1.0 - progress
        else:
            decay = ops.ones_like(progress)
        value = self.end_learning_rate + (self.learning_rate - self.end_learning_rate) * decay
        return warmup * value

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "schedule": self.schedule,
            "end_learning_rate": self.end_learning_rate,
        }


class RecipeOptimizerMixin:
    """Two corrections to Keras 3.15 optimizers so that a recipe means the same on any hardware.

    - Clipping after summing over replicas: Keras clips each replica's share of the gradient before the
      all-reduce, so under `tf.distribute` a global-norm clip of 1.0 acts on norms about `1/replicas` of the real
      one and the run diverges from the single-device recipe. Here the gradients are summed first, clipped, and
      handed on as equal shares, which the update's own all-reduce sums back to the clipped global gradient
      (one extra all-reduce per update, only when clipping under several replicas).
    - The schedule advances per update: with `gradient_accumulation_steps`, Keras evaluates a schedule at the
      micro-step count, so warmup and decay would run `accumulation_steps` times too fast.
    - Accumulation under several replicas: Keras wraps the update in `ops.cond`, and the update's `merge_call`
      cannot run inside a cond (`RuntimeError: merge_call called while defining a new graph`). Here the merge
      call comes first and the cond runs inside it, in cross-replica context (see `_accumulate_across_replicas`).
    """

    def _get_current_learning_rate(self):
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()

    def _clip_gradients(self, grads):
        if keras.backend.backend() != "tensorflow":  # replicas exist only under tf.distribute
            return super()._clip_gradients(grads)
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        clipping = self.global_clipnorm or self.clipnorm or self.clipvalue
        if not clipping or context is None or context.num_replicas_in_sync == 1:
            return super()._clip_gradients(grads)
        replicas = context.num_replicas_in_sync
        summed = context.all_reduce("SUM", list(grads))
        return [g / replicas for g in super()._clip_gradients(summed)]

    def _backend_apply_gradients(self, grads, trainable_variables):
        if keras.backend.backend() != "tensorflow":
            return super()._backend_apply_gradients(grads, trainable_variables)
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        if (not self.gradient_accumulation_steps or self.use_ema or context is None
                or context.num_replicas_in_sync == 1):
            return super()._backend_apply_gradients(grads, trainable_variables)
        return self._accumulate_across_replicas(context, grads, trainable_variables)

    def _accumulate_across_replicas(self, context, grads, trainable_variables):
        """Keras' accumulation (average k micro-batch gradients, clip, decay, one update) with the merge call
        outside the cond.

        The replica gradients are summed every micro-step, so the accumulators hold the global gradient and stay
        identical on every replica (a checkpoint of any replica is the run's state); the all-reduce per
        micro-step is what training without accumulation costs anyway. Clipping acts on the summed average,
        as on one device.
        """
        import tensorflow as tf

        steps = self.gradient_accumulation_steps
        accumulators = [self._accumulated_gradients[self._get_variable_index(v)] for v in trainable_variables]
        summed = context.all_reduce("SUM", list(grads))
        totals = [g + tf.cast(a.value, g.dtype) for g, a in zip(summed, accumulators)]
        # The optimizer's own clip without the mixin's all-reduce: `summed` already is the global gradient.
        update_grads = super()._clip_gradients([t / steps for t in totals])
        learning_rate = self.learning_rate
        variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
        slots = [a.value for a in accumulators]

        def cross_replica(distribution, update_grads, totals, learning_rate):
            # Read in cross-replica context: one value for all replicas, so every replica takes the same branch.
            is_update_step = tf.equal((self._iterations + 1) % steps, 0)

            def update():
                if self.weight_decay is not None:
                    decay = self.weight_decay

                    def decay_fn(variable, lr):
                        if self._use_weight_decay(variable):
                            variable.assign_sub(variable * tf.cast(decay, variable.dtype) * tf.cast(lr, variable.dtype))

                    for variable in variables:
                        distribution.extended.update(variable, decay_fn, args=(learning_rate,), group=False)
                self._distributed_tf_update_step(distribution, list(zip(update_grads, variables)), learning_rate)
                for slot in slots:
                    distribution.extended.update(slot, lambda s: s.assign(tf.zeros_like(s)), group=False)

            def accumulate():
                for slot, total in zip(slots, totals):
                    distribution.extended.update(slot, lambda s, t: s.assign(tf.cast(t, s.dtype)), args=(total,),
                                                 group=False)

            tf.cond(is_update_step, update, accumulate)

        tf.__internal__.distribute.interim.maybe_merge_call(
            cross_replica, self._distribution_strategy, update_grads, totals, learning_rate
        )


def clip_by_global_norm(grads, max_norm):
    """optax's `clip_by_global_norm`: `g` if the global norm is below `max_norm`, else `(g / norm) * max_norm`.

    Example:
        >>> import numpy as np
        >>> [np.asarray(g).tolist() for g in clip_by_global_norm([np.array([3.0]), np.array([4.0])], 1.0)]
        [[0.6], [0.8]]
    """
    present = [g for g in grads if g is not None]
    norm = ops.sqrt(sum(ops.sum(ops.square(ops.cast(g, "float32"))) for g in present))
    below = ops.less(norm, max_norm)

    def clip(g):
        return ops.where(below, g, ops.multiply(ops.divide(g, ops.cast(norm, g.dtype)), ops.cast(max_norm, g.dtype)))

    return [None if g is None else clip(g) for g in grads]


class OptaxClipMixin:
    """Global-norm clipping with optax's arithmetic (divide by the norm, multiply by the bound) instead of Keras'
    (multiply by `min(1/norm, 1/bound) · bound`): the same function, rounded as vit_jax and big_vision round it."""

    def _clip_gradients(self, grads):
        if self.global_clipnorm and self.global_clipnorm > 0 and not self.clipnorm and not self.clipvalue:
            return clip_by_global_norm(grads, self.global_clipnorm)
        return super()._clip_gradients(grads)


@keras.saving.register_keras_serializable(package="vit_keras")
class SGD(RecipeOptimizerMixin, keras.optimizers.SGD):
    """`keras.optimizers.SGD` whose gradient clipping sees the gradient summed over replicas."""


def _storage_dtype(trace_dtype: str) -> str:
    """bfloat16, except under MultiWorkerMirroredStrategy, whose collective broadcast of new variables has no
    bfloat16 kernel: there the trace is stored in float32 holding the same bfloat16-rounded values (same
    arithmetic, same checkpoints once loaded; only the memory saving is lost)."""
    if trace_dtype != "bfloat16" or keras.backend.backend() != "tensorflow":
        return trace_dtype
    import tensorflow as tf

    strategy = tf.distribute.get_strategy()
    collective = getattr(tf.distribute.experimental, "MultiWorkerMirroredStrategy", ())
    if isinstance(strategy, (tf.distribute.MultiWorkerMirroredStrategy, collective)):
        return "float32"
    return trace_dtype


@keras.saving.register_keras_serializable(package="vit_keras")
class TraceSGD(RecipeOptimizerMixin, OptaxClipMixin, keras.optimizers.Optimizer):
    """SGD with momentum exactly as vit_jax fine-tunes: `optax.sgd(schedule, momentum, accumulator_dtype=bfloat16)`.

    Per update, with `g` the (averaged, clipped) gradient and `lr` the schedule at the update count (0 first):

        trace_new = g + momentum · trace          # in float32; `momentum` rounded to the trace's dtype first
        variable  = variable − lr · trace_new     # the float32 new trace, not the stored one
        trace     = trace_new rounded to `trace_dtype`

    Unlike `keras.optimizers.SGD`, whose buffer accumulates `lr · g` (so a learning rate that changes during warmup
    and decay weighs past gradients differently), the trace holds raw gradients and the current learning rate
    scales the whole trace. With `trace_dtype="bfloat16"` (vit_jax's `accumulator_dtype`) the trace takes half the
    memory and the momentum itself rounds to bfloat16 (0.9 → 0.8984375), as in optax under XLA; `"float32"`
    keeps it exact. The trace is an optimizer variable: saved with the model and restored bit for bit.

    Example:
        >>> import keras
        >>> optimizer = TraceSGD(learning_rate=0.1, momentum=0.9, trace_dtype="float32")
        >>> w = keras.Variable([1.0])
        >>> optimizer.apply([keras.ops.convert_to_tensor([1.0])], [w])
        >>> optimizer.apply([keras.ops.convert_to_tensor([1.0])], [w])
        >>> round(float(w.numpy()[0]), 4)  # 1 − 0.1·1 − 0.1·(1 + 0.9·1)
        0.71
    """

    def __init__(self, learning_rate=0.01, momentum=0.9, trace_dtype="bfloat16", name="trace_sgd", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if not 0 <= momentum < 1:
            raise ValueError(f"TraceSGD: `momentum` must lie in [0, 1), got {momentum}.")
        if trace_dtype not in TRACE_DTYPES:
            raise ValueError(f"TraceSGD: `trace_dtype` must be one of {TRACE_DTYPES}, got {trace_dtype!r}.")
        self.momentum = float(momentum)
        self.trace_dtype = trace_dtype

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._traces = [
            self.add_variable(shape=v.shape, initializer="zeros", dtype=_storage_dtype(self.trace_dtype),
                              name=f"{v.path.replace('/', '_')}_trace", layout=getattr(v, "_layout", None))
            for v in variables
        ]

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        gradient = ops.cast(gradient, dtype)
        trace = self._traces[self._get_variable_index(variable)]
        # optax writes `g + decay * trace` with `decay` a Python float, which becomes a constant of the trace's
        # dtype (0.9 → 0.8984375 in bfloat16); XLA then keeps the product in float32 (its default excess
        # precision) and only the stored trace is rounded. Rounding the product to bfloat16 as well moves the
        # parameters 40-90x further from vit_jax's than this (measured on the parity fixture).
        decay = ops.cast(ops.cast(self.momentum, self.trace_dtype), dtype)
        new_trace = ops.add(gradient, ops.multiply(decay, ops.cast(trace, dtype)))
        self.assign_sub(variable, ops.multiply(ops.cast(learning_rate, dtype), new_trace))
        self.assign(trace, ops.cast(ops.cast(new_trace, self.trace_dtype), trace.dtype))

    def get_config(self):
        config = super().get_config()
        config.update({"momentum": self.momentum, "trace_dtype": self.trace_dtype})
        return config


@keras.saving.register_keras_serializable(package="vit_keras")
class AdamW(RecipeOptimizerMixin, OptaxClipMixin, keras.optimizers.AdamW):
    """AdamW as big_vision pre-trains: optax's `scale_by_adam` with decoupled weight decay on kernels.

    Keras' Adam puts epsilon outside the bias correction (`lr·√(1−β₂ᵗ)/(1−β₁ᵗ) · m / (√v + ε)`, so the effective
    epsilon is `ε/√(1−β₂ᵗ)`, 32× larger at the first step); optax divides each moment by its correction first:

        m = (1−β₁)·g + β₁·m;   v = (1−β₂)·g² + β₂·v
        variable −= lr · (m / (1−β₁ᵗ)) / (√(v / (1−β₂ᵗ)) + ε)

    with ε = 1e-8 (optax's default). Weight decay is Keras' decoupled `variable −= lr · weight_decay · variable`,
    which is big_vision's `wd · schedule_multiplier · variable` with `wd = weight_decay · base learning rate`
    (big_vision's ViT configs pair `lr = 1e-3` with `wd = 1e-4`: `weight_decay = 0.1` here).

    Example:
        >>> AdamW(learning_rate=1e-3, weight_decay=0.1).epsilon
        1e-08
    """

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999, epsilon=1e-8, **kwargs):
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2,
                         epsilon=epsilon, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        learning_rate = ops.cast(learning_rate, dtype)
        gradient = ops.cast(gradient, dtype)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        beta_1, beta_2 = ops.cast(self.beta_1, dtype), ops.cast(self.beta_2, dtype)
        count = ops.cast(self.iterations + 1, dtype)
        new_m = ops.add(ops.multiply(1.0 - beta_1, gradient), ops.multiply(beta_1, m))
        new_v = ops.add(ops.multiply(1.0 - beta_2, ops.square(gradient)), ops.multiply(beta_2, v))
        m_hat = ops.divide(new_m, 1.0 - ops.power(beta_1, count))
        v_hat = ops.divide(new_v, 1.0 - ops.power(beta_2, count))
        self.assign(m, new_m)
        self.assign(v, new_v)
        step = ops.divide(m_hat, ops.add(ops.sqrt(v_hat), ops.cast(self.epsilon, dtype)))
        self.assign_sub(variable, ops.multiply(learning_rate, step))

    def _use_weight_decay(self, variable):
        # big_vision decays the kernels only; the name list stays as a second guard for custom layers. Under
        # TensorFlow the decay sees the backing tf.Variable, named "kernel:0".
        name = variable.name.split(":")[0].rsplit("/", 1)[-1]
        return name == "kernel" and super()._use_weight_decay(variable)


def make_schedule(config) -> WarmupDecay:
    """The learning-rate schedule of `config`, indexed by optimizer updates.

    Example:
        >>> from vit_keras.training import finetune
        >>> make_schedule(finetune(total_steps=1000)).warmup_steps
        500
    """
    return WarmupDecay(config.learning_rate, config.warmup_steps, config.total_steps, config.schedule,
                       config.end_learning_rate)


def make_optimizer(config) -> keras.optimizers.Optimizer:
    """vit_jax's SGD with momentum (fine-tune, `TraceSGD`) or big_vision's AdamW (pre-train), with the recipe's
    clipping and accumulation.

    Keras' `gradient_accumulation_steps` averages the gradients of that many micro-batches (summed, then divided,
    as vit_jax's `accumulate_gradient`), then clips and applies them once; the schedule advances per update (see
    `RecipeOptimizerMixin`), so k micro-batches of b equal one batch of k·b.

    Example:
        >>> from vit_keras.training import finetune
        >>> make_optimizer(finetune(accumulation_steps=8)).gradient_accumulation_steps
        8
    """
    common = {
        "learning_rate": make_schedule(config),
        "global_clipnorm": config.clipnorm,
        "gradient_accumulation_steps": config.accumulation_steps if config.accumulation_steps > 1 else None,
    }
    if config.optimizer == "sgd":
        if config.weight_decay:
            common["weight_decay"] = config.weight_decay
        optimizer = TraceSGD(momentum=config.momentum, trace_dtype=config.trace_dtype, **common)
    else:
        optimizer = AdamW(
            beta_1=config.beta_1, beta_2=config.beta_2, weight_decay=config.weight_decay, **common
        )
    if config.weight_decay:
        optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
    return optimizer
