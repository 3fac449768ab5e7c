"""Shared test set-up: quiet TensorFlow, a float32 policy per test, a tiny model, and importable timm."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

from tests.torch_compat import make_torchvision_importable  # noqa: E402

make_torchvision_importable()

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
