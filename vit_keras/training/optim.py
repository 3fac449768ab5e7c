"""Learning-rate schedules and optimizers of the recipes, built from a `TrainConfig`."""

from __future__ import annotations

import math

import keras
from keras import ops

# Biases, norm parameters, the class token and position embeddings carry no weight decay (big_vision decays
# kernels only); matched as substrings of the variable names.
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
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        clipping = self.global_clipnorm or self.clipnorm or self.clipvalue
        if not clipping or context is None or context.num_replicas_in_sync == 1:
            return super()._clip_gradients(grads)
        replicas = context.num_replicas_in_sync
        summed = context.all_reduce("SUM", list(grads))
        return [g / replicas for g in super()._clip_gradients(summed)]

    def _backend_apply_gradients(self, grads, trainable_variables):
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
        # Keras' plain clip: `summed` already is the global gradient, the mixin's own all-reduce would double it.
        update_grads = keras.optimizers.Optimizer._clip_gradients(self, [t / steps for t in totals])
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


@keras.saving.register_keras_serializable(package="vit_keras")
class SGD(RecipeOptimizerMixin, keras.optimizers.SGD):
    """`keras.optimizers.SGD` whose gradient clipping sees the gradient summed over replicas."""


@keras.saving.register_keras_serializable(package="vit_keras")
class AdamW(RecipeOptimizerMixin, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` whose gradient clipping sees the gradient summed over replicas."""


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
    """SGD with momentum (fine-tune) or AdamW (pre-train), with the recipe's clipping and accumulation.

    Keras' `gradient_accumulation_steps` averages the gradients of that many micro-batches, then clips and
    applies them once; the schedule advances per update (see `RecipeOptimizerMixin`), so k micro-batches of b
    equal one batch of k·b.

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
        optimizer = SGD(momentum=config.momentum, **common)
    else:
        optimizer = AdamW(
            beta_1=config.beta_1, beta_2=config.beta_2, weight_decay=config.weight_decay, **common
        )
    if config.weight_decay:
        optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
    return optimizer
