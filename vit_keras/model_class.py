"""`VisionTransformer`: the `keras.Model` class vit_keras's builders return, a functional model whose `predict`,
`evaluate` and `fit` leave it usable when they refuse an input.

On the JAX backend, Keras 3's `predict`, `evaluate` and `fit` take every variable's value out of the model (to hand
the values to the compiled step) before the step is traced, and put them back only when the loop ends. An input
refused while the step is traced (an image of another size, a side not divisible by the patch size, an empty
image) raises in between: upstream Keras leaves the variables without values, so every later call fails with
`TypeError: 'NoneType' object is not callable` whatever its input, and the weights are lost (any Keras model does
this, e.g. `keras.applications.MobileNetV2`). A `VisionTransformer` keeps the values in its variables while the
loop runs, and reattaches the ones the steps that did run computed before the error propagates.
"""

from __future__ import annotations

import contextlib

import keras


@keras.saving.register_keras_serializable(package="vit_keras")
class VisionTransformer(keras.Model):
    """A functional `keras.Model` (`VisionTransformer(inputs, outputs, name=...)`) that stays usable after
    `predict`, `evaluate` or `fit` refuse an input, on every backend.

    It saves to and loads from `.keras` files like any functional model (with `safe_mode=True`, once vit_keras is
    imported, which its layers need anyway).

    Example:
        >>> inputs = keras.Input((4,))
        >>> model = VisionTransformer(inputs, keras.layers.Dense(2)(inputs))
        >>> model.predict(keras.ops.zeros((3, 4)), verbose=0).shape
        (3, 2)
    """

    def __call__(self, *args, **kwargs):
        self._check_flexible_batch(args[0] if args else kwargs.get("inputs"))
        return super().__call__(*args, **kwargs)

    def predict(self, *args, **kwargs):
        self._check_flexible_batch(args[0] if args else kwargs.get("x"))
        with _state_kept(self):
            return super().predict(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        self._check_flexible_batch(args[0] if args else kwargs.get("x"))
        with _state_kept(self):
            return super().evaluate(*args, **kwargs)

    def fit(self, *args, **kwargs):
        self._check_flexible_batch(args[0] if args else kwargs.get("x"))
        with _state_kept(self):
            return super().fit(*args, **kwargs)

    def _check_flexible_batch(self, batch):
        """A flexible (NaFlex) model checks a concrete batch before Keras converts it (a float `grid` would be
        truncated) or traces a step with it (a wrong patch width or batch size would fail deep inside the graph):
        `vit_keras.layers.flexible.check_flexible_batch`."""
        if not isinstance(batch, dict):
            return
        from vit_keras.layers.flexible import FlexiblePatchEncoder, check_flexible_batch

        for layer in self.layers:
            if isinstance(layer, FlexiblePatchEncoder):
                check_flexible_batch(batch, int(layer.embedding.kernel.shape[0]))
                return

    def _purge_model_variables(self, *args, **kwargs):
        """JAX only: upstream frees the variables' values while a loop runs. They are kept, so that a step refused
        while it is traced leaves them in place; the memory this saved was the values' own buffers, which a step
        consumes anyway (Keras donates them to the compiled step)."""


@contextlib.contextmanager
def _state_kept(model):
    """On JAX, reattach the values the steps that ran computed when a `predict`/`evaluate`/`fit` loop raises: the
    variables' own buffers were donated to the first compiled step, and the loop attaches the new ones only at its
    end."""
    try:
        yield
    except BaseException:
        sync = getattr(model, "jax_state_sync", None)  # only the JAX trainer keeps state outside the model
        if sync is not None:
            sync()
        raise


# A legacy whole-model .h5 file names the model's class without the package it is registered under; Keras's .h5
# loader looks that bare name up among the custom objects.
keras.saving.get_custom_objects()[VisionTransformer.__name__] = VisionTransformer
