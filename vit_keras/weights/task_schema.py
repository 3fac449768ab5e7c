"""The canonical checkpoint names of the task heads on a ViT (`vit_keras.dense.tasks`): EoMT's queries and mask
heads, Depth Anything's DPT neck and depth head, ViTPose's decoders. They extend `vit_keras.weights.schema`'s list,
in its template form (`{name}` is an index), and the task layers declare the same names for their variables.

Layouts (Keras'): dense kernels `(in, out)`; convolution kernels `(kh, kw, in, out)`; transposed-convolution
kernels `(kh, kw, out, in)` (what `keras.ops.conv_transpose` takes); depthwise kernels `(kh, kw, 1, channels)`;
the queries `(1, Q, D)`; norms `scale`/`bias` (and a batch norm's `mean`/`variance`) vectors.

Example:
    >>> "neck/fusion_{s}/residual_{r}/conv_{c}/kernel" in TASK_NAMES
    True
"""

from __future__ import annotations

_DENSE = ("kernel", "bias")
_NORM = ("scale", "bias")


def _names(prefix: str, params) -> tuple[str, ...]:
    return tuple(f"{prefix}/{param}" for param in params)


TASK_NAMES: tuple[str, ...] = (
    # EoMT: the learned queries, the class and mask heads, the upscaling blocks of the patch map.
    "queries/embedding", *_names("class_head", _DENSE), *_names("mask_head/fc{k}", _DENSE),
    *_names("upscale/block_{u}/deconv", _DENSE), "upscale/block_{u}/dwconv/kernel",
    *_names("upscale/block_{u}/norm", _NORM),
    # Depth Anything: the DPT neck (reassemble, convolutions, fusion) and the depth head.
    *_names("neck/reassemble_{s}/projection", _DENSE), *_names("neck/reassemble_{s}/resize", _DENSE),
    "neck/conv_{s}/kernel", *_names("neck/fusion_{s}/projection", _DENSE),
    *_names("neck/fusion_{s}/residual_{r}/conv_{c}", _DENSE), *_names("depth_head/conv_{c}", _DENSE),
    # ViTPose: the simple decoder's convolution; the classic decoder's transposed convolutions and batch norms.
    *_names("pose_head/conv", _DENSE), "pose_head/deconv_{d}/kernel",
    *_names("pose_head/norm_{d}", (*_NORM, "mean", "variance")),
)
