"""The published image processors' post-processing of the task models' outputs, in NumPy on the channels-last
outputs of `vit_keras.dense.from_pretrained` models: EoMT's semantic segmentation maps
(`EomtImageProcessor.post_process_semantic_segmentation`), depth resized to the images
(`DPTImageProcessor.post_process_depth_estimation`, which Depth Anything uses) and ViTPose's keypoints in the image
for each person box (`VitPoseImageProcessor.post_process_pose_estimation`).

The resizes are torch's `F.interpolate` (bilinear, or bicubic with a = -0.75; half-pixel, no antialias) as one
`(out, in)` matrix per axis (`vit_keras.layers.interpolation`), in float64.

Example:
    >>> depth = np.ones((1, 14, 14), "float32")
    >>> [d.shape for d in post_process_depth_estimation(depth, target_sizes=[(20, 30)])]
    [(20, 30)]
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import gaussian_filter

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


# ViTPose's box encoding (mmpose's): a box of width w is w / 200 "scale" units, padded by 25 %.
_POSE_SCALE_UNIT = 200.0
_POSE_BOX_PADDING = 1.25
_DARK_SIGMA = 0.8  # the DARK refinement's Gaussian (its radius is kernel_size // 2)


def _center_and_scale(box, width: int, height: int):
    """A COCO box (x, y, w, h) as its centre and its scale, widened to the model's aspect ratio and padded."""
    x, y, w, h = box[:4]
    aspect = width / height
    center = np.array([x + w * 0.5, y + h * 0.5], np.float32)
    if w > aspect * h:
        h = w * 1.0 / aspect
    elif w < aspect * h:
        w = h * aspect
    return center, np.array([w / _POSE_SCALE_UNIT, h / _POSE_SCALE_UNIT], np.float32) * _POSE_BOX_PADDING


def _dark_refined(coords, heatmaps, kernel: int):
    """DARK (Zhang et al. 2020): each peak moved by one Newton step on the log of the smoothed heatmap."""
    batch, keypoints, height, width = heatmaps.shape
    radius = int((kernel - 1) // 2)
    smooth = np.array([[gaussian_filter(heatmap, sigma=_DARK_SIGMA, radius=(radius, radius), axes=(0, 1))
                        for heatmap in maps] for maps in heatmaps])
    padded = np.pad(np.log(np.clip(smooth, 0.001, 50)), ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge").flatten()
    index = coords[..., 0] + 1 + (coords[..., 1] + 1) * (width + 2)
    index += (width + 2) * (height + 2) * np.arange(0, batch * keypoints).reshape(-1, keypoints)
    index = index.astype(int).reshape(-1, 1)
    at = {name: padded[index + offset] for name, offset in (
        ("i", 0), ("x1", 1), ("y1", width + 2), ("x1y1", width + 3), ("x1_y1_", -width - 3), ("x1_", -1),
        ("y1_", -2 - width))}
    dx, dy = 0.5 * (at["x1"] - at["x1_"]), 0.5 * (at["y1"] - at["y1_"])
    derivative = np.concatenate([dx, dy], axis=1).reshape(batch, keypoints, 2, 1)
    dxx = at["x1"] - 2 * at["i"] + at["x1_"]
    dyy = at["y1"] - 2 * at["i"] + at["y1_"]
    dxy = 0.5 * (at["x1y1"] - at["x1"] - at["y1"] + at["i"] + at["i"] - at["x1_"] - at["y1_"] + at["x1_y1_"])
    hessian = np.concatenate([dxx, dxy, dxy, dyy], axis=1).reshape(batch, keypoints, 2, 2)
    hessian = np.linalg.inv(hessian + np.finfo(np.float32).eps * np.eye(2))
    coords -= np.einsum("ijmn,ijnk->ijmk", hessian, derivative).squeeze()  # kept float32, as the processor's
    return coords


def post_process_pose_estimation(heatmaps, boxes, *, size, target_sizes=None, kernel_size: int = 11,
                                 threshold: float | None = None) -> list[list[dict]]:
    """Keypoints in the image from ViTPose's heatmaps `(N, h, w, K)`, one heatmap set per person box, as
    `VitPoseImageProcessor.post_process_pose_estimation`: each heatmap's peak, refined by DARK (a Gaussian of
    `kernel_size`), mapped back through the box the person crop was cut from.

    `boxes`: per image, its persons' COCO boxes `(x, y, width, height)` in pixels (N boxes in all, in order);
    `size`: the model's input (height, width); `target_sizes`: per image the pair the processor scales relative
    boxes by, read as it reads it (`(width, height)`); `threshold`: keep the keypoints scoring above it. Returns per
    image, per person, a dict of `keypoints` (K, 2) as (x, y), `scores` (K,), `labels` (K,) and `bbox` (x1, y1, x2,
    y2) as the processor gives it (its box centre and scale, read as a COCO box).

    Example:
        >>> heatmaps = np.zeros((1, 16, 12, 2), "float32"); heatmaps[0, 8, 6, 0] = 1.0
        >>> result = post_process_pose_estimation(heatmaps, [[[10.0, 20.0, 30.0, 40.0]]], size=(64, 48))
        >>> result[0][0]["keypoints"].shape, result[0][0]["scores"].tolist()
        ((2, 2), [1.0, 0.0])
    """
    heatmaps = np.ascontiguousarray(np.asarray(heatmaps, np.float32).transpose(0, 3, 1, 2))
    batch, keypoints, height, width = heatmaps.shape
    flat = [np.asarray(box, np.float64) for image_boxes in boxes for box in image_boxes]
    if len(flat) != batch:
        raise ValueError(f"boxes hold {len(flat)} person boxes but the heatmaps are for {batch} persons; give one box "
                         "per heatmap set, in the order the crops were made.")
    if target_sizes is not None and len(target_sizes) != batch:
        raise ValueError("Give one target size per person box, as the processor reads them.")
    centers, scales = np.zeros((batch, 2), np.float32), np.zeros((batch, 2), np.float32)
    for i, box in enumerate(flat):
        if target_sizes is not None:
            box = box * np.array([target_sizes[i][0], target_sizes[i][1]] * 2)
        centers[i], scales[i] = _center_and_scale(box, width=size[1], height=size[0])
    peaks = heatmaps.reshape(batch, keypoints, -1)
    index = peaks.argmax(axis=2).reshape(batch, keypoints, 1)
    scores = peaks.max(axis=2).reshape(batch, keypoints, 1)
    coords = np.tile(index, (1, 1, 2)).astype(np.float32)
    coords[:, :, 0], coords[:, :, 1] = coords[:, :, 0] % width, coords[:, :, 1] // width
    coords = _dark_refined(np.where(np.tile(scores, (1, 1, 2)) > 0.0, coords, -1), heatmaps, kernel_size)
    results, person = [], 0
    for image_boxes in boxes:
        image_results = []
        for _ in image_boxes:
            # The heatmap grid's corners are the padded box's, in float32 as the processor computes them.
            scale, center = scales[person] * _POSE_SCALE_UNIT, centers[person]
            points = np.ones_like(coords[person])
            points[:, 0] = coords[person][:, 0] * (scale[0] / (width - 1.0)) + center[0] - scale[0] * 0.5
            points[:, 1] = coords[person][:, 1] * (scale[1] / (height - 1.0)) + center[1] - scale[1] * 0.5
            score, labels = scores[person].reshape(-1), np.arange(keypoints)
            if threshold is not None:
                keep = score > threshold
                points, score, labels = points[keep], score[keep], labels[keep]
            # The processor's `bbox`: its (centre, scale) pair read as a COCO box, (x, y, x + w - 1, y + h - 1).
            bbox = np.concatenate([centers[person], centers[person] + scales[person] - 1])
            image_results.append({"keypoints": points, "scores": score, "labels": labels, "bbox": bbox})
            person += 1
        results.append(image_results)
    return results
