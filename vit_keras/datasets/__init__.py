"""tfds builders shipped with vit_keras: importing this package registers them with `tensorflow_datasets`.

Example:
    >>> import vit_keras.datasets  # registers "vit_keras_digits" and "vit_keras_shapes"
    >>> import tensorflow_datasets as tfds
    >>> ds = tfds.load("vit_keras_digits", split="test", as_supervised=True)
    >>> len(ds)
    360
"""

from vit_keras.datasets.digits import DIGITS_NAME, VitKerasDigits
from vit_keras.datasets.shapes import SHAPES_NAME, VitKerasShapes

__all__ = ["DIGITS_NAME", "SHAPES_NAME", "VitKerasDigits", "VitKerasShapes"]
