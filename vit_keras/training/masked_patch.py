"""`MaskedPatchModel`: a ViT encoder trained to predict its corrupted patches (paper §4.6, App. B.1.2).

The model runs the encoder's own layers — preprocessing, `Patches`, `PatchEncoder`, the Transformer blocks and the
final LayerNorm — with `PatchCorruption` between the patches and their embedding and `MaskEmbedding` after it, then
a linear head on each patch's output token. The loss (cross-entropy over 512 colour classes, or L2 for pixels)
and the `colour_accuracy` metric count only corrupted patches. `model.encoder` is the plain ViT, ready for
`transfer_weights` into a classifier.

Example:
    >>> import vit_keras
    >>> encoder = vit_keras.ViT(image_size=8, patch_size=2, hidden_size=48, num_layers=2, num_heads=3,
    ...                         mlp_dim=96, include_top=False)
    >>> model = MaskedPatchModel(encoder, target="mean_colour", seed=0)
    >>> model.compile(optimizer="adam")
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from vit_keras.layers.masked_patch import (
    CLEAN,
    COLOUR_CLASSES,
    MASKED,
    MaskedPatchTargets,
    MaskEmbedding,
    PatchCorruption,
    class_colours,
    target_shape,
)

# The encoder's layers the corruption is inserted around (the names the weight loaders rely on too).
PATCHES_LAYER, ENCODER_LAYER, FINAL_NORM_LAYER = "patches", "patch_encoder", "encoder_norm"


def _encoder_chain(encoder):
    """The encoder's layers in order, checked to form one chain ending at the final LayerNorm."""
    layers = [layer for layer in encoder.layers if not isinstance(layer, keras.layers.InputLayer)]
    names = [layer.name for layer in layers]
    if "resnet" in names:
        raise ValueError("Masked patch prediction predicts pixels of image patches; a hybrid's patches are ResNet "
                         "features. Use a plain ViT encoder (resnet=None).")
    for needed in (PATCHES_LAYER, ENCODER_LAYER, FINAL_NORM_LAYER):
        if needed not in names:
            raise ValueError(
                f"The encoder {encoder.name!r} has no layer {needed!r}: pass a vit_keras.ViT (include_top=False, "
                "pooling=None is the lightest)."
            )
    if not encoder.get_layer(PATCHES_LAYER).flatten:
        raise ValueError("Masked patch prediction corrupts a fixed number of patches; build the encoder with a fixed "
                         "image_size (not image_size=None).")
    end = names.index(FINAL_NORM_LAYER)
    for previous, layer in zip(layers[: end], layers[1: end + 1]):
        inbound = {node_layer.name for node in layer._inbound_nodes for node_layer in
                   (history.operation for history in (t._keras_history for t in node.input_tensors))}
        if inbound != {previous.name}:
            raise ValueError(f"The encoder is not a chain of layers at {layer.name!r}: pass a vit_keras.ViT.")
    return layers[: end + 1]


@keras.saving.register_keras_serializable(package="vit_keras")
class MaskedPatchModel(keras.Model):
    """Masked patch prediction around a ViT `encoder` (any `vit_keras.ViT` without a ResNet stem; its head and
    pooling, if any, are not used).

    Args:
        encoder: the ViT to pre-train; `model.encoder` holds it (weights shared).
        target: `"mean_colour"` (the paper's: 3-bit mean colour, 512 classes), `"downsized_colour"` (the patch
            pooled to `target_grid`² cells, each a 3-bit colour) or `"pixels"` (L2 regression of the patch).
        corruption_rate, mask_rate, random_rate: the corruption (`PatchCorruption`; the paper's 0.5, 0.8, 0.1).
        target_grid: cells per side of `"downsized_colour"` (the paper's 4); must divide the patch size.
        seed: seeds the corruption's generator.

    `call(images)` returns `{"predictions", "roles", "targets"}`: per-patch logits `(batch, N, 512)` /
    `(batch, N, grid², 512)` or pixels `(batch, N, P·P·C)`, the corruption roles `(batch, N)` (0 = clean) and the
    targets. `compile(optimizer=...)` needs no loss: the model has its own.

    Example:
        >>> model = MaskedPatchModel(vit_keras.ViT(image_size=8, patch_size=2, hidden_size=48, num_layers=2,
        ...                                        num_heads=3, mlp_dim=96, include_top=False))
        >>> model.compile(optimizer="adam")  # no loss: the model has its own; then model.fit(images, ...)
        >>> outputs = model(np.random.default_rng(0).uniform(0, 255, (2, 8, 8, 3)).astype("float32"))
        >>> outputs["predictions"].shape, outputs["roles"].shape  # 16 patches, 512 colour classes each
        (TensorShape([2, 16, 512]), TensorShape([2, 16]))
    """

    def __init__(self, encoder, target: str = "mean_colour", corruption_rate: float = 0.5, mask_rate: float = 0.8,
                 random_rate: float = 0.1, target_grid: int = 4, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self._chain = _encoder_chain(encoder)
        names = [layer.name for layer in self._chain]
        self._patch_index, self._encoder_index = names.index(PATCHES_LAYER), names.index(ENCODER_LAYER)
        patches = self._chain[self._patch_index]
        patch_encoder = self._chain[self._encoder_index]
        self.patch_size = int(patches.patch_size)
        self.num_prefix_tokens = int(patch_encoder.num_prefix_tokens)
        self.channels = int(encoder.input_shape[-1])
        self.target = target
        self.target_grid = int(target_grid)
        self.seed = seed
        self.prediction_shape = target_shape(target, self.patch_size, self.target_grid, self.channels)

        # Targets are computed from the images as given; map them back to [0, 255] like the encoder's Rescaling.
        rescaling = [layer for layer in self._chain[: self._patch_index] if isinstance(layer, keras.layers.Rescaling)]
        if rescaling:
            scale, offset = 1.0, 0.0  # the encoder takes [0, 255]
        else:
            scale, offset = 1.0 / 127.5, -1.0  # the encoder takes [-1, 1]
        self.corruption = PatchCorruption(corruption_rate, mask_rate, random_rate, seed=seed, name="corruption")
        self.mask_embedding = MaskEmbedding(name="mask_embedding")
        self.targets = MaskedPatchTargets(target, self.patch_size, self.target_grid, scale, offset, name="targets")
        self.head = keras.layers.Dense(int(np.prod(self.prediction_shape)), dtype="float32",
                                       name="masked_patch_head")
        self.colour_accuracy = keras.metrics.Mean(name="colour_accuracy")

    def call(self, images, training=None):
        x = images
        for index, layer in enumerate(self._chain):
            if index == self._patch_index:
                x = layer(x)
                x, roles = self.corruption(x, training=training)
            elif index == self._encoder_index:
                x = layer(x, training=training)
                x = self.mask_embedding([x, roles])
            else:
                x = layer(x, training=training) if _takes_training(layer) else layer(x)
        tokens = x[:, self.num_prefix_tokens:]
        predictions = self.head(tokens)
        predictions = ops.reshape(predictions, (-1, tokens.shape[1], *self.prediction_shape))
        return {"predictions": predictions, "roles": roles, "targets": self.targets(images)}

    def _per_patch(self, outputs):
        """(loss per patch, correct colour per patch, corrupted-patch weights), each (batch, N)."""
        predictions, targets = outputs["predictions"], outputs["targets"]
        weights = ops.cast(ops.not_equal(outputs["roles"], CLEAN), "float32")
        if self.target == "pixels":
            loss = ops.mean(ops.square(predictions - targets), axis=-1)
            predicted = _mean_colour_of_pixels(predictions, self.patch_size, self.channels)
            actual = _mean_colour_of_pixels(targets, self.patch_size, self.channels)
            correct = ops.cast(ops.equal(predicted, actual), "float32")
            return loss, correct, weights
        loss = keras.losses.sparse_categorical_crossentropy(targets, predictions, from_logits=True)
        correct = ops.cast(ops.equal(ops.argmax(predictions, axis=-1), ops.cast(targets, "int32")), "float32")
        if self.target == "downsized_colour":
            loss, correct = ops.mean(loss, axis=-1), ops.mean(correct, axis=-1)
        return loss, correct, weights

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Mean loss over the corrupted patches of the batch (clean patches weigh nothing)."""
        loss, _, weights = self._per_patch(y_pred)
        total = ops.sum(loss * weights) / ops.maximum(ops.sum(weights), 1.0)
        for extra in self.losses:
            total = total + ops.cast(extra, total.dtype)
        return _scale_for_replicas(total)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        _, correct, weights = self._per_patch(y_pred)
        self.colour_accuracy.update_state(correct, sample_weight=weights)
        return self.get_metrics_result()

    def predict_images(self, images):
        """Run the model once on `images` (numpy, as the encoder takes them) and return numpy arrays for a figure:
        `(corrupted, predicted, roles)`: the corrupted input with masked patches shown black, the input with each
        corrupted patch replaced by the prediction (class colours, or the predicted pixels), both RGB [0, 255],
        and the roles `(batch, gh, gw)`.

        Example:
            >>> model = MaskedPatchModel(vit_keras.ViT(image_size=8, patch_size=2, hidden_size=48, num_layers=2,
            ...                                        num_heads=3, mlp_dim=96, include_top=False))
            >>> images = np.random.default_rng(0).uniform(0, 255, (16, 8, 8, 3)).astype("float32")
            >>> corrupted, predicted, roles = model.predict_images(images[:8])
            >>> corrupted.shape, predicted.shape, roles.shape
            ((8, 8, 8, 3), (8, 8, 8, 3), (8, 4, 4))
        """
        images = np.asarray(images, np.float32)
        outputs = self(images, training=False)
        roles = np.asarray(ops.convert_to_numpy(outputs["roles"]))
        predictions = np.asarray(ops.convert_to_numpy(outputs["predictions"]), np.float32)
        pixels = self._as_pixels(images)
        batch, height, width, channels = pixels.shape
        p = self.patch_size
        gh, gw = height // p, width // p
        patches = pixels.reshape(batch, gh, p, gw, p, channels).transpose(0, 1, 3, 2, 4, 5).reshape(batch, gh * gw,
                                                                                                   p, p, channels)
        corrupted_patches = self._corrupted_pixels(patches, roles)
        if self.target == "mean_colour":
            colours = np.asarray(ops.convert_to_numpy(class_colours(predictions.argmax(-1))))
            guessed = np.broadcast_to(colours[:, :, None, None, :], patches.shape)
        elif self.target == "downsized_colour":
            grid, cell = self.target_grid, p // self.target_grid
            colours = np.asarray(ops.convert_to_numpy(class_colours(predictions.argmax(-1))))
            colours = colours.reshape(batch, gh * gw, grid, grid, channels)
            guessed = np.repeat(np.repeat(colours, cell, axis=2), cell, axis=3)
        else:
            guessed = np.clip((predictions.reshape(patches.shape) + 1.0) * 127.5, 0, 255)
        predicted = np.where((roles != CLEAN)[:, :, None, None, None], guessed, patches)

        def as_image(grid_patches):
            return grid_patches.reshape(batch, gh, gw, p, p, channels).transpose(0, 1, 3, 2, 4, 5).reshape(
                batch, height, width, channels)

        return as_image(corrupted_patches), as_image(predicted), roles.reshape(batch, gh, gw)

    def _as_pixels(self, images):
        return np.asarray(ops.convert_to_numpy(
            (ops.cast(images, "float32") - self.targets.input_offset) / self.targets.input_scale), np.float32)

    def _corrupted_pixels(self, patches, roles):
        # What the encoder saw, in pixels: masked patches are zeros in [-1, 1], i.e. mid grey; drawn black here so
        # they stand out. Replaced patches are not recoverable from the roles alone: shown as they were, outlined by
        # the figure.
        shown = patches.copy()
        shown[roles == MASKED] = 0.0
        return shown

    def get_config(self):
        return {
            **super().get_config(),
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "target": self.target,
            "corruption_rate": self.corruption.corruption_rate,
            "mask_rate": self.corruption.mask_rate,
            "random_rate": self.corruption.random_rate,
            "target_grid": self.target_grid,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def _takes_training(layer) -> bool:
    import inspect

    return "training" in inspect.signature(layer.call).parameters


def _mean_colour_of_pixels(values, patch_size, channels):
    from vit_keras.layers.masked_patch import mean_colour_target

    pixels = (ops.clip(values, -1.0, 1.0) + 1.0) * 127.5
    return mean_colour_target(pixels, patch_size, channels)


def _scale_for_replicas(loss):
    # Each replica's gradient is summed over replicas: scale its loss so that the sum is the mean (as Keras' own
    # losses do under tf.distribute).
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas > 1:
            loss = loss / replicas
    return loss


__all__ = ["COLOUR_CLASSES", "MaskedPatchModel"]
