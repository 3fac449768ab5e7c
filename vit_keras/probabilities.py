"""Logits to probabilities, one table for every head that scores: a softmax over the last axis where the classes
exclude each other (a single-label classifier, CLIP's image-text scores), a sigmoid per logit where each stands on
its own (a multi-label classifier, SigLIP's image-text pairs).

Example:
    >>> import numpy as np
    >>> logits = np.array([[0.0, 0.0]], "float32")
    >>> [keras.ops.convert_to_numpy(probabilities(logits, kind)).tolist() for kind in ACTIVATIONS]
    [[[0.5, 0.5]], [[0.5, 0.5]]]
"""

from __future__ import annotations

import keras

# Each activation by its name, as a function of the ops namespace that computes it and the logits.
ACTIVATIONS = {
    "softmax": lambda ops, logits: ops.softmax(logits, axis=-1),
    "sigmoid": lambda ops, logits: ops.sigmoid(logits),
}


def activation_for(multi_label: bool) -> str:
    """The activation of a classifier's logits: one sigmoid per class where an image may carry several labels,
    else a softmax over the classes.

    Example:
        >>> activation_for(multi_label=True)
        'sigmoid'
    """
    return "sigmoid" if multi_label else "softmax"


def probabilities(logits, activation: str, ops=keras.ops):
    """`logits` (classes on the last axis) as probabilities by `activation`, a name of `ACTIVATIONS`, computed with
    `ops`: `keras.ops` (any backend's tensors or NumPy arrays), or `tf.nn` inside a TensorFlow graph.

    Example:
        >>> import numpy as np
        >>> p = probabilities(np.array([[2.0, 0.0]], "float32"), "softmax")
        >>> [round(float(value), 4) for value in keras.ops.convert_to_numpy(p)[0]]
        [0.8808, 0.1192]
        >>> probabilities(np.zeros(2), "relu")
        Traceback (most recent call last):
        ValueError: Unknown activation 'relu' for turning logits into probabilities; use one of softmax, sigmoid.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"Unknown activation {activation!r} for turning logits into probabilities; use one of "
                         f"{', '.join(ACTIVATIONS)}.")
    return ACTIVATIONS[activation](ops, logits)
