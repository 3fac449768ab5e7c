"""vit-keras 0.2.0's `vit_keras.utils` under its earlier name: the module is `vit_keras.compat.utils`."""

import sys

from vit_keras.compat import utils as _module

sys.modules[__name__] = _module
