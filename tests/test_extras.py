"""The light core: `import vit_keras` needs none of the optional packages, and a function whose extra is missing
says which extra to install.

Each check runs in a fresh interpreter (the test process has long imported everything). A package is made
"missing" with `sys.modules[name] = None`, under which `import name` raises ImportError as if it were not
installed.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from vit_keras.extras import MissingExtraError, install_command, require

# Slow tier: each test starts Python processes that import TensorFlow.
pytestmark = pytest.mark.slow


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Optional packages (extras, other backends, test-only) that `import vit_keras` on TensorFlow must not import.
OPTIONAL = ("jax", "torch", "matplotlib", "sklearn", "PIL", "scipy")


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def test_import_vit_keras_loads_no_optional_package():
    # With these packages installed, Keras and TensorFlow import them themselves on `import keras` (TensorFlow's
    # lite converter imports jax, keras.src.visualization matplotlib.pyplot and PIL, keras.wrappers sklearn,
    # TensorFlow's legacy keras scipy.sparse); their imports are optional, so they are hidden while Keras loads
    # and put back before vit_keras loads: what is imported after that, vit_keras imported.
    result = _run(f"""
        import json, sys
        OPTIONAL = {OPTIONAL!r}
        for name in OPTIONAL:
            sys.modules[name] = None
        import keras
        for name in OPTIONAL:
            del sys.modules[name]
        import vit_keras
        assert keras.backend.backend() == "tensorflow"
        print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set(OPTIONAL))))
    """)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_core_runs_and_missing_extras_are_named():
    # Every optional package missing for the whole run, as in `pip install -e ".[tensorflow]"`: a model builds
    # and predicts, and each function that needs an extra says which one.
    result = _run(f"""
        import contextlib, io, json, sys
        for name in {OPTIONAL!r}:
            sys.modules[name] = None
        import numpy as np
        import vit_keras
        from vit_keras import cli, demo, inspection
        from vit_keras.datasets import digits

        model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
                              classes=4, weights=None)
        out = model.predict(np.zeros((1, 32, 32, 3), np.float32), verbose=0)
        errors = {{"predict_shape": list(out.shape), "classes": len(vit_keras.imagenet_classes())}}
        calls = {{
            "plot": lambda: inspection.plot_attention_distance(np.ones((2, 3), np.float32)),
            "write_figures": lambda: inspection.write_figures(model, np.zeros((1, 32, 32, 3)), "unused_dir"),
            "digits": lambda: digits.digits_arrays("test"),
            "demo": lambda: demo.load_digits_rgb(),
        }}
        for key, call in calls.items():
            try:
                call()
                errors[key] = None
            except ImportError as error:  # MissingExtraError is one
                errors[key] = f"{{type(error).__name__}}: {{error}}"
        # The command line says it too, before it loads a model (this one does not exist): exit status 1.
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            status = cli.main(["inspect", "no_image.png", "--model", "no_model.keras", "--out", "unused_dir"])
        errors["cli"] = f"{{status}}: {{stderr.getvalue()}}"
        print(json.dumps(errors))
    """)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["predict_shape"] == [1, 4]
    assert found["classes"] == 1000
    assert not os.path.exists(os.path.join(ROOT, "unused_dir")), "write_figures made its directory before failing"
    assert found["cli"].startswith("1: vit-keras inspect: error: "), found["cli"]
    for key, extra, package in [("plot", "inspection", "matplotlib"), ("write_figures", "inspection", "matplotlib"),
                                ("digits", "train", "sklearn"), ("demo", "train", "sklearn"),
                                ("cli", "inspection", "matplotlib")]:
        assert found[key] is not None, f"{key} ran without {package}"
        assert f'pip install -e ".[{extra}]" in the vit_keras source tree' in found[key], found[key]
        assert package in found[key], found[key]
        assert key == "cli" or found[key].startswith("MissingExtraError: "), found[key]


def test_require_returns_the_module_and_names_the_extra():
    assert require("json", "inspection", "Reading JSON").dumps([]) == "[]"
    with pytest.raises(MissingExtraError, match=r"Exporting needs no_such_module_xyz.*\[onnx\] extra") as caught:
        require("no_such_module_xyz.sub", "onnx", "Exporting")
    assert str(caught.value).endswith(f"{install_command('onnx')} in the vit_keras source tree")
    assert isinstance(caught.value.__cause__, ImportError)  # the original error stays attached
