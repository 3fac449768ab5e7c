"""Build the sdist and wheel, check their metadata, and install the wheel the way a user would, outside the checkout.

Run by `make check-wheel` (8 to 13 minutes on 2 shared cores, most of it pip installing TensorFlow into a fresh
virtualenv). Steps, each printed with its time; the first failure stops the run with exit status 1:

1. `python -m build` writes the sdist and the wheel; `twine check --strict` passes both; the wheel holds the
   package data (ImageNet class names) and no tests.
2. A fresh virtualenv in a temporary directory gets `vit-keras3[tensorflow]` from the wheel with `-c constraints.txt`,
   through pip's usual configuration (index, find-links); a quickstart runs there from another directory: a tiny
   model predicts, `vit_keras.imagenet_classes()` has its 1,000 names, `import vit_keras` imported none of the
   optional packages, and plotting without the [inspection] extra says how to install it.
3. numpy one patch release below the pin (and above, if on the index) is installed first, then the wheel: pip must
   keep that numpy, and the quickstart must pass with it.

Example:
    python scripts/check_wheel.py            # what `make check-wheel` runs
    python scripts/check_wheel.py --keep     # leave the temporary directory for a look
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONSTRAINTS = os.path.join(ROOT, "constraints.txt")
DISTRIBUTION = "vit-keras3"
EXTRAS = "tensorflow"
# Packages of other extras and backends: absent from a [tensorflow] install, and never imported by `import vit_keras`.
OPTIONAL = ("jax", "torch", "matplotlib", "sklearn")

QUICKSTART = textwrap.dedent("""
    import importlib.metadata, importlib.util, json, os, sys
    import numpy as np
    import vit_keras
    loaded = sorted({m.split(".")[0] for m in sys.modules} & set(OPTIONAL))
    installed = sorted(name for name in OPTIONAL if importlib.util.find_spec(name) is not None)
    import keras
    model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
                          classes=4, weights=None)
    shape = model.predict(np.zeros((2, 32, 32, 3), np.float32), verbose=0).shape
    try:
        vit_keras.inspection.plot_attention_distance(np.ones((2, 3), np.float32))
        missing_extra = None
    except ImportError as error:
        missing_extra = str(error)
    print(json.dumps({
        "file": vit_keras.__file__, "version": vit_keras.__version__, "backend": keras.backend.backend(),
        "metadata_version": importlib.metadata.version("vit-keras3"), "numpy": np.__version__,
        "predict_shape": list(shape), "imagenet_classes": len(vit_keras.imagenet_classes()),
        "optional_loaded": loaded, "optional_installed": installed, "missing_extra": missing_extra,
    }))
""")


class CheckFailed(Exception):
    pass


def run(command, what, cwd=None, env=None, timeout=1800):
    """Run `command`; return its stdout, or raise CheckFailed with the end of its output."""
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip()[-3000:]
        raise CheckFailed(f"{what} failed (exit status {result.returncode}): {' '.join(command)}\n{tail}")
    return result.stdout


def pinned(name: str) -> str:
    with open(CONSTRAINTS) as f:
        for line in f:
            match = re.fullmatch(rf"{re.escape(name)}==(\S+)", line.strip(), flags=re.IGNORECASE)
            if match:
                return match.group(1)
    raise CheckFailed(f"{CONSTRAINTS} has no exact pin for {name}.")


def build(work: str) -> tuple[str, str]:
    dist = os.path.join(work, "dist")
    run([sys.executable, "-m", "build", "--outdir", dist, ROOT], "python -m build")
    sdists, wheels = glob.glob(os.path.join(dist, "*.tar.gz")), glob.glob(os.path.join(dist, "*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        raise CheckFailed(f"expected one sdist and one wheel in {dist}, found {sorted(os.listdir(dist))}")
    print(run([sys.executable, "-m", "twine", "--no-color", "check", "--strict", sdists[0], wheels[0]],
              "twine check").strip())
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
    if "vit_keras/resources/imagenet1k_classes.tsv" not in names:
        raise CheckFailed("the wheel lacks vit_keras/resources/imagenet1k_classes.tsv (package_data in setup.cfg)")
    if any(name.startswith("tests/") or os.path.basename(name) == "conftest.py" for name in names):
        raise CheckFailed("the wheel ships test code (the tests/ directory or a conftest.py)")
    print(f"{os.path.basename(sdists[0])}, {os.path.basename(wheels[0])} ({len(names)} files)")
    return sdists[0], wheels[0]


def quickstart(python: str, work: str, expect_numpy: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    code = f"OPTIONAL = {OPTIONAL!r}\n{QUICKSTART}"
    found = json.loads(run([python, "-c", code], "the quickstart", cwd=work, env=env).strip().splitlines()[-1])
    problems = []
    if not found["file"].startswith(os.path.dirname(os.path.dirname(python))):
        problems.append(f"vit_keras was imported from {found['file']}, not from the virtualenv")
    if found["metadata_version"] != found["version"]:
        problems.append(f"metadata version {found['metadata_version']} != vit_keras.__version__ {found['version']}")
    if found["numpy"] != expect_numpy:
        problems.append(f"numpy {found['numpy']} was installed, expected {expect_numpy}")
    if found["predict_shape"] != [2, 4] or found["imagenet_classes"] != 1000 or found["backend"] != "tensorflow":
        problems.append(f"quickstart results {found}")
    if found["optional_loaded"]:
        problems.append(f"import vit_keras imported {found['optional_loaded']}")
    named = 'pip install -e ".[inspection]"' in (found["missing_extra"] or "")
    if "matplotlib" not in found["optional_installed"] and not named:
        problems.append(f"plotting without matplotlib gave {found['missing_extra']!r}")
    if problems:
        raise CheckFailed("; ".join(problems))
    print(f"quickstart OK with numpy {found['numpy']}: predict {found['predict_shape']}, "
          f"{found['imagenet_classes']} ImageNet classes, optional packages installed {found['optional_installed']}, "
          f"none imported; without [inspection]: {found['missing_extra']!r}")
    return found


def install(python: str, wheel: str, constraints: str) -> None:
    run([python, "-m", "pip", "install", "--quiet", "-c", constraints, f"{wheel}[{EXTRAS}]"],
        f"installing the wheel with [{EXTRAS}]")


def numpy_beside(python: str, wheel: str, work: str, version: str) -> str:
    """Uninstall the wheel, install numpy `version`, install the wheel again: pip must keep that numpy."""
    probe = subprocess.run([python, "-m", "pip", "download", "--quiet", "--no-deps", "-d",
                            os.path.join(work, "probe"), f"numpy=={version}"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"numpy {version}: not on the index, skipped"
    run([python, "-m", "pip", "uninstall", "--quiet", "--yes", DISTRIBUTION], "uninstalling the wheel")
    run([python, "-m", "pip", "install", "--quiet", f"numpy=={version}"], f"installing numpy {version}")
    loose = os.path.join(work, "constraints-without-numpy.txt")
    with open(CONSTRAINTS) as f, open(loose, "w") as out:
        out.writelines(line for line in f if not line.lower().startswith("numpy=="))
    install(python, wheel, loose)
    run([python, "-m", "pip", "check"], "pip check")
    quickstart(python, work, expect_numpy=version)
    return f"numpy {version}: installed beside it, quickstart OK"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="vit-keras-wheel-")
    started = time.perf_counter()

    def step(message):
        print(f"[{time.perf_counter() - started:6.0f} s] {message}", flush=True)

    try:
        step(f"building in {work}")
        _, wheel = build(work)
        step("creating a fresh virtualenv")
        run([sys.executable, "-m", "venv", os.path.join(work, "venv")], "python -m venv")
        python = os.path.join(work, "venv", "bin", "python")
        run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "upgrading pip")
        step(f"installing {os.path.basename(wheel)}[{EXTRAS}] with -c constraints.txt")
        install(python, wheel, CONSTRAINTS)
        run([python, "-m", "pip", "check"], "pip check")
        run([os.path.join(work, "venv", "bin", "vit-keras"), "--help"], "the vit-keras console script")
        numpy_pin = pinned("numpy")
        quickstart(python, work, expect_numpy=numpy_pin)
        major, minor, patch = (int(part) for part in numpy_pin.split(".")[:3])
        neighbours = [f"{major}.{minor}.{patch - 1}"] if patch > 0 else []
        for version in [*neighbours, f"{major}.{minor}.{patch + 1}"]:
            step(f"numpy {version} installed first, then the wheel")
            print(numpy_beside(python, wheel, work, version))
        step("check-wheel OK")
        return 0
    except (CheckFailed, subprocess.TimeoutExpired) as error:
        step(f"check-wheel FAILED: {error}")
        return 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
