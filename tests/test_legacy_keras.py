"""`.keras` files written by vit_keras 0.1.0 before the model class carried its config still load (safe mode) and
give the outputs they gave when saved.

The files (`tests/fixtures/legacy_keras/`, written by the script in its README with that release) store the config in
the `patch_encoder` layer and give every layer its flat arguments: a plain ViT, one with 2-D RoPE, registers,
LayerScale, RMSNorm and SwiGLU, and a NaFlex model with a MAP head. Bound: the same float32 computation, reordered
at most by a changed layer structure: float32 rounding over two blocks (~1e-6 relative); 1e-5 is that with margin,
and any wrong weight or part moves the outputs by O(0.1).
"""

import os

import keras
import numpy as np
import pytest

import vit_keras
from vit_keras.vision_transformer import config_of

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "legacy_keras")
BOUND = 1e-5  # see the module docstring


@pytest.mark.parametrize("name", ["plain", "rope_registers", "naflex_map"])
def test_a_keras_file_from_before_loads_and_gives_its_outputs(name):
    model = keras.saving.load_model(os.path.join(FIXTURES, f"{name}.keras"), safe_mode=True)
    with np.load(os.path.join(FIXTURES, f"{name}.npz")) as saved:
        expected = saved["output"]
        if "input" in saved:
            x = saved["input"]
        else:
            x = {key[len("input_"):]: saved[key] for key in saved.files if key.startswith("input_")}
    assert isinstance(model, vit_keras.vision_transformer.VisionTransformer)
    out = np.asarray(model.predict(x, verbose=0))
    assert np.abs(out - expected).max() / max(1.0, np.abs(expected).max()) <= BOUND
    config = config_of(model)
    assert config.hidden_size == 32 and config.num_layers == 2
    if name == "rope_registers":
        assert (config.rope, config.num_register_tokens, config.mlp, config.norm) == (
            "rotate_half", 2, "swiglu", "rmsnorm")
