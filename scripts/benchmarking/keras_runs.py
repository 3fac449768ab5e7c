"""The Keras libraries measured in a worker: vit_keras (in Keras on each backend, and exported to TFLite and ONNX
Runtime), keras-hub's `ViTBackbone` and vit-keras 0.2.0; inference and a training step (`train_on_batch`,
`model.fit`)."""

from __future__ import annotations

import os
import sys

from .settings import ARCHITECTURES, CLASSES, DINOV3, PRECISIONS, REPO
from .timing import Skipped, backend_device, set_tf32, time_calls, to_device


def keras_model(case):
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

    tf32 = set_tf32(case["backend"], case)
    model = keras_model(case)
    size = ARCHITECTURES[case["architecture"]]["image_size"]
    batch = case["batch"]
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (batch, size, size, 3)).astype("float32")
    labels = rng.integers(0, CLASSES, batch)
    on_device = case.get("input", "device") == "device"
    if on_device:
        images, labels, synchronize = to_device(case["backend"], images, labels)
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
    result = time_calls(step, batch, min_seconds, min_calls)
    if case.get("call") == "fit":
        result["input_path"] = input_path
    result["parameters"] = int(model.count_params())
    result["backend_device"] = backend_device(case["backend"])
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

    model = keras_model(case)
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
        result = time_calls(step, batch, min_seconds, min_calls)
    result["parameters"] = int(model.count_params())
    result["tf32_active"] = False if case["precision"] == "float32" else None  # CPU runtimes: no TF32
    return result


def run_keras(case, min_seconds, min_calls):
    if case.get("runtime", "keras") != "keras":
        return _run_vit_keras_exported(case, min_seconds, min_calls)
    if case.get("backend", "tensorflow") != "tensorflow":
        return _run_keras_backend(case, min_seconds, min_calls)
    import numpy as np
    import tensorflow as tf

    tf32 = set_tf32("tensorflow", case)
    model = keras_model(case)
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
    result = time_calls(step, batch, min_seconds, min_calls)
    if case.get("call") == "fit":
        result["input_path"] = input_path
    result["parameters"] = int(model.count_params())
    result["tf32_active"] = tf32
    result["attention_paths"] = _attention_paths_taken(model)
    if tf.config.list_physical_devices("GPU"):
        result["peak_device_mib"] = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    return result
