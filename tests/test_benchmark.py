"""scripts/benchmark.py keeps working: every case runs in its own process and the report compares like with like.

No wall-clock time is asserted: a throughput only has to be a positive number. What is asserted is that the
peers are the same network (equal parameter counts with timm, an independent implementation; ONNX Runtime's
output equal to timm's), that each peer is reported at its best setting, and that the ratios and the share of
the matmul peak are computed from the measurements.
"""

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from scripts import benchmarking
from scripts.benchmarking import keras_runs, machine, peers, report, settings, suites

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "benchmark.py")


def _run(tmp_path, *arguments):
    path = tmp_path / "results.json"
    process = subprocess.run([sys.executable, SCRIPT, "--quick", "--json", str(path), *arguments],
                             capture_output=True, text=True, timeout=900)
    assert process.returncode == 0, process.stderr[-2000:]
    return json.loads(path.read_text()), process.stdout


@pytest.mark.slow
def test_quick_inference_benchmark_measures_every_peer_and_the_matmul_peak(tmp_path):
    measured, printed = _run(tmp_path, "--libraries", "vit_keras,timm,onnxruntime", "--batch-sizes", "2",
                             "--precisions", "float32", "--xla", "on", "--torch-compile", "off", "--matmul-size", "128",
                             "--backends", "tensorflow", "--runtimes", "keras")
    by_library = {row["library"]: row for row in measured["results"]
                  if row.get("call") != "predict" and row.get("head_tokens_only", True)}
    assert set(by_library) == {"vit_keras", "timm", "onnxruntime", "tf.matmul"}, measured["results"]
    (all_tokens,) = [row for row in measured["results"] if row.get("head_tokens_only") is False]
    for row in measured["results"]:
        assert "skipped" not in row, row
        assert row["peak_rss_mib"] > 0
    # Same architecture, written independently: the parameter counts must agree to the parameter, and the
    # ONNX export must compute what timm computes (float32, same kernels' order of magnitude of rounding).
    assert by_library["vit_keras"]["parameters"] == by_library["timm"]["parameters"] \
        == by_library["onnxruntime"]["parameters"] == all_tokens["parameters"]
    assert by_library["onnxruntime"]["max_abs_diff_vs_torch"] < 1e-4
    assert by_library["tf.matmul"]["gflop_per_s"] > 0 and by_library["tf.matmul"]["batch"] == 128
    # The machine is named, with the flags the precision rule reads.
    from vit_keras import hardware

    assert measured["machine"]["cpu_flags"] == hardware.summary(hardware.Machine(hardware.cpu_info()))["cpu_flags"]
    assert measured["machine"]["cpu_model"] in printed.splitlines()[0]
    (summary,) = measured["summary"]
    # Keras' predict loop on a NumPy batch is vit_keras' from-host row; its best is its compiled function of a
    # tensor on the device.
    predict = [row for row in measured["results"] if row.get("call") == "predict"]
    assert len(predict) == 1 and predict[0]["images_per_s"] > 0 and predict[0]["input"] == "host"
    function = by_library["vit_keras"]["images_per_s"]
    assert summary["predict_vs_function"] == round(predict[0]["images_per_s"] / function, 3)
    assert "model.predict at batch 2 (float32)" in printed
    # head_tokens_only against the same model computing every token of the last block, same setting.
    assert summary["head_tokens_only_gain"] == round(function / all_tokens["images_per_s"], 3)
    assert "head_tokens_only at inference batch 2 (float32, XLA)" in printed and "| XLA, all tokens |" in printed
    best = max((by_library["vit_keras"], all_tokens), key=lambda row: row["images_per_s"])
    ours = best["images_per_s"]
    timm_on_device = max(row["images_per_s"] for row in measured["results"]
                         if row["library"] == "timm" and row["input"] == "device")
    for peer, theirs in (("timm", timm_on_device), ("onnxruntime", by_library["onnxruntime"]["images_per_s"])):
        ratio = ours / theirs
        assert summary["ratios"][peer] == round(ratio, 2) and f"— {ratio:.2f} |" in printed
    # From host: vit_keras' predict loop against timm fed NumPy and ONNX Runtime (NumPy in, always).
    timm_from_host = max(row["images_per_s"] for row in measured["results"]
                         if row["library"] == "timm" and row["input"] == "host")
    assert summary["from_host"]["vit_keras"]["images_per_s"] == predict[0]["images_per_s"]
    assert summary["from_host_ratios"]["timm"] == round(predict[0]["images_per_s"] / timm_from_host, 2)
    assert "| vit_keras from host |" in printed and "(eager, from host)" in printed
    assert "| TF32 | attention |" in printed and "| off | keras |" in printed  # a CPU: TF32 off
    assert {row.get("tf32_active") for row in measured["results"] if row["task"] == "inference"} == {False}
    peak = max(row["gflop_per_s"] for row in measured["results"] if row["library"] == "tf.matmul")  # XLA on / off
    gflop = settings.forward_gflop(settings.ARCHITECTURES["tiny"], best.get("head_tokens_only", True))
    expected_share = ours * gflop / peak
    assert summary["fraction_of_matmul_peak"] == pytest.approx(expected_share)


@pytest.mark.slow
def test_quick_training_benchmark_measures_vit_keras_and_timm_on_the_same_network(tmp_path):
    measured, printed = _run(tmp_path, "--suite", "training", "--libraries", "vit_keras,timm", "--batch-sizes", "2",
                             "--precisions", "float32", "--xla", "on", "--torch-compile", "off", "--matmul-size", "0",
                             "--backends", "tensorflow")
    by_library = {row["library"]: row for row in measured["results"]
                  if row.get("head_tokens_only", True) and row.get("call") is None}
    assert set(by_library) == {"vit_keras", "timm"}, measured["results"]
    assert [row["library"] for row in measured["results"] if row.get("head_tokens_only") is False] == ["vit_keras"]
    for row in measured["results"]:
        assert "skipped" not in row, row
        assert row["images_per_s"] > 0 and row["peak_rss_mib"] > 0
    assert by_library["vit_keras"]["parameters"] == by_library["timm"]["parameters"]
    # Its best: the step on a batch on the device (fit's row is fed from host memory and reported apart).
    ours = max(row["images_per_s"] for row in measured["results"]
               if row["library"] == "vit_keras" and row.get("call") is None)
    ratio = ours / by_library["timm"]["images_per_s"]
    assert f"| {ratio:.2f} |" in printed
    # Keras' fit loop, fed as training.train feeds it, beside train_on_batch at the same setting.
    (fit,) = [row for row in measured["results"] if row.get("call") == "fit"]
    assert fit["input_path"] == "host (no accelerator)" and fit["fit_steps"] == 2
    step = by_library["vit_keras"]
    (summary,) = measured["summary"]
    assert summary["fit_vs_train_on_batch"] == {"fit, XLA": {
        "ratio": round(fit["images_per_s"] / step["images_per_s"], 3), "input_path": "host (no accelerator)"}}
    assert "model.fit at batch 2 (float32, fit, XLA)" in printed


@pytest.mark.slow
def test_quick_benchmark_runs_vit_keras_on_jax_and_pytorch_and_names_the_fastest_backend(tmp_path):
    measured, printed = _run(tmp_path, "--libraries", "vit_keras", "--backends", "tensorflow,jax,torch",
                             "--batch-sizes", "2", "--precisions", "float32", "--xla", "off", "--matmul-size", "0",
                             "--runtimes", "keras")
    rows = {(row.get("backend"), row["xla"]): row for row in measured["results"]
            if row.get("head_tokens_only", True) and row["input"] == "device"}
    # --xla off: TensorFlow and PyTorch eager; JAX is always jitted. No predict row without XLA.
    assert set(rows) == {("tensorflow", False), ("jax", True), ("torch", False)}, measured["results"]
    # JAX and PyTorch also from host (NumPy through predict_on_batch), the same network.
    hosted = {row["backend"]: row for row in measured["results"] if row["input"] == "host"}
    assert set(hosted) == {"jax", "torch"} and {row["parameters"] for row in hosted.values()} \
        == {rows[("jax", True)]["parameters"]}
    # The attention path each backend's layers took: Keras' own on TensorFlow and JAX (CPU), SDPA on PyTorch.
    assert [rows[key]["attention_paths"] for key in sorted(rows)] == [["keras"], ["keras"], ["sdpa"]]
    for row in rows.values():
        assert "skipped" not in row, row
        assert row["images_per_s"] > 0 and row["device"] == "CPU"
    # The same network on every backend.
    assert len({row["parameters"] for row in rows.values()}) == 1
    (summary,) = measured["summary"]
    by_backend = summary["vit_keras_by_backend"]
    (all_tokens,) = [row for row in measured["results"] if row.get("head_tokens_only") is False]
    fastest = {backend: rows[(backend, xla)]["images_per_s"] for backend, xla in rows}
    fastest["tensorflow"] = max(fastest["tensorflow"], all_tokens["images_per_s"])
    assert {b: v["images_per_s"] for b, v in by_backend.items()} == fastest
    assert summary["vit_keras"] == max(fastest.values())
    assert "| vit_keras on tensorflow | vit_keras on jax | vit_keras on torch |" in printed
    assert "(PyTorch, eager)" in printed and "(JAX)" in printed


@pytest.mark.slow
def test_quick_benchmark_runs_vit_keras_exported_to_tflite_and_onnx_runtime(tmp_path):
    measured, printed = _run(tmp_path, "--libraries", "vit_keras", "--backends", "tensorflow", "--runtimes",
                             "tflite,onnxruntime", "--batch-sizes", "2", "--precisions", "float32",
                             "--matmul-size", "0")
    rows = {row["runtime"]: row for row in measured["results"]}
    assert set(rows) == {"tflite", "onnxruntime"}, measured["results"]  # no Keras rows with --runtimes
    for row in rows.values():
        assert "skipped" not in row, row
        assert row["images_per_s"] > 0 and row["parameters"] == rows["tflite"]["parameters"]
        assert row["tf32_active"] is False  # CPU runtimes
    (summary,) = measured["summary"]
    assert summary["vit_keras"] == max(row["images_per_s"] for row in rows.values())
    assert "vit_keras_by_backend" not in summary  # exported runs are not a Keras backend's
    assert "| TFLite |" in printed and "| ONNX Runtime |" in printed


def test_the_benchmarks_docstring_examples_run():
    """scripts/ is outside the doctest paths of the suite: the examples of the benchmark's modules are run here."""
    import doctest
    import pkgutil

    attempted = 0
    for module in pkgutil.iter_modules(benchmarking.__path__):
        module = importlib.import_module(f"{benchmarking.__name__}.{module.name}")
        results = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert results.failed == 0, (module.__name__, results)
        attempted += results.attempted
    assert attempted >= 14, attempted


def test_b16_costs_the_papers_35_gflop_per_image():
    assert settings.forward_gflop(settings.ARCHITECTURES["B/16"]) == pytest.approx(35.1, abs=0.05)
    assert settings.image_gflop(settings.ARCHITECTURES["B/16"], "training") == pytest.approx(105.4, abs=0.1)
    # head_tokens_only: the last block keeps its keys and values for 197 tokens (2 N D^2 multiply-adds), and its
    # query, attention, output projection and MLP shrink to the class token.
    n, d, m = 197, 768, 3072
    full_block = 4 * n * d * d + 2 * n * n * d + 2 * n * d * m
    head_block = 2 * n * d * d + 2 * d * d + 2 * n * d + 2 * d * m
    saved = 2 * (full_block - head_block) / 1e9
    assert settings.forward_gflop(settings.ARCHITECTURES["B/16"], True) == pytest.approx(35.12 - saved, abs=0.01)
    assert saved / 35.12 == pytest.approx(0.069, abs=0.001)


def test_every_peer_is_measured_at_each_of_its_settings():
    args = SimpleNamespace(suite="inference", batch_sizes=[1], precisions=["float32", "bfloat16"],
                           libraries=list(settings.LIBRARIES), xla=[False, True], torch_compile=[False, True],
                           architecture="tiny", matmul_size=256, backends=list(settings.BACKENDS),
                           runtimes=list(settings.RUNTIMES), inputs=["device", "host"])
    cases = suites.suite_cases(args)
    labels = {(c["library"], c["precision"], report.setting_label(c)) for c in cases}
    for precision in ("float32", "bfloat16"):
        for library in ("vit_keras", "keras-hub", "vit-keras-0.2.0"):
            assert {(library, precision, "XLA"), (library, precision, "no XLA")} <= labels
        for library in ("vit_keras", "keras-hub"):  # on every Keras backend too
            assert {(library, precision, "JAX"), (library, precision, "PyTorch, eager"),
                    (library, precision, "PyTorch, torch.compile")} <= labels
        assert not any(library == "vit-keras-0.2.0" and setting.startswith(("JAX", "PyTorch"))
                       for library, _, setting in labels)  # TensorFlow-only
        assert ("vit_keras", precision, "predict, XLA") in labels
        assert {("vit_keras", precision, "XLA, all tokens"), ("vit_keras", precision, "no XLA, all tokens")} \
            <= labels  # what head_tokens_only gains, on TensorFlow
        assert not any(setting.endswith("all tokens") for library, _, setting in labels if library != "vit_keras")
        assert {("timm", precision, "eager"), ("timm", precision, "torch.compile")} <= labels
    # Exported vit_keras, float32 inference only.
    assert {("vit_keras", "float32", "TFLite"), ("vit_keras", "int8", "TFLite, int8 weights"),
            ("vit_keras", "float32", "ONNX Runtime")} <= labels
    assert not {("vit_keras", "bfloat16", "TFLite"), ("vit_keras", "bfloat16", "ONNX Runtime")} & labels
    assert [c["precision"] for c in cases if c["library"] == "onnxruntime"] == ["float32"]  # float32 only
    peaks = {(c["precision"], c["xla"]) for c in suites.peak_cases(args)}
    assert peaks == {("float32", True), ("float32", False), ("bfloat16", True), ("bfloat16", False)}
    # Every library also fed from host memory (NumPy in): timm at each setting, the Keras libraries on JAX and
    # PyTorch; on TensorFlow, Keras' predict loop; ONNX Runtime only ever takes NumPy.
    for precision in ("float32", "bfloat16"):
        assert {("timm", precision, "eager, from host"), ("timm", precision, "torch.compile, from host")} <= labels
        for library in ("vit_keras", "keras-hub"):
            assert {(library, precision, "JAX, from host"), (library, precision, "PyTorch, eager, from host"),
                    (library, precision, "PyTorch, torch.compile, from host")} <= labels
    assert {c["input"] for c in cases if c["library"] == "onnxruntime" or c.get("call") == "predict"} == {"host"}
    assert {c["input"] for c in cases if c.get("backend") == "tensorflow" and c.get("call") != "predict"
            and c.get("runtime", "keras") == "keras"} == {"device"}


def test_on_a_gpu_every_float32_row_runs_with_and_without_tf32_and_the_peak_falls_back_without_tensorflow():
    args = SimpleNamespace(suite="training", batch_sizes=[64], precisions=["float32", "bfloat16"],
                           libraries=["vit_keras", "keras-hub", "timm"], xla=[True], torch_compile=[True],
                           architecture="tiny", matmul_size=8192, backends=["jax", "torch"], runtimes=["keras"],
                           inputs=["device"], tf32=[False, True], attention=["auto", "keras"], peak_backend="jax")
    cases = suites.suite_cases(args)
    for library in ("vit_keras", "keras-hub", "timm"):
        float32 = {c["tf32"] for c in cases if c["library"] == library and c["precision"] == "float32"}
        bfloat16 = {c["tf32"] for c in cases if c["library"] == library and c["precision"] == "bfloat16"}
        assert float32 == {False, True} and bfloat16 == {None}, library
    labels = {(c["library"], c["precision"], report.setting_label(c)) for c in cases}
    assert {("timm", "float32", "torch.compile, TF32"), ("timm", "float32", "torch.compile, no TF32"),
            ("vit_keras", "bfloat16", "JAX"), ("vit_keras", "bfloat16", "JAX, keras attention"),
            ("keras-hub", "float32", "PyTorch, torch.compile, no TF32")} <= labels
    # Keras' fit loop around vit_keras' step on each backend, fed from host memory as training.train feeds it.
    assert {("vit_keras", "bfloat16", "fit, JAX"), ("vit_keras", "bfloat16", "fit, PyTorch, torch.compile"),
            ("vit_keras", "float32", "fit, JAX, TF32")} <= labels
    assert {c["input"] for c in cases if c.get("call") == "fit"} == {"host"}
    assert not any(c.get("call") for c in cases if c["library"] != "vit_keras")
    assert not any(c.get("attention") for c in cases if c["library"] != "vit_keras")  # vit_keras' own setting
    # No TensorFlow: the peak is jax.numpy.matmul's, jitted, in each precision the run measures.
    peaks = suites.peak_cases(args)
    assert {(c["library"], c["backend"], c["precision"], c["xla"]) for c in peaks} == {
        ("jax.numpy.matmul", "jax", "float32", True), ("jax.numpy.matmul", "jax", "bfloat16", True)}


def test_the_summary_takes_each_librarys_best_setting():

    def row(library, setting, images_per_s, **extra):
        return dict(task="inference", batch=16, precision="float32", architecture="B/16", library=library,
                    images_per_s=images_per_s, **setting, **extra)

    results = [
        dict(task="matmul", library="tf.matmul", batch=2048, precision="float32", xla=True, gflop_per_s=170.0),
        dict(task="matmul", library="tf.matmul", batch=2048, precision="float32", xla=False, gflop_per_s=150.0),
        row("vit_keras", {"xla": False}, 4.0), row("vit_keras", {"xla": True}, 4.4),
        row("timm", {"xla": None, "torch_compile": False}, 3.9), row("timm", {"xla": None, "torch_compile": True}, 4.0),
        row("onnxruntime", {"xla": None}, 4.2),
    ]
    (summary,) = report.summarize(results)
    assert summary["vit_keras"] == 4.4 and summary["vit_keras_setting"] == "XLA"
    assert summary["peers"]["timm"] == {"images_per_s": 4.0, "setting": "torch.compile"}
    assert summary["ratios"] == {"timm": 1.1, "onnxruntime": 1.05}
    # A vit_keras row runs head_tokens_only unless it says otherwise: 32.70 GFLOP per image.
    assert summary["fraction_of_matmul_peak"] == pytest.approx(4.4 * 32.70 / 170.0, rel=1e-3)
    printed = report.summary_table([summary], report.matmul_peaks(results))
    assert "4.00 (torch.compile) — 1.10" in printed and "85%" in printed and "170 GFLOP/s" in printed


def test_keras_peers_are_compared_with_vit_keras_on_the_same_backend_and_setting():

    def row(library, backend, xla, images_per_s):
        return dict(task="inference", batch=16, precision="float32", architecture="B/16", library=library,
                    backend=backend, xla=xla, images_per_s=images_per_s, ms_per_batch=1.0, first_call_s=1.0,
                    peak_rss_mib=1.0)

    results = [row("vit_keras", "tensorflow", True, 4.4), row("vit_keras", "jax", True, 4.8),
               row("keras-hub", "tensorflow", True, 4.0), row("keras-hub", "jax", True, 4.0)]
    printed = report.table(results)
    assert "| keras-hub | 16 | float32 | XLA | 4.00 |" in printed and "| 1.10 |" in printed  # TF with TF
    assert "| keras-hub | 16 | float32 | JAX | 4.00 |" in printed and "| 1.20 |" in printed  # JAX with JAX
    (summary,) = report.summarize(results)
    assert summary["vit_keras_setting"] == "JAX" and summary["ratios"] == {"keras-hub": 1.2}
    exported_only = {"task": "inference", "batch": 16, "precision": "int8", "vit_keras": 5.0, "peers": {}}
    assert "4.40 (XLA) — 0.92 | 4.80 (JAX) — 1.00" in report.backend_table([summary, exported_only])


@pytest.mark.slow
def test_a_missing_peer_is_reported_as_skipped(tmp_path):
    results, report = _run(tmp_path, "--libraries", "vit-keras-0.2.0", "--batch-sizes", "1", "--precisions",
                           "float32", "--xla", "on", "--matmul-size", "0", "--vit-keras-0.2.0-path",
                           str(tmp_path / "absent"))
    results = results["results"]
    assert len(results) == 1 and "skipped" in results[0]
    assert "skipped" in report


def test_unknown_library_is_refused():
    process = subprocess.run([sys.executable, SCRIPT, "--libraries", "vit_keras,tensorflow_models"],
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == 2
    assert "unknown libraries ['tensorflow_models']" in process.stderr


def test_unknown_backend_is_refused():
    process = subprocess.run([sys.executable, SCRIPT, "--backends", "tensorflow,mxnet"],
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == 2
    assert "--backends must come from tensorflow, jax, torch" in process.stderr and "mxnet" in process.stderr


def test_the_head_tokens_only_gain_compares_the_same_setting():

    def row(images_per_s, **extra):
        return dict(task="inference", batch=1, precision="float32", architecture="B/16", library="vit_keras",
                    backend="tensorflow", images_per_s=images_per_s, **extra)

    results = [row(4.0, xla=False), row(4.8, xla=True), row(3.7, xla=False, head_tokens_only=False),
               row(4.4, xla=True, head_tokens_only=False)]
    (summary,) = report.summarize(results)
    assert summary["head_tokens_only_gain"] == round(4.8 / 4.4, 3)
    assert summary["vit_keras_setting"] == "XLA"
    # Its share of the matmul peak counts the FLOPs it ran: 32.7 GFLOP per image, not 35.1.
    peak = dict(task="matmul", library="tf.matmul", batch=2048, precision="float32", xla=True, gflop_per_s=170.0)
    (summary,) = report.summarize([*results, peak])
    expected = 4.8 * settings.forward_gflop(settings.ARCHITECTURES["B/16"], True) / 170.0
    assert summary["fraction_of_matmul_peak"] == pytest.approx(expected)
    assert report.setting_label(results[3]) == "XLA, all tokens"


def test_dinov3_runs_beside_vit_in_vit_keras_and_timm_and_its_cost_is_a_ratio():
    """--dinov3: vit_keras and timm also run DINOv3's ViT-B/16 at the settings they have for the plain ViT, the two
    are the same network (equal parameter counts, written independently), and the report divides each library's
    DINOv3 images/s by its own ViT's."""
    args = SimpleNamespace(suite="inference", batch_sizes=[1], precisions=["float32"],
                           libraries=list(settings.LIBRARIES), xla=[False, True], torch_compile=[False, True],
                           architecture="tiny", matmul_size=256, backends=["tensorflow"],
                           runtimes=list(settings.RUNTIMES), dinov3=True)
    dinov3 = [case for case in suites.suite_cases(args) if case.get("model") == "dinov3"]
    assert {(c["library"], report.setting_label(c)) for c in dinov3} == {
        ("vit_keras", "XLA"), ("vit_keras", "no XLA"), ("timm", "eager"), ("timm", "torch.compile")}
    case = dinov3[0]
    keras_model = keras_runs.keras_model(case)
    timm_model = peers.timm_model({**case, "library": "timm"}, "cpu")
    assert keras_model.count_params() == sum(p.numel() for p in timm_model.parameters())

    def row(library, model, images_per_s):
        return dict(task="inference", batch=1, precision="float32", library=library, images_per_s=images_per_s,
                    architecture="B/16", xla=True, model=model)

    results = [row("vit_keras", "vit", 10.0), row("timm", "vit", 8.0), row("vit_keras", "dinov3", 9.0),
               row("timm", "dinov3", 6.0)]
    plain, rope = report.summarize(results)
    assert "model" not in plain and rope["model"] == "dinov3"
    assert rope["dinov3_vs_vit"] == {"vit_keras": 0.9, "timm": 0.75} and rope["ratios"] == {"timm": 1.5}
    assert "| inference, DINOv3 | 1 |" in report.summary_table([plain, rope], {})


def test_the_machine_class_names_the_cpu_its_matrix_instructions_and_the_gpu():
    """The class in a result's file name tells an AVX2-only CPU from an AVX-512 / AMX one, and a GPU machine from a
    CPU one: the classes whose float32 and bfloat16 speeds differ."""
    epyc = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "gpus": []}
    sapphire = {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_flags": ["avx2", "avx512f", "avx512_bf16",
                                                                             "amx_tile", "amx_bf16"], "gpus": []}
    assert machine.machine_class(epyc) == "amd-epyc-avx2"
    assert machine.machine_class(sapphire) == "intel-xeon-platinum-8480-amx"
    assert machine.machine_class({**sapphire, "cpu_flags": ["avx2", "avx512f", "avx512_bf16"]}) \
        == "intel-xeon-platinum-8480-avx512bf16"
    assert machine.machine_class({**sapphire, "cpu_flags": ["avx2", "avx512f"]}) == "intel-xeon-platinum-8480-avx512"
    assert machine.machine_class({**epyc, "gpus": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]}) \
        == "amd-epyc-avx2-nvidia-h100-80gb-hbm3"
    unknown = machine.machine_class({"cpu_model": "", "cpu_flags": [], "gpus": []})
    assert unknown and "/" not in unknown and " " not in unknown


def test_the_report_line_names_missing_matrix_units_and_every_gpu():
    epyc = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "cpu_count": 2, "python": "3.11.9", "gpus": []}
    line = machine.machine_line(epyc)
    assert line.startswith("AMD EPYC (avx2, fma; no AVX-512, avx512_bf16 or AMX)") and "no GPU" in line
    amx = machine.machine_line({**epyc, "cpu_flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile"]})
    assert "; no" not in amx
    gpus = machine.machine_line({**epyc, "gpus": ["NVIDIA H200", "NVIDIA H200"]})
    assert "2 GPUs: NVIDIA H200, NVIDIA H200" in gpus


def test_gpu_names_come_from_tensorflow(monkeypatch):
    """The device name TensorFlow reports for each GPU (a fake TensorFlow: this machine may have none)."""
    gpu = SimpleNamespace(name="/physical_device:GPU:0")
    config = SimpleNamespace(list_physical_devices=lambda kind: [gpu] if kind == "GPU" else [],
                             experimental=SimpleNamespace(get_device_details=lambda device: {
                                 "device_name": "NVIDIA H100 80GB HBM3", "compute_capability": (9, 0)}))
    monkeypatch.setitem(sys.modules, "tensorflow", SimpleNamespace(config=config))
    assert machine.gpu_names() == ["NVIDIA H100 80GB HBM3"]


def test_the_default_json_is_dated_and_named_for_the_machine_and_the_run():
    """Runs on other days, machines, suites or precisions never overwrite each other's file."""
    import datetime

    epyc = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "gpus": []}
    day = datetime.date(2026, 11, 26)
    path = machine.default_json_path(epyc, "inference", ["float32"], day=day)
    assert path == os.path.join(settings.REPO, "benchmarks", "2026-11-26-amd-epyc-avx2-inference-float32.json")
    others = {machine.default_json_path(epyc, "inference", ["bfloat16"], day=day),
              machine.default_json_path(epyc, "training", ["float32"], day=day),
              machine.default_json_path(epyc, "inference", ["float32"], dinov3=True, day=day),
              machine.default_json_path(epyc, "inference", ["float32"], day=datetime.date(2026, 11, 27)),
              machine.default_json_path({**epyc, "gpus": ["NVIDIA H100"]}, "inference", ["float32"], day=day)}
    assert len(others) == 5 and path not in others


def test_the_summary_compares_inputs_on_the_device_and_from_host_apart_and_gives_every_librarys_mfu():

    def row(library, images_per_s, placement, **setting):
        return dict(task="training", batch=64, precision="bfloat16", architecture="B/16", library=library,
                    images_per_s=images_per_s, input=placement, **setting)

    peak = dict(task="matmul", library="jax.numpy.matmul", batch=8192, precision="bfloat16", xla=True,
                backend="jax", gflop_per_s=790_000.0)
    results = [peak, row("vit_keras", 1855.0, "device", xla=True, backend="jax", attention_paths=["cudnn"]),
               row("vit_keras", 1602.0, "host", xla=True, backend="jax"),
               row("timm", 2879.0, "device", xla=None, torch_compile=True),
               row("timm", 2500.0, "host", xla=None, torch_compile=True)]
    (summary,) = report.summarize(results)
    # The main comparison: each library's input on the device; from host: NumPy in, apart.
    assert summary["vit_keras"] == 1855.0 and summary["ratios"] == {"timm": round(1855 / 2879, 2)}
    assert summary["from_host"] == {"vit_keras": {"images_per_s": 1602.0, "setting": "JAX, from host"},
                                    "timm": {"images_per_s": 2500.0, "setting": "torch.compile, from host"}}
    assert summary["from_host_ratios"] == {"timm": round(1602 / 2500, 2)}
    assert summary["vit_keras_attention"] == ["cudnn"]
    assert summary["vit_keras_by_backend"] == {"jax": {"images_per_s": 1855.0, "setting": "JAX"}}
    # MFU: FLOPs each model computes per image (timm every token of the last block: 3 x 35.1; vit_keras the class
    # token alone there: 3 x 32.7) x images/s over the peak.
    b16 = settings.ARCHITECTURES["B/16"]
    assert summary["mfu"]["timm"] == pytest.approx(2879 * 3 * settings.forward_gflop(b16) / 790_000)
    assert summary["mfu"]["vit_keras"] == pytest.approx(1855 * 3 * settings.forward_gflop(b16, True) / 790_000)
    (line,) = report.mfu_lines([summary])
    assert "vit_keras 23.0%, timm 38.4%" in line and "790000 GFLOP/s (jax.numpy.matmul n=8192)" in line
    assert "| timm from host |" in report.host_table([summary]) and "2500.00 (torch.compile, from host) — 0.64" \
        in report.host_table([summary])
    assert "a training step is 3x the forward: 105.38 and 98.09" in report.flop_line("B/16", "training")


def test_the_attention_suite_runs_a_block_per_path_of_each_backend():
    args = SimpleNamespace(suite="attention", batch_sizes=[64], precisions=["bfloat16"], xla=[True],
                           architecture="tiny", backends=["jax", "torch"], gpu=True)
    paths = {(c["backend"], c["attention_path"], c["pass"]) for c in suites.suite_cases(args)}
    assert paths == {(backend, path, which) for which in ("forward", "forward+backward")
                     for backend, path in (("jax", "einsum"), ("jax", "keras"), ("jax", "cudnn"), ("torch", "einsum"),
                                           ("torch", "keras"), ("torch", "sdpa"))}
    without_gpu = suites.suite_cases(SimpleNamespace(**{**vars(args), "gpu": False}))
    assert not any(c["attention_path"] == "cudnn" for c in without_gpu)
    rows = [dict(task="attention", library=f"block, {path} attention", attention_path=path, backend="jax",
                 batch=64, precision="bfloat16", xla=True, images_per_s=v, **{"pass": "forward"})
            for path, v in (("einsum", 100.0), ("cudnn", 260.0))]
    printed = report.attention_path_table(rows)
    assert "| JAX | forward | 64 | bfloat16 | cudnn | 260.00 | 2.60 |" in printed


@pytest.mark.slow
def test_the_gpu_script_runs_without_tensorflow(tmp_path):
    """scripts/gpu_benchmark.sh --quick on this CPU with TensorFlow hidden (as on the GPU machine, which has none):
    its check part and its training part (the part that exercises every row kind: device and host inputs, both
    attention paths, MFU against JAX's matmul peak) run on JAX and PyTorch and write their JSON. The inference and
    attention parts run the same benchmark.py code the other tests here cover; the suite keeps to two parts for
    time. keras-hub is a benchmark peer (`make .venv/.peers`), not a test dependency: where it is not installed its
    rows say skipped, as test_a_missing_peer_is_reported_as_skipped expects."""
    hidden = tmp_path / "hidden" / "tensorflow"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tensorflow'\", name=\"tensorflow\")\n")
    (tmp_path / "wheels").mkdir()
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "hidden"), GPU_WHEELS=str(tmp_path / "wheels"),
               PYTHON=sys.executable)
    env.pop("KERAS_BACKEND", None)
    script = os.path.join(os.path.dirname(SCRIPT), "gpu_benchmark.sh")
    outputs = ""
    for part in ("check", "training"):
        done = subprocess.run([script, "--quick", part, str(tmp_path / "out")], env=env, capture_output=True,
                              text=True, timeout=1500)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outputs += done.stdout
    assert '"keras_backend": "jax"' in outputs and '"attention": {' in outputs  # the check part
    reports = {path.name: json.loads(path.read_text()) for path in (tmp_path / "out").iterdir()}
    assert sorted(reports) == ["attention_paths-jax.json", "attention_paths-torch.json",
                               "gpu-training-bfloat16-quick.json"]
    # The check part compared each attention path of JAX and PyTorch with the einsum path, within the bounds.
    assert "every path within its bound" in outputs
    assert {name.split()[1] for name in reports["attention_paths-torch.json"]["compared"]} == {"keras", "sdpa"}
    peers = {"vit_keras", "timm"} | ({"keras-hub"} if importlib.util.find_spec("keras_hub") else set())
    training = reports["gpu-training-bfloat16-quick.json"]
    assert training["machine"]["keras_backend"] == "jax" and "tensorflow" not in training["machine"]["versions"]
    for row in training["results"]:
        assert "skipped" not in row or (row["library"] == "keras-hub" and "keras-hub" not in peers), row
    measured = [row for row in training["results"] if "skipped" not in row]
    assert {row["library"] for row in measured} == {"jax.numpy.matmul"} | peers
    (summary,) = training["summary"]
    assert set(summary["mfu"]) == peers and set(summary["from_host"]) == set(summary["mfu"])
    # vit_keras at its own attention path and forced onto Keras' own, each from the device and from host.
    vit_keras = [(row["input"], row.get("attention")) for row in measured
                 if row["library"] == "vit_keras" and row.get("call") is None]
    assert sorted(vit_keras, key=str) == sorted([("device", None), ("device", "keras"), ("host", None),
                                                 ("host", "keras")], key=str)
    # And Keras' fit loop around its step, from host, as training.train feeds it (no TensorFlow: a generator).
    (fit,) = [row for row in measured if row.get("call") == "fit"]
    assert fit["backend"] == "jax" and fit["input_path"] == "host (no accelerator)"
    assert set(summary["fit_vs_train_on_batch"]) == {"fit, JAX"}
