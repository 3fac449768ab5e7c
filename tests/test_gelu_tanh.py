"""The tanh GELU in each backend's fastest form (`vit_keras.layers.transformer.gelu_tanh`) is the tanh GELU.

Reference: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) in float64 on the same (bfloat16- or float32-rounded) inputs.

Bounds:
- float32: 2e-6 absolute for |x| <= 10. Each float32 form rounds a handful of ops on outputs up to 10 (ulp 9.5e-7);
  measured 9.6e-7 (TensorFlow's tanh form), 5.2e-7 (the sigmoid form).
- bfloat16: half a bfloat16 ulp of the reference (the best a bfloat16 result can be: one rounding of the exact
  value) plus 4e-6 for the float32 computation before that rounding (the float32 bound, twice). TensorFlow's
  `tf.nn.gelu` in bfloat16 rounds after each of its ops and misses this bound by up to 335x.
- PyTorch compiled against PyTorch eager (the form each runs): one bfloat16 ulp of the larger output plus the
  float32 bound (both compute in float32 and round once, so they land on the same or neighbouring bfloat16
  values; for x < -3 the tanh form's 1 + tanh(z) cancels in float32 where the sigmoid form keeps the tiny output),
  2e-6 in float32 as above.
"""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from keras import ops

from vit_keras.layers.transformer import GELU_TANH_CUBIC, GELU_TANH_LINEAR, apply_activation, gelu_tanh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOAT32_TOLERANCE = 2e-6
FLOAT32_SLACK_IN_BFLOAT16 = 4e-6


def tanh_gelu_float64(x):
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def bfloat16_ulp(values):
    magnitude = np.maximum(np.abs(values), 2.0**-126)
    return 2.0 ** (np.floor(np.log2(magnitude)) - 7)  # 8 significant bits


def inputs(dtype):
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.uniform(-6, 6, 20_000), np.linspace(-10, 10, 4001)]).astype("float32")
    x = ops.cast(ops.convert_to_tensor(values), dtype)
    return x, np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), np.float64)


def as_float64(y):
    return np.asarray(ops.convert_to_numpy(ops.cast(y, "float32")), np.float64)


def test_the_sigmoid_constants_give_the_tanh_gelu():
    # 1 + tanh(z) = 2·sigmoid(2z): the sigmoid form with the module's constants is the tanh GELU (float64 rounding).
    x = np.linspace(-10, 10, 2001)
    sigmoid_form = x / (1 + np.exp(-x * (GELU_TANH_LINEAR + GELU_TANH_CUBIC * x**2)))
    np.testing.assert_allclose(sigmoid_form, tanh_gelu_float64(x), rtol=0, atol=1e-12)


def test_float32_is_the_tanh_gelu():
    x, values = inputs("float32")
    np.testing.assert_allclose(as_float64(gelu_tanh(x)), tanh_gelu_float64(values), rtol=0, atol=FLOAT32_TOLERANCE)
    np.testing.assert_array_equal(ops.convert_to_numpy(apply_activation(x, "gelu_tanh")),
                                  ops.convert_to_numpy(gelu_tanh(x)))


@pytest.mark.skipif(keras.backend.backend() == "torch", reason="eager PyTorch runs its own bfloat16 kernel")
def test_bfloat16_is_rounded_once_from_float32():
    x, values = inputs("bfloat16")
    reference = tanh_gelu_float64(values)
    error = np.abs(as_float64(gelu_tanh(x)) - reference)
    bound = 0.5 * bfloat16_ulp(reference) + FLOAT32_SLACK_IN_BFLOAT16
    assert keras.backend.standardize_dtype(gelu_tanh(x).dtype) == "bfloat16"
    assert np.all(error <= bound), f"{np.sum(error > bound)} outputs off by up to {np.max(error / bound):.3g}x"


TORCH_CHECK = textwrap.dedent("""
    import numpy as np
    import torch

    from vit_keras.layers.transformer import gelu_tanh

    graphs = []

    def capture(graph, example_inputs):
        graphs.append({str(node.target) for node in graph.graph.nodes})
        return graph.forward

    x = torch.linspace(-10, 10, 40_001)
    torch.compile(gelu_tanh, backend=capture, fullgraph=True)(x)
    print("traced", "sigmoid" in str(graphs[0]), "gelu" in str(graphs[0]), "tanh" in str(graphs[0]))
    reference = torch.nn.functional.gelu
    for dtype in (torch.float32, torch.bfloat16):
        y = x.to(dtype)
        eager = gelu_tanh(y)
        assert torch.equal(eager, reference(y, approximate="tanh")), "eager PyTorch runs its own tanh GELU"
        compiled = torch.compile(gelu_tanh, fullgraph=True)(y)
        assert compiled.dtype == dtype
        difference = (compiled.double() - eager.double()).abs().numpy()
        if dtype == torch.bfloat16:
            larger = np.maximum(np.abs(eager.double().numpy()), np.abs(compiled.double().numpy()))
            bound = 2.0 ** (np.floor(np.log2(np.maximum(larger, 2.0 ** -126))) - 7) + 2e-6
        else:
            bound = np.full_like(difference, 2e-6)
        print(dtype, "within", bool(np.all(difference <= bound)), float(np.max(difference / bound)))
""")


@pytest.mark.slow
def test_torch_compile_runs_the_sigmoid_form_with_the_eager_outputs():
    env = dict(os.environ, KERAS_BACKEND="torch", PYTHONPATH=os.pathsep.join(filter(None, [
        ROOT, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", TORCH_CHECK], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "traced True False False" in lines, done.stdout  # one fused sigmoid expression, no tanh kernel
    assert any(line.startswith("torch.float32 within True") for line in lines), done.stdout
    assert any(line.startswith("torch.bfloat16 within True") for line in lines), done.stdout
