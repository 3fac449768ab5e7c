"""vit-keras 0.2.0's `vit_keras.visualize` under its earlier name: the module is `vit_keras.compat.visualize`."""

import sys

from vit_keras.compat import visualize as _module

sys.modules[__name__] = _module
