"""vit-keras 0.2.0's `vit_keras.vit` under its earlier name: the module is `vit_keras.compat.vit`."""

import sys

from vit_keras.compat import vit as _module

sys.modules[__name__] = _module
