"""Which kernel computes `softmax(q kᵀ / √d) v` in the attention layers, chosen from the backend and the device.

The paths (every one computes the same attention; they differ in speed and memory):

- `"einsum"`: the explicit scores, `einsum → softmax → einsum` (Keras `MultiHeadAttention`'s path when it returns
  the attention weights). Always available; `return_attention_scores=True` and attention dropout always take it.
- `"keras"`: `keras.ops.dot_product_attention` with Keras' own kernel choice: on TensorFlow the same composed
  maths (XLA fuses it), on JAX XLA's `jax.nn.dot_product_attention` (Splash attention on TPU), on PyTorch
  `scaled_dot_product_attention` behind Keras' checks.
- `"sdpa"` (PyTorch): `torch.nn.functional.scaled_dot_product_attention` called directly, boolean mask as is:
  PyTorch picks its flash / memory-efficient / cuDNN kernel on a GPU and its fused flash kernel on the CPU.
- `"cudnn"` (JAX on an NVIDIA GPU, Ampere or newer, float16 / bfloat16): cuDNN's flash attention through
  `jax.nn.dot_product_attention(implementation="cudnn")`, forward and backward. cuDNN's backward refuses ViT
  lengths such as 197 tokens, so the tokens are padded to a multiple of `CUDNN_SEQUENCE_MULTIPLE`, the padded
  keys masked out (`key_value_seq_lengths`) and the padded queries sliced off: the same result as unpadded.

The automatic choice (`choose`): `"sdpa"` on PyTorch, on the CPU too (2-vCPU Intel Xeon with AVX-512 and AMX,
shared: SDPA took 2.4-3.6x less time than the einsum path for the attention alone at ViT-B/16's shapes, batch 1
and 16, float32 and bfloat16, load average 1.3; for a whole B/16 block at batch 8, the paths alternated in one
process under load average 9, 1.17x less CPU time forward and 1.09x forward + backward in float32, the same within
2% in bfloat16), `"cudnn"` on JAX where cuDNN takes the call (NVIDIA GPU of compute capability 8.0 or newer, half
precision, head size a multiple of 8 up to 128, no token mask), `"keras"` otherwise.
`VIT_KERAS_ATTENTION=einsum|keras|sdpa|cudnn` (or a layer's `attention_path=` argument) overrides it; a path the
backend does not have is refused, never replaced in silence.

Example:
    >>> choose("torch", "cpu", environ={}).path
    'sdpa'
    >>> choose("jax", "cpu", environ={}).path
    'keras'
"""

from __future__ import annotations

import dataclasses
import functools
import os

ENVIRONMENT_VARIABLE = "VIT_KERAS_ATTENTION"
PATHS = ("einsum", "keras", "sdpa", "cudnn")
# The backends each path runs on (einsum and keras run everywhere).
PATH_BACKENDS = {"sdpa": ("torch",), "cudnn": ("jax",)}
# cuDNN's flash attention backward refused 197 tokens ("Unsupported sequence length") and took 208 = 13 x 16.
CUDNN_SEQUENCE_MULTIPLE = 16
CUDNN_DTYPES = ("float16", "bfloat16")
FIRST_CUDNN_GPU = (8, 0)  # Ampere: cuDNN's flash attention kernels
CUDNN_MAX_HEAD_SIZE = 128


@dataclasses.dataclass(frozen=True)
class AttentionPath:
    """A path name and the reason it was chosen (one sentence, for logs and benchmark reports).

    Example:
        >>> AttentionPath("einsum", "asked for").path
        'einsum'
    """

    path: str
    reason: str


def requested(environ=None) -> str | None:
    """The path `VIT_KERAS_ATTENTION` asks for, or None when it is unset, empty or `auto`.

    Example:
        >>> requested({"VIT_KERAS_ATTENTION": "einsum"}), requested({"VIT_KERAS_ATTENTION": "auto"})
        ('einsum', None)
    """
    environ = os.environ if environ is None else environ
    value = environ.get(ENVIRONMENT_VARIABLE, "").strip().lower()
    if value in ("", "auto"):
        return None
    return check(value, source=ENVIRONMENT_VARIABLE)


def check(path: str, backend: str | None = None, source: str = "attention_path") -> str:
    """`path` if it names a path (and, given `backend`, one that backend has); a ValueError saying why not.

    Example:
        >>> check("sdpa", "torch")
        'sdpa'
    """
    if path not in PATHS:
        raise ValueError(f"{source}={path!r} is not an attention path: choose one of {', '.join(PATHS)} "
                         "(or leave it unset for the automatic choice).")
    if backend is not None and backend not in PATH_BACKENDS.get(path, (backend,)):
        raise ValueError(f"{source}={path!r} runs on the {' or '.join(PATH_BACKENDS[path])} backend only, and "
                         f"Keras runs on {backend}: choose one of "
                         f"{', '.join(p for p in PATHS if backend in PATH_BACKENDS.get(p, (backend,)))}.")
    return path


def cudnn_refusal(platform: str, capability: tuple | None, dtype: str, head_size: int | None = None,
                  masked: bool = False) -> str | None:
    """Why cuDNN's flash attention cannot take this call, or None when it can.

    Example:
        >>> cudnn_refusal("gpu", (9, 0), "bfloat16", 64) is None
        True
        >>> cudnn_refusal("gpu", (9, 0), "float32", 64)
        'cuDNN flash attention computes in float16 or bfloat16, not float32'
    """
    if platform not in ("gpu", "cuda"):
        return f"cuDNN runs on NVIDIA GPUs, and JAX runs on {platform}"
    if capability is None or tuple(capability) < FIRST_CUDNN_GPU:
        return f"cuDNN flash attention needs compute capability 8.0 or newer, not {capability}"
    if dtype not in CUDNN_DTYPES:
        return f"cuDNN flash attention computes in float16 or bfloat16, not {dtype}"
    if head_size is not None and (head_size % 8 or head_size > CUDNN_MAX_HEAD_SIZE):
        return f"cuDNN flash attention takes head sizes that are multiples of 8 up to 128, not {head_size}"
    if masked:
        return "a token mask (a NaFlex batch) is not a padding mask cuDNN's kernel takes"
    return None


def choose(backend: str, platform: str, capability: tuple | None = None, dtype: str = "float32",
           head_size: int | None = None, masked: bool = False, environ=None) -> AttentionPath:
    """The attention path for one call: `backend` ("tensorflow", "jax", "torch"), the device's `platform`
    ("cpu", "gpu", "tpu"), its compute `capability` on a GPU, the compute `dtype`, the head size and whether a
    token mask comes with the call. `VIT_KERAS_ATTENTION` (in `environ`, default `os.environ`) takes precedence.

    Example:
        >>> choose("jax", "gpu", (9, 0), "bfloat16", 64, environ={}).path
        'cudnn'
        >>> choose("jax", "gpu", (9, 0), "float32", 64, environ={}).reason
        'keras: cuDNN flash attention computes in float16 or bfloat16, not float32'
    """
    override = requested(environ)
    if override is not None:
        return AttentionPath(check(override, backend, ENVIRONMENT_VARIABLE), f"{override} from {ENVIRONMENT_VARIABLE}")
    if backend == "torch":
        return AttentionPath("sdpa", "sdpa: PyTorch's scaled_dot_product_attention (its flash / memory-efficient "
                                     "kernels on a GPU, its fused flash kernel on a CPU)")
    if backend == "jax":
        refusal = cudnn_refusal(platform, capability, dtype, head_size, masked)
        if refusal is None:
            return AttentionPath("cudnn", f"cudnn: flash attention, tokens padded to a multiple of "
                                          f"{CUDNN_SEQUENCE_MULTIPLE} with the padding masked")
        return AttentionPath("keras", f"keras: {refusal}")
    return AttentionPath("keras", "keras: TensorFlow has no fused attention kernel; XLA fuses Keras' own")


@functools.cache
def device(backend: str) -> tuple:
    """`(platform, compute capability or None)` of the device the Keras `backend` computes on by default.

    Example:
        >>> device("tensorflow")[1] is None
        True
    """
    if backend == "jax":
        import jax

        first = jax.devices()[0]
        capability = getattr(first, "compute_capability", None)
        return first.platform, tuple(int(part) for part in capability.split(".")) if capability else None
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return "cuda", tuple(torch.cuda.get_device_capability())
        return "cpu", None
    return "any", None


def for_call(backend: str, dtype: str, head_size: int | None = None, masked: bool = False,
             asked: str | None = None) -> AttentionPath:
    """The path a layer takes on this machine: `asked` (a layer's `attention_path=`) when given, else `choose`.

    Example:
        >>> for_call("tensorflow", "float32", asked="einsum").path
        'einsum'
    """
    if asked is not None:
        return AttentionPath(check(asked, backend), f"{asked}: the layer's attention_path")
    # Only JAX's choice depends on the device; PyTorch's is SDPA everywhere, and asking CUDA from inside a
    # `torch.compile`d call is a cached function call Dynamo warns about.
    platform, capability = device(backend) if backend == "jax" else ("any", None)
    return choose(backend, platform, capability, dtype, head_size, masked)


def round_up(length: int, multiple: int = CUDNN_SEQUENCE_MULTIPLE) -> int:
    """`length` rounded up to a multiple of `multiple`.

    Example:
        >>> round_up(197), round_up(1), round_up(208)
        (208, 16, 208)
    """
    return -(-length // multiple) * multiple


def padded_attention(query, key, value, scale: float, implementation: str = "cudnn",
                     multiple: int = CUDNN_SEQUENCE_MULTIPLE):
    """`jax.nn.dot_product_attention` on `(batch, tokens, heads, size)` JAX arrays padded to a multiple of
    `multiple` tokens: the padded keys are masked out with `key_value_seq_lengths`, the padded queries' rows sliced
    off, so the result is the unpadded attention's. `implementation="xla"` runs the same maths on any device.

    Example:
        >>> import jax.numpy as jnp
        >>> q = jnp.ones((1, 5, 2, 8)); padded_attention(q, q, q, 8**-0.5, "xla").shape
        (1, 5, 2, 8)
    """
    import jax
    import jax.numpy as jnp

    tokens, keys = query.shape[1], key.shape[1]

    def pad(x, length):
        return jnp.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0), (0, 0)))

    lengths = jnp.full((query.shape[0],), keys, dtype=jnp.int32)
    output = jax.nn.dot_product_attention(
        pad(query, round_up(tokens, multiple)), pad(key, round_up(keys, multiple)),
        pad(value, round_up(keys, multiple)), scale=scale, key_value_seq_lengths=lengths,
        implementation=implementation)
    return output[:, :tokens]


def sdpa(query, key, value, scale: float, mask=None):
    """PyTorch's `scaled_dot_product_attention` on `(batch, tokens, heads, size)` tensors; `mask` is boolean,
    broadcastable to `(batch, heads, queries, keys)`, true where a query may attend.

    Example:
        >>> import torch
        >>> q = torch.ones(1, 5, 2, 8); tuple(sdpa(q, q, q, 8**-0.5).shape)
        (1, 5, 2, 8)
    """
    import torch

    output = torch.nn.functional.scaled_dot_product_attention(
        query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), attn_mask=mask, scale=scale)
    return output.transpose(1, 2)
