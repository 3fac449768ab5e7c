"""The automatic precision follows the hardware: detection (mocked) -> dtype policy and XLA, with the reason recorded.

The CPU texts are abridged `/proc/cpuinfo` of the two CPU kinds this project measured (an AVX2-only AMD EPYC, where
bfloat16 is emulated, and a Zen 5 with avx512_bf16), plus an AMX Xeon and an AVX-512 CPU without BF16.
"""

import numpy as np
import pytest

from vit_keras import hardware, training

AVX2_EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 bmi2
"""
ZEN5 = """processor\t: 0
model name\t: AMD EPYC 9B45
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 avx_vnni
"""
SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8481C
flags\t\t: fpu sse2 avx2 fma avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
"""
SKYLAKE = """processor\t: 0
model name\t: Intel(R) Xeon(R) CPU @ 2.00GHz
flags\t\t: fpu sse2 avx2 fma avx512f avx512dq avx512bw avx512vl
"""
GRAVITON2 = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
"""


def machine(cpuinfo="", gpus=()):
    return hardware.Machine(hardware.parse_cpuinfo(cpuinfo), gpus=tuple(gpus))


class OneReplica:
    num_replicas_in_sync = 1


@pytest.mark.parametrize(
    "cpuinfo, native, flags",
    [
        (AVX2_EPYC, False, ["avx2", "fma"]),
        (ZEN5, True, ["avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16"]),
        (SAPPHIRE_RAPIDS, True, ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
                                 "amx_int8"]),
        (SKYLAKE, False, ["avx2", "fma", "avx512f"]),
        (GRAVITON2, False, []),
    ],
)
def test_cpuinfo_flags_are_read(cpuinfo, native, flags):
    detected = machine(cpuinfo)
    assert detected.cpu.known and detected.cpu.native_bfloat16 is native
    assert hardware.summary(detected)["cpu_flags"] == flags


@pytest.mark.parametrize(
    "cpuinfo, expected",
    [
        (AVX2_EPYC, ("float32", True)),  # bfloat16 emulated: float32 + XLA measured 3.4x faster
        (SKYLAKE, ("float32", True)),  # AVX-512 alone has no bfloat16 dot products
        (GRAVITON2, ("float32", True)),
        ("", ("float32", True)),  # flags unreadable: the safe choice
        (ZEN5, ("mixed_bfloat16", False)),  # oneDNN's native bf16 matmuls, which XLA's CPU GEMM lacks
        (SAPPHIRE_RAPIDS, ("mixed_bfloat16", False)),
    ],
)
def test_auto_precision_on_cpus(cpuinfo, expected):
    choice = hardware.choose_precision("CPU", machine(cpuinfo), environ={})
    assert (choice.policy, choice.jit_compile) == expected
    plan = training.plan_execution(OneReplica(), "auto", True, kind="CPU", machine=machine(cpuinfo), environ={})
    assert (plan.policy, plan.jit_compile) == expected
    assert plan.notes == (f"precision auto: {choice.reason}",)


@pytest.mark.parametrize(
    "environ, backend, expected",
    [
        # oneDNN capped below its bfloat16 kernels: bfloat16 emulated (or, on TensorFlow, a crashed process).
        ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "tensorflow", ("float32", True)),
        ({"ONEDNN_MAX_CPU_ISA": "avx512_core"}, "torch", ("float32", True)),
        ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "tensorflow", ("float32", True)),  # TensorFlow's Eigen kernels
        # Caps at or above the bfloat16 kernels, and settings the backend does not read, change nothing.
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, "tensorflow", ("mixed_bfloat16", False)),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, "torch", ("mixed_bfloat16", True)),
        ({"ONEDNN_MAX_CPU_ISA": "ALL"}, "tensorflow", ("mixed_bfloat16", False)),
        ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "torch", ("mixed_bfloat16", True)),
    ],
)
def test_onednn_kept_off_the_bfloat16_instructions_means_float32(environ, backend, expected):
    choice = hardware.choose_precision("CPU", machine(SAPPHIRE_RAPIDS), environ=environ, backend=backend)
    assert (choice.policy, choice.jit_compile) == expected, choice
    if expected[0] == "float32":
        assert "has native bfloat16 instructions, but" in choice.reason and next(iter(environ)) in choice.reason
        # Asked for by name, bfloat16 is emulated there: XLA is the faster of the two, as on an AVX2 CPU.
        assert hardware.xla_pays("CPU", "mixed_bfloat16", machine(SAPPHIRE_RAPIDS), backend, environ) == (True, None)


def test_the_recorded_note_says_why():
    plan = training.plan_execution(OneReplica(), "auto", kind="CPU", machine=machine(AVX2_EPYC), environ={})
    assert "AMD EPYC (avx2, fma) has no native bfloat16 instructions" in plan.notes[0]
    plan = training.plan_execution(OneReplica(), "auto", kind="CPU", machine=machine(ZEN5), environ={})
    assert "has native bfloat16 instructions" in plan.notes[0] and "avx512_bf16" in plan.notes[0]
    assert "XLA off" in plan.notes[0]
    plan = training.plan_execution(OneReplica(), "auto", kind="CPU", machine=machine(""), environ={})
    assert "could not be read" in plan.notes[0]


@pytest.mark.parametrize(
    "gpus, expected, why",
    [
        (((9, 0),), "mixed_bfloat16", "compute capability 9.0 has bfloat16"),
        (((8, 0), (8, 0)), "mixed_bfloat16", "compute capability 8.0 has bfloat16"),
        (((7, 5),), "mixed_float16", "loss scaling"),
        (((8, 6), (7, 0)), "mixed_float16", "compute capability 7.0"),  # the slowest GPU decides
        (((6, 1),), "float32", "no tensor cores"),
        ((), "mixed_float16", "unknown"),
    ],
)
def test_auto_precision_on_gpus(gpus, expected, why):
    choice = hardware.choose_precision("GPU", machine(AVX2_EPYC, gpus), environ={})
    assert choice.policy == expected and choice.jit_compile and why in choice.reason
    plan = training.plan_execution(OneReplica(), "auto", kind="GPU", machine=machine(AVX2_EPYC, gpus), environ={})
    assert plan.policy == expected and plan.loss_scaling == (expected == "mixed_float16")


def test_several_gpu_replicas_keep_the_float16_crash_rule():
    class EightReplicas:
        num_replicas_in_sync = 8

    turing = machine(AVX2_EPYC, [(7, 5)] * 8)
    plan = training.plan_execution(EightReplicas(), "auto", True, kind="GPU", machine=turing, environ={})
    assert (plan.policy, plan.jit_compile) == ("mixed_float16", False)
    assert "MirroredStrategy + XLA + float16" in plan.notes[-1]
    hopper = machine(AVX2_EPYC, [(9, 0)] * 8)
    plan = training.plan_execution(EightReplicas(), "auto", True, kind="GPU", machine=hopper, environ={})
    assert (plan.policy, plan.jit_compile) == ("mixed_bfloat16", True)


def test_tpu_computes_in_bfloat16_with_xla():
    choice = hardware.choose_precision("TPU", machine(AVX2_EPYC), environ={})
    assert (choice.policy, choice.jit_compile) == ("mixed_bfloat16", True)


@pytest.mark.parametrize(
    "value, cpuinfo, expected",
    [
        ("bfloat16", AVX2_EPYC, ("mixed_bfloat16", True)),  # emulated bf16: XLA is the faster of the two
        ("bfloat16", ZEN5, ("mixed_bfloat16", False)),
        ("float32", ZEN5, ("float32", True)),
        (" Float32 ", SAPPHIRE_RAPIDS, ("float32", True)),
        ("mixed_float16", AVX2_EPYC, ("mixed_float16", True)),
    ],
)
def test_environment_override(value, cpuinfo, expected):
    environ = {"VIT_KERAS_PRECISION": value}
    choice = hardware.choose_precision("CPU", machine(cpuinfo), environ=environ)
    assert (choice.policy, choice.jit_compile) == expected
    assert "VIT_KERAS_PRECISION" in choice.reason
    plan = training.plan_execution(OneReplica(), "auto", kind="CPU", machine=machine(cpuinfo), environ=environ)
    assert (plan.policy, plan.jit_compile) == expected and "VIT_KERAS_PRECISION" in plan.notes[0]


def test_environment_override_reads_os_environ_and_an_explicit_precision_wins(monkeypatch):
    monkeypatch.setenv("VIT_KERAS_PRECISION", "bfloat16")
    plan = training.plan_execution(OneReplica(), "auto", kind="CPU", machine=machine(AVX2_EPYC))
    assert plan.policy == "mixed_bfloat16"
    plan = training.plan_execution(OneReplica(), "float32", kind="CPU", machine=machine(AVX2_EPYC))
    assert (plan.policy, plan.jit_compile, plan.notes) == ("float32", True, ())


def test_a_bad_environment_override_is_named():
    with pytest.raises(ValueError, match=r"VIT_KERAS_PRECISION='fp8' is not a precision.*float32, bfloat16, float16"):
        hardware.choose_precision("CPU", machine(AVX2_EPYC), environ={"VIT_KERAS_PRECISION": "fp8"})


def test_macos_and_unknown_systems(monkeypatch):
    answers = {"machdep.cpu.brand_string": "Intel(R) Core(TM) i9-9980HK", "machdep.cpu.features": "FPU SSE2 AVX1.0",
               "machdep.cpu.leaf7_features": "AVX2 BMI2", "hw.optional.arm.FEAT_BF16": ""}
    monkeypatch.setattr(hardware, "_sysctl", lambda name: answers.get(name, ""))
    monkeypatch.setattr(hardware.platform, "system", lambda: "Darwin")
    hardware.cpu_info.cache_clear()
    try:
        cpu = hardware.cpu_info()
        assert (cpu.model, cpu.source, cpu.native_bfloat16) == ("Intel(R) Core(TM) i9-9980HK", "sysctl", False)
        assert "avx2" in cpu.flags
        monkeypatch.setattr(hardware.platform, "system", lambda: "Windows")
        hardware.cpu_info.cache_clear()
        assert not hardware.cpu_info().known
        assert hardware.choose_precision("CPU", hardware.Machine(hardware.cpu_info()), environ={}).policy == "float32"
    finally:
        hardware.cpu_info.cache_clear()


def test_this_machine_is_detected_once_and_described():
    assert hardware.cpu_info() is hardware.cpu_info()
    assert set(hardware.summary()) == {"cpu_model", "cpu_flags", "cpu_native_bfloat16", "cpu_source",
                                       "gpu_compute_capabilities", "attention"}


@pytest.mark.slow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_inference_follows_the_rule_and_pads_the_last_batch(tiny_kwargs, monkeypatch, jit_compile):
    import tensorflow as tf

    import vit_keras
    from vit_keras.training import evaluation

    chosen = []

    def xla_pays(kind, policy, detected=None):
        chosen.append((kind, policy))
        return jit_compile, None

    monkeypatch.setattr(hardware, "xla_pays", xla_pays)
    model = vit_keras.ViT(image_size=16, classes=5, **tiny_kwargs)
    images = np.random.default_rng(0).uniform(0, 255, (5, 16, 16, 3)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((images, np.arange(5) % 5)).batch(2)  # batches of 2, 2, 1
    scores, labels = evaluation.predict_dataset(model, dataset)
    assert chosen == [(hardware.default_kind(), "float32")]
    # Padding rows dropped; batches of 2 against one of 5 change only the matmul blocking (float32 rounding ~1e-6).
    np.testing.assert_allclose(scores, model.predict_on_batch(images), atol=1e-5)
    assert labels.tolist() == [0, 1, 2, 3, 4]


def test_plan_inference_keeps_a_models_policy():
    class Bf16Model:
        class dtype_policy:
            name = "mixed_bfloat16"

    plan = training.plan_inference(Bf16Model(), kind="CPU", machine=machine(ZEN5))
    assert (plan.policy, plan.jit_compile) == ("mixed_bfloat16", False) and "XLA off" in plan.notes[0]
    plan = training.plan_inference(Bf16Model(), kind="CPU", machine=machine(AVX2_EPYC))
    assert (plan.policy, plan.jit_compile, plan.notes) == ("mixed_bfloat16", True, ())
    plan = training.plan_inference(kind="CPU", machine=machine(AVX2_EPYC), environ={})
    assert (plan.policy, plan.jit_compile) == ("float32", True)
