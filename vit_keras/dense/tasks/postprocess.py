"""The published image processors' post-processing of the task models' outputs, in NumPy on the channels-last
outputs of `vit_keras.dense.from_pretrained` models: EoMT's semantic segmentation maps
(`EomtImageProcessor.post_process_semantic_segmentation`) and depth resized to the images
(`DPTImageProcessor.post_process_depth_estimation`, which Depth Anything uses).

The resizes are torch's `F.interpolate` (bilinear, or bicubic with a = -0.75; half-pixel, no antialias) as one
`(out, in)` matrix per axis (`vit_keras.layers.interpolation`), in float64.

Example:
    >>> depth = np.ones((1, 14, 14), "float32")
    >>> [d.shape for d in post_process_depth_estimation(depth, target_sizes=[(20, 30)])]
    [(20, 30)]
"""

from __future__ import annotations

import numpy as np

from vit_keras.layers.interpolation import numpy_interpolation_matrix

# torch's F.interpolate modes -> the interpolation module's: bilinear (align_corners=False) is its half-pixel
# "bilinear_crop" at the full size, bicubic its "bicubic".
_MODES = {"bilinear": "bilinear_crop", "bicubic": "bicubic"}


def _resize(maps: np.ndarray, size, mode: str) -> np.ndarray:
    """`maps` (H, W, ...) resized to `size` (h, w) as torch's `F.interpolate(mode=mode, align_corners=False)`."""
    (in_h, in_w), (out_h, out_w) = maps.shape[:2], (int(size[0]), int(size[1]))
    square = {"square_size": None}
    rows = numpy_interpolation_matrix(_MODES[mode], in_h, out_h, **(square if mode == "bicubic" else
                                                                    {"square_size": out_h}))
    cols = numpy_interpolation_matrix(_MODES[mode], in_w, out_w, **(square if mode == "bicubic" else
                                                                    {"square_size": out_w}))
    return np.einsum("hi,ij...,wj->hw...", rows, np.asarray(maps, np.float64), cols)


def _target_sizes(target_sizes, batch: int, what: str) -> list:
    if target_sizes is None:
        return [None] * batch
    target_sizes = list(target_sizes)
    if len(target_sizes) != batch:
        raise ValueError(f"target_sizes has {len(target_sizes)} sizes for a batch of {batch} {what}; give one "
                         "(height, width) per image.")
    for size in target_sizes:
        if len(size) != 2 or not all(int(side) == side and side > 0 for side in size):
            raise ValueError(f"target size {size!r} is not a (height, width) pair of positive integers.")
    return target_sizes


def post_process_depth_estimation(predicted_depth, target_sizes=None) -> list[np.ndarray]:
    """Each depth map `(B, H, W)` resized bicubic to its image's (height, width) in `target_sizes` (None: as it
    is), as `DPTImageProcessor.post_process_depth_estimation`.

    Example:
        >>> post_process_depth_estimation(np.zeros((2, 14, 14)), [(28, 28), (7, 14)])[1].shape
        (7, 14)
    """
    predicted_depth = np.asarray(predicted_depth)
    if predicted_depth.ndim != 3:
        raise ValueError(f"predicted_depth must be (batch, height, width), got shape {predicted_depth.shape}.")
    return [depth.astype(np.float64) if size is None else _resize(depth, size, "bicubic")
            for depth, size in zip(predicted_depth, _target_sizes(target_sizes, len(predicted_depth), "maps"))]


def _softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def post_process_semantic_segmentation(outputs: dict, target_sizes, *, size) -> list[np.ndarray]:
    """EoMT's semantic maps, as `EomtImageProcessor.post_process_semantic_segmentation` (whole images, not
    patches): the mask logits `(B, h, w, Q)` resized bilinear to `size` (the (height, width) the images were
    given to the model at), each pixel's class scores `sum_q softmax(class logits)[q, c] · sigmoid(mask)[q]` (the
    no-object class left out), resized bilinear to the image's `target_sizes` entry, and their argmax: one
    `(height, width)` map of class ids per image.

    Example:
        >>> outputs = {"class_queries_logits": np.zeros((1, 2, 4)), "masks_queries_logits": np.zeros((1, 4, 4, 2))}
        >>> post_process_semantic_segmentation(outputs, [(6, 5)], size=(8, 8))[0].shape
        (6, 5)
    """
    masks = np.asarray(outputs["masks_queries_logits"], np.float64)
    classes = np.asarray(outputs["class_queries_logits"], np.float64)
    if masks.ndim != 4 or classes.ndim != 3 or masks.shape[0] != classes.shape[0] or masks.shape[3] != classes.shape[1]:
        raise ValueError(f"masks_queries_logits (B, h, w, Q) {masks.shape} and class_queries_logits (B, Q, C+1) "
                         f"{classes.shape} do not describe one batch of queries.")
    class_probabilities = _softmax(classes)[..., :-1]
    maps = []
    for mask, probabilities, target in zip(masks, class_probabilities,
                                           _target_sizes(target_sizes, len(masks), "images")):
        mask_probabilities = 1.0 / (1.0 + np.exp(-_resize(mask, size, "bilinear")))
        scores = np.einsum("qc,hwq->hwc", probabilities, mask_probabilities)
        maps.append((scores if target is None else _resize(scores, target, "bilinear")).argmax(axis=-1))
    return maps
