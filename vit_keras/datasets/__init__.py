"""tfds builders shipped with vit_keras: importing this package registers them with `tensorflow_datasets`.

Example:
    >>> import vit_keras.datasets  # registers "vit_keras_digits"
    >>> import tensorflow_datasets as tfds
    >>> ds = tfds.load("vit_keras_digits", split="test", as_supervised=True)
    >>> len(ds)
    360
"""

from vit_keras.datasets.digits import DIGITS_NAME, VitKerasDigits

__all__ = ["DIGITS_NAME", "VitKerasDigits"]
