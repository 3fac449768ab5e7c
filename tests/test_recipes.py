"""The scripts of recipes/ (shown whole on the docs' Recipes page), run as a user runs them: `python recipes/X.py`
in a process of their own, with their default hub ids. The hub is the local one (tests/local_hub.py, HF_ENDPOINT),
serving under each real id a tiny checkpoint of the same family from tests/fixtures/; the images are a folder of
coloured squares made here. The TF Serving binary is not installable here: the SavedModel is checked by a plain
TensorFlow process (vit_keras blocked from importing) that loads it and calls its `serve_bytes` signature, which is
what TF Serving runs for a REST request."""

import ast
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests.local_hub import LocalHub

pytestmark = pytest.mark.slow  # every test starts a Python process

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
FIXTURES = ROOT / "tests" / "fixtures"
TOKEN = "hf_recipes_test_token"
# Each recipe's default hub id -> the tiny checkpoint of that family served under it.
SERVED = {
    "facebook/dinov3-vits16-pretrain-lvd1689m": FIXTURES / "family2" / "hf_dinov3" / "checkpoint",
    "timm/vit_base_patch16_siglip_224.v2_webli": FIXTURES / "family" / "timm_siglip_map" / "checkpoint",
    "timm/vit_small_patch16_224.augreg_in21k": FIXTURES / "family" / "timm_avg_fcnorm" / "checkpoint",
    "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k": FIXTURES / "family" / "timm_avg_fcnorm" / "checkpoint",
    # a SiglipModel with its tokenizer (the real one ships a Gemma tokenizer; the fixture's is a Unigram)
    "google/siglip2-base-patch16-224": FIXTURES / "zeroshot" / "siglip" / "checkpoint",
}
GATED = {"facebook/dinov3-vits16-pretrain-lvd1689m"}  # as Meta's DINOv3 repositories are


def _default_model(script: str) -> str:
    """The DEFAULT_MODEL a recipe script assigns (read from its source, so the test follows the file)."""
    tree = ast.parse((RECIPES / script).read_text(encoding="utf-8"))
    for node in tree.body:
        names = [target.id for target in getattr(node, "targets", ()) if isinstance(target, ast.Name)]
        if names == ["DEFAULT_MODEL"]:
            return node.value.value
    raise AssertionError(f"{script} assigns no DEFAULT_MODEL")


@pytest.fixture(scope="module")
def hub():
    server = LocalHub()
    for repo, directory in SERVED.items():
        files = {path.name: path.read_bytes() for path in directory.iterdir() if path.is_file()}
        server.add(repo, files, **({"token": TOKEN} if repo in GATED else {}))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working directory holding photos/ (two classes of 10 coloured squares, 32x32)."""
    from vit_keras.training import local_data

    directory = tmp_path_factory.mktemp("recipes")
    local_data.write_colour_squares(directory / "photos", per_class=10, size=32)
    return directory


def _env(hub, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "TRANSFORMERS_OFFLINE"))}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf_home"), HF_TOKEN=TOKEN, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=str(ROOT))
    return env


def run(script, *args, hub, cwd, check=True, prelude=""):
    """`python recipes/SCRIPT ARGS...` in `cwd` (`prelude` runs first in the same process); its stdout."""
    code = f"{prelude}\nimport runpy, sys\nsys.argv = {[script, *map(str, args)]!r}\n" \
           f"runpy.run_path({str(RECIPES / script)!r}, run_name='__main__')"
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=_env(hub, cwd), capture_output=True,
                            text=True, timeout=600)
    if check:
        assert result.returncode == 0, f"{script} {args} failed:\n{result.stdout}\n{result.stderr[-4000:]}"
    return result


# A number a docs page shows a recipe printing is printed with 3 decimals: rounding makes each side up to 0.0005 off
# the value, and float32 sums on another CPU stay far below that; 0.002 allows one unit in the last place more.
SHOWN_NUMBER_TOLERANCE = 0.002


def assert_prints_as_shown(out: str, page: str, nth: int = 0):
    """`out` is the `nth` "Output (test checkpoint)" block of docs/recipes/PAGE: the same lines and words, numbers
    within SHOWN_NUMBER_TOLERANCE."""
    import re

    text = (ROOT / "docs" / "recipes" / page).read_text(encoding="utf-8")
    shown = re.findall(r'```text title="Output \(test checkpoint\)"\n(.*?)```', text, re.DOTALL)[nth]
    number = r"-?\d+\.\d+"
    lines, shown_lines = out.strip().splitlines(), shown.strip().splitlines()
    assert len(lines) == len(shown_lines), f"{page} shows\n{shown}\nthe recipe printed\n{out}"
    for line, want in zip(lines, shown_lines):
        assert re.sub(number, "#", line).split() == re.sub(number, "#", want).split(), (line, want, page)
        got, expected = [float(x) for x in re.findall(number, line)], [float(x) for x in re.findall(number, want)]
        np.testing.assert_allclose(got, expected, atol=SHOWN_NUMBER_TOLERANCE, err_msg=f"{page}: {line!r}")


def test_every_recipe_default_is_served_here():
    """The ids the recipes default to are the ones this file serves (a renamed default would otherwise reach for
    the real hub and fail for lack of network, not for a reason in the recipe)."""
    defaults = {_default_model(path.name) for path in RECIPES.glob("*.py") if "DEFAULT_MODEL" in path.read_text()}
    assert {d.removeprefix("hf-hub:") for d in defaults} <= set(SERVED), defaults


@pytest.mark.parametrize("script, pooling", [("image_embeddings_dinov3.py", "token"),
                                             ("image_embeddings_siglip2.py", "map")])
def test_image_embeddings_by_hub_id(hub, workdir, script, pooling):
    import vit_keras
    from vit_keras.images import read_image

    out = run(script, "photos/red/0.jpg", "photos/blue/0.jpg", "--output", f"{script}.npy", hub=hub,
              cwd=workdir).stdout
    embeddings = np.load(workdir / f"{script}.npy")
    # The same numbers as the checkpoint's directory loaded here with the recipe's pooling.
    model = vit_keras.from_pretrained(str(SERVED[_default_model(script).removeprefix("hf-hub:")]),
                                      include_top=False, pooling=pooling)
    size = model.vit_config.reference_image_size  # DINOv3 (RoPE only) takes any size: its checkpoint's
    images = np.stack([read_image(workdir / "photos" / c / "0.jpg", size) for c in ("red", "blue")])
    np.testing.assert_allclose(embeddings, model.predict(images, verbose=0), rtol=1e-5, atol=1e-5)
    assert embeddings.shape == (2, model.output_shape[-1])
    assert "cosine similarity:" in out and f"wrote {script}.npy (2, {embeddings.shape[1]})" in out, out
    # what docs/recipes/embeddings.md shows it printing (there with the page's `--output embeddings.npy`)
    assert_prints_as_shown(out.replace(f"{script}.npy", "embeddings.npy"), "embeddings.md",
                           ["image_embeddings_dinov3.py", "image_embeddings_siglip2.py"].index(script))


def test_a_gated_default_without_a_token_says_what_to_do(hub, workdir):
    result = run("image_embeddings_dinov3.py", "photos/red/0.jpg", hub=hub, cwd=workdir, check=False,
                 prelude="import os; os.environ.pop('HF_TOKEN')")
    assert result.returncode != 0
    assert "HF_TOKEN" in result.stderr, result.stderr[-2000:]


@pytest.fixture(scope="module")
def finetuned(hub, workdir):
    out = run("finetune_folder.py", "photos", "--output-dir", "runs/full", "--steps", "6", "--batch-size", "4",
              hub=hub, cwd=workdir).stdout
    return out, workdir / "runs" / "full"


def test_finetune_on_a_folder(finetuned):
    import keras

    out, run_dir = finetuned
    assert "classes: ['blue', 'red']" in out and "held-out top-1: " in out, out
    model = keras.models.load_model(run_dir / "checkpoints" / "best.keras", safe_mode=True)
    assert model.output_shape == (None, 2)
    assert json.loads((run_dir / "results.json").read_text())


def test_finetune_with_lora(hub, workdir):
    import keras

    out = run("finetune_folder.py", "photos", "--output-dir", "runs/lora", "--steps", "4", "--batch-size", "4",
              "--lora", "2", hub=hub, cwd=workdir).stdout
    assert "held-out top-1: " in out, out
    base = keras.models.load_model(workdir / "runs" / "lora" / "checkpoints" / "best.keras", compile=False)
    assert base.output_shape == (None, 2)
    results = (workdir / "runs" / "lora" / "results.json").read_text()
    assert "lora" in results.lower(), results[:500]


def test_linear_probe_on_a_folder(hub, workdir):
    import keras

    out = run("linear_probe.py", "photos", "--epochs", "3", "--output", "probe.json", "--save-model", "probe.keras",
              hub=hub, cwd=workdir).stdout
    result = json.loads((workdir / "probe.json").read_text())
    assert 0.0 <= result["top1"] <= 1.0 and result["examples"]["test"] == 4, result
    assert f"test top-1 {result['top1']:.3f} on 4 images" in out, out
    classifier = keras.models.load_model(workdir / "probe.keras", safe_mode=True)
    probabilities = classifier.predict(np.full((1, *classifier.input_shape[1:]), 128.0, np.float32), verbose=0)
    assert probabilities.shape == (1, 2) and abs(float(probabilities.sum()) - 1.0) < 1e-4


def test_tf_serving_export_and_query(hub, finetuned):
    _, run_dir = finetuned
    workdir = run_dir.parent.parent
    out = run("serve_export.py", "--model", run_dir / "checkpoints" / "best.keras", "--export-dir", "models/vit",
              hub=hub, cwd=workdir).stdout
    assert "wrote models/vit/1" in out, out
    (workdir / "broken.jpg").write_bytes((workdir / "photos" / "red" / "1.jpg").read_bytes()[:40])
    # The query side needs TensorFlow only: vit_keras cannot even be imported in its process.
    query = run("serve_query.py", "photos/red/0.jpg", "broken.jpg", "photos/blue/0.jpg", "--saved-model",
                "models/vit/1", hub=hub, cwd=workdir, prelude="import sys; sys.modules['vit_keras'] = None").stdout
    lines = query.strip().splitlines()
    assert len(lines) == 3, query
    assert lines[0].startswith("photos/red/0.jpg: ") and lines[2].startswith("photos/blue/0.jpg: "), query
    assert {"red", "blue"} == set(lines[0].split()[1::2]), query  # both class names, each with a score
    assert lines[1].startswith("broken.jpg: not served: ") and "image_bytes[1]" in lines[1], query


def test_gpu_recipe(hub, workdir):
    import vit_keras.hardware

    if vit_keras.hardware.default_kind() != "GPU":
        refused = run("gpu_embeddings.py", "photos", hub=hub, cwd=workdir, check=False)
        assert refused.returncode != 0 and "No GPU is visible" in refused.stderr, refused.stderr[-2000:]
    out = run("gpu_embeddings.py", "photos", "--allow-cpu", "--batch-size", "8", "--output", "gpu.npy", hub=hub,
              cwd=workdir).stdout
    assert "precision: " in out and "wrote gpu.npy (20, " in out, out
    assert np.isfinite(np.load(workdir / "gpu.npy")).all()


def test_zeroshot_export_and_query(hub, workdir):
    import tensorflow as tf

    from vit_keras import zeroshot

    out = run("zeroshot_export.py", "--export-dir", "models/zeroshot/1", "--labels", "red,blue", hub=hub,
              cwd=workdir).stdout
    assert "wrote models/zeroshot/1 (siglip, sigmoid scores, context 16 tokens)" in out, out
    images = ["photos/red/0.jpg", "photos/blue/0.jpg"]
    # The query side needs TensorFlow only: vit_keras cannot even be imported in its process.
    query = run("zeroshot_query.py", *images, "--labels", "red square,blue square", "--saved-model",
                "models/zeroshot/1", hub=hub, cwd=workdir, prelude="import sys; sys.modules['vit_keras'] = None").stdout
    lines = query.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == images, query
    assert_prints_as_shown(query, "zeroshot-serving.md")  # what the page shows it printing
    # The scores the Python API gives for the same prompts and the same decoded pixels (the images are at the
    # model's 32x32, so the graph's resize keeps them); printed with 4 decimals, float32 graph vs eager: 1e-4.
    model = zeroshot.from_pretrained(str(SERVED["google/siglip2-base-patch16-224"]))
    pixels = np.stack([tf.io.decode_jpeg((workdir / path).read_bytes(), channels=3).numpy() for path in images])
    labels = ["red square", "blue square"]
    want = model.classify(pixels.astype(np.float32), labels, templates=["a photo of a {}."])
    for line, row in zip(lines, want):
        printed = dict(pair.rsplit(" ", 1) for pair in line.split(": ", 1)[1].split(", "))
        np.testing.assert_allclose([float(printed[label]) for label in labels], row, atol=1e-4)
