"""Shared test set-up: quiet TensorFlow, a float32 policy per test, a tiny model, and importable timm.

timm and transformers' vision models need torchvision, whose PyPI wheel is a CUDA build whose compiled ops do
not register with the CPU torch (`operator torchvision::nms does not exist`). ViT never calls these ops; the
rest of torchvision is Python. So: load torchvision's `_C` library when it works, otherwise declare the two op
schemas its Python code registers fakes for. Nothing changes when torchvision is absent.
"""

import glob
import importlib.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

_TORCHVISION_LIBRARY = None  # kept alive: dropping it would unregister the schemas


def _make_torchvision_importable():
    global _TORCHVISION_LIBRARY
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


_make_torchvision_importable()

# A model small enough to build and run in well under a second on a laptop CPU.
TINY = dict(patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)


@pytest.fixture
def tiny_kwargs():
    return dict(TINY)


@pytest.fixture(autouse=True)
def _float32_policy():
    """Every test starts and ends under the float32 policy, whatever a failing test left behind."""
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy("float32")
