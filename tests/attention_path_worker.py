"""Run in a process of its own by tests/test_attention_path.py, with KERAS_BACKEND set: each attention path of
that backend against the explicit einsum path, on one transformer block, in float32 and mixed bfloat16.

Writes `<out>/attention_paths-<backend>.json`: per case, the largest absolute difference from the einsum path's
block output (and, for the training case, from its input gradient), the path each layer reports, and the magnitude
of the compared values (for the bounds' scale). On a GPU (`scripts/gpu_benchmark.sh check`) the same comparison runs
on the device's own kernels (cuDNN flash attention on JAX, SDPA's CUDA kernels on PyTorch); `--check` prints each
case against its bound and exits 1 when one is exceeded.

The bounds, relative to the largest magnitude of the compared values ("scale"): float32 16 ulps (16 x 2^-23 =
1.9e-6; the paths sum in other orders); bfloat16 4 ulps (4 x 2^-7 = 3.1e-2; outputs rounded to bfloat16 land one
or two ulps apart). Measured on an AMX Xeon (PyTorch and JAX, the same under `ONEDNN_MAX_CPU_ISA=AVX512_CORE`,
`=AVX2` and one thread): float32 at most 3.0e-7 (the input gradient on JAX), bfloat16 6.5e-3 forward and 9.3e-3
gradient (JAX), 8.5e-3 with RoPE on PyTorch.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vit_keras import hardware  # noqa: E402
from vit_keras.layers import TransformerBlock, attention_path  # noqa: E402
from vit_keras.layers.rope import RotaryEmbedding2D  # noqa: E402

FLOAT32_BOUND = 16 * 2.0**-23
BFLOAT16_BOUND = 4 * 2.0**-7
TOKENS = 197  # ViT-B/16 at 224 px: 14 x 14 patches and the class token (not a multiple of cuDNN's 16)
WIDTH, HEADS = 64, 4  # head size 16


def _inputs(rope: bool, masked: bool):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, TOKENS, WIDTH)).astype("float32")
    arguments = {}
    if rope:
        arguments["rope"] = RotaryEmbedding2D(WIDTH // HEADS, dtype="float32")(keras.ops.zeros((1, 14, 14, 1)))
    if masked:  # a NaFlex batch: the second example's last 60 tokens are padding
        mask = np.ones((2, TOKENS), bool)
        mask[1, -60:] = False
        arguments["token_mask"] = mask
    return x, arguments


def _block(path, rope, query_tokens=None):
    keras.utils.set_random_seed(1)
    block = TransformerBlock(num_heads=HEADS, mlp_dim=2 * WIDTH, rope="rotate_half" if rope else None,
                             query_tokens=query_tokens)
    block.build((None, TOKENS, WIDTH))
    block.attention.attention_path = path
    return block


def _forward(path, rope, masked, query_tokens=None):
    x, arguments = _inputs(rope, masked)
    block = _block(path, rope, query_tokens)
    output = keras.ops.convert_to_numpy(keras.ops.cast(block(x, **arguments), "float32"))
    return output, block.attention.attention_path_taken


def _input_gradient(path, rope):
    """d(sum of squares of the block's output)/d(input), on the backend's own autodiff."""
    x, arguments = _inputs(rope, masked=False)
    block = _block(path, rope)
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        def loss(inputs):
            return keras.ops.sum(keras.ops.square(keras.ops.cast(block(inputs, **arguments), "float32")))

        return np.asarray(jax.grad(loss)(x))
    import torch

    inputs = torch.tensor(x, requires_grad=True)
    torch.sum(torch.square(block(inputs, **arguments).float())).backward()
    return inputs.grad.numpy()


def bound(name: str) -> float:
    """The relative bound of a compared case, by its precision (see the module's text)."""
    return FLOAT32_BOUND if name.startswith("float32") else BFLOAT16_BOUND


def outside_bounds(compared: dict) -> list:
    """The cases whose difference from the einsum path exceeds their bound, or whose layer ran another path than
    the one asked for."""
    wrong = []
    for name, result in compared.items():
        if result["max_abs_diff"] > bound(name) * result["scale"]:
            wrong.append(f"{name}: {result['max_abs_diff']:.3g} > {bound(name) * result['scale']:.3g}")
        if "taken" in result and result["taken"] != name.split()[1]:
            wrong.append(f"{name}: the layer ran {result['taken']!r}")
    return wrong


# The block layouts compared: RoPE or not, a token mask or not, every query or the class token's alone. --quick
# (scripts/gpu_benchmark.sh --quick, which checks the script on a CPU) keeps the RoPE one.
LAYOUTS = [(rope, masked, query_tokens) for rope in (False, True) for masked in (False, True)
           for query_tokens in (None, 1)]
QUICK_LAYOUTS = [(True, False, None)]


def compare(paths, layouts=LAYOUTS, policies=("float32", "mixed_bfloat16")) -> dict:
    results = {}
    for policy in policies:
        keras.mixed_precision.set_global_policy(policy)
        for rope, masked, query_tokens in layouts:
            reference, _ = _forward("einsum", rope, masked, query_tokens)
            for path in paths:
                output, taken = _forward(path, rope, masked, query_tokens)
                name = f"{policy} {path} rope={rope} masked={masked} query_tokens={query_tokens}"
                results[name] = {"max_abs_diff": float(np.abs(output - reference).max()), "taken": taken,
                                 "scale": float(np.abs(reference).max())}
        for path in paths:
            reference = _input_gradient("einsum", rope=True)
            gradient = _input_gradient(path, rope=True)
            results[f"{policy} {path} gradient"] = {"max_abs_diff": float(np.abs(gradient - reference).max()),
                                                   "scale": float(np.abs(reference).max())}
    keras.mixed_precision.set_global_policy("float32")
    return results


def automatic() -> dict:
    """The path each layer takes when none is asked for, with and without a token mask, and with the scores."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    x, arguments = _inputs(rope=False, masked=True)
    block = _block(None, rope=False)
    block(x)
    unmasked = block.attention.attention_path_taken
    block(x, **arguments)
    masked = block.attention.attention_path_taken
    _, scores = block(x, return_attention_scores=True)
    keras.mixed_precision.set_global_policy("float32")
    return {"unmasked": unmasked, "masked": masked, "with_scores": block.attention.attention_path_taken,
            "scores_shape": list(scores.shape)}


SCALE = 16**-0.5  # head size 16


def _unpadded(q, k, v):
    import jax

    return jax.nn.dot_product_attention(q, k, v, scale=SCALE, implementation="xla")


def _padded(q, k, v):
    return attention_path.padded_attention(q, k, v, SCALE, implementation="xla")


def _padded_unmasked(q, k, v):
    """The control: the keys padded with zeros as the cuDNN path pads them, but left in the softmax."""
    import jax
    import jax.numpy as jnp

    pad = attention_path.round_up(k.shape[1]) - k.shape[1]
    k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (k, v))
    return jax.nn.dot_product_attention(q, k, v, scale=SCALE, implementation="xla")


def _gradients(function, q, k, v):
    import jax
    import jax.numpy as jnp

    return jax.grad(lambda *xs: jnp.sum(jnp.sin(function(*xs))), argnums=(0, 1, 2))(q, k, v)


def padding_maths() -> dict:
    """JAX, float32: the cuDNN path's padding and masking run with XLA's implementation against the unpadded
    attention, forward and the gradients with respect to q, k and v; and, as a control, the same padding with the
    padded keys left unmasked (which must differ)."""
    import jax.numpy as jnp

    rng = np.random.default_rng(2)
    results = {}
    for queries in (TOKENS, 1):  # every token, and the class token alone (a head_tokens_only last block)
        q = jnp.asarray(rng.normal(size=(2, queries, HEADS, 16)).astype("float32"))
        k, v = (jnp.asarray(rng.normal(size=(2, TOKENS, HEADS, 16)).astype("float32")) for _ in range(2))
        reference = _unpadded(q, k, v)
        results[f"forward queries={queries}"] = {
            "max_abs_diff": float(jnp.abs(_padded(q, k, v) - reference).max()),
            "control_max_abs_diff": float(jnp.abs(_padded_unmasked(q, k, v) - reference).max()),
            "scale": float(jnp.abs(reference).max())}
        theirs = _gradients(_unpadded, q, k, v)
        for name, ours, expected in zip("qkv", _gradients(_padded, q, k, v), theirs):
            results[f"gradient d{name} queries={queries}"] = {
                "max_abs_diff": float(jnp.abs(ours - expected).max()), "scale": float(jnp.abs(expected).max())}
    return results


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--pretend-gpu", action="store_true",
                        help="JAX: report an NVIDIA GPU of compute capability 9.0 and run the cuDNN path's padding "
                        "and masking with XLA's implementation, which this CPU has")
    parser.add_argument("--check", action="store_true",
                        help="print each compared case against its bound; exit 1 when one is exceeded")
    parser.add_argument("--quick", action="store_true",
                        help="one block layout (RoPE), and no separate padding check: checks the script quickly")
    args = parser.parse_args(argv)
    backend = keras.backend.backend()
    paths = ["keras", "sdpa"] if backend == "torch" else ["keras"]
    if args.pretend_gpu:
        attention_path.device = lambda backend: ("gpu", (9, 0))
        attention_path.padded_attention = functools.partial(attention_path.padded_attention, implementation="xla")
    platform, capability = attention_path.device(backend)
    if backend == "jax" and platform == "gpu" and tuple(capability or (0, 0)) >= attention_path.FIRST_CUDNN_GPU:
        paths.append("cudnn")
    report = {"backend": backend, "device": [platform, capability], "automatic": automatic(), "paths": paths,
              "summary": hardware.summary()["attention"]}
    layouts = QUICK_LAYOUTS if args.quick else LAYOUTS
    report["compared"] = compare([p for p in paths if p != "cudnn"], layouts)
    if backend == "jax" and not args.quick:
        report["padding"] = padding_maths()
    if "cudnn" in paths:  # half precision only (its float32 calls are refused), and no token mask (see automatic)
        unmasked = [(rope, masked, query_tokens) for rope, masked, query_tokens in layouts if not masked]
        report["compared"].update(compare(["cudnn"], unmasked, policies=("mixed_bfloat16",)))
    with open(os.path.join(args.out, f"attention_paths-{backend}.json"), "w") as file:
        json.dump(report, file, indent=1)
    print(f"KERAS_BACKEND={backend} done")
    if args.check:
        for name, result in report["compared"].items():
            print(f"  {name:<70} {result['max_abs_diff'] / result['scale']:.2e} of scale (bound {bound(name):.1e})")
        wrong = outside_bounds(report["compared"])
        print("\n".join(["outside the bounds:", *wrong]) if wrong else "every path within its bound")
        return 1 if wrong else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
