"""What this machine computes fast, and the precision and XLA setting that follow from it.

The rule (measured with `scripts/benchmark.py`, ViT-B/16; docs/performance.md has the tables):

- CPU with native bfloat16 instructions (`avx512_bf16` or AMX `amx_bf16`), per Keras backend:
  TensorFlow: `mixed_bfloat16` *without* XLA. TensorFlow's oneDNN bfloat16 matmuls (AMX `brg_matmul` kernels)
  are 1.6x faster than float32 there, and XLA's CPU GEMM has no bfloat16 speed-up, so XLA would undo the gain
  (AMX Xeon, ViT-B/16 batch 16, alternated: 2.1x the images/s of float32 with XLA).
  PyTorch: `mixed_bfloat16` with `torch.compile` (`jit_compile=True`): its matmuls use oneDNN's bfloat16 kernels
  compiled or not, and compiling fuses the rest.
  JAX: `float32` (always compiled): XLA is its only runtime, and bfloat16 measured no faster than float32 there.
  Where this process keeps oneDNN off those instructions (`ONEDNN_MAX_CPU_ISA` below AVX512_CORE_BF16, or
  `TF_ENABLE_ONEDNN_OPTS=0` on TensorFlow), bfloat16 is emulated: the CPU is treated as one without them.
- Any other CPU (AVX2, or AVX-512 without BF16, or flags that cannot be read): `float32` with XLA. bfloat16
  is emulated there: 3.4x slower than float32 + XLA at batch 1 (1.30 against 4.38 images/s) and 2.6x at 16.
- GPU: `mixed_bfloat16` from compute capability 8.0 (Ampere) on, `mixed_float16` with loss scaling on 7.x
  (tensor cores, no bfloat16), `float32` below 7.0 (no tensor cores: TensorFlow's mixed-precision guide warns
  that half precision is no faster there); XLA on.
- TPU: `mixed_bfloat16` with XLA.

`VIT_KERAS_PRECISION=float32|bfloat16|float16` overrides the automatic choice (XLA then follows the same rule
for that precision). Detection runs once per process: CPU flags from `/proc/cpuinfo` (Linux) or `sysctl`
(macOS), "unknown" elsewhere; GPU compute capabilities from TensorFlow when it is installed.

Example:
    >>> from vit_keras import hardware
    >>> cpu = hardware.parse_cpuinfo("model name : AMD EPYC\\nflags : fpu avx2 fma\\n")
    >>> hardware.choose_precision("CPU", hardware.Machine(cpu=cpu), environ={}).policy
    'float32'
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import platform
import subprocess

ENVIRONMENT_VARIABLE = "VIT_KERAS_PRECISION"
# The override's values and the Keras dtype policy each one selects.
OVERRIDES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
# Instructions that make bfloat16 matmuls native (oneDNN uses them; without them bfloat16 is emulated).
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")
# The flags worth recording next to a measurement: what the matmul kernels can use.
REPORTED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
                  "amx_int8", "bf16", "i8mm", "sve")
# oneDNN's instruction-set caps (`ONEDNN_MAX_CPU_ISA`), lowest first, and the first at which its bfloat16 matmuls
# use the CPU's bfloat16 instructions: under a lower cap they are emulated, or on TensorFlow 2.21 the process dies
# (a bfloat16 tf.matmul under ONEDNN_MAX_CPU_ISA=AVX2 on an AMX Xeon: segmentation fault).
ONEDNN_ISA_VARIABLE = "ONEDNN_MAX_CPU_ISA"
ONEDNN_ISAS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
               "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512", "AVX512_CORE_AMX", "AVX10_1_512_AMX",
               "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX_FP16")
FIRST_BFLOAT16_ONEDNN_ISA = "AVX512_CORE_BF16"
FIRST_BFLOAT16_GPU = (8, 0)  # Ampere: bfloat16 tensor cores
FIRST_FLOAT16_GPU = (7, 0)  # Volta: float16 tensor cores


@dataclasses.dataclass(frozen=True)
class CpuInfo:
    """The CPU's model name and instruction-set flags (lower case, Linux names), and where they were read.

    Example:
        >>> CpuInfo("Xeon", frozenset({"avx512_bf16"}), "/proc/cpuinfo").native_bfloat16
        True
    """

    model: str
    flags: frozenset
    source: str

    @property
    def native_bfloat16(self) -> bool:
        return any(flag in self.flags for flag in BFLOAT16_FLAGS)

    @property
    def known(self) -> bool:
        return self.source != "unknown"

    def describe(self) -> str:
        """The model and the matmul-relevant flags, e.g. "AMD EPYC (avx2, fma)".

        Example:
            >>> CpuInfo("AMD EPYC", frozenset({"avx2", "fma", "sse"}), "/proc/cpuinfo").describe()
            'AMD EPYC (avx2, fma)'
        """
        if not self.known:
            return f"{self.model or 'CPU'} (instruction set unknown)"
        shown = [flag for flag in REPORTED_FLAGS if flag in self.flags]
        return f"{self.model or 'CPU'} ({', '.join(shown) or 'no AVX2 or AVX-512'})"


def parse_cpuinfo(text: str) -> CpuInfo:
    """Read the model name and flags of the first processor in Linux's `/proc/cpuinfo` text.

    x86 lists its flags under "flags", ARM under "Features".

    Example:
        >>> parse_cpuinfo("model name\\t: Intel Xeon\\nflags\\t\\t: avx2 amx_bf16 amx_tile\\n").native_bfloat16
        True
    """
    model, flags = "", None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and flags is None:
            flags = frozenset(value.lower().split())
    if flags is None:
        return CpuInfo(model, frozenset(), "unknown")
    return CpuInfo(model, flags, "/proc/cpuinfo")


def _sysctl(name: str) -> str:
    try:
        process = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return process.stdout.strip() if process.returncode == 0 else ""


def _macos_cpu() -> CpuInfo:
    model = _sysctl("machdep.cpu.brand_string")
    # Intel Macs: "AVX2 FMA ..." in two lists, named like Linux's flags once lower-cased ("AVX512F" -> "avx512f").
    listed = f"{_sysctl('machdep.cpu.features')} {_sysctl('machdep.cpu.leaf7_features')}".lower().split()
    flags = {flag.replace(".", "_") for flag in listed}
    if _sysctl("hw.optional.arm.FEAT_BF16") == "1":  # Apple silicon
        flags.add("bf16")
    if not model and not flags:
        return CpuInfo(platform.processor(), frozenset(), "unknown")
    return CpuInfo(model, frozenset(flags), "sysctl")


@functools.lru_cache(maxsize=1)
def cpu_info() -> CpuInfo:
    """This machine's CPU, read once per process.

    Example:
        >>> isinstance(cpu_info().flags, frozenset)
        True
    """
    system = platform.system()
    if system == "Linux":
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as file:
                return parse_cpuinfo(file.read())
        except OSError:
            pass
    elif system == "Darwin":
        return _macos_cpu()
    return CpuInfo(platform.processor(), frozenset(), "unknown")


@functools.lru_cache(maxsize=1)
def gpu_capabilities() -> tuple:
    """The compute capability `(major, minor)` of every GPU TensorFlow sees; () without GPUs or TensorFlow.

    Example:
        >>> all(len(capability) == 2 for capability in gpu_capabilities())  # e.g. ((9, 0),) on an H100
        True
    """
    try:
        import tensorflow as tf
    except ImportError:  # a machine without TensorFlow: ask the Keras backend's own framework
        return _backend_gpu_capabilities()
    capabilities = []
    for gpu in tf.config.list_physical_devices("GPU"):
        capability = tf.config.experimental.get_device_details(gpu).get("compute_capability") or (0, 0)
        capabilities.append(tuple(int(part) for part in capability))
    return tuple(capabilities)


def _backend_gpu_capabilities() -> tuple:
    """The GPUs' compute capabilities as JAX or PyTorch (whichever Keras runs on) sees them; () on other backends."""
    import keras

    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        return tuple(tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count()))
    if backend == "jax":
        import jax

        try:
            gpus = jax.devices("gpu")
        except RuntimeError:  # no GPU backend
            return ()
        return tuple(tuple(int(part) for part in device.compute_capability.split("."))
                     for device in gpus if getattr(device, "compute_capability", None))
    return ()


def on_tpu_vm() -> bool:
    """True on a Cloud TPU VM, whose TPU chips appear as `/dev/accel*` (v2-v4) or `/dev/vfio/*` with
    `TPU_ACCELERATOR_TYPE` set (v5 and later).

    Example:
        >>> isinstance(on_tpu_vm(), bool)
        True
    """
    return bool(glob.glob("/dev/accel*")) or (bool(os.environ.get("TPU_ACCELERATOR_TYPE"))
                                              and bool(glob.glob("/dev/vfio/[0-9]*")))


@dataclasses.dataclass(frozen=True)
class Machine:
    """What the precision rule looks at: the CPU and the GPUs' compute capabilities.

    Example:
        >>> Machine(cpu=CpuInfo("", frozenset(), "unknown"), gpus=((8, 6),)).gpus
        ((8, 6),)
    """

    cpu: CpuInfo
    gpus: tuple = ()


def machine() -> Machine:
    """This machine, detected once per process (see `cpu_info` and `gpu_capabilities`).

    Example:
        >>> isinstance(machine().cpu, CpuInfo)
        True
    """
    return Machine(cpu_info(), gpu_capabilities())


def default_kind(detected: Machine | None = None) -> str:
    """Where TensorFlow runs a model by default here: "GPU" when one is visible, else "CPU".

    Example:
        >>> default_kind(Machine(cpu=CpuInfo("", frozenset(), "unknown"), gpus=((9, 0),)))
        'GPU'
    """
    detected = detected or machine()
    return "GPU" if detected.gpus else "CPU"


def precision_override(environ=None) -> str | None:
    """The dtype policy `VIT_KERAS_PRECISION` asks for, or None when it is unset or empty.

    Example:
        >>> precision_override({"VIT_KERAS_PRECISION": "bfloat16"})
        'mixed_bfloat16'
    """
    environ = os.environ if environ is None else environ
    value = environ.get(ENVIRONMENT_VARIABLE, "").strip().lower()
    if not value:
        return None
    aliases = {**OVERRIDES, **{policy: policy for policy in OVERRIDES.values()}}
    if value not in aliases:
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={environ[ENVIRONMENT_VARIABLE]!r} is not a precision: set it to "
                         f"one of {', '.join(OVERRIDES)} (or unset it for the automatic choice).")
    return aliases[value]


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    """A dtype policy, whether XLA pays with it, and why (one sentence, for logs and `results.json`).

    Example:
        >>> PrecisionChoice("float32", True, "float32 with XLA: ...").policy
        'float32'
    """

    policy: str
    jit_compile: bool
    reason: str


def onednn_bfloat16_off(backend: str, environ=None) -> str | None:
    """Why this process's oneDNN settings keep bfloat16 matmuls off the CPU's bfloat16 instructions, or None:
    `ONEDNN_MAX_CPU_ISA` capped below AVX512_CORE_BF16 (TensorFlow and PyTorch), or `TF_ENABLE_ONEDNN_OPTS=0`
    (TensorFlow's own Eigen kernels, which emulate bfloat16).

    Example:
        >>> onednn_bfloat16_off("tensorflow", {"ONEDNN_MAX_CPU_ISA": "AVX2"})
        'ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN below its bfloat16 kernels (AVX512_CORE_BF16)'
        >>> onednn_bfloat16_off("tensorflow", {}) is None
        True
    """
    environ = os.environ if environ is None else environ
    cap = environ.get(ONEDNN_ISA_VARIABLE, "").strip().upper()
    if cap in ONEDNN_ISAS and ONEDNN_ISAS.index(cap) < ONEDNN_ISAS.index(FIRST_BFLOAT16_ONEDNN_ISA) \
            and backend in ("tensorflow", "torch"):
        return f"{ONEDNN_ISA_VARIABLE}={cap} caps oneDNN below its bfloat16 kernels ({FIRST_BFLOAT16_ONEDNN_ISA})"
    if backend == "tensorflow" and environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip().lower() in ("0", "false"):
        return "TF_ENABLE_ONEDNN_OPTS=0 turns TensorFlow's oneDNN kernels off; its own kernels emulate bfloat16"
    return None


def _native_bfloat16(cpu: CpuInfo, backend: str, environ=None) -> bool:
    """The CPU has bfloat16 instructions and this process's matmuls for `backend` can use them."""
    return cpu.native_bfloat16 and onednn_bfloat16_off(backend, environ) is None


def xla_pays(kind: str, policy: str, detected: Machine | None = None,
             backend: str | None = None, environ=None) -> tuple[bool, str | None]:
    """Whether compiling with XLA is faster for `policy` on `kind`, and the reason when it is not.

    Only one case loses: bfloat16 on a CPU with native bfloat16 instructions on TensorFlow, where oneDNN's bfloat16
    matmuls (used without XLA) are 1.6x faster than XLA's CPU GEMM. Where bfloat16 is emulated, XLA is 2x faster.
    `backend` (default: the Keras backend in use) decides what compiling means: on PyTorch it is `torch.compile`,
    which keeps oneDNN's matmuls, and JAX always compiles with XLA. `environ` (default `os.environ`): where oneDNN
    is capped below its bfloat16 kernels or off (`onednn_bfloat16_off`), bfloat16 is emulated and XLA pays.

    Example:
        >>> xla_pays("CPU", "float32", Machine(cpu=CpuInfo("", frozenset(), "unknown")))
        (True, None)
    """
    backend = _keras_backend(backend)
    if kind != "CPU" or policy != "mixed_bfloat16" or backend in ("torch", "jax"):
        return True, None
    cpu = (detected or machine()).cpu
    if _native_bfloat16(cpu, backend, environ):
        return False, (f"XLA off: on {cpu.describe()}, TensorFlow's oneDNN bfloat16 kernels beat XLA's "
                       "(ViT-B/16 fine-tune step 1.6x faster without XLA)")
    return True, None


def _keras_backend(backend: str | None) -> str:
    if backend is not None:
        return backend
    import keras

    return keras.backend.backend()


def _native_bfloat16_cpu_choice(cpu: CpuInfo, backend: str, detected: Machine, environ) -> PrecisionChoice:
    """The precision for a CPU with avx512_bf16/AMX: what each Keras backend computes fastest there."""
    if backend == "jax":
        return PrecisionChoice("float32", True, f"float32 with XLA: on JAX every model runs through XLA, whose CPU "
                                                f"matmuls do not use the bfloat16 instructions of {cpu.describe()} "
                                                "(ViT-B/16 in bfloat16 measured no faster than in float32)")
    if backend == "torch":
        return PrecisionChoice("mixed_bfloat16", True,
                               f"mixed_bfloat16 with torch.compile: {cpu.describe()} has native bfloat16 "
                               "instructions, which PyTorch's oneDNN matmuls use compiled or not, and torch.compile "
                               "fuses the rest")
    _, why_not = xla_pays("CPU", "mixed_bfloat16", detected, backend, environ)
    return PrecisionChoice("mixed_bfloat16", False,
                           f"mixed_bfloat16: {cpu.describe()} has native bfloat16 instructions "
                           f"(1.6x faster than float32); {why_not}")


def choose_precision(kind: str, detected: Machine | None = None, environ=None,
                     backend: str | None = None) -> PrecisionChoice:
    """The fastest dtype policy and XLA setting for one `kind` of device ("CPU", "GPU" or "TPU") here.

    `VIT_KERAS_PRECISION` (in `environ`, default `os.environ`) takes precedence, and oneDNN's settings there
    (`onednn_bfloat16_off`) decide whether a CPU's bfloat16 instructions are used; see the module docstring for
    the rule and the measurements behind it. `backend` is the Keras backend the model runs on (default: the one in
    use); it matters on CPUs with native bfloat16, where each backend's fastest setting differs.

    Example:
        >>> avx512_bf16 = Machine(cpu=parse_cpuinfo("flags : avx2 avx512f avx512_bf16"))
        >>> choice = choose_precision("CPU", avx512_bf16, environ={})
        >>> choice.policy, choice.jit_compile
        ('mixed_bfloat16', False)
    """
    detected = detected or machine()
    backend = _keras_backend(backend)
    override = precision_override(environ)
    if override is not None:
        jit, why_not = xla_pays(kind, override, detected, backend, environ)
        reason = f"{override} from {ENVIRONMENT_VARIABLE}" + (f"; {why_not}" if why_not else "")
        return PrecisionChoice(override, jit, reason)
    if kind == "TPU":
        return PrecisionChoice("mixed_bfloat16", True, "mixed_bfloat16 with XLA: TPUs compute in bfloat16")
    if kind == "GPU":
        if not detected.gpus:
            return PrecisionChoice("mixed_float16", True,
                                   "mixed_float16 with XLA: the GPU's compute capability is unknown")
        lowest = min(detected.gpus)
        named = f"GPU compute capability {lowest[0]}.{lowest[1]}"
        if lowest >= FIRST_BFLOAT16_GPU:
            return PrecisionChoice("mixed_bfloat16", True, f"mixed_bfloat16 with XLA: {named} has bfloat16 "
                                                           "tensor cores (no loss scaling needed)")
        if lowest >= FIRST_FLOAT16_GPU:
            return PrecisionChoice("mixed_float16", True, f"mixed_float16 with XLA and loss scaling: {named} has "
                                                          "float16 tensor cores but no bfloat16")
        return PrecisionChoice("float32", True, f"float32 with XLA: {named} has no tensor cores, where half "
                                                "precision is no faster")
    cpu = detected.cpu
    if _native_bfloat16(cpu, backend, environ):
        return _native_bfloat16_cpu_choice(cpu, backend, detected, environ)
    if cpu.native_bfloat16:
        return PrecisionChoice("float32", True, f"float32 with XLA: {cpu.describe()} has native bfloat16 "
                                                f"instructions, but {onednn_bfloat16_off(backend, environ)}")
    if not cpu.known:
        return PrecisionChoice("float32", True, f"float32 with XLA: the instruction set of {cpu.describe()} could "
                                                "not be read, and bfloat16 is only faster with avx512_bf16/AMX")
    return PrecisionChoice("float32", True, f"float32 with XLA: {cpu.describe()} has no native bfloat16 "
                                            "instructions (avx512_bf16/amx_bf16), where bfloat16 measured up to "
                                            "3.4x slower than float32 with XLA")


def attention_paths(head_size: int = 64) -> dict:
    """The attention path the attention layers take here (`vit_keras.layers.attention_path`) on the Keras backend
    in use, for float32 and bfloat16 models (ViT-B/16's head size 64 by default), with the reason: a NaFlex batch
    (with a token mask) may take another, and the layer reports the one it ran (`attention_path_taken`).

    Example:
        >>> sorted(attention_paths())
        ['bfloat16', 'float32']
    """
    import keras

    from vit_keras.layers import attention_path

    backend = keras.backend.backend()
    return {precision: attention_path.for_call(backend, precision, head_size).reason
            for precision in ("float32", "bfloat16")}


def summary(detected: Machine | None = None) -> dict:
    """What to record next to a measurement or a run: CPU model, matmul-relevant flags, GPUs, and the attention
    path on the Keras backend in use.

    Example:
        >>> sorted(summary())
        ['attention', 'cpu_flags', 'cpu_model', 'cpu_native_bfloat16', 'cpu_source', 'gpu_compute_capabilities']
    """
    detected = detected or machine()
    return {
        "cpu_model": detected.cpu.model,
        "cpu_flags": [flag for flag in REPORTED_FLAGS if flag in detected.cpu.flags],
        "cpu_native_bfloat16": detected.cpu.native_bfloat16,
        "cpu_source": detected.cpu.source,
        "gpu_compute_capabilities": [f"{major}.{minor}" for major, minor in detected.gpus],
        "attention": attention_paths(),
    }
