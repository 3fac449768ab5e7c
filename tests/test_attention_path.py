"""The attention path: chosen from the backend and the device, overridable, reported, and equal to the einsum path.

The other backends run in processes of their own (tests/attention_path_worker.py): PyTorch compares its SDPA path
with the explicit einsum path on one block (float32 and mixed bfloat16; RoPE, a NaFlex token mask, a block that
computes the class token alone, and the input gradient); JAX checks the cuDNN path's padding and masking with XLA's
implementation (this CPU has no cuDNN), alone and inside a block whose device is reported as a GPU.

Bounds: `tests/attention_path_worker.py` states them and where they come from (the same worker checks the paths on
a GPU's own kernels in `scripts/gpu_benchmark.sh check`).
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests.attention_path_worker import FLOAT32_BOUND, outside_bounds
from vit_keras.layers import TransformerBlock, attention_path
from vit_keras.layers.transformer import ProjectionAttention

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "attention_path_worker.py")



def test_the_automatic_choice_follows_the_backend_and_the_device():
    def path(*args, **kwargs):
        return attention_path.choose(*args, environ={}, **kwargs).path

    assert path("torch", "cpu") == path("torch", "cuda", (9, 0), "bfloat16") == "sdpa"
    assert path("jax", "gpu", (9, 0), "bfloat16", 64) == path("jax", "gpu", (8, 0), "float16", 128) == "cudnn"
    # cuDNN's flash attention: half precision, Ampere or newer, head sizes multiple of 8 up to 128, no token mask.
    assert path("jax", "gpu", (9, 0), "float32", 64) == "keras"
    assert path("jax", "gpu", (7, 5), "float16", 64) == "keras"
    assert path("jax", "gpu", (9, 0), "bfloat16", 60) == path("jax", "gpu", (9, 0), "bfloat16", 256) == "keras"
    assert path("jax", "gpu", (9, 0), "bfloat16", 64, masked=True) == "keras"
    assert path("jax", "cpu", None, "bfloat16") == path("jax", "tpu", None, "bfloat16") == "keras"
    assert path("tensorflow", "gpu", (9, 0), "bfloat16") == "keras"
    # Every choice says why.
    reason = attention_path.choose("jax", "gpu", (9, 0), "float32", 64, environ={}).reason
    assert "float32" in reason and reason.startswith("keras: ")


def test_the_environment_variable_overrides_the_choice_and_is_refused_where_the_backend_lacks_the_path():
    environ = {attention_path.ENVIRONMENT_VARIABLE: "einsum"}
    assert attention_path.choose("torch", "cpu", environ=environ).path == "einsum"
    assert attention_path.choose("jax", "gpu", (9, 0), "bfloat16", 64,
                                 environ={attention_path.ENVIRONMENT_VARIABLE: "auto"}).path == "cudnn"
    with pytest.raises(ValueError, match="runs on the torch backend only"):
        attention_path.choose("jax", "cpu", environ={attention_path.ENVIRONMENT_VARIABLE: "sdpa"})
    with pytest.raises(ValueError, match="is not an attention path"):
        attention_path.choose("jax", "cpu", environ={attention_path.ENVIRONMENT_VARIABLE: "flash"})


def test_the_path_is_a_saved_layer_argument_when_chosen_by_hand():
    layer = ProjectionAttention(2, 4, attention_path="einsum")
    assert layer.get_config()["attention_path"] == "einsum"
    assert ProjectionAttention.from_config(layer.get_config()).attention_path == "einsum"
    assert "attention_path" not in ProjectionAttention(2, 4).get_config()  # a loaded model chooses again
    with pytest.raises(ValueError, match="is not an attention path"):
        ProjectionAttention(2, 4, attention_path="flash")


def test_each_path_on_this_backend_gives_the_einsum_paths_output_and_the_layer_names_the_one_it_took():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 11, 16)).astype("float32")
    mask = np.ones((2, 11), bool)
    mask[1, 7:] = False
    outputs = {}
    for path in ("einsum", "keras"):
        keras.utils.set_random_seed(3)
        block = TransformerBlock(num_heads=2, mlp_dim=32)
        block.build(x.shape)
        block.attention.attention_path = path
        outputs[path] = keras.ops.convert_to_numpy(block(x, token_mask=mask))
        assert block.attention.attention_path_taken == path
        # The weights are only on the einsum path: asking for them takes it, whatever the layer's path.
        _, scores = block(x, return_attention_scores=True)
        assert block.attention.attention_path_taken == "einsum" and tuple(scores.shape) == (2, 2, 11, 11)
    scale = np.abs(outputs["einsum"]).max()
    np.testing.assert_allclose(outputs["keras"], outputs["einsum"], rtol=0, atol=FLOAT32_BOUND * scale)


def test_a_path_this_backend_lacks_is_refused_not_replaced():
    block = TransformerBlock(num_heads=2, mlp_dim=8)
    block.build((1, 3, 8))
    block.attention.attention_path = "sdpa" if keras.backend.backend() != "torch" else "cudnn"
    with pytest.raises(ValueError, match="backend only"):
        block(np.zeros((1, 3, 8), "float32"))


def _worker(backend, tmp_path, *arguments):
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")])))
    env.pop(attention_path.ENVIRONMENT_VARIABLE, None)
    done = subprocess.run([sys.executable, WORKER, "--out", str(tmp_path), *arguments], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((tmp_path / f"attention_paths-{backend}.json").read_text())


def _check_within_bounds(compared):
    assert compared
    # Each difference within its precision's bound, and each layer ran the path it was asked for.
    assert outside_bounds(compared) == [], compared


@pytest.mark.slow
def test_pytorch_takes_sdpa_by_default_and_it_equals_the_einsum_path(tmp_path):
    report = _worker("torch", tmp_path)
    assert report["automatic"] == {"unmasked": "sdpa", "masked": "sdpa", "with_scores": "einsum",
                                   "scores_shape": [2, 4, 197, 197]}
    assert {name.split()[1] for name in report["compared"]} == {"keras", "sdpa"}
    assert all(reason.startswith("sdpa: ") for reason in report["summary"].values())  # hardware.summary() says so
    _check_within_bounds(report["compared"])


@pytest.mark.slow
def test_jax_cudnn_paths_padding_and_masking_equal_the_unpadded_attention(tmp_path):
    report = _worker("jax", tmp_path, "--pretend-gpu")
    # On a GPU of compute capability 9.0 in bfloat16: cuDNN, except with a token mask; the weights: einsum.
    assert report["automatic"] == {"unmasked": "cudnn", "masked": "keras", "with_scores": "einsum",
                                   "scores_shape": [2, 4, 197, 197]}
    assert any(name.split()[1] == "cudnn" for name in report["compared"])
    assert report["summary"]["bfloat16"].startswith("cudnn: ") and report["summary"]["float32"].startswith("keras: ")
    _check_within_bounds(report["compared"])
    for name, result in report["padding"].items():  # float32, XLA's implementation with and without padding
        assert result["max_abs_diff"] <= FLOAT32_BOUND * result["scale"], (name, result)
        if "control_max_abs_diff" in result:  # unmasked padding would change the result far beyond the bound
            assert result["control_max_abs_diff"] > 100 * FLOAT32_BOUND * result["scale"], (name, result)
