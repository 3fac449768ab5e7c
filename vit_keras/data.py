"""`vit_keras.data` under its earlier name: the input pipelines are `vit_keras.training.data`."""

import sys

from vit_keras.training import data as _module

sys.modules[__name__] = _module
