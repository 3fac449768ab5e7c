"""`Split`: one split of a dataset and what the model needs to know about it — what every source (a tfds name, a
`tf.data.Dataset`, a folder or file of your own images) is loaded into. It sits below `data` and `local_data`, which
both make it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Split:
    """One split of a dataset: `(image, label)` examples plus what the model needs to know about them.

    Example:
        >>> Split(dataset=None, num_classes=10, num_examples=100, name="digits[train]").num_classes
        10
    """

    dataset: object  # tf.data.Dataset of (image uint8/float (H, W, C), int label or multi-hot float32 labels)
    num_classes: int | None
    num_examples: int | None
    name: str
    class_names: tuple | None = None  # your own images (`local_data`): the names of the classes, in label order
    multi_label: bool = False  # labels are multi-hot vectors of `num_classes` (sigmoid outputs, mAP)
