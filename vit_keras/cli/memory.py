"""Keep the resident memory of a long `vit-keras predict` run flat, on any number of cores.

glibc's `malloc` serves blocks above its mmap threshold (128 KiB) with their own mappings, returned to the system
when freed, but by default it raises that threshold to the size of each such block freed (up to 32 MiB). After the
first batch, a batch's image array and activations (a 32-image batch at 224 px is 19 MB) are therefore carved from
the heaps instead, one heap ("arena") per thread that allocates, and a freed block stays resident there until the
heap's top is free. TensorFlow's thread pools have one thread per core, so this retained memory grows with the
core count and with which thread happened to run which op. Fixing the threshold (which also turns off its
adjustment) maps every large block and unmaps it when it is freed.
"""

from __future__ import annotations

import ctypes
import os
import platform

M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 128 * 1024  # glibc's default starting value


def map_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Have glibc's `malloc` map each block of `threshold` bytes or more on its own and unmap it when freed, for
    the rest of the process; `True` when done, `False` where the C library is not glibc or the user set
    `MALLOC_MMAP_THRESHOLD_` (their setting stays).

    Example:
        >>> map_large_blocks() in (True, False)
        True
    """
    if platform.libc_ver()[0] != "glibc" or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))
