"""The automatic precision on a CPU with native bfloat16 follows the Keras backend the model runs on.

Each backend's fastest setting on an AMX Xeon (docs/performance.md, "bfloat16 on an AMX CPU"): TensorFlow runs
oneDNN's AMX bfloat16 matmuls without XLA (XLA's CPU GEMM has none); PyTorch runs them compiled or not, and
torch.compile fuses the rest; JAX runs everything through XLA, where bfloat16 is no faster than float32.
"""

import keras
import pytest

from tests.test_hardware import AVX2_EPYC, SAPPHIRE_RAPIDS, ZEN5, machine
from vit_keras import hardware


@pytest.mark.parametrize("cpuinfo", [SAPPHIRE_RAPIDS, ZEN5])
@pytest.mark.parametrize(
    "backend, expected",
    [
        ("tensorflow", ("mixed_bfloat16", False)),
        ("torch", ("mixed_bfloat16", True)),  # jit_compile=True is torch.compile there
        ("jax", ("float32", True)),
    ],
)
def test_native_bfloat16_cpus_get_each_backends_fastest_setting(cpuinfo, backend, expected):
    choice = hardware.choose_precision("CPU", machine(cpuinfo), environ={}, backend=backend)
    assert (choice.policy, choice.jit_compile) == expected
    assert ("XLA off" in choice.reason) == (backend == "tensorflow")


@pytest.mark.parametrize("backend", ["tensorflow", "torch", "jax"])
def test_emulated_bfloat16_stays_float32_with_compilation_on_every_backend(backend):
    choice = hardware.choose_precision("CPU", machine(AVX2_EPYC), environ={}, backend=backend)
    assert (choice.policy, choice.jit_compile) == ("float32", True)


def test_compiling_pays_for_bfloat16_on_pytorch_and_jax():
    amx = machine(SAPPHIRE_RAPIDS)
    assert hardware.xla_pays("CPU", "mixed_bfloat16", amx, backend="tensorflow")[0] is False
    assert hardware.xla_pays("CPU", "mixed_bfloat16", amx, backend="torch") == (True, None)
    assert hardware.xla_pays("CPU", "mixed_bfloat16", amx, backend="jax") == (True, None)
    override = hardware.choose_precision("CPU", amx, environ={"VIT_KERAS_PRECISION": "bfloat16"}, backend="torch")
    assert (override.policy, override.jit_compile) == ("mixed_bfloat16", True)


def test_the_backend_in_use_is_the_default():
    amx = machine(SAPPHIRE_RAPIDS)
    assert (hardware.choose_precision("CPU", amx, environ={})
            == hardware.choose_precision("CPU", amx, environ={}, backend=keras.backend.backend()))
