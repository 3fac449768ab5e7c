"""`VisionTransformer`: the `keras.Model` class vit_keras's builders return. It carries the `ViTConfig` it was built
from (`vit_config`, through `get_config` / `from_config` and so through `.keras` files), gives the parts the
features, dense heads and text towers build on as attributes (`blocks`, `num_prefix_tokens`, `patch_size`,
`grid_size`), and stays usable when `predict`, `evaluate` and `fit` refuse an input. `config_of(model)` reads the
config back, also from a `.keras` file saved by 0.1.0, whose config sits in its `patch_encoder` layer.

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

from vit_keras.configs import ViTConfig
from vit_keras.layers.transformer import TransformerBlock

# Where files saved by vit_keras 0.1.0 keep the config: the patch encoder layer's `architecture` argument.
LEGACY_CONFIG_LAYER = "patch_encoder"
# vit_jax's module name, which is also the checkpoint key of its parameters.
FINAL_NORM_LAYER = "encoder_norm"

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

    _vit_config = None

    @property
    def vit_config(self) -> ViTConfig | None:
        """The `ViTConfig` this model was built from (None for a functional model built by hand).

        Example:
            >>> import vit_keras
            >>> vit_keras.ViTTi16(image_size=32).vit_config.hidden_size
            192
        """
        if self._vit_config is None:
            legacy = legacy_architecture(self)
            if legacy is not None:
                self._vit_config = ViTConfig.from_dict(legacy)
        return self._vit_config

    @vit_config.setter
    def vit_config(self, config: ViTConfig):
        self._vit_config = config

    @property
    def blocks(self) -> tuple:
        """The encoder's Transformer blocks (`vit_keras.layers.TransformerBlock`), in order: what the features,
        the dense heads and LoRA read, e.g. `model.blocks[-1].output` for the last block's tokens."""
        return tuple(layer for layer in self.layers if isinstance(layer, TransformerBlock))

    @property
    def final_norm_layer(self):
        """The norm over the tokens after the last block (`encoder_norm`), or None: a model that normalises after
        pooling (`fc_norm`) or not at all (`final_norm=False`)."""
        try:
            return self.get_layer(FINAL_NORM_LAYER)
        except ValueError:
            return None

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens in front of the patch tokens (class, distillation and register tokens)."""
        return self._config_or_raise().num_prefix_tokens

    @property
    def patch_size(self) -> int:
        return self._config_or_raise().patch_size

    @property
    def grid_size(self) -> tuple[int, int] | None:
        """The patch grid (rows, columns) of a fixed-size model; None for one that takes any image size."""
        config = self._config_or_raise()
        return None if config.dynamic else config.grid_size

    def _config_or_raise(self) -> ViTConfig:
        if self.vit_config is None:
            raise ValueError(f"{self.name!r} carries no ViTConfig; build it with vit_keras.ViT or "
                             "vit_keras.from_pretrained.")
        return self.vit_config

    def get_config(self):
        config = super().get_config()
        if self._vit_config is not None:
            config["vit_config"] = self._vit_config.to_dict()
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        architecture = config.pop("vit_config", None)
        model = super().from_config(config, custom_objects=custom_objects)
        if architecture is not None:
            model.vit_config = ViTConfig.from_dict(architecture)
        return model

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


def legacy_architecture(model) -> dict | None:
    """The config dict a file saved by vit_keras 0.1.0 keeps in its patch encoder layer, or None."""
    try:
        layer = model.get_layer(LEGACY_CONFIG_LAYER)
    except ValueError:
        return None
    return getattr(layer, "architecture", None)


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


def config_of(model) -> ViTConfig:
    """The `ViTConfig` a vit_keras model was built from (also after `.keras` save and load).

    Example:
        >>> import vit_keras
        >>> config_of(vit_keras.ViTTi16(image_size=32)).hidden_size
        192
    """
    config = model.vit_config if isinstance(model, VisionTransformer) else None
    if config is None:
        architecture = legacy_architecture(model) if isinstance(model, keras.Model) else None
        if architecture is None:
            raise ValueError(f"{getattr(model, 'name', model)!r} is not a vit_keras model (it carries no ViTConfig); "
                             "build it with vit_keras.ViT or vit_keras.from_pretrained.")
        config = ViTConfig.from_dict(architecture)
    return config


def config_among(layers) -> ViTConfig | None:
    """The config of the first vit_keras model (or, for a file saved by 0.1.0, patch encoder) among `layers`, e.g.
    a wrapping model's flattened layers; None if there is none."""
    for layer in layers:
        config = getattr(layer, "vit_config", None) if isinstance(layer, VisionTransformer) else None
        if config is None and layer.name == LEGACY_CONFIG_LAYER:
            architecture = getattr(layer, "architecture", None)
            config = None if architecture is None else ViTConfig.from_dict(architecture)
        if config is not None:
            return config
    return None


# A legacy whole-model .h5 file names the model's class without the package it is registered under; Keras's .h5
# loader looks that bare name up among the custom objects.
keras.saving.get_custom_objects()[VisionTransformer.__name__] = VisionTransformer
