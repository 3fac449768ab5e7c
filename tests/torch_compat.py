"""torch helpers for the parity tests and scripts/benchmark.py: timm importable beside the CPU torch, and
random parameters that make every weight of a reference model matter.

timm and transformers' vision models need torchvision, whose PyPI wheel is a CUDA build whose compiled ops do
not register with the CPU torch (`operator torchvision::nms does not exist`). ViT never calls these ops; the
rest of torchvision is Python. So: load torchvision's `_C` library when it works, otherwise declare the two op
schemas its Python code registers fakes for. Nothing changes when torch or torchvision is absent.
"""

import glob
import importlib.util
import os

_TORCHVISION_LIBRARY = None  # kept alive: dropping it would unregister the schemas


def make_torchvision_importable():
    global _TORCHVISION_LIBRARY
    if _TORCHVISION_LIBRARY is not None:  # already declared: a second definition would raise
        return
    if importlib.util.find_spec("torch") is None:
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return
    import torch

    try:
        for library in glob.glob(os.path.join(os.path.dirname(spec.origin), "_C*.so")):
            torch.ops.load_library(library)
        torch.ops.torchvision.nms  # noqa: B018 (raises when the library did not register it)
        return
    except (OSError, RuntimeError, AttributeError):
        pass
    _TORCHVISION_LIBRARY = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        _TORCHVISION_LIBRARY.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


def randomise_parameters(model, seed=0):
    """Add N(0, 0.1) to every parameter (zero-initialised biases and heads included) and return the model in
    eval mode, so a parity test cannot pass while a weight is ignored."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model.eval()
