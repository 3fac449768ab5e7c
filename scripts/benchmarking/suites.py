"""The cases of each suite (library x task x batch x precision x setting) and how each runs: in a process of its
own, so that no precision policy, XLA cache or thread pool leaks from one case into the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .keras_runs import FIT_STEPS, FIT_STEPS_QUICK
from .naflex import NAFLEX_BATCHING, NAFLEX_SETS
from .settings import DINOV3_LIBRARIES, MATMUL, MULTI_BACKEND, PEAK_LIBRARIES, PEAK_PRECISIONS, SCRIPT


def _attention_cases(args):
    """The TensorFlow attention variants of one block's attention layer, and one B/16 block per attention path of
    each backend (`vit_keras.layers.attention_path`; cuDNN only where a GPU is seen), forward and forward+backward."""
    cases = []
    if "tensorflow" in args.backends:
        variants = ("keras MultiHeadAttention", "fused QKV + ops.dot_product_attention", "explicit einsum softmax")
        cases += [dict(task="attention", library=v, batch=b, precision=p, xla=x, architecture=args.architecture)
                  for b in args.batch_sizes for p in args.precisions for x in args.xla for v in variants]
    paths = {"tensorflow": ("einsum", "keras"), "jax": ("einsum", "keras", "cudnn") if getattr(args, "gpu", False)
             else ("einsum", "keras"), "torch": ("einsum", "keras", "sdpa")}
    for backend in args.backends:
        settings = args.xla if backend == "tensorflow" else [backend == "jax"]  # JAX jitted, PyTorch eager
        cases += [dict(task="attention", library=f"block, {path} attention", attention_path=path, backend=backend,
                       batch=b, precision=p, xla=x, tf32=t, architecture=args.architecture, **{"pass": which})
                  for which in ("forward", "forward+backward") for b in args.batch_sizes for p in args.precisions
                  for t in _tf32_values(args, p) for x in settings for path in paths[backend]]
    return cases


def _tf32_values(args, precision):
    """The TF32 settings a float32 case runs at: off and on where the run has a GPU (`--tf32`), else the default."""
    return getattr(args, "tf32", [None]) if precision == "float32" else [None]


def suite_cases(args):
    if args.suite == "attention":
        return _attention_cases(args)
    if args.suite == "naflex":
        return [dict(task="naflex", library=batching, image_set=image_set, batch=b, precision="float32", xla=x,
                     architecture=args.architecture)
                for image_set in NAFLEX_SETS for b in args.batch_sizes for x in args.xla
                for batching in NAFLEX_BATCHING]
    inputs = getattr(args, "inputs", ["device"])
    forced_attention = [a for a in getattr(args, "attention", ["auto"]) if a != "auto"]
    cases = []
    for b in args.batch_sizes:
        for p in args.precisions:
            for lib in args.libraries:
                if lib == "timm":  # timm's setting is torch.compile (eager and compiled by default)
                    cases += [dict(task=args.suite, library=lib, batch=b, precision=p, xla=None, torch_compile=c,
                                   input=i, tf32=t, architecture=args.architecture)
                              for i in inputs for t in _tf32_values(args, p) for c in args.torch_compile]
                elif lib == "onnxruntime":  # float32 inference only, its own graph optimiser, NumPy in
                    if p == "float32" and args.suite == "inference":
                        cases.append(dict(task=args.suite, library=lib, batch=b, precision=p, xla=None,
                                          input="host", architecture=args.architecture))
                else:
                    backends = args.backends if lib in MULTI_BACKEND else [name for name in args.backends
                                                                           if name == "tensorflow"]
                    keras_runtime = lib != "vit_keras" or "keras" in args.runtimes
                    for backend in backends if keras_runtime else []:
                        # JAX is always jitted; TensorFlow and PyTorch at each XLA / torch.compile setting. On
                        # TensorFlow the input is a tensor on the device; from host is the predict row below.
                        settings = [True] if backend == "jax" else args.xla
                        placements = ["device"] if backend == "tensorflow" else inputs
                        attention = ["auto", *forced_attention] if lib == "vit_keras" else ["auto"]
                        cases += [dict(task=args.suite, library=lib, batch=b, precision=p, xla=x, backend=backend,
                                       input=i, tf32=t, architecture=args.architecture,
                                       **({} if a == "auto" else {"attention": a}))
                                  for i in placements for t in _tf32_values(args, p) for x in settings
                                  for a in attention]
                        if lib == "vit_keras" and args.suite == "training":  # Keras' fit loop around the step
                            cases += [dict(task=args.suite, library=lib, batch=b, precision=p, xla=x,
                                           backend=backend, call="fit", input="host", tf32=t,
                                           fit_steps=FIT_STEPS_QUICK if getattr(args, "quick", False) else FIT_STEPS,
                                           architecture=args.architecture)
                                      for t in _tf32_values(args, p) for x in settings]
                        if lib == "vit_keras" and backend == "tensorflow":  # what head_tokens_only gains
                            cases += [dict(task=args.suite, library=lib, batch=b, precision=p, xla=x,
                                           backend=backend, input="device", head_tokens_only=False,
                                           architecture=args.architecture)
                                      for x in settings]
                    tf_inference = lib == "vit_keras" and "tensorflow" in backends and args.suite == "inference"
                    if keras_runtime and tf_inference and True in args.xla and "host" in inputs:
                        cases.append(dict(task=args.suite, library=lib, batch=b, precision=p, xla=True,
                                          backend="tensorflow", call="predict", input="host",
                                          architecture=args.architecture))
                    exported = tf_inference and p == "float32"
                    # int8 weights are reported apart: no float32 peer is quantized. Exported after the Keras
                    # cases, so that no Keras case follows a conversion of several GiB (tf2onnx: 13 GiB for B/16).
                    cases += [dict(task=args.suite, library=lib, batch=b, xla=None, backend="tensorflow",
                                   precision="int8" if runtime == "tflite_int8" else p, runtime=runtime,
                                   input="host", architecture=args.architecture)
                              for runtime in args.runtimes if runtime != "keras" and exported]
    for lib in [name for name in DINOV3_LIBRARIES if name in args.libraries] if getattr(args, "dinov3", False) else []:
        # Each library at the settings it has for the plain ViT (Keras in Keras only), so each best is comparable.
        for b in args.batch_sizes:
            for p in args.precisions:
                if lib == "timm":
                    cases += [dict(task=args.suite, library=lib, batch=b, precision=p, xla=None, torch_compile=c,
                                   input="device", tf32=t, architecture=args.architecture, model="dinov3")
                              for t in _tf32_values(args, p) for c in args.torch_compile]
                    continue
                for backend in args.backends if "keras" in args.runtimes else []:
                    cases += [dict(task=args.suite, library=lib, batch=b, precision=p, xla=x, backend=backend,
                                   input="device", tf32=t, architecture=args.architecture, model="dinov3")
                              for t in _tf32_values(args, p) for x in ([True] if backend == "jax" else args.xla)]
    return cases


def peak_cases(args):
    """The matmul peak, in every precision the run measures that has one: `tf.matmul` with and without XLA, or where
    TensorFlow is absent the matmul of JAX (jitted) or PyTorch."""
    backend = getattr(args, "peak_backend", "tensorflow")
    if backend == "tensorflow":
        return [dict(task="matmul", library=MATMUL, batch=args.matmul_size, precision=p, xla=x, architecture="")
                for p in PEAK_PRECISIONS if p in args.precisions for x in (True, False)]
    return [dict(task="matmul", library=PEAK_LIBRARIES[backend], batch=args.matmul_size, precision=p,
                 xla=backend == "jax", backend=backend, architecture="")
            for p in PEAK_PRECISIONS if p in args.precisions]


def _needs_tensorflow(case) -> bool:
    """Keras cases without a backend of their own run on TensorFlow, and so do the exports, NaFlex's tf.data input
    and the tf.matmul peak; timm and ONNX Runtime do not."""
    return case["library"] not in ("timm", "onnxruntime") and (case.get("backend") or "tensorflow") == "tensorflow"


def tensorflow_available() -> bool:
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


def run_case(case, args):
    if _needs_tensorflow(case) and not tensorflow_available():
        return {**case, "skipped": "TensorFlow is not installed here (its Keras cases run on --backends jax,torch)"}
    backend = case.get("backend") or ("tensorflow" if _needs_tensorflow(case) else os.environ.get("KERAS_BACKEND")
                                      or "tensorflow")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND=backend)
    env.pop("VIT_KERAS_ATTENTION", None)
    if case.get("attention"):  # vit_keras forced onto one attention path (vit_keras.layers.attention_path)
        env["VIT_KERAS_ATTENTION"] = case["attention"]
    command = [sys.executable, SCRIPT, "--worker", json.dumps(case),
               "--min-seconds", str(args.min_seconds), "--min-calls", str(args.min_calls)]
    if case["library"] == "vit-keras-0.2.0":
        if not os.path.isdir(args.vit_keras_020_path or ""):
            return {**case, "skipped": f"vit-keras 0.2.0 is not installed at {args.vit_keras_020_path!r} "
                                       "(make benchmark installs it)"}
        # Its package is also called vit_keras: put its directory first and keep this repository off the path.
        env["PYTHONPATH"] = os.path.abspath(args.vit_keras_020_path)
    try:
        process = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout,
                                 cwd=os.path.dirname(SCRIPT))
    except subprocess.TimeoutExpired:
        return {**case, "skipped": f"took longer than {args.timeout} s"}
    lines = [line for line in process.stdout.splitlines() if line.startswith("{")]
    if process.returncode or not lines:
        return {**case, "skipped": f"failed (exit {process.returncode}): {process.stderr.strip()[-400:]}"}
    return json.loads(lines[-1])
