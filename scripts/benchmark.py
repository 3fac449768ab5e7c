"""Speed and memory of vit_keras beside its peers, each at its best setting, measured in one run as ratios.

Every case (library x task x batch x precision x XLA / torch.compile) runs in a fresh process, so each has its
own peak RSS and no precision policy, XLA cache or thread pool leaks from one case into the next. All models are
ViT-B/16 at 224 px with random weights (weights do not change the speed) and compute the same thing, what an
image classifier serves: 1000-class logits from the class token (inference; training: a fine-tuning step on
them). vit_keras runs with `head_tokens_only=True`, its setting for such a classifier (the last block computes
the class token alone: the same logits, 7% fewer FLOPs); the report also gives vit_keras computing every token
of the last block ("all tokens", on TensorFlow at each XLA setting) so that the gain is visible. The same run
measures the machine's matmul peak (`tf.matmul`, n=2048, float32 and bfloat16, with and without XLA; at the start
and again at the end, the faster counting) and reports vit_keras' fraction of it; the CPU model and its
matmul-relevant flags head the report and the JSON.

    python scripts/benchmark.py                            # inference: batch 1 and 16, fp32 and bf16
    python scripts/benchmark.py --suite training           # fine-tune step: fp32 and bf16, XLA on and off
    python scripts/benchmark.py --suite attention          # the attention implementations and paths, one block
    python scripts/benchmark.py --suite naflex             # NaFlex batches padded to N=256 vs bucketed by length
    python scripts/benchmark.py --backends jax,torch       # the Keras libraries on Keras' other backends
    python scripts/benchmark.py --quick                    # a tiny model: checks the script in seconds
    python scripts/benchmark.py --json results.json        # also write every measurement
    python scripts/benchmark.py --dinov3                   # also DINOv3 ViT-B/16 in vit_keras and timm

Peers, each measured at every setting it has and reported at the best: keras-hub's `ViTBackbone`
(`pip install --no-deps keras-hub==0.32.0`; XLA on/off like vit_keras), timm's `VisionTransformer` (eager and
under `torch.compile`, which needs a C++ compiler on CPU), ONNX Runtime on timm's ONNX export (float32
inference; `pip install onnxruntime==1.31.1 onnx==1.23.2`, the `benchmark` extra) and the earlier Keras port
vit-keras 0.2.0, which imports as `vit_keras` too and so runs from its own directory (`--vit-keras-0.2.0-path`,
installed with `pip install --target DIR --no-deps vit-keras==0.2.0 validators opencv-python-headless`). A peer
that is not installed is reported as skipped. `make benchmark` installs them and runs the inference and training
suites.

DINOv3 (`--dinov3`): vit_keras and timm (`vit_base_patch16_dinov3`) also run DINOv3's ViT-B/16 (2-D RoPE on q and
k, 4 registers, LayerScale, no position table), each at the settings it has, in the same run as the plain ViT-B/16:
the report gives each library's DINOv3 images/s as a fraction of its own ViT-B/16's, the cost of RoPE and the
registers.

Keras' fit loop (`--suite training`): beside its `train_on_batch` rows, vit_keras runs `model.fit` over 8 batches
per call (2 with `--quick`) from host memory, fed as `vit_keras.training.train` feeds it (a `tf.data` pipeline on
TensorFlow, through the input path `vit_keras.training.device_prefetch` picks for the backend and hardware), at
each backend and setting. The report gives each fit row's images/s as a fraction of `train_on_batch` on a batch
already on the device at the same setting: what the fit loop and the input pipeline cost over the bare step.

NaFlex (`--suite naflex`): a flexible vit_keras ViT-B/16 (`flexible=True`) runs its forward pass (float32, batches
of `--batch-sizes`, default 8) over one fixed set of 32 images of mixed sizes and aspect ratios, once with every batch
padded to N=256 patches (`naflex_map(...).batch(...)`) and once bucketed by patch count (`naflex_buckets` at every
64 patches): images/s over the whole set and the share of the computed tokens that are padding. Two image sets:
"fit to N" (each image resized to fill the 256-patch budget, as SigLIP 2 and `vit-keras train --max-patches` do)
and "native size" (each image cut at its own size, from 64x64 to 256x256 px: 16 to 256 patches).

Inputs (`--inputs`, default both): every library is measured with its input where its users keep it, on the
device — timm's tensor, a `jax.Array` / `torch.Tensor` for the Keras libraries on JAX / PyTorch called through a
compiled function (`jax.jit` of `stateless_call`; the model under `torch.compile`) or `train_on_batch`, a
`tf.constant` on TensorFlow — and, in rows marked "from host", a NumPy batch copied over on every call (Keras'
`predict_on_batch` / `train_on_batch`, TensorFlow's `model.predict`, timm fed a NumPy array, ONNX Runtime always).
The comparison at each library's best uses the device rows; the from-host rows have a table of their own.

GPU: float32 rows run with TF32 matmuls off and on for every library (`--tf32`; PyTorch's `allow_tf32`, JAX's
default matmul precision, which is TF32 on Ampere and later); every row records whether TF32 was on. Training rows
give each library's MFU, its FLOPs per image (stated once at the top: `image_gflop`) times images/s over the matmul
peak measured in the same run. vit_keras' rows name the attention path their layers ran
(`vit_keras.layers.attention_path`); `--attention auto,keras` also measures vit_keras forced onto Keras' own path.
Without TensorFlow (a GPU machine with JAX and PyTorch only) its cases are reported as skipped, the matmul peak is
JAX's or PyTorch's, and the GPUs are named by PyTorch or JAX; `scripts/gpu_benchmark.sh` runs the GPU set.

Backends: vit_keras and keras-hub run on every Keras backend named by `--backends` (default: tensorflow, jax,
torch), each at its settings: TensorFlow with XLA on and off (a `tf.function` for inference, plus `model.predict`
with XLA to show what the Keras API costs on top), JAX always compiled (`jit`; un-jitted JAX runs op by op and
is no setting anyone deploys), PyTorch eager and with Keras' `jit_compile=True` (`torch.compile`). A library's
best is its fastest backend and setting; the report also gives vit_keras' best on each backend.

Runtimes: for float32 inference vit_keras is also measured exported, in the runtimes it exports to
(`--runtimes`, default all): TFLite (`vit_keras.export.tflite`, XNNPACK with one thread per core) in float32
and with dynamic-range int8 weights (`quantization="dynamic_int8"`), and ONNX Runtime on its own ONNX export
(`vit_keras.export.to_onnx`; needs tf2onnx, in the `benchmark` extra).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHITECTURES = {
    "B/16": dict(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    # --quick: small enough to run every case in seconds; it checks the script, not the libraries.
    "tiny": dict(image_size=64, patch_size=16, hidden_size=64, num_layers=2, num_heads=2, mlp_dim=128),
}
LIBRARIES = ("vit_keras", "keras-hub", "vit-keras-0.2.0", "timm", "onnxruntime")
# The networks: the paper's ViT, and DINOv3's (timm `vit_base_patch16_dinov3`; vit_keras `ViTConfig` fields).
MODELS = ("vit", "dinov3")
DINOV3_LIBRARIES = ("vit_keras", "timm")
DINOV3 = dict(rope="rotate_half", num_register_tokens=4, layer_scale=True, qkv_bias=False, position_embedding="none",
              activation="gelu", layer_norm_epsilon=1e-5)
KERAS_LIBRARIES = ("vit_keras", "keras-hub", "vit-keras-0.2.0")
BACKENDS = ("tensorflow", "jax", "torch")
MULTI_BACKEND = ("vit_keras", "keras-hub")  # vit-keras 0.2.0 is written for TensorFlow only
RUNTIMES = ("keras", "tflite", "tflite_int8", "onnxruntime")  # how vit_keras runs: Keras itself, or exported
PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
CLASSES = 1000
MATMUL = "tf.matmul"
PEAK_LIBRARIES = {"tensorflow": MATMUL, "jax": "jax.numpy.matmul", "torch": "torch.matmul"}
PEAK_PRECISIONS = ("float32", "bfloat16")  # the matmul peak is measured for these


def forward_gflop(arch, head_tokens_only=False, prefix_tokens=1) -> float:
    """GFLOP of one image's forward pass (multiply-adds x 2): patch embedding, then per layer the QKV, attention
    logits and mix, output projection and MLP; the head is left out. ViT-B/16 at 224: 35.1, and 32.7 when the
    last block computes the class token alone (its keys and values still come from all 197 tokens).
    `prefix_tokens`: tokens before the patches (DINOv3: the class token and 4 registers; RoPE adds no matmul).

    Example:
        >>> round(forward_gflop(ARCHITECTURES["B/16"]), 1), round(forward_gflop(ARCHITECTURES["B/16"], True), 1)
        (35.1, 32.7)
    """
    width, mlp, patch = arch["hidden_size"], arch["mlp_dim"], arch["patch_size"]
    patches = (arch["image_size"] // patch) ** 2
    tokens = patches + prefix_tokens

    def layer(queries):
        return 2 * tokens * width * 2 * width + 2 * queries * width * width + 2 * 2 * queries * tokens * width \
            + 2 * queries * width * width + 2 * 2 * queries * width * mlp

    embedding = 2 * patches * (patch * patch * 3) * width
    last = layer(1 if head_tokens_only else tokens)
    return (embedding + (arch["num_layers"] - 1) * layer(tokens) + last) / 1e9


def image_gflop(arch, task, head_tokens_only=False, model="vit") -> float:
    """GFLOP per image of `task`: the forward pass, or forward + backward (3x) for a training step."""
    prefix_tokens = 1 + DINOV3["num_register_tokens"] if model == "dinov3" else 1
    return forward_gflop(arch, head_tokens_only, prefix_tokens) * (3 if task == "training" else 1)


# --- the worker: one case in this process --------------------------------------------------------------------


class Skipped(Exception):
    """The peer this case needs is not installed."""


def _keras_model(case):
    """The case's Keras model, returning 1000-class logits from the class token."""
    import keras

    # An exported int8 case starts from the float32 model.
    keras.mixed_precision.set_global_policy(PRECISIONS.get(case["precision"], "float32"))
    arch = ARCHITECTURES[case["architecture"]]
    size = arch["image_size"]
    library = case["library"]
    if library == "vit_keras":
        sys.path.insert(0, REPO)
        import vit_keras

        family = DINOV3 if case.get("model") == "dinov3" else {}
        return vit_keras.ViT(**arch, **family, classes=CLASSES, classifier_activation=None,
                             include_preprocessing=False, head_tokens_only=case.get("head_tokens_only", True))
    if library == "keras-hub":
        try:
            import keras_hub
        except ImportError as error:
            raise Skipped("keras-hub is not installed (pip install --no-deps keras-hub==0.32.0)") from error
        backbone = keras_hub.models.ViTBackbone(
            image_shape=(size, size, 3), patch_size=arch["patch_size"], num_layers=arch["num_layers"],
            num_heads=arch["num_heads"], hidden_dim=arch["hidden_size"], mlp_dim=arch["mlp_dim"])
        tokens = backbone.output
        logits = keras.layers.Dense(CLASSES, dtype="float32")(tokens[:, 0])
        return keras.Model(backbone.input, logits)
    if library == "vit-keras-0.2.0":
        try:
            from vit_keras import vit  # the 0.2.0 package: this process runs with its directory first on sys.path
        except ImportError as error:
            raise Skipped("vit-keras 0.2.0 is not installed (see --vit-keras-0.2.0-path)") from error
        if "vit_b16" not in dir(vit) or arch["patch_size"] != 16 or case["architecture"] != "B/16":
            raise Skipped("vit-keras 0.2.0 only builds the paper's variants")
        return vit.vit_b16(image_size=size, pretrained=False, include_top=True, pretrained_top=False,
                           classes=CLASSES, activation="linear")
    raise ValueError(f"unknown Keras library {library!r}")


def _time_calls(step, batch, min_seconds, min_calls):
    """Median seconds per call after two warm-up calls (the first one compiles)."""
    compile_start = time.perf_counter()
    step()
    compile_seconds = time.perf_counter() - compile_start
    step()
    durations = []
    start = time.perf_counter()
    while len(durations) < min_calls or time.perf_counter() - start < min_seconds:
        begin = time.perf_counter()
        step()
        durations.append(time.perf_counter() - begin)
    median = statistics.median(durations)
    return {"images_per_s": batch / median, "ms_per_batch": 1000 * median, "calls": len(durations),
            "first_call_s": compile_seconds}


def _set_tf32(backend, case):
    """Turn TF32 matmuls on or off as `case["tf32"]` says (None: the framework's default). Returns the state the
    float32 matmuls of this case run in: True (TF32), False (full float32), or None for a half-precision case."""
    on_gpu = _backend_device(backend) == "GPU"
    asked = case.get("tf32")
    if backend == "torch":
        import torch

        if asked is not None:
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(asked)
        state = on_gpu and torch.backends.cuda.matmul.allow_tf32
    elif backend == "jax":
        import jax

        if asked is not None:
            jax.config.update("jax_default_matmul_precision", "tensorfloat32" if asked else "highest")
        # JAX's default precision runs float32 matmuls in TF32 on GPUs that have it (Ampere and later).
        state = on_gpu and jax.config.jax_default_matmul_precision in (None, "default", "tensorfloat32",
                                                                        "bfloat16")
    else:
        import tensorflow as tf

        if asked is not None:
            tf.config.experimental.enable_tensor_float_32_execution(bool(asked))
        state = on_gpu and tf.config.experimental.tensor_float_32_execution_enabled()
    return bool(state) if case["precision"] == "float32" else None


def _attention_paths_taken(model) -> list:
    """The attention paths the model's attention layers ran (vit_keras layers report theirs; others: none)."""
    return sorted({layer.attention_path_taken for layer in model._flatten_layers()
                   if getattr(layer, "attention_path_taken", None)})


def _run_keras_backend(case, min_seconds, min_calls):
    """A Keras library on JAX or PyTorch. Input on the device (`case["input"] == "device"`, the default): the batch
    is a `jax.Array` / `torch.Tensor` already there, and inference runs a compiled function of it (`jax.jit` of
    `stateless_call`; the model, under `torch.compile` with `xla`), training `train_on_batch` on it. From host
    (`"host"`): a NumPy batch through `predict_on_batch` / `train_on_batch`, each call copying it over, as
    `predict` users do. `jit_compile` is `jax.jit` on JAX and `torch.compile` on PyTorch."""
    import keras
    import numpy as np

    tf32 = _set_tf32(case["backend"], case)
    model = _keras_model(case)
    size = ARCHITECTURES[case["architecture"]]["image_size"]
    batch = case["batch"]
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (batch, size, size, 3)).astype("float32")
    labels = rng.integers(0, CLASSES, batch)
    on_device = case.get("input", "device") == "device"
    if on_device:
        images, labels, synchronize = _to_device(case["backend"], images, labels)
    if case["task"] == "inference" and on_device:
        step = _compiled_forward(case, model, images, synchronize)
    elif case["task"] == "inference":
        model.compile(jit_compile=case["xla"])

        def step():
            keras.ops.convert_to_numpy(model.predict_on_batch(images))
    else:
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9, global_clipnorm=1.0),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=case["xla"])
        if case.get("call") == "fit":
            step, input_path = _fit_step(case, model, images, labels)
            batch *= case["fit_steps"]
        else:
            def step():
                keras.ops.convert_to_numpy(model.train_on_batch(images, labels))
    result = _time_calls(step, batch, min_seconds, min_calls)
    if case.get("call") == "fit":
        result["input_path"] = input_path
    result["parameters"] = int(model.count_params())
    result["backend_device"] = _backend_device(case["backend"])
    result["tf32_active"] = tf32
    result["attention_paths"] = _attention_paths_taken(model)
    return result


# Batches per `model.fit` call in a fit row: enough that fit's per-call set-up (its epoch iterator, callbacks list
# and data adapter) is shared by several steps, as in a real epoch, few enough for a CPU to time.
FIT_STEPS = 8
FIT_STEPS_QUICK = 2


def _fit_step(case, model, host_images, host_labels):
    """One call of `model.fit` over `case["fit_steps"]` batches from host memory, fed as `vit_keras.training.train`
    feeds it: a `tf.data` pipeline on TensorFlow (a Python iterable elsewhere: the backend may have no TensorFlow),
    through the input path `vit_keras.training.device_prefetch` chooses for the backend and hardware. Returns the
    step and that path's description."""
    sys.path.insert(0, REPO)
    from vit_keras.training.device_prefetch import choose_input_path

    steps = case["fit_steps"]
    path = choose_input_path(case["backend"])
    batches = [(host_images, host_labels)] * steps  # the same host batch each step, as train_on_batch's rows
    if case["backend"] == "tensorflow":
        import tensorflow as tf

        def source():
            return path.apply(tf.data.Dataset.from_tensors((host_images, host_labels)).repeat(steps))
    elif path.builds:
        def source():
            return path.apply(batches)
    else:
        def source():  # Keras takes a Python generator on every backend
            yield from batches

    def step():
        model.fit(source(), epochs=1, steps_per_epoch=steps, verbose=0)
    return step, path.description


def _to_device(backend, *arrays):
    """The arrays on the backend's default device, and a function that waits for that device's work to end."""
    if backend == "jax":
        import jax

        placed = [jax.device_put(array) for array in arrays]
        return (*placed, lambda outputs: jax.block_until_ready(outputs))
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    placed = [torch.as_tensor(array, device=device) for array in arrays]
    return (*placed, lambda outputs: torch.cuda.synchronize() if device == "cuda" else None)


def _compiled_forward(case, model, images, synchronize):
    """One call of the model's forward pass on a device-resident batch, compiled: `jax.jit` of `stateless_call`
    (variables passed in, as Keras' own jitted functions do), or the model under `torch.compile` (with `xla`) in
    `torch.no_grad()`. The output stays on the device; the call waits for it."""
    if case["backend"] == "jax":
        import jax

        trainable = [variable.value for variable in model.trainable_variables]
        non_trainable = [variable.value for variable in model.non_trainable_variables]
        forward = jax.jit(lambda t, n, x: model.stateless_call(t, n, x, training=False)[0])

        def step():
            synchronize(forward(trainable, non_trainable, images))
        return step
    import torch

    forward = torch.compile(model) if case["xla"] else model

    def step():
        with torch.no_grad():
            synchronize(forward(images, training=False))
    return step


def _run_vit_keras_exported(case, min_seconds, min_calls):
    """vit_keras' model exported by vit_keras.export and run in that runtime (float32 inference on the CPU)."""
    import tempfile

    import numpy as np

    sys.path.insert(0, REPO)
    from vit_keras import export

    model = _keras_model(case)
    arch = ARCHITECTURES[case["architecture"]]
    batch, size = case["batch"], arch["image_size"]
    images = np.random.default_rng(0).uniform(0, 255, (batch, size, size, 3)).astype("float32")
    threads = os.cpu_count()
    with tempfile.TemporaryDirectory() as directory:
        if case["runtime"] in ("tflite", "tflite_int8"):
            try:
                from ai_edge_litert.interpreter import Interpreter
            except ImportError as error:
                raise Skipped("ai-edge-litert is not installed (pip install ai-edge-litert)") from error
            quantization = "dynamic_int8" if case["runtime"] == "tflite_int8" else None
            path = export.tflite(model, os.path.join(directory, "vit.tflite"), quantization=quantization)
            interpreter = Interpreter(model_path=path, num_threads=threads)
            runner = interpreter.get_signature_runner("serving_default")  # resizes its input to the batch

            def step():
                runner(images=images)
        else:
            try:
                import onnxruntime  # noqa: F401
                import tf2onnx  # noqa: F401
            except ImportError as error:
                raise Skipped("onnxruntime or tf2onnx is not installed (the `benchmark` extra)") from error
            path = export.to_onnx(model, os.path.join(directory, "vit.onnx"))
            session = export.onnx_session(path, num_threads=threads)

            def step():
                export.onnx_predict(session, images)
        result = _time_calls(step, batch, min_seconds, min_calls)
    result["parameters"] = int(model.count_params())
    result["tf32_active"] = False if case["precision"] == "float32" else None  # CPU runtimes: no TF32
    return result


def _backend_device(backend) -> str:
    if backend == "jax":
        import jax

        platform = jax.devices()[0].platform.upper()
        return "GPU" if platform in ("GPU", "CUDA", "ROCM") else platform
    if backend == "torch":
        import torch

        return "GPU" if torch.cuda.is_available() else "CPU"
    import tensorflow as tf

    return "GPU" if tf.config.list_physical_devices("GPU") else "CPU"


def _run_keras(case, min_seconds, min_calls):
    if case.get("runtime", "keras") != "keras":
        return _run_vit_keras_exported(case, min_seconds, min_calls)
    if case.get("backend", "tensorflow") != "tensorflow":
        return _run_keras_backend(case, min_seconds, min_calls)
    import numpy as np
    import tensorflow as tf

    tf32 = _set_tf32("tensorflow", case)
    model = _keras_model(case)
    size = ARCHITECTURES[case["architecture"]]["image_size"]
    batch = case["batch"]
    rng = np.random.default_rng(0)
    host_images = rng.uniform(-1, 1, (batch, size, size, 3)).astype("float32")
    images = tf.constant(host_images)  # on the default device: the GPU where TensorFlow has one
    if case["task"] == "inference" and case.get("call") == "predict":
        # What a user calls: Keras' predict loop (its data adapter, one batch, the compiled predict function) on a
        # NumPy batch, copied over each call.
        model.compile(jit_compile=case["xla"])

        def step():
            model.predict(host_images, batch_size=batch, verbose=0)
    elif case["task"] == "inference":
        forward = tf.function(lambda x: model(x, training=False), jit_compile=case["xla"])

        def step():
            forward(images).numpy()
    else:
        import keras

        labels = tf.constant(rng.integers(0, CLASSES, batch))
        # The paper's fine-tuning optimizer, the same for every library.
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9, global_clipnorm=1.0),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=case["xla"])

        if case.get("call") == "fit":
            step, input_path = _fit_step(case, model, host_images, rng.integers(0, CLASSES, batch))
            batch *= case["fit_steps"]
        else:
            def step():
                model.train_on_batch(images, labels)
    result = _time_calls(step, batch, min_seconds, min_calls)
    if case.get("call") == "fit":
        result["input_path"] = input_path
    result["parameters"] = int(model.count_params())
    result["tf32_active"] = tf32
    result["attention_paths"] = _attention_paths_taken(model)
    if tf.config.list_physical_devices("GPU"):
        result["peak_device_mib"] = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    return result


def _import_timm():
    try:
        sys.path.insert(0, REPO)
        from tests.torch_compat import make_torchvision_importable

        make_torchvision_importable()
        import timm
        import torch
    except ImportError as error:
        raise Skipped("timm and torch are not installed (make test installs them)") from error
    return timm, torch


def _timm_model(case, device):
    timm, _ = _import_timm()
    arch = ARCHITECTURES[case["architecture"]]
    if case.get("model") == "dinov3":  # timm's own function: its RoPE, registers and LayerScale
        return timm.create_model(
            "vit_base_patch16_dinov3", pretrained=False, img_size=arch["image_size"], patch_size=arch["patch_size"],
            embed_dim=arch["hidden_size"], depth=arch["num_layers"], num_heads=arch["num_heads"],
            mlp_ratio=arch["mlp_dim"] / arch["hidden_size"], num_classes=CLASSES, global_pool="token").to(device)
    return timm.models.vision_transformer.VisionTransformer(
        img_size=arch["image_size"], patch_size=arch["patch_size"], embed_dim=arch["hidden_size"],
        depth=arch["num_layers"], num_heads=arch["num_heads"], mlp_ratio=arch["mlp_dim"] / arch["hidden_size"],
        num_classes=CLASSES, global_pool="token").to(device)


def _run_timm(case, min_seconds, min_calls):
    _, torch = _import_timm()
    arch = ARCHITECTURES[case["architecture"]]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train = case["task"] == "training"
    model = _timm_model(case, device)
    compiled = case["torch_compile"]
    # PyTorch's counterpart of XLA; on CPU it needs a C++ toolchain.
    forward = torch.compile(model) if compiled else model
    batch, size = case["batch"], arch["image_size"]
    tf32 = _set_tf32("torch", case)
    host = case.get("input", "device") == "host"
    # From host: a NumPy batch (pinned memory is an extra step users seldom take) copied over each call.
    host_images = (torch.rand(batch, 3, size, size) * 2 - 1).numpy()
    images = torch.as_tensor(host_images, device=device)
    low_precision = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(case["precision"])

    def autocast():
        return torch.autocast(device_type=device, dtype=low_precision, enabled=low_precision is not None)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    if not train:
        model.eval()

        def step():
            with torch.inference_mode(), autocast():
                forward(torch.as_tensor(host_images, device=device) if host else images)
            sync()
    else:
        labels = torch.randint(0, CLASSES, (batch,), device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        scaler = torch.amp.GradScaler(device, enabled=low_precision is torch.float16)

        def step():
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                inputs = torch.as_tensor(host_images, device=device) if host else images
                loss = torch.nn.functional.cross_entropy(forward(inputs), labels)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            sync()

    result = _time_calls(step, batch, min_seconds, min_calls)
    result["compiled"] = compiled
    result["tf32_active"] = tf32
    result["parameters"] = sum(p.numel() for p in model.parameters())
    if device == "cuda":
        result["peak_device_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return result


def _run_onnxruntime(case, min_seconds, min_calls):
    """timm's model exported with `torch.onnx.export` and run by an ONNX Runtime `InferenceSession` (float32)."""
    import tempfile

    if case["task"] != "inference" or case["precision"] != "float32":
        raise Skipped("ONNX Runtime is measured for float32 inference only")
    try:
        import onnxruntime
    except ImportError as error:
        raise Skipped("onnxruntime is not installed (pip install onnxruntime==1.31.1 onnx==1.23.2)") from error
    _, torch = _import_timm()
    arch = ARCHITECTURES[case["architecture"]]
    model = _timm_model(case, "cpu").eval()

    batch, size = case["batch"], arch["image_size"]
    images = torch.rand(batch, 3, size, size) * 2 - 1
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                 if p in onnxruntime.get_available_providers()]
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "vit.onnx")
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
            # The TorchScript-based exporter, at this case's fixed batch: it needs no onnxscript.
            torch.onnx.export(model, (images,), path, dynamo=False, input_names=["images"],
                              output_names=["logits"])
        session = onnxruntime.InferenceSession(path, providers=providers)
    feed = {"images": images.numpy()}
    logits = session.run(None, feed)[0]
    with torch.inference_mode():
        expected = model(images).numpy()
    result = _time_calls(lambda: session.run(None, feed), batch, min_seconds, min_calls)
    result["max_abs_diff_vs_torch"] = float(abs(logits - expected).max())  # the same network, exported intact
    result["parameters"] = sum(p.numel() for p in model.parameters())
    result["providers"] = session.get_providers()
    # ONNX Runtime's CUDA provider computes float32 matmuls in TF32 unless told `use_tf32=0`; its CPU one never.
    result["tf32_active"] = "CUDAExecutionProvider" in result["providers"]
    return result


def _run_matmul(case, min_seconds, min_calls):
    """GFLOP/s of one n x n matmul in the case's precision: `tf.matmul` (bfloat16 operands: oneDNN's or XLA's GEMM),
    or where TensorFlow is absent `jax.numpy.matmul` under `jax.jit` / `torch.matmul`. On a GPU, float32 runs in
    TF32 (its fastest setting: the peak a TF32 row can reach)."""
    import numpy as np

    n = case["batch"]
    rng = np.random.default_rng(0)
    a, b = (rng.normal(size=(n, n)).astype("float32") for _ in range(2))
    backend = case.get("backend", "tensorflow")
    tf32 = _set_tf32(backend, {**case, "tf32": True})
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        a, b = (jnp.asarray(x, dtype=case["precision"]) for x in (a, b))
        multiply = jax.jit(jnp.matmul)
        result = _time_calls(lambda: multiply(a, b).block_until_ready(), 1, min_seconds, min_calls)
    elif backend == "torch":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        a, b = (torch.as_tensor(x, device=device).to(getattr(torch, case["precision"])) for x in (a, b))

        def step():
            torch.matmul(a, b)
            if device == "cuda":
                torch.cuda.synchronize()
        result = _time_calls(step, 1, min_seconds, min_calls)
    else:
        import tensorflow as tf

        dtype = {"float32": tf.float32, "bfloat16": tf.bfloat16}[case["precision"]]
        a, b = (tf.cast(tf.constant(x), dtype) for x in (a, b))
        multiply = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=case["xla"])
        result = _time_calls(lambda: multiply(a, b).numpy(), 1, min_seconds, min_calls)
    result["gflop_per_s"] = 2 * n**3 / 1e9 * result.pop("images_per_s")
    result["tf32_active"] = tf32
    result["backend_device"] = _backend_device(backend)
    return result


def _run_attention(case, min_seconds, min_calls):
    """One B/16 encoder block (batch x 197 tokens x 768) with the attention implementation the case names."""
    import keras
    import numpy as np
    import tensorflow as tf
    from keras import ops

    sys.path.insert(0, REPO)
    from vit_keras.layers import TransformerBlock

    keras.mixed_precision.set_global_policy(PRECISIONS[case["precision"]])
    arch = ARCHITECTURES[case["architecture"]]
    heads, width = arch["num_heads"], arch["hidden_size"]
    tokens = (arch["image_size"] // arch["patch_size"]) ** 2 + 1
    head_dim = width // heads
    x = tf.constant(np.random.default_rng(0).normal(size=(case["batch"], tokens, width)).astype("float32"))
    variant = case["library"]
    if variant == "keras MultiHeadAttention":
        block = TransformerBlock(num_heads=heads, mlp_dim=arch["mlp_dim"])
        block.build(x.shape)
        layer = block.attention

        def attend(y):
            return layer(y, y)
    else:
        qkv = keras.layers.EinsumDense("btd,dnh->btnh", (tokens, 3 * heads, head_dim), bias_axes="nh")
        out = keras.layers.EinsumDense("btnh,nhd->btd", (tokens, width), bias_axes="d")
        qkv.build(x.shape)
        out.build((None, tokens, heads, head_dim))

        def attend(y):
            q, k, v = ops.split(qkv(y), 3, axis=2)
            if variant == "fused QKV + ops.dot_product_attention":
                context = ops.dot_product_attention(q, k, v)
            else:  # explicit einsum softmax
                logits = ops.einsum("bqnh,bknh->bnqk", q * (head_dim**-0.5), k)
                context = ops.einsum("bnqk,bknh->bqnh", ops.softmax(logits, axis=-1), v)
            return out(context)

    forward = tf.function(attend, jit_compile=case["xla"])
    return _time_calls(lambda: forward(x).numpy(), case["batch"], min_seconds, min_calls)


def _run_attention_path(case, min_seconds, min_calls):
    """One B/16 encoder block (`TransformerBlock`, batch x 197 tokens x 768) on the case's Keras backend with its
    attention layer forced onto `case["attention_path"]`; `case["pass"]`: the forward pass, or forward and
    backward (the gradients of the input and of every weight), compiled as the backend compiles (`jax.jit`,
    `tf.function` with `xla`; PyTorch eager). The input is on the device."""
    import keras
    import numpy as np

    sys.path.insert(0, REPO)
    from vit_keras.layers import TransformerBlock

    keras.mixed_precision.set_global_policy(PRECISIONS[case["precision"]])
    backend = case["backend"]
    tf32 = _set_tf32(backend, case)
    arch = ARCHITECTURES[case["architecture"]]
    tokens = (arch["image_size"] // arch["patch_size"]) ** 2 + 1
    x = np.random.default_rng(0).normal(size=(case["batch"], tokens, arch["hidden_size"])).astype("float32")
    block = TransformerBlock(num_heads=arch["num_heads"], mlp_dim=arch["mlp_dim"])
    block.build(x.shape)
    block.attention.attention_path = case["attention_path"]
    backward = case["pass"] == "forward+backward"
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        x = jax.device_put(x)
        trainable = [v.value for v in block.trainable_variables]
        non_trainable = [v.value for v in block.non_trainable_variables]

        def forward(t, n, inputs):
            return block.stateless_call(t, n, inputs)[0]

        def loss(t, n, inputs):
            return jnp.sum(jnp.square(forward(t, n, inputs).astype("float32")))

        function = jax.jit(jax.grad(loss, argnums=(0, 2)) if backward else forward)

        def step():
            jax.block_until_ready(function(trainable, non_trainable, x))
    elif backend == "torch":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        x = torch.as_tensor(x, device=device).requires_grad_(backward)

        def step():
            if backward:
                torch.sum(torch.square(block(x).float())).backward()
            else:
                with torch.no_grad():
                    block(x)
            if device == "cuda":
                torch.cuda.synchronize()
    else:
        import tensorflow as tf

        x = tf.constant(x)

        def gradients(inputs):
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                value = tf.reduce_sum(tf.square(tf.cast(block(inputs), "float32")))
            return tape.gradient(value, [inputs, *block.trainable_variables])

        function = tf.function(gradients if backward else block, jit_compile=case["xla"])

        def step():
            tf.nest.map_structure(lambda tensor: tensor.numpy(), function(x))
    result = _time_calls(step, case["batch"], min_seconds, min_calls)
    result["attention_paths"] = [block.attention.attention_path_taken]
    result["tf32_active"] = tf32
    result["backend_device"] = _backend_device(backend)
    return result


def attention_path_table(results) -> str:
    """Markdown: one encoder block per attention path, and its images/s over the einsum path's on the same backend,
    pass, batch and precision."""
    rows = [r for r in results if r.get("attention_path")]
    if not rows:
        return ""

    def key(r):
        return r["backend"], r["pass"], r["batch"], r["precision"], r.get("xla")

    einsum = {key(r): r for r in rows if r["attention_path"] == "einsum" and "images_per_s" in r}
    lines = ["| backend | pass | batch | precision | attention path | images/s | ÷ einsum |",
             "|---|---|---:|---|---|---:|---:|"]
    for r in rows:
        head = f"| {_setting(r)} | {r['pass']} | {r['batch']} | {r['precision']} | {r['attention_path']} "
        if "skipped" in r:
            lines.append(head + f"| skipped: {r['skipped'][:160]} | |")
            continue
        base = einsum.get(key(r))
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}" if base else "—"
        lines.append(head + f"| {r['images_per_s']:.2f} | {ratio} |")
    return "\n".join(lines)


NAFLEX_PATCHES = 256
NAFLEX_BUCKET_EVERY = 64
NAFLEX_IMAGES = 32
NAFLEX_SETS = ("fit to N", "native size")
NAFLEX_BATCHING = ("padded to N", "bucketed")


def naflex_image_sizes(image_set: str, count: int = NAFLEX_IMAGES, patch: int = 16,
                       budget: int = NAFLEX_PATCHES) -> list:
    """The (height, width) of the benchmark's images, the same on every run: photo-like aspect ratios (4:3, 3:4,
    16:9, 9:16, 1:1, 3:1, 1:3, 2:3) for "fit to N"; for "native size", sides that are multiples of `patch`, from a
    quarter of √budget to √budget patches each (4 to 16 for 256), at most `budget` patches.

    Example:
        >>> naflex_image_sizes("fit to N", 3)
        [(480, 640), (640, 480), (360, 640)]
    """
    if image_set == "fit to N":
        shapes = [(480, 640), (640, 480), (360, 640), (640, 360), (512, 512), (200, 600), (600, 200), (400, 600)]
        return [shapes[i % len(shapes)] for i in range(count)]
    import numpy as np

    rng = np.random.default_rng(0)
    side = int(budget**0.5)
    sizes = []
    while len(sizes) < count:
        rows, cols = (int(v) for v in rng.integers(max(side // 4, 1), side + 1, 2))
        if rows * cols <= budget:
            sizes.append((rows * patch, cols * patch))
    return sizes


def _run_naflex(case, min_seconds, min_calls):
    """A flexible ViT over the image set of `case`, its batches padded to N or bucketed (one call: the whole set)."""
    import keras
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, REPO)
    import vit_keras
    from vit_keras.naflex_data import bucket_boundaries, naflex_buckets, naflex_map

    keras.mixed_precision.set_global_policy(PRECISIONS[case["precision"]])
    arch = {k: v for k, v in ARCHITECTURES[case["architecture"]].items() if k != "image_size"}
    patch = arch["patch_size"]
    budget = NAFLEX_PATCHES if case["architecture"] == "B/16" else 16  # --quick: the tiny model's small budget
    model = vit_keras.ViT(**arch, flexible=True, classes=CLASSES, classifier_activation=None,
                          include_preprocessing=False)
    rng = np.random.default_rng(0)
    sizes = naflex_image_sizes(case["image_set"], patch=patch, budget=budget)
    images = [rng.uniform(0, 255, (h, w, 3)).astype(np.float32) for h, w in sizes]
    dataset = tf.data.Dataset.from_generator(lambda: iter(images),
                                             output_signature=tf.TensorSpec((None, None, 3), tf.float32))
    examples = dataset.map(naflex_map(patch, budget, resize=case["image_set"] == "fit to N"))
    if case["library"] == "bucketed":
        boundaries = bucket_boundaries(budget, NAFLEX_BUCKET_EVERY if budget == NAFLEX_PATCHES else 4)
        batches = list(examples.apply(naflex_buckets(boundaries, case["batch"])))
    else:
        batches = list(examples.batch(case["batch"]))
    forward = tf.function(lambda x: model(x, training=False), jit_compile=case["xla"], reduce_retracing=True)

    def step():
        for batch in batches:
            forward(batch).numpy()

    result = _time_calls(step, len(images), min_seconds, min_calls)
    computed = sum(int(np.prod(b["mask"].shape)) for b in batches)
    real = sum(int(np.asarray(b["mask"]).sum()) for b in batches)
    result.update(padding_share=1 - real / computed, tokens_per_image=computed / len(images),
                  lengths=sorted({int(b["mask"].shape[1]) for b in batches}))
    return result


def naflex_table(results) -> str:
    """Markdown: images/s of each NaFlex batching, and of bucketed over padded for the same image set."""
    padded = {(r["image_set"], r["batch"], r["xla"]): r for r in results
              if r["library"] == "padded to N" and "images_per_s" in r}
    rows = ["| images | batching | batch | setting | sequence lengths | padding share | images/s | ÷ padded |",
            "|---|---|---:|---|---|---:|---:|---:|"]
    for r in results:
        head = f"| {r['image_set']} | {r['library']} | {r['batch']} | {'XLA' if r['xla'] else 'no XLA'} "
        if "skipped" in r:
            rows.append(head + f"| skipped: {r['skipped'][:120]} | | | |")
            continue
        base = padded.get((r["image_set"], r["batch"], r["xla"]))
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}" if base else "—"
        rows.append(head + f"| {', '.join(map(str, r['lengths']))} | {100 * r['padding_share']:.0f}% "
                    f"| {r['images_per_s']:.2f} | {ratio} |")
    return "\n".join(rows)


def _own_peak_kib() -> int:
    """This worker's peak resident memory in KiB: VmHWM (its own memory map) on Linux; ru_maxrss elsewhere, which
    on Linux would start at the parent's high-water mark (fork + exec keeps it)."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def worker(case: dict, min_seconds: float, min_calls: int) -> dict:
    """Run one case in this process and return its measurements (or why it was skipped)."""
    try:
        if case["task"] == "attention" and case.get("attention_path"):
            result = _run_attention_path(case, min_seconds, min_calls)
        elif case["task"] == "attention":
            result = _run_attention(case, min_seconds, min_calls)
        elif case["task"] == "naflex":
            result = _run_naflex(case, min_seconds, min_calls)
        elif case["task"] == "matmul":
            result = _run_matmul(case, min_seconds, min_calls)
        elif case["library"] == "timm":
            result = _run_timm(case, min_seconds, min_calls)
        elif case["library"] == "onnxruntime":
            result = _run_onnxruntime(case, min_seconds, min_calls)
        else:
            result = _run_keras(case, min_seconds, min_calls)
    except Skipped as reason:
        return {**case, "skipped": str(reason)}
    result["peak_rss_mib"] = _own_peak_kib() / 1024
    result["device"] = result.pop("backend_device", None) or _backend_device(
        "torch" if case["library"] in ("timm", "onnxruntime") else "tensorflow")
    return {**case, **result}


# --- the driver: every case in its own process, then the table ---------------------------------------------


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


def _cases(args):
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


def _peak_cases(args):
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


def _run_case(case, args):
    if _needs_tensorflow(case) and not tensorflow_available():
        return {**case, "skipped": "TensorFlow is not installed here (its Keras cases run on --backends jax,torch)"}
    backend = case.get("backend") or ("tensorflow" if _needs_tensorflow(case) else os.environ.get("KERAS_BACKEND")
                                      or "tensorflow")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND=backend)
    env.pop("VIT_KERAS_ATTENTION", None)
    if case.get("attention"):  # vit_keras forced onto one attention path (vit_keras.layers.attention_path)
        env["VIT_KERAS_ATTENTION"] = case["attention"]
    command = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(case),
               "--min-seconds", str(args.min_seconds), "--min-calls", str(args.min_calls)]
    if case["library"] == "vit-keras-0.2.0":
        if not os.path.isdir(args.vit_keras_020_path or ""):
            return {**case, "skipped": f"vit-keras 0.2.0 is not installed at {args.vit_keras_020_path!r} "
                                       "(make benchmark installs it)"}
        # Its package is also called vit_keras: put its directory first and keep this repository off the path.
        env["PYTHONPATH"] = os.path.abspath(args.vit_keras_020_path)
    try:
        process = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout,
                                 cwd=os.path.dirname(os.path.abspath(__file__)))
    except subprocess.TimeoutExpired:
        return {**case, "skipped": f"took longer than {args.timeout} s"}
    lines = [line for line in process.stdout.splitlines() if line.startswith("{")]
    if process.returncode or not lines:
        return {**case, "skipped": f"failed (exit {process.returncode}): {process.stderr.strip()[-400:]}"}
    return json.loads(lines[-1])


def _setting(r) -> str:
    """How a row ran, e.g. "XLA", "no XLA", "predict, XLA", "JAX", "PyTorch, torch.compile", "XLA, all tokens",
    "JAX, from host", "torch.compile, TF32", "JAX, keras attention" (vit_keras forced onto an attention path).

    Example:
        >>> _setting(dict(library="timm", torch_compile=True, input="host", tf32=False))
        'torch.compile, from host, no TF32'
    """
    if r.get("head_tokens_only") is False:
        return _setting({**r, "head_tokens_only": True}) + ", all tokens"
    if r.get("tf32") is not None:
        return _setting({**r, "tf32": None}) + (", TF32" if r["tf32"] else ", no TF32")
    if r.get("call"):  # Keras' own loop (predict, fit) around the compiled function: NumPy or tf.data in
        return f"{r['call']}, " + _setting({**r, "call": None, "input": "device"})
    if r.get("input") == "host" and r["library"] != "onnxruntime" and r.get("runtime", "keras") == "keras":
        return _setting({**r, "input": "device"}) + ", from host"
    if r.get("attention"):
        return _setting({**r, "attention": None}) + f", {r['attention']} attention"
    if r["library"] == "timm":
        return "torch.compile" if r.get("torch_compile") else "eager"
    if r["library"] == "onnxruntime":
        return "ONNX Runtime"
    if r.get("runtime") == "tflite":
        return "TFLite"
    if r.get("runtime") == "tflite_int8":
        return "TFLite, int8 weights"
    if r.get("runtime") == "onnxruntime":
        return "ONNX Runtime"
    backend = r.get("backend") or "tensorflow"
    if backend == "jax":
        return "JAX"
    if backend == "torch":
        return "PyTorch, torch.compile" if r["xla"] else "PyTorch, eager"
    return "XLA" if r["xla"] else "no XLA"


def _task(r) -> str:
    """The task as the tables name it: "inference", or "inference, DINOv3" for the DINOv3 network."""
    return r["task"] if r.get("model", "vit") == "vit" else f"{r['task']}, DINOv3"


def _like(r):
    """What a Keras peer's row is compared with: vit_keras on the same backend, setting, call, input and TF32."""
    return (*_group(r), r.get("backend") or "tensorflow", r["xla"], r.get("call"), r.get("runtime"),
            r.get("head_tokens_only", True), r.get("input", "device"), r.get("tf32"), r.get("attention"))


def _group(r):
    return r["task"], r["batch"], r["precision"], r.get("model", "vit")


def _from_host(r) -> bool:
    return r.get("input", "device") == "host"


def best_from_host(results) -> dict:
    """{(task, batch, precision, model): {library: the fastest row fed from host memory (NumPy in)}}."""
    best = {}
    for r in results:
        if "images_per_s" in r and _from_host(r):
            libraries = best.setdefault(_group(r), {})
            if r["library"] not in libraries or r["images_per_s"] > libraries[r["library"]]["images_per_s"]:
                libraries[r["library"]] = r
    return best


def _row_gflop(r) -> float:
    """GFLOP per image of what the row's model computed (vit_keras: its last block's class token only, unless the
    row says otherwise)."""
    head_tokens_only = r.get("head_tokens_only", True) if r["library"] == "vit_keras" else False
    return image_gflop(ARCHITECTURES[r["architecture"]], r["task"], head_tokens_only, r.get("model", "vit"))


def best_by_library(results) -> dict:
    """{(task, batch, precision): {library: the fastest measured row}} over each library's settings.

    Example:
        >>> rows = [dict(task="inference", batch=1, precision="float32", library="timm", images_per_s=v)
        ...         for v in (2.0, 3.0)]
        >>> best_by_library(rows)[("inference", 1, "float32", "vit")]["timm"]["images_per_s"]
        3.0
    """
    best = {}
    on_device = {(_group(r), r["library"]) for r in results if "images_per_s" in r and not _from_host(r)}
    for r in results:
        if "images_per_s" not in r or (_from_host(r) and (_group(r), r["library"]) in on_device):
            continue  # a library's best is its input on the device, where it has such a row
        libraries = best.setdefault(_group(r), {})
        if r["library"] not in libraries or r["images_per_s"] > libraries[r["library"]]["images_per_s"]:
            libraries[r["library"]] = r
    return best


def matmul_peaks(results) -> dict:
    """{precision: the fastest matmul row} (GFLOP/s over the XLA settings and the run's repeated measurements)."""
    peaks = {}
    for r in results:
        if r["task"] == "matmul" and "gflop_per_s" in r:
            if r["precision"] not in peaks or r["gflop_per_s"] > peaks[r["precision"]]["gflop_per_s"]:
                peaks[r["precision"]] = r
    return peaks


def table(results) -> str:
    """Markdown: one row per case, with the ratio of vit_keras' throughput to that case's.

    Keras libraries are compared at the same XLA setting; timm and ONNX Runtime, which have none, with
    vit_keras' best.
    """
    reference = {_like(r): r for r in results
                 if r["library"] in ("vit_keras", "keras MultiHeadAttention") and "images_per_s" in r}
    best = best_by_library(results)
    rows = ["| task | library | batch | precision | setting | images/s | ms/batch | first call s "
            "| peak RSS MiB | vit_keras ÷ this | TF32 | attention |",
            "|---|---|---:|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in results:
        if r["task"] == "matmul":
            continue
        head = f"| {_task(r)} | {r['library']} | {r['batch']} | {r['precision']} | {_setting(r)} "
        if "skipped" in r:
            rows.append(head + f"| skipped: {r['skipped'][:120]} | | | | | | |")
            continue
        if r["library"] in ("timm", "onnxruntime"):
            ours = best.get(_group(r), {}).get("vit_keras")
        else:
            ours = reference.get(_like(r))
        ratio = f"{ours['images_per_s'] / r['images_per_s']:.2f}" if ours else "—"
        tf32 = {True: "on", False: "off"}.get(r.get("tf32_active"), "—")
        attention = ", ".join(r.get("attention_paths") or []) or "—"
        rows.append(head + f"| {r['images_per_s']:.2f} | {r['ms_per_batch']:.1f} | {r['first_call_s']:.1f} "
                    f"| {r['peak_rss_mib']:.0f} | {ratio} | {tf32} | {attention} |")
    return "\n".join(rows)


def summarize(results) -> list:
    """Per (task, batch, precision): vit_keras' best, each peer's best and the ratio, and vit_keras' share of
    the matmul peak measured in the same run (images/s x GFLOP per image ÷ peak GFLOP/s).

    Example:
        >>> rows = [dict(task="inference", batch=1, precision="float32", library=lib, images_per_s=v,
        ...              architecture="B/16", xla=True) for lib, v in (("vit_keras", 4.4), ("timm", 4.0))]
        >>> summarize(rows)[0]["ratios"]
        {'timm': 1.1}
    """
    peaks = matmul_peaks(results)
    rows = []
    for group, libraries in best_by_library(results).items():
        task, batch, precision, model = group
        ours = libraries.get("vit_keras")
        if task == "matmul" or ours is None:
            continue
        row = {"task": task, "batch": batch, "precision": precision, "vit_keras": ours["images_per_s"],
               "vit_keras_setting": _setting(ours), "peers": {}, "ratios": {}}
        if model != "vit":
            row["model"] = model
        for library, peer in libraries.items():
            if library != "vit_keras":
                row["peers"][library] = {"images_per_s": peer["images_per_s"], "setting": _setting(peer)}
                row["ratios"][library] = round(ours["images_per_s"] / peer["images_per_s"], 2)
        mine = [r for r in results if r["library"] == "vit_keras" and _group(r) == group and "images_per_s" in r]
        for r in mine:  # vit_keras' best on each backend (in Keras itself, not exported, its input on the device)
            if r.get("runtime", "keras") != "keras" or _from_host(r):
                continue
            backend = r.get("backend") or "tensorflow"
            best = row.setdefault("vit_keras_by_backend", {}).get(backend)
            if best is None or r["images_per_s"] > best["images_per_s"]:
                row["vit_keras_by_backend"][backend] = {"images_per_s": r["images_per_s"], "setting": _setting(r)}
        function = [r for r in mine if (r.get("backend") or "tensorflow") == "tensorflow" and r["xla"]
                    and r.get("head_tokens_only", True)]
        predict = [r for r in function if r.get("call") == "predict"]
        function = [r for r in function if r.get("call") != "predict"]
        if predict and function:  # Keras' predict loop against the compiled function it wraps
            row["predict_vs_function"] = round(predict[0]["images_per_s"] / function[0]["images_per_s"], 3)
        fit_loop = _fit_vs_train_on_batch(mine)
        if fit_loop:
            row["fit_vs_train_on_batch"] = fit_loop
        all_tokens = [r for r in mine if r.get("head_tokens_only") is False and r["xla"]]
        if all_tokens and function:  # the same model and setting, every token of the last block computed
            row["head_tokens_only_gain"] = round(function[0]["images_per_s"] / all_tokens[0]["images_per_s"], 3)
        if ours.get("attention_paths"):
            row["vit_keras_attention"] = ours["attention_paths"]
        hosted = best_from_host(results).get(group, {})
        if hosted:  # each library fed NumPy batches, as `predict` users feed it
            row["from_host"] = {library: {"images_per_s": r["images_per_s"], "setting": _setting(r)}
                                for library, r in hosted.items()}
            if "vit_keras" in hosted:
                row["from_host_ratios"] = {library: round(hosted["vit_keras"]["images_per_s"] / r["images_per_s"], 2)
                                           for library, r in hosted.items() if library != "vit_keras"}
        peak = peaks.get(precision)
        if peak and task in ("inference", "training"):
            achieved = ours["images_per_s"] * _row_gflop(ours)
            row["gflop_per_s"] = achieved
            row["fraction_of_matmul_peak"] = achieved / peak["gflop_per_s"]
            row["matmul_peak"] = {"gflop_per_s": peak["gflop_per_s"], "setting": _setting(peak),
                                  "n": peak["batch"], "library": peak["library"]}
            # Model FLOPs utilisation: each library's FLOPs per image (what its model computes) x images/s over
            # the matmul peak measured in the same run.
            row["mfu"] = {library: r["images_per_s"] * _row_gflop(r) / peak["gflop_per_s"]
                          for library, r in libraries.items()}
        rows.append(row)
    _dinov3_cost(rows, best_by_library(results))
    return rows


def _fit_vs_train_on_batch(rows) -> dict:
    """{fit row's setting: {"ratio": its images/s ÷ those of `train_on_batch` at the same backend and setting on a
    batch already on the device, "input_path": how fit's batches reached the step}}: what Keras' fit loop and the
    input pipeline cost over the bare step.

    Example:
        >>> step = dict(library="vit_keras", backend="torch", xla=True, images_per_s=10.0)
        >>> fit = {**step, "call": "fit", "input": "host", "images_per_s": 9.0, "input_path": "host"}
        >>> _fit_vs_train_on_batch([step, fit])
        {'fit, PyTorch, torch.compile': {'ratio': 0.9, 'input_path': 'host'}}
    """
    def setting(r):
        return r.get("backend") or "tensorflow", r["xla"], r.get("tf32")

    steps = {setting(r): r for r in rows if r.get("call") is None and not _from_host(r) and not r.get("attention")
             and r.get("head_tokens_only", True) and r.get("runtime", "keras") == "keras"}
    found = {}
    for fit in (r for r in rows if r.get("call") == "fit"):
        step = steps.get(setting(fit))
        if step is not None:
            found[_setting(fit)] = {"ratio": round(fit["images_per_s"] / step["images_per_s"], 3),
                                    "input_path": fit.get("input_path")}
    return found


def _dinov3_cost(rows, best) -> None:
    """Each DINOv3 row gets, per library measured on both networks, its DINOv3 images/s ÷ its ViT-B/16 images/s."""
    for row in rows:
        if row.get("model") != "dinov3":
            continue
        plain = best.get((row["task"], row["batch"], row["precision"], "vit"), {})
        dinov3 = best[(row["task"], row["batch"], row["precision"], "dinov3")]
        row["dinov3_vs_vit"] = {library: round(dinov3[library]["images_per_s"] / plain[library]["images_per_s"], 3)
                                for library in dinov3 if library in plain}


def summary_table(summary, peaks) -> str:
    """Markdown: each library at its best, as ratios, with vit_keras' share of the matmul peak."""
    if not summary:
        return "(no vit_keras measurement to compare the peers with)"
    peers = sorted({library for row in summary for library in row["peers"]},
                   key=lambda name: LIBRARIES.index(name) if name in LIBRARIES else len(LIBRARIES))
    lines = ["| task | batch | precision | vit_keras | " + "".join(f"{p} | " for p in peers) + "% of matmul peak |",
             "|---|---:|---|---:|" + "---:|" * len(peers) + "---:|"]
    for row in summary:
        cells = []
        for library in peers:
            peer = row["peers"].get(library)
            cells.append(f"{peer['images_per_s']:.2f} ({peer['setting']}) — {row['ratios'][library]:.2f}"
                         if peer else "—")
        share = f"{100 * row['fraction_of_matmul_peak']:.0f}%" if "fraction_of_matmul_peak" in row else "—"
        lines.append(f"| {_task(row)} | {row['batch']} | {row['precision']} | {row['vit_keras']:.2f} "
                     f"({row['vit_keras_setting']}) | " + "".join(f"{c} | " for c in cells) + f"{share} |")
    if peaks:
        lines.append("")
    for precision, peak in peaks.items():
        lines.append(f"matmul peak, {precision}: {peak['gflop_per_s']:.0f} GFLOP/s "
                     f"({peak['library']} n={peak['batch']}, {_setting(peak)})")
    return "\n".join(lines)


def host_table(summary) -> str:
    """Markdown: each library fed from host memory (a NumPy batch per call), at its best, as ratios."""
    rows = [row for row in summary if row.get("from_host")]
    if not rows:
        return ""
    libraries = sorted({library for row in rows for library in row["from_host"]},
                       key=lambda name: LIBRARIES.index(name) if name in LIBRARIES else len(LIBRARIES))
    lines = ["| task | batch | precision | " + " | ".join(f"{name} from host" for name in libraries) + " |",
             "|---|---:|---|" + "---:|" * len(libraries)]
    for row in rows:
        cells = []
        for library in libraries:
            peer = row["from_host"].get(library)
            ratio = row.get("from_host_ratios", {}).get(library)
            cells.append("—" if peer is None else f"{peer['images_per_s']:.2f} ({peer['setting']})"
                         + (f" — {ratio:.2f}" if ratio else ""))
        lines.append(f"| {_task(row)} | {row['batch']} | {row['precision']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mfu_lines(summary) -> list:
    """One line per training row: each library's model FLOPs utilisation against the run's matmul peak."""
    lines = []
    for row in summary:
        if row["task"] == "training" and row.get("mfu"):
            shares = ", ".join(f"{library} {100 * share:.1f}%" for library, share in row["mfu"].items())
            peak = row["matmul_peak"]
            lines.append(f"MFU at training batch {row['batch']} ({row['precision']}): {shares} of the matmul peak "
                         f"{peak['gflop_per_s']:.0f} GFLOP/s ({peak['library']} n={peak['n']})")
    return lines


def flop_line(architecture, suite) -> str:
    """The FLOPs per image that the MFU and the share of the matmul peak count, stated once per run."""
    arch = ARCHITECTURES[architecture]
    forward, head = forward_gflop(arch), forward_gflop(arch, True)
    line = f"# GFLOP per image (ViT-{architecture}): forward {forward:.2f}; vit_keras' head_tokens_only {head:.2f}"
    if suite == "training":
        line += f"; a training step is 3x the forward: {3 * forward:.2f} and {3 * head:.2f}"
    return line


def backend_table(summary) -> str:
    """Markdown: vit_keras' best on each Keras backend, per case, as images/s and as a share of the fastest."""
    backends = [b for b in BACKENDS if any(b in row.get("vit_keras_by_backend", {}) for row in summary)]
    if len(backends) < 2:
        return ""
    lines = ["| task | batch | precision | " + " | ".join(f"vit_keras on {b}" for b in backends) + " |",
             "|---|---:|---|" + "---:|" * len(backends)]
    for row in summary:
        by_backend = row.get("vit_keras_by_backend", {})
        if not by_backend:  # only exported runs in this case
            continue
        fastest = max(v["images_per_s"] for v in by_backend.values())
        cells = [f"{by_backend[b]['images_per_s']:.2f} ({by_backend[b]['setting']}) — "
                 f"{by_backend[b]['images_per_s'] / fastest:.2f}" if b in by_backend else "—" for b in backends]
        lines.append(f"| {row['task']} | {row['batch']} | {row['precision']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gpu_names() -> list:
    """The names of the GPUs TensorFlow sees, or, where it sees none (a CPU-only TensorFlow, or none at all), those
    PyTorch sees, or JAX."""
    names = []
    try:
        import tensorflow as tf

        for gpu in tf.config.list_physical_devices("GPU"):
            names.append(tf.config.experimental.get_device_details(gpu).get("device_name") or gpu.name)
    except ImportError:  # pragma: no cover
        pass
    if names:
        return names
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:  # a JAX-only install
        import jax

        return [device.device_kind for device in jax.devices("gpu")]
    except (ImportError, RuntimeError):  # no JAX, or no GPU backend
        return []


def machine_description() -> dict:
    """The CPU model and matmul-relevant flags (see vit_keras.hardware), the GPUs, core count and library versions."""
    sys.path.insert(0, REPO)
    from vit_keras import hardware

    detected = hardware.Machine(hardware.cpu_info(), hardware.gpu_capabilities())
    import keras

    described = {"platform": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
                 "python": platform.python_version(), **hardware.summary(detected), "gpus": gpu_names(),
                 "keras_backend": keras.backend.backend(), "load_average": list(os.getloadavg())}
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return described
    for package in ("tensorflow-cpu", "tensorflow", "keras", "jax", "jaxlib", "torch", "timm", "onnxruntime",
                    "keras-hub"):
        try:
            described.setdefault("versions", {})[package] = version(package)
        except PackageNotFoundError:
            pass
    return described


# The instruction-set class that decides float32 / bfloat16 matmul speed on a CPU, most capable first.
ISA_CLASSES = (("amx", ("amx_bf16", "amx_tile")), ("avx512bf16", ("avx512_bf16",)), ("avx512", ("avx512f",)),
               ("avx2", ("avx2",)), ("sve", ("sve",)), ("neon-bf16", ("bf16",)))


def _slug(text: str) -> str:
    words = re.sub(r"\((r|tm)\)|\b(cpu|processor|\d+-core)\b|@.*$", " ", text.lower())
    return "-".join(re.findall(r"[a-z0-9]+", words))


def machine_class(machine: dict) -> str:
    """The machine in a few words for a file name: CPU model, its matmul instruction class, and the first GPU.

    Example:
        >>> machine_class({"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "gpus": []})
        'amd-epyc-avx2'
        >>> machine_class({"cpu_model": "Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.0GHz",
        ...                "cpu_flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"],
        ...                "gpus": ["NVIDIA H100 80GB HBM3"]})
        'intel-xeon-platinum-8480-amx-nvidia-h100-80gb-hbm3'
    """
    flags = set(machine.get("cpu_flags") or ())
    isa = next((name for name, needs in ISA_CLASSES if flags & set(needs)), None)
    parts = [_slug(machine.get("cpu_model") or "") or _slug(platform.machine()) or "cpu", isa]
    parts += [_slug(machine["gpus"][0])] if machine.get("gpus") else []
    return "-".join(part for part in parts if part)


def machine_line(machine: dict) -> str:
    """The machine as the report's first line names it: CPU model and flags, core count, GPUs, Python.

    Example:
        >>> machine_line({"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "cpu_count": 2, "gpus": [],
        ...               "python": "3.11.9"})
        'AMD EPYC (avx2, fma; no AVX-512, avx512_bf16 or AMX), 2 CPUs, no GPU, Python 3.11.9'
    """
    flags = machine.get("cpu_flags") or []
    missing = [name for name, flag in (("AVX-512", "avx512f"), ("avx512_bf16", "avx512_bf16"), ("AMX", "amx_tile"))
               if flag not in flags]
    shown = ", ".join(flags) or "flags unknown"
    if missing and "avx2" in flags:
        shown += f"; no {', '.join(missing[:-1])}{' or ' if len(missing) > 1 else ''}{missing[-1]}"
    gpus = machine.get("gpus") or []
    gpu = f"{len(gpus)} GPU{'s' if len(gpus) > 1 else ''}: {', '.join(gpus)}" if gpus else "no GPU"
    return (f"{machine.get('cpu_model') or platform.machine()} ({shown}), {machine.get('cpu_count')} CPUs, {gpu}, "
            f"Python {machine.get('python')}")


def default_json_path(machine: dict, suite: str, precisions, dinov3=False, quick=False, day=None) -> str:
    """Where a run's JSON goes unless `--json` names a file: `benchmarks/<date>-<machine class>-<suite>-<precisions>`
    (`-dinov3`, `-quick` when set), so that runs on other days, machines or suites never overwrite each other.

    Example:
        >>> default_json_path({"cpu_model": "AMD EPYC", "cpu_flags": ["avx2"]}, "inference", ["float32"],
        ...                   day=datetime.date(2026, 11, 26)).split(os.sep)[-2:]
        ['benchmarks', '2026-11-26-amd-epyc-avx2-inference-float32.json']
    """
    day = day or datetime.date.today()
    parts = [day.isoformat(), machine_class(machine), suite, *precisions]
    parts += ["dinov3"] if dinov3 else []
    parts += ["quick"] if quick else []
    return os.path.join(REPO, "benchmarks", "-".join(parts) + ".json")


def _yes_no(text):
    return {"on": [True], "off": [False], "both": [False, True]}[text]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--suite", choices=("inference", "training", "attention", "naflex"), default="inference")
    parser.add_argument("--libraries", default=",".join(LIBRARIES),
                        help=f"comma-separated, from {', '.join(LIBRARIES)} (default: all)")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help=f"comma-separated Keras backends for {' and '.join(MULTI_BACKEND)} (default: all)")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES),
                        help="how vit_keras runs float32 inference: keras, and exported to tflite, tflite_int8 "
                        "(dynamic-range int8 weights) or onnxruntime (comma-separated; default: all)")
    parser.add_argument("--batch-sizes", default=None, help="comma-separated (default: 1,16; training: 8)")
    parser.add_argument("--precisions", default="float32,bfloat16", help="from float32, bfloat16, float16")
    parser.add_argument("--xla", choices=("on", "off", "both"), default="both",
                        help="XLA for the Keras libraries (default: both, and the faster one is their best)")
    parser.add_argument("--torch-compile", choices=("on", "off", "both"), default="both",
                        help="torch.compile the timm model (default: both, and the faster one is timm's best)")
    parser.add_argument("--inputs", default="device,host",
                        help="where each library's input batch lives: device (a tensor already on the device, a "
                        "compiled function of it) and host (NumPy in, as predict users do); comma-separated")
    parser.add_argument("--tf32", choices=("on", "off", "both"), default="both",
                        help="on a GPU, float32 matmuls in TF32 or full float32 for every library (default: both)")
    parser.add_argument("--attention", default="auto",
                        help="vit_keras' attention paths: auto (its own choice) and any of einsum, keras, sdpa, "
                        "cudnn forced through VIT_KERAS_ATTENTION, each a row of its own (comma-separated)")
    parser.add_argument("--matmul-size", type=int, default=None,
                        help="n of the n x n tf.matmul that measures the peak (default 2048; --quick 256; 0: skip)")
    parser.add_argument("--quick", action="store_true", help="a tiny model and short timings")
    parser.add_argument("--dinov3", action="store_true",
                        help="also DINOv3's ViT-B/16 (RoPE, registers, LayerScale) in vit_keras and timm")
    parser.add_argument("--min-seconds", type=float, default=None, help="time each case at least this long")
    parser.add_argument("--min-calls", type=int, default=None, help="and at least this many calls")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds before a case is given up")
    parser.add_argument("--vit-keras-0.2.0-path", dest="vit_keras_020_path",
                        default=os.path.join(REPO, ".venv-vitkeras020"),
                        help="a directory holding vit-keras 0.2.0 (pip install --target)")
    parser.add_argument("--json", default=None, help="write every measurement to this file (default: "
                        "benchmarks/<date>-<machine class>-<suite>-<precisions>.json)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.min_seconds = args.min_seconds if args.min_seconds is not None else (0.2 if args.quick else 10.0)
    args.min_calls = args.min_calls if args.min_calls is not None else (2 if args.quick else 3)

    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), args.min_seconds, args.min_calls)))
        return 0

    args.architecture = "tiny" if args.quick else "B/16"
    args.libraries = [name.strip() for name in args.libraries.split(",") if name.strip()]
    unknown = sorted(set(args.libraries) - set(LIBRARIES))
    if unknown:
        parser.error(f"unknown libraries {unknown}; choose from {', '.join(LIBRARIES)}")
    args.backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    if not args.backends or set(args.backends) - set(BACKENDS):
        parser.error(f"--backends must come from {', '.join(BACKENDS)}, got {args.backends}")
    args.runtimes = [name.strip() for name in args.runtimes.split(",") if name.strip()]
    if not args.runtimes or set(args.runtimes) - set(RUNTIMES):
        parser.error(f"--runtimes must come from {', '.join(RUNTIMES)}, got {args.runtimes}")
    default_batches = "8" if args.suite in ("training", "naflex") else "1,16"
    args.batch_sizes = [int(b) for b in (args.batch_sizes or default_batches).split(",")]
    args.precisions = [p.strip() for p in args.precisions.split(",")]
    if set(args.precisions) - set(PRECISIONS):
        parser.error(f"precisions must come from {', '.join(PRECISIONS)}")
    args.xla = _yes_no(args.xla)
    args.torch_compile = _yes_no(args.torch_compile)
    if args.matmul_size is None:
        args.matmul_size = 256 if args.quick else 2048
    args.inputs = [name.strip() for name in args.inputs.split(",") if name.strip()]
    if not args.inputs or set(args.inputs) - {"device", "host"}:
        parser.error(f"--inputs must come from device, host, got {args.inputs}")
    args.attention = [name.strip() for name in args.attention.split(",") if name.strip()]
    if not args.attention or set(args.attention) - {"auto", "einsum", "keras", "sdpa", "cudnn"}:
        parser.error(f"--attention must come from auto, einsum, keras, sdpa, cudnn, got {args.attention}")

    machine = machine_description()
    args.gpu = bool(machine["gpus"])
    args.tf32 = _yes_no(args.tf32) if args.gpu else [None]  # TF32 is a GPU setting; a CPU has none
    args.peak_backend = "tensorflow" if tensorflow_available() else next(
        (name for name in ("jax", "torch") if importlib.util.find_spec(name)), "tensorflow")
    print(f"# {args.suite}: ViT-{args.architecture}; {machine_line(machine)}", flush=True)
    print(f"# machine class: {machine_class(machine)}", flush=True)
    if args.suite in ("inference", "training"):
        print(flop_line(args.architecture, args.suite), flush=True)
    for precision, reason in machine.get("attention", {}).items():
        print(f"# vit_keras attention on {machine.get('keras_backend')}, {precision}: {reason}", flush=True)
    if args.json is None:  # `--json ""` writes none
        args.json = default_json_path(machine, args.suite, args.precisions, args.dinov3, args.quick)
    if args.json:
        print(f"# measurements to {args.json}", flush=True)
    # The matmul peak is measured first and again last, and the faster counts: a slow spell of a shared machine
    # at either end then cannot make vit_keras' share of it look larger than it is.
    peak_cases = _peak_cases(args) if args.matmul_size and args.suite not in ("attention", "naflex") else []
    cases = peak_cases + _cases(args) + peak_cases
    results = []
    for case in cases:
        result = _run_case(case, args)
        results.append(result)
        if "skipped" in result:
            shown = result["skipped"]
        elif case["task"] == "matmul":
            shown = f"{result['gflop_per_s']:.1f} GFLOP/s"
        else:
            shown = f"{result['images_per_s']:.2f} images/s"
        label = case["library"] + (", DINOv3" if case.get("model") == "dinov3" else "") + (
            f", {case['image_set']}" if case["task"] == "naflex" else "")
        print(f"  {label:<40} batch {case['batch']:>4} {case['precision']:<8} {_setting(case):<13} "
              f"{shown}", flush=True)
    if args.suite == "naflex":
        print()
        print(naflex_table(results))
        if args.json:
            _write_json(args.json, {"suite": args.suite, "architecture": args.architecture, "machine": machine,
                                    "results": results})
        return 0
    summary = summarize(results)
    print()
    print(table(results))
    print()
    print(summary_table(summary, matmul_peaks(results)))
    for extra in (backend_table(summary), host_table(summary), attention_path_table(results),
                  "\n".join(mfu_lines(summary))):
        if extra:
            print()
            print(extra)
    for row in summary:
        if "predict_vs_function" in row:
            print(f"model.predict at batch {row['batch']} ({row['precision']}): {row['predict_vs_function']:.3f} x "
                  "the compiled tf.function's images/s")
        if "dinov3_vs_vit" in row:
            costs = ", ".join(f"{library} {ratio:.3f}" for library, ratio in row["dinov3_vs_vit"].items())
            print(f"DINOv3 at {row['task']} batch {row['batch']} ({row['precision']}): {costs} x the images/s of the "
                  "same library's ViT (RoPE, 4 registers, LayerScale)")
        for setting, fit in row.get("fit_vs_train_on_batch", {}).items():
            print(f"model.fit at batch {row['batch']} ({row['precision']}, {setting}): {fit['ratio']:.3f} x the "
                  f"images/s of train_on_batch on a batch already on the device; input: {fit['input_path']}")
        if "head_tokens_only_gain" in row:
            print(f"head_tokens_only at {row['task']} batch {row['batch']} ({row['precision']}, XLA): "
                  f"{row['head_tokens_only_gain']:.3f} x the images/s of computing every token of the last block")
    if args.json:
        _write_json(args.json, {"suite": args.suite, "architecture": args.architecture, "machine": machine,
                                "matmul_peaks": matmul_peaks(results), "summary": summary, "results": results})
    return 0


def _write_json(path: str, report: dict) -> None:
    sys.path.insert(0, REPO)
    from vit_keras.files import atomic_file

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_file(path) as temporary, open(temporary, "w") as file:
        json.dump(report, file, indent=2)


if __name__ == "__main__":
    sys.exit(main())
