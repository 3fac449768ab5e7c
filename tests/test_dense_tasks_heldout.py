"""Held-out task cases made here with transformers and `save_pretrained` (random weights, the fixtures' recipe), read
by `vit_keras.dense.from_pretrained` unchanged and compared with transformers' own outputs within the reference
cases' tolerance (tests/task_cases.py): Depth Anything with metric depth, other `out_indices` (the embeddings
included, the last block unread) and `reassemble_factors`, on non-square images of two sizes and at a fixed size;
ViTPose with the classic decoder on a non-square image; ViTPose++ with its experts chosen by dataset_index; EoMT
without registers whose second masked block reuses the first one's masks; a Depth Anything image the patches do
not tile refused. Each (but ViTPose++, folded for one dataset) written back by `save_pretrained` and reloaded by
transformers with no missing or unexpected keys and the same outputs. And the post-processing (segmentation, depth,
keypoints) against the image processors'."""

from __future__ import annotations

import numpy as np
import pytest

from tests import task_cases as cases
from tests.torch_compat import randomise_parameters
from vit_keras import dense

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow  # each builds a transformers model, saves it and loads it: over 1.5 s


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _perturbed(model, seed: int):
    """Every parameter moved by N(0, 0.1), as the fixtures' recipe, and the batch norms' running statistics too
    (variances kept positive), so that a weight read wrongly or left out moves the outputs."""
    randomise_parameters(model, seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.named_buffers():
            if name.endswith(("running_mean", "running_var")):
                tensor.add_(0.1 * torch.randn(tensor.shape, generator=generator))
                if name.endswith("running_var"):
                    tensor.abs_()
    return model


def _reference(model, images: np.ndarray) -> dict:
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(images).permute(0, 3, 1, 2))
    channels_last = {"masks_queries_logits", "heatmaps"}
    return {name: (value.permute(0, 2, 3, 1) if name in channels_last else value).double().numpy()
            for name, value in out.items() if name in ("class_queries_logits", "masks_queries_logits",
                                                       "predicted_depth", "heatmaps")}


def _saved(model, directory) -> str:
    model.save_pretrained(directory, safe_serialization=True)
    return str(directory)


def _saved_back(model, reference, tmp_path):
    """`model` written by `save_pretrained`, reloaded by `reference`'s transformers class: no missing, unexpected or
    mismatched keys."""
    from vit_keras.dense import tasks

    directory = tasks.save_pretrained(model, tmp_path / "saved_back")
    reloaded, info = type(reference).from_pretrained(directory, output_loading_info=True,
                                                     attn_implementation="eager")
    assert not any(info.values()), info
    return reloaded.eval()


def _images(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _heldout_depth(seed: int):
    backbone = transformers.Dinov2Config(hidden_size=24, num_hidden_layers=4, num_attention_heads=3, patch_size=14,
                                         image_size=42, mlp_ratio=2, out_indices=[0, 2, 3],
                                         reshape_hidden_states=False)
    config = transformers.DepthAnythingConfig(backbone_config=backbone, neck_hidden_sizes=[6, 12, 24],
                                              reassemble_factors=[2, 1, 0.5], reassemble_hidden_size=24,
                                              fusion_hidden_size=8, head_hidden_size=4,
                                              depth_estimation_type="metric", max_depth=20)
    return _perturbed(transformers.DepthAnythingForDepthEstimation(config), seed)


def test_heldout_depth_anything_metric_non_square_other_stages(tmp_path):
    # Metric depth (sigmoid x max_depth), stages 0 (the embeddings), 2 and 3 of 4 (block 3 is not computed),
    # reassembled x2 / x1 / x0.5, images of two non-square sizes on a 3x3 stored position grid.
    torch.manual_seed(0)
    reference = _heldout_depth(seed=1)
    model = dense.from_pretrained(_saved(reference, tmp_path / "depth"), include_preprocessing=False)
    for seed, shape in enumerate([(2, 42, 70, 3), (1, 56, 28, 3)]):
        images = _images(shape, seed)
        want = _reference(reference, images)
        errors = cases.relative_errors(model(images), want)
        assert errors["predicted_depth"] <= cases.RELATIVE_TOLERANCE, (shape, errors)
        assert want["predicted_depth"].shape == shape[:3]
    with pytest.raises(ValueError, match="Image height 50 is not divisible by patch_size 14; use 42 or 56"):
        model(np.zeros((1, 50, 56, 3), "float32"))
    images = _images((1, 56, 28, 3), 1)
    errors = cases.relative_errors(model(images), _reference(_saved_back(model, reference, tmp_path), images))
    assert errors["predicted_depth"] <= cases.RELATIVE_TOLERANCE, errors
    fixed = dense.from_pretrained(str(tmp_path / "depth"), include_preprocessing=False, image_size=(42, 70))
    assert fixed.input_shape == (None, 42, 70, 3)
    images = _images((2, 42, 70, 3), 0)
    errors = cases.relative_errors(fixed(images), _reference(reference, images))
    assert errors["predicted_depth"] <= cases.RELATIVE_TOLERANCE, errors


def test_heldout_vitpose_classic_decoder_non_square(tmp_path):
    backbone = transformers.VitPoseBackboneConfig(hidden_size=24, num_hidden_layers=2, num_attention_heads=2,
                                                  mlp_ratio=2, image_size=[48, 32], patch_size=[8, 8],
                                                  out_indices=[2])
    config = transformers.VitPoseConfig(backbone_config=backbone, use_simple_decoder=False, num_labels=3)
    torch.manual_seed(0)
    reference = _perturbed(transformers.VitPoseForPoseEstimation(config), seed=2)
    model = dense.from_pretrained(_saved(reference, tmp_path / "pose"), include_preprocessing=False)
    images = _images((2, 48, 32, 3), 3)
    want = _reference(reference, images)
    assert want["heatmaps"].shape == (2, 24, 16, 3)
    errors = cases.relative_errors(model(images), want)
    assert errors["heatmaps"] <= cases.RELATIVE_TOLERANCE, errors
    errors = cases.relative_errors(model(images), _reference(_saved_back(model, reference, tmp_path), images))
    assert errors["heatmaps"] <= cases.RELATIVE_TOLERANCE, errors


def _heldout_eomt(probs):
    config = transformers.EomtConfig(hidden_size=24, num_hidden_layers=4, num_attention_heads=3, mlp_ratio=2,
                                     patch_size=4, image_size=24, num_register_tokens=0, num_queries=5, num_blocks=3,
                                     num_upscale_blocks=1, num_labels=3)
    torch.manual_seed(0)
    model = _perturbed(transformers.EomtForUniversalSegmentation(config), seed=4)
    model.attn_mask_probs.copy_(torch.tensor(probs))
    return model


def test_heldout_eomt_without_registers_one_block_unmasked(tmp_path):
    # Queries join before block 1 of 4; blocks 1 and 3 compute new masks, block 2 (prob 0) reuses block 1's.
    reference = _heldout_eomt([1.0, 0.0, 1.0])
    model = dense.from_pretrained(_saved(reference, tmp_path / "eomt"), include_preprocessing=False)
    images = _images((2, 24, 24, 3), 5)
    want = _reference(reference, images)
    assert want["masks_queries_logits"].shape == (2, 12, 12, 5)
    errors = cases.relative_errors(model(images), want)
    assert max(errors.values()) <= cases.RELATIVE_TOLERANCE, errors
    errors = cases.relative_errors(model(images), _reference(_saved_back(model, reference, tmp_path), images))
    assert max(errors.values()) <= cases.RELATIVE_TOLERANCE, errors


def test_post_processing_equals_the_processors():
    # On the fixtures' outputs and on random logits (several classes win), computed by both in float64: the same
    # class at every pixel, the same depth to float64 rounding.
    from transformers.models.eomt.modeling_eomt import EomtForUniversalSegmentationOutput

    from vit_keras.dense import tasks

    rng = np.random.default_rng(0)
    random = {"class_queries_logits": 3 * rng.normal(size=(2, 7, 5)),
              "masks_queries_logits": 3 * rng.normal(size=(2, 8, 8, 7))}
    processor = transformers.EomtImageProcessor(size={"shortest_edge": 32, "longest_edge": 32})
    target_sizes = [(45, 37), (20, 64)]
    for outputs in (cases.expected("eomt"), random):
        reference = processor.post_process_semantic_segmentation(EomtForUniversalSegmentationOutput(
            class_queries_logits=torch.tensor(outputs["class_queries_logits"]),
            masks_queries_logits=torch.tensor(outputs["masks_queries_logits"]).permute(0, 3, 1, 2)),
            target_sizes=target_sizes)
        maps = tasks.post_process_semantic_segmentation(outputs, target_sizes, size=(32, 32))
        for want, got in zip(reference, maps):
            np.testing.assert_array_equal(got, want.numpy())
    assert len(np.unique(maps[0])) > 1
    depth = cases.expected("depth_anything")["predicted_depth"]
    reference = transformers.DPTImageProcessor().post_process_depth_estimation(
        transformers.modeling_outputs.DepthEstimatorOutput(predicted_depth=torch.tensor(depth)),
        target_sizes=[(70, 90), (40, 30)])
    for want, got in zip(reference, tasks.post_process_depth_estimation(depth, [(70, 90), (40, 30)])):
        np.testing.assert_allclose(got, want["predicted_depth"].numpy(), rtol=0, atol=1e-12)


def test_pose_post_processing_equals_the_processor():
    # The fixture's heatmaps and random ones, boxes in pixels, and relative boxes with target sizes and a threshold
    # that drops some keypoints: the same keypoints (bit for bit: the same float32 steps), scores, labels and boxes.
    from transformers.models.vitpose.modeling_vitpose import VitPoseEstimatorOutput

    from vit_keras.dense import tasks

    processor = transformers.VitPoseImageProcessor(size={"height": 32, "width": 32})
    random = np.random.default_rng(0).random((2, 16, 16, 5)).astype(np.float32)
    for heatmaps in (cases.expected("vitpose_simple")["heatmaps"].astype(np.float32), random):
        outputs = VitPoseEstimatorOutput(heatmaps=torch.tensor(heatmaps).permute(0, 3, 1, 2))
        threshold = float(np.median(heatmaps.max(axis=(1, 2))))
        for boxes, extra in (([[[10.0, 5.0, 40.0, 60.0]], [[3.0, 4.0, 20.0, 10.0]]], {}),
                             ([[[0.1, 0.2, 0.3, 0.4]], [[0.5, 0.1, 0.2, 0.2]]],
                              dict(target_sizes=[(100, 80), (60, 90)], threshold=threshold))):
            reference = processor.post_process_pose_estimation(outputs, boxes=boxes, **extra)
            found = tasks.post_process_pose_estimation(heatmaps, boxes, size=(32, 32), **extra)
            kept = 0
            for want, got in zip(reference, found):
                for name in ("keypoints", "scores", "labels", "bbox"):
                    np.testing.assert_array_equal(got[0][name], want[0][name].numpy(), err_msg=name)
                kept += len(got[0]["labels"])
            assert (0 < kept < 10) if "threshold" in extra else kept == 10  # 2 persons x 5 keypoints


def test_heldout_vitpose_plus_expert_by_dataset_index(tmp_path):
    # ViTPose++: 3 experts of 8 features each; the model loaded for dataset 1 equals transformers run with
    # dataset_index 1 (and differs from dataset 0's, so the expert chosen matters).
    backbone = transformers.VitPoseBackboneConfig(hidden_size=24, num_hidden_layers=2, num_attention_heads=2,
                                                  mlp_ratio=2, image_size=[32, 24], patch_size=[8, 8],
                                                  out_indices=[2], num_experts=3, part_features=8)
    config = transformers.VitPoseConfig(backbone_config=backbone, num_labels=4)
    torch.manual_seed(0)
    reference = _perturbed(transformers.VitPoseForPoseEstimation(config), seed=6)
    directory = _saved(reference, tmp_path / "pose_plus")
    images = _images((2, 32, 24, 3), 7)
    found = dense.from_pretrained(directory, include_preprocessing=False, dataset_index=1)(images)
    for index, close in ((1, True), (0, False)):
        with torch.no_grad():
            want = reference(pixel_values=torch.from_numpy(images).permute(0, 3, 1, 2),
                             dataset_index=torch.tensor([index, index])).heatmaps.permute(0, 2, 3, 1).numpy()
        error = cases.relative_errors(found, {"heatmaps": want.astype(np.float64)})["heatmaps"]
        assert (error <= cases.RELATIVE_TOLERANCE) == close, (index, error)
