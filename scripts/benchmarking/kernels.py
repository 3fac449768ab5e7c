"""The parts measured alone in a worker: the matmul peak (`tf.matmul`, `jax.numpy.matmul` or `torch.matmul`), one
block's attention variants and vit_keras' attention paths."""

from __future__ import annotations

import sys

from .settings import ARCHITECTURES, PRECISIONS, REPO
from .timing import backend_device, set_tf32, time_calls


def run_matmul(case, min_seconds, min_calls):
    """GFLOP/s of one n x n matmul in the case's precision: `tf.matmul` (bfloat16 operands: oneDNN's or XLA's GEMM),
    or where TensorFlow is absent `jax.numpy.matmul` under `jax.jit` / `torch.matmul`. On a GPU, float32 runs in
    TF32 (its fastest setting: the peak a TF32 row can reach)."""
    import numpy as np

    n = case["batch"]
    rng = np.random.default_rng(0)
    a, b = (rng.normal(size=(n, n)).astype("float32") for _ in range(2))
    backend = case.get("backend", "tensorflow")
    tf32 = set_tf32(backend, {**case, "tf32": True})
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        a, b = (jnp.asarray(x, dtype=case["precision"]) for x in (a, b))
        multiply = jax.jit(jnp.matmul)
        result = time_calls(lambda: multiply(a, b).block_until_ready(), 1, min_seconds, min_calls)
    elif backend == "torch":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        a, b = (torch.as_tensor(x, device=device).to(getattr(torch, case["precision"])) for x in (a, b))

        def step():
            torch.matmul(a, b)
            if device == "cuda":
                torch.cuda.synchronize()
        result = time_calls(step, 1, min_seconds, min_calls)
    else:
        import tensorflow as tf

        dtype = {"float32": tf.float32, "bfloat16": tf.bfloat16}[case["precision"]]
        a, b = (tf.cast(tf.constant(x), dtype) for x in (a, b))
        multiply = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=case["xla"])
        result = time_calls(lambda: multiply(a, b).numpy(), 1, min_seconds, min_calls)
    result["gflop_per_s"] = 2 * n**3 / 1e9 * result.pop("images_per_s")
    result["tf32_active"] = tf32
    result["backend_device"] = backend_device(backend)
    return result


def run_attention(case, min_seconds, min_calls):
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
    return time_calls(lambda: forward(x).numpy(), case["batch"], min_seconds, min_calls)


def run_attention_path(case, min_seconds, min_calls):
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
    tf32 = set_tf32(backend, case)
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
    result = time_calls(step, case["batch"], min_seconds, min_calls)
    result["attention_paths"] = [block.attention.attention_path_taken]
    result["tf32_active"] = tf32
    result["backend_device"] = backend_device(backend)
    return result
