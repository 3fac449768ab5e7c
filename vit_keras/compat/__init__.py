"""The vit-keras 0.2.0 API (`vit`, `utils`, `visualize`) on today's models, for code written against that package.

`vit_keras.vit`, `vit_keras.utils` and `vit_keras.visualize` are these modules under their earlier names.

Example:
    >>> from vit_keras.compat import vit
    >>> vit.vit_b16 is __import__("vit_keras.vit", fromlist=["vit_b16"]).vit_b16
    True
"""
