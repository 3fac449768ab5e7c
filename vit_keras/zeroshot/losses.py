"""Fine-tuning losses for image-text pairs, on the (batch, batch) `logits_per_image` of matched pairs (image i goes
with text i): CLIP's symmetric softmax cross-entropy and SigLIP's pairwise sigmoid loss. They ignore `y_true`, so
`model.fit(pairs, dummy)` trains a `training_model`.

Example:
    >>> logits = np.array([[5.0, 0.0], [0.0, 5.0]], "float32")
    >>> round(float(contrastive_loss(logits)), 4), round(float(sigmoid_loss(logits)), 4)
    (0.0067, 0.6999)
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.zeroshot.text import ATTENTION_MASK, TOKEN_IDS

IMAGES = "images"


def _pairs(logits):
    logits = ops.convert_to_tensor(logits)
    if len(logits.shape) != 2:
        raise ValueError(f"The image-text losses take (batch, batch) logits of matched pairs, got shape "
                         f"{tuple(logits.shape)}.")
    return logits


def contrastive_rows(logits):
    """Per pair: the mean of the image→text and text→image cross-entropies (CLIP's loss, averaged over the batch)."""
    logits = _pairs(logits)
    labels = ops.arange(ops.shape(logits)[0])
    per_image = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    per_text = keras.losses.sparse_categorical_crossentropy(labels, ops.transpose(logits), from_logits=True)
    return (per_image + per_text) / 2


def sigmoid_rows(logits):
    """Per image: -Σ_j log σ(z_ij · l_ij), z = +1 on matched pairs and -1 elsewhere (SigLIP's loss, whose batch mean
    is the paper's -1/|B| Σ_i Σ_j)."""
    logits = _pairs(logits)
    size = ops.shape(logits)[0]
    signs = 2.0 * ops.eye(size, dtype=logits.dtype) - 1.0
    return -ops.sum(ops.log_sigmoid(signs * logits), axis=-1)


def contrastive_loss(logits):
    """CLIP's symmetric cross-entropy of `logits_per_image` (batch, batch)."""
    return ops.mean(contrastive_rows(logits))


def sigmoid_loss(logits):
    """SigLIP's sigmoid loss of `logits_per_image` (batch, batch), with the logit bias already in the logits."""
    return ops.mean(sigmoid_rows(logits))


@keras.saving.register_keras_serializable(package="vit_keras.zeroshot")
class ContrastiveLoss(keras.losses.Loss):
    """`contrastive_loss` as a Keras loss (`y_true` ignored: the pairs are the labels)."""

    def __init__(self, name="contrastive_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        return contrastive_rows(y_pred)


@keras.saving.register_keras_serializable(package="vit_keras.zeroshot")
class SigmoidLoss(keras.losses.Loss):
    """`sigmoid_loss` as a Keras loss (`y_true` ignored: the pairs are the labels)."""

    def __init__(self, name="sigmoid_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        return sigmoid_rows(y_pred)


def loss_for(model) -> keras.losses.Loss:
    """The loss the model's family was trained with: softmax for CLIP, sigmoid for SigLIP and SigLIP 2."""
    return ContrastiveLoss() if model.probabilities == "softmax" else SigmoidLoss()


def training_model(model) -> keras.Model:
    """A Keras model of a `ZeroShotModel`'s towers and logits: `{"images", "token_ids", "attention_mask"}` → the
    (batch, batch) logits of the batch's pairs. Its weights are the towers' own: fitting it fine-tunes them."""
    images = keras.Input(model.image_model.input.shape[1:], name=IMAGES)
    ids = keras.Input((None,), dtype="int32", name=TOKEN_IDS)
    mask = keras.Input((None,), dtype="int32", name=ATTENTION_MASK)
    text = model.text_model({TOKEN_IDS: ids, ATTENTION_MASK: mask})
    logits = model.logits_layer(model.image_model(images), text)
    return keras.Model({IMAGES: images, TOKEN_IDS: ids, ATTENTION_MASK: mask}, logits, name="image_text_pairs")
