"""The peers outside Keras measured in a worker: timm's `VisionTransformer` (eager and under `torch.compile`) and
ONNX Runtime on timm's ONNX export."""

from __future__ import annotations

import os
import sys

from .settings import ARCHITECTURES, CLASSES, REPO
from .timing import Skipped, set_tf32, time_calls


def _import_timm():
    try:
        sys.path.insert(0, REPO)
        from tests.torch_compat import make_torchvision_importable

        make_torchvision_importable()
        import timm
        import torch
    except ImportError as error:
        raise Skipped("timm and torch are not installed (make test installs them)") from error
    return timm, torch


def timm_model(case, device):
    timm, _ = _import_timm()
    arch = ARCHITECTURES[case["architecture"]]
    if case.get("model") == "dinov3":  # timm's own function: its RoPE, registers and LayerScale
        return timm.create_model(
            "vit_base_patch16_dinov3", pretrained=False, img_size=arch["image_size"], patch_size=arch["patch_size"],
            embed_dim=arch["hidden_size"], depth=arch["num_layers"], num_heads=arch["num_heads"],
            mlp_ratio=arch["mlp_dim"] / arch["hidden_size"], num_classes=CLASSES, global_pool="token").to(device)
    return timm.models.vision_transformer.VisionTransformer(
        img_size=arch["image_size"], patch_size=arch["patch_size"], embed_dim=arch["hidden_size"],
        depth=arch["num_layers"], num_heads=arch["num_heads"], mlp_ratio=arch["mlp_dim"] / arch["hidden_size"],
        num_classes=CLASSES, global_pool="token").to(device)


def run_timm(case, min_seconds, min_calls):
    _, torch = _import_timm()
    arch = ARCHITECTURES[case["architecture"]]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train = case["task"] == "training"
    model = timm_model(case, device)
    compiled = case["torch_compile"]
    # PyTorch's counterpart of XLA; on CPU it needs a C++ toolchain.
    forward = torch.compile(model) if compiled else model
    batch, size = case["batch"], arch["image_size"]
    tf32 = set_tf32("torch", case)
    host = case.get("input", "device") == "host"
    # From host: a NumPy batch (pinned memory is an extra step users seldom take) copied over each call.
    host_images = (torch.rand(batch, 3, size, size) * 2 - 1).numpy()
    images = torch.as_tensor(host_images, device=device)
    low_precision = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(case["precision"])

    def autocast():
        return torch.autocast(device_type=device, dtype=low_precision, enabled=low_precision is not None)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    if not train:
        model.eval()

        def step():
            with torch.inference_mode(), autocast():
                forward(torch.as_tensor(host_images, device=device) if host else images)
            sync()
    else:
        labels = torch.randint(0, CLASSES, (batch,), device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        scaler = torch.amp.GradScaler(device, enabled=low_precision is torch.float16)

        def step():
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                inputs = torch.as_tensor(host_images, device=device) if host else images
                loss = torch.nn.functional.cross_entropy(forward(inputs), labels)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            sync()

    result = time_calls(step, batch, min_seconds, min_calls)
    result["compiled"] = compiled
    result["tf32_active"] = tf32
    result["parameters"] = sum(p.numel() for p in model.parameters())
    if device == "cuda":
        result["peak_device_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return result


def run_onnxruntime(case, min_seconds, min_calls):
    """timm's model exported with `torch.onnx.export` and run by an ONNX Runtime `InferenceSession` (float32)."""
    import tempfile

    if case["task"] != "inference" or case["precision"] != "float32":
        raise Skipped("ONNX Runtime is measured for float32 inference only")
    try:
        import onnxruntime
    except ImportError as error:
        raise Skipped("onnxruntime is not installed (pip install onnxruntime==1.31.1 onnx==1.23.2)") from error
    _, torch = _import_timm()
    arch = ARCHITECTURES[case["architecture"]]
    model = timm_model(case, "cpu").eval()

    batch, size = case["batch"], arch["image_size"]
    images = torch.rand(batch, 3, size, size) * 2 - 1
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                 if p in onnxruntime.get_available_providers()]
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "vit.onnx")
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
            # The TorchScript-based exporter, at this case's fixed batch: it needs no onnxscript.
            torch.onnx.export(model, (images,), path, dynamo=False, input_names=["images"],
                              output_names=["logits"])
        session = onnxruntime.InferenceSession(path, providers=providers)
    feed = {"images": images.numpy()}
    logits = session.run(None, feed)[0]
    with torch.inference_mode():
        expected = model(images).numpy()
    result = time_calls(lambda: session.run(None, feed), batch, min_seconds, min_calls)
    result["max_abs_diff_vs_torch"] = float(abs(logits - expected).max())  # the same network, exported intact
    result["parameters"] = sum(p.numel() for p in model.parameters())
    result["providers"] = session.get_providers()
    # ONNX Runtime's CUDA provider computes float32 matmuls in TF32 unless told `use_tf32=0`; its CPU one never.
    result["tf32_active"] = "CUDAExecutionProvider" in result["providers"]
    return result
