"""scripts/benchmark.py keeps working: every case runs in its own process and the report compares like with like.

No wall-clock time is asserted: a throughput only has to be a positive number. What is asserted is that the
peers are the same network (equal parameter counts with timm, an independent implementation; ONNX Runtime's
output equal to timm's), that each peer is reported at its best setting, and that the ratios and the share of
the matmul peak are computed from the measurements.
"""

import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "benchmark.py")


def _script():
    spec = importlib.util.spec_from_file_location("benchmark_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(tmp_path, *arguments):
    path = tmp_path / "results.json"
    process = subprocess.run([sys.executable, SCRIPT, "--quick", "--json", str(path), *arguments],
                             capture_output=True, text=True, timeout=900)
    assert process.returncode == 0, process.stderr[-2000:]
    return json.loads(path.read_text()), process.stdout


@pytest.mark.slow
def test_quick_inference_benchmark_measures_every_peer_and_the_matmul_peak(tmp_path):
    report, printed = _run(tmp_path, "--libraries", "vit_keras,timm,onnxruntime", "--batch-sizes", "2",
                           "--precisions", "float32", "--xla", "on", "--torch-compile", "off", "--matmul-size", "128",
                           "--backends", "tensorflow", "--runtimes", "keras")
    by_library = {row["library"]: row for row in report["results"]
                  if row.get("call") != "predict" and row.get("head_tokens_only", True)}
    assert set(by_library) == {"vit_keras", "timm", "onnxruntime", "tf.matmul"}, report["results"]
    (all_tokens,) = [row for row in report["results"] if row.get("head_tokens_only") is False]
    for row in report["results"]:
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

    assert report["machine"]["cpu_flags"] == hardware.summary(hardware.Machine(hardware.cpu_info()))["cpu_flags"]
    assert report["machine"]["cpu_model"] in printed.splitlines()[0]
    (summary,) = report["summary"]
    # vit_keras' best is its compiled function or Keras' predict loop around it, whichever ran faster.
    predict = [row for row in report["results"] if row.get("call") == "predict"]
    assert len(predict) == 1 and predict[0]["images_per_s"] > 0
    function = by_library["vit_keras"]["images_per_s"]
    assert summary["predict_vs_function"] == round(predict[0]["images_per_s"] / function, 3)
    assert "model.predict at batch 2 (float32)" in printed
    # head_tokens_only against the same model computing every token of the last block, same setting.
    assert summary["head_tokens_only_gain"] == round(function / all_tokens["images_per_s"], 3)
    assert "head_tokens_only at inference batch 2 (float32, XLA)" in printed and "| XLA, all tokens |" in printed
    best = max((by_library["vit_keras"], predict[0], all_tokens), key=lambda row: row["images_per_s"])
    ours = best["images_per_s"]
    for peer in ("timm", "onnxruntime"):
        ratio = ours / by_library[peer]["images_per_s"]
        assert summary["ratios"][peer] == round(ratio, 2) and f"— {ratio:.2f} |" in printed
    script = _script()
    peak = max(row["gflop_per_s"] for row in report["results"] if row["library"] == "tf.matmul")  # XLA on / off
    gflop = script.forward_gflop(script.ARCHITECTURES["tiny"], best.get("head_tokens_only", True))
    expected_share = ours * gflop / peak
    assert summary["fraction_of_matmul_peak"] == pytest.approx(expected_share)


@pytest.mark.slow
def test_quick_training_benchmark_measures_vit_keras_and_timm_on_the_same_network(tmp_path):
    report, printed = _run(tmp_path, "--suite", "training", "--libraries", "vit_keras,timm", "--batch-sizes", "2",
                           "--precisions", "float32", "--xla", "on", "--torch-compile", "off", "--matmul-size", "0",
                           "--backends", "tensorflow")
    by_library = {row["library"]: row for row in report["results"] if row.get("head_tokens_only", True)}
    assert set(by_library) == {"vit_keras", "timm"}, report["results"]
    assert [row["library"] for row in report["results"] if row.get("head_tokens_only") is False] == ["vit_keras"]
    for row in report["results"]:
        assert "skipped" not in row, row
        assert row["images_per_s"] > 0 and row["peak_rss_mib"] > 0
    assert by_library["vit_keras"]["parameters"] == by_library["timm"]["parameters"]
    ours = max(row["images_per_s"] for row in report["results"] if row["library"] == "vit_keras")  # its best
    ratio = ours / by_library["timm"]["images_per_s"]
    assert f"| {ratio:.2f} |" in printed


@pytest.mark.slow
def test_quick_benchmark_runs_vit_keras_on_jax_and_pytorch_and_names_the_fastest_backend(tmp_path):
    report, printed = _run(tmp_path, "--libraries", "vit_keras", "--backends", "tensorflow,jax,torch",
                           "--batch-sizes", "2", "--precisions", "float32", "--xla", "off", "--matmul-size", "0",
                           "--runtimes", "keras")
    rows = {(row.get("backend"), row["xla"]): row for row in report["results"] if row.get("head_tokens_only", True)}
    # --xla off: TensorFlow and PyTorch eager; JAX is always jitted. No predict row without XLA.
    assert set(rows) == {("tensorflow", False), ("jax", True), ("torch", False)}, report["results"]
    for row in rows.values():
        assert "skipped" not in row, row
        assert row["images_per_s"] > 0 and row["device"] == "CPU"
    # The same network on every backend.
    assert len({row["parameters"] for row in rows.values()}) == 1
    (summary,) = report["summary"]
    by_backend = summary["vit_keras_by_backend"]
    (all_tokens,) = [row for row in report["results"] if row.get("head_tokens_only") is False]
    fastest = {backend: rows[(backend, xla)]["images_per_s"] for backend, xla in rows}
    fastest["tensorflow"] = max(fastest["tensorflow"], all_tokens["images_per_s"])
    assert {b: v["images_per_s"] for b, v in by_backend.items()} == fastest
    assert summary["vit_keras"] == max(fastest.values())
    assert "| vit_keras on tensorflow | vit_keras on jax | vit_keras on torch |" in printed
    assert "(PyTorch, eager)" in printed and "(JAX)" in printed


@pytest.mark.slow
def test_quick_benchmark_runs_vit_keras_exported_to_tflite_and_onnx_runtime(tmp_path):
    report, printed = _run(tmp_path, "--libraries", "vit_keras", "--backends", "tensorflow", "--runtimes",
                           "tflite,onnxruntime", "--batch-sizes", "2", "--precisions", "float32", "--matmul-size", "0")
    rows = {row["runtime"]: row for row in report["results"]}
    assert set(rows) == {"tflite", "onnxruntime"}, report["results"]  # no Keras rows with --runtimes
    for row in rows.values():
        assert "skipped" not in row, row
        assert row["images_per_s"] > 0 and row["parameters"] == rows["tflite"]["parameters"]
    (summary,) = report["summary"]
    assert summary["vit_keras"] == max(row["images_per_s"] for row in rows.values())
    assert "vit_keras_by_backend" not in summary  # exported runs are not a Keras backend's
    assert "| TFLite |" in printed and "| ONNX Runtime |" in printed


def test_b16_costs_the_papers_35_gflop_per_image():
    script = _script()
    assert script.forward_gflop(script.ARCHITECTURES["B/16"]) == pytest.approx(35.1, abs=0.05)
    assert script.image_gflop(script.ARCHITECTURES["B/16"], "training") == pytest.approx(105.4, abs=0.1)
    # head_tokens_only: the last block keeps its keys and values for 197 tokens (2 N D^2 multiply-adds), and its
    # query, attention, output projection and MLP shrink to the class token.
    n, d, m = 197, 768, 3072
    full_block = 4 * n * d * d + 2 * n * n * d + 2 * n * d * m
    head_block = 2 * n * d * d + 2 * d * d + 2 * n * d + 2 * d * m
    saved = 2 * (full_block - head_block) / 1e9
    assert script.forward_gflop(script.ARCHITECTURES["B/16"], True) == pytest.approx(35.12 - saved, abs=0.01)
    assert saved / 35.12 == pytest.approx(0.069, abs=0.001)


def test_every_peer_is_measured_at_each_of_its_settings():
    script = _script()
    args = SimpleNamespace(suite="inference", batch_sizes=[1], precisions=["float32", "bfloat16"],
                           libraries=list(script.LIBRARIES), xla=[False, True], torch_compile=[False, True],
                           architecture="tiny", matmul_size=256, backends=list(script.BACKENDS),
                           runtimes=list(script.RUNTIMES))
    cases = script._cases(args)
    settings = {(c["library"], c["precision"], script._setting(c)) for c in cases}
    for precision in ("float32", "bfloat16"):
        for library in ("vit_keras", "keras-hub", "vit-keras-0.2.0"):
            assert {(library, precision, "XLA"), (library, precision, "no XLA")} <= settings
        for library in ("vit_keras", "keras-hub"):  # on every Keras backend too
            assert {(library, precision, "JAX"), (library, precision, "PyTorch, eager"),
                    (library, precision, "PyTorch, torch.compile")} <= settings
        assert not any(library == "vit-keras-0.2.0" and setting.startswith(("JAX", "PyTorch"))
                       for library, _, setting in settings)  # TensorFlow-only
        assert ("vit_keras", precision, "predict, XLA") in settings
        assert {("vit_keras", precision, "XLA, all tokens"), ("vit_keras", precision, "no XLA, all tokens")} \
            <= settings  # what head_tokens_only gains, on TensorFlow
        assert not any(setting.endswith("all tokens") for library, _, setting in settings if library != "vit_keras")
        assert {("timm", precision, "eager"), ("timm", precision, "torch.compile")} <= settings
    # Exported vit_keras, float32 inference only.
    assert {("vit_keras", "float32", "TFLite"), ("vit_keras", "int8", "TFLite, int8 weights"),
            ("vit_keras", "float32", "ONNX Runtime")} <= settings
    assert not {("vit_keras", "bfloat16", "TFLite"), ("vit_keras", "bfloat16", "ONNX Runtime")} & settings
    assert [c["precision"] for c in cases if c["library"] == "onnxruntime"] == ["float32"]  # float32 only
    peaks = {(c["precision"], c["xla"]) for c in script._peak_cases(args)}
    assert peaks == {("float32", True), ("float32", False), ("bfloat16", True), ("bfloat16", False)}


def test_the_summary_takes_each_librarys_best_setting():
    script = _script()

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
    (summary,) = script.summarize(results)
    assert summary["vit_keras"] == 4.4 and summary["vit_keras_setting"] == "XLA"
    assert summary["peers"]["timm"] == {"images_per_s": 4.0, "setting": "torch.compile"}
    assert summary["ratios"] == {"timm": 1.1, "onnxruntime": 1.05}
    # A vit_keras row runs head_tokens_only unless it says otherwise: 32.70 GFLOP per image.
    assert summary["fraction_of_matmul_peak"] == pytest.approx(4.4 * 32.70 / 170.0, rel=1e-3)
    printed = script.summary_table([summary], script.matmul_peaks(results))
    assert "4.00 (torch.compile) — 1.10" in printed and "85%" in printed and "170 GFLOP/s" in printed


def test_keras_peers_are_compared_with_vit_keras_on_the_same_backend_and_setting():
    script = _script()

    def row(library, backend, xla, images_per_s):
        return dict(task="inference", batch=16, precision="float32", architecture="B/16", library=library,
                    backend=backend, xla=xla, images_per_s=images_per_s, ms_per_batch=1.0, first_call_s=1.0,
                    peak_rss_mib=1.0)

    results = [row("vit_keras", "tensorflow", True, 4.4), row("vit_keras", "jax", True, 4.8),
               row("keras-hub", "tensorflow", True, 4.0), row("keras-hub", "jax", True, 4.0)]
    printed = script.table(results)
    assert "| keras-hub | 16 | float32 | XLA | 4.00 |" in printed and "| 1.10 |" in printed  # TF with TF
    assert "| keras-hub | 16 | float32 | JAX | 4.00 |" in printed and "| 1.20 |" in printed  # JAX with JAX
    (summary,) = script.summarize(results)
    assert summary["vit_keras_setting"] == "JAX" and summary["ratios"] == {"keras-hub": 1.2}
    exported_only = {"task": "inference", "batch": 16, "precision": "int8", "vit_keras": 5.0, "peers": {}}
    assert "4.40 (XLA) — 0.92 | 4.80 (JAX) — 1.00" in script.backend_table([summary, exported_only])


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
    script = _script()

    def row(images_per_s, **extra):
        return dict(task="inference", batch=1, precision="float32", architecture="B/16", library="vit_keras",
                    backend="tensorflow", images_per_s=images_per_s, **extra)

    results = [row(4.0, xla=False), row(4.8, xla=True), row(3.7, xla=False, head_tokens_only=False),
               row(4.4, xla=True, head_tokens_only=False)]
    (summary,) = script.summarize(results)
    assert summary["head_tokens_only_gain"] == round(4.8 / 4.4, 3)
    assert summary["vit_keras_setting"] == "XLA"
    # Its share of the matmul peak counts the FLOPs it ran: 32.7 GFLOP per image, not 35.1.
    peak = dict(task="matmul", library="tf.matmul", batch=2048, precision="float32", xla=True, gflop_per_s=170.0)
    (summary,) = script.summarize([*results, peak])
    expected = 4.8 * script.forward_gflop(script.ARCHITECTURES["B/16"], True) / 170.0
    assert summary["fraction_of_matmul_peak"] == pytest.approx(expected)
    assert script._setting(results[3]) == "XLA, all tokens"


def test_dinov3_runs_beside_vit_in_vit_keras_and_timm_and_its_cost_is_a_ratio():
    """--dinov3: vit_keras and timm also run DINOv3's ViT-B/16 at the settings they have for the plain ViT, the two
    are the same network (equal parameter counts, written independently), and the report divides each library's
    DINOv3 images/s by its own ViT's."""
    script = _script()
    args = SimpleNamespace(suite="inference", batch_sizes=[1], precisions=["float32"], libraries=list(script.LIBRARIES),
                           xla=[False, True], torch_compile=[False, True], architecture="tiny", matmul_size=256,
                           backends=["tensorflow"], runtimes=list(script.RUNTIMES), dinov3=True)
    dinov3 = [case for case in script._cases(args) if case.get("model") == "dinov3"]
    assert {(c["library"], script._setting(c)) for c in dinov3} == {
        ("vit_keras", "XLA"), ("vit_keras", "no XLA"), ("timm", "eager"), ("timm", "torch.compile")}
    case = dinov3[0]
    keras_model = script._keras_model(case)
    timm_model = script._timm_model({**case, "library": "timm"}, "cpu")
    assert keras_model.count_params() == sum(p.numel() for p in timm_model.parameters())

    def row(library, model, images_per_s):
        return dict(task="inference", batch=1, precision="float32", library=library, images_per_s=images_per_s,
                    architecture="B/16", xla=True, model=model)

    results = [row("vit_keras", "vit", 10.0), row("timm", "vit", 8.0), row("vit_keras", "dinov3", 9.0),
               row("timm", "dinov3", 6.0)]
    plain, rope = script.summarize(results)
    assert "model" not in plain and rope["model"] == "dinov3"
    assert rope["dinov3_vs_vit"] == {"vit_keras": 0.9, "timm": 0.75} and rope["ratios"] == {"timm": 1.5}
    assert "| inference, DINOv3 | 1 |" in script.summary_table([plain, rope], {})


def test_the_machine_class_names_the_cpu_its_matrix_instructions_and_the_gpu():
    """The class in a result's file name tells an AVX2-only CPU from an AVX-512 / AMX one, and a GPU machine from a
    CPU one: the classes whose float32 and bfloat16 speeds differ."""
    script = _script()
    epyc = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "gpus": []}
    sapphire = {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_flags": ["avx2", "avx512f", "avx512_bf16",
                                                                             "amx_tile", "amx_bf16"], "gpus": []}
    assert script.machine_class(epyc) == "amd-epyc-avx2"
    assert script.machine_class(sapphire) == "intel-xeon-platinum-8480-amx"
    assert script.machine_class({**sapphire, "cpu_flags": ["avx2", "avx512f", "avx512_bf16"]}) \
        == "intel-xeon-platinum-8480-avx512bf16"
    assert script.machine_class({**sapphire, "cpu_flags": ["avx2", "avx512f"]}) == "intel-xeon-platinum-8480-avx512"
    assert script.machine_class({**epyc, "gpus": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]}) \
        == "amd-epyc-avx2-nvidia-h100-80gb-hbm3"
    unknown = script.machine_class({"cpu_model": "", "cpu_flags": [], "gpus": []})
    assert unknown and "/" not in unknown and " " not in unknown


def test_the_report_line_names_missing_matrix_units_and_every_gpu():
    script = _script()
    machine = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "cpu_count": 2, "python": "3.11.9", "gpus": []}
    line = script.machine_line(machine)
    assert line.startswith("AMD EPYC (avx2, fma; no AVX-512, avx512_bf16 or AMX)") and "no GPU" in line
    amx = script.machine_line({**machine, "cpu_flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile"]})
    assert "; no" not in amx
    gpus = script.machine_line({**machine, "gpus": ["NVIDIA H200", "NVIDIA H200"]})
    assert "2 GPUs: NVIDIA H200, NVIDIA H200" in gpus


def test_gpu_names_come_from_tensorflow(monkeypatch):
    """The device name TensorFlow reports for each GPU (a fake TensorFlow: this machine may have none)."""
    script = _script()
    gpu = SimpleNamespace(name="/physical_device:GPU:0")
    config = SimpleNamespace(list_physical_devices=lambda kind: [gpu] if kind == "GPU" else [],
                             experimental=SimpleNamespace(get_device_details=lambda device: {
                                 "device_name": "NVIDIA H100 80GB HBM3", "compute_capability": (9, 0)}))
    monkeypatch.setitem(sys.modules, "tensorflow", SimpleNamespace(config=config))
    assert script.gpu_names() == ["NVIDIA H100 80GB HBM3"]


def test_the_default_json_is_dated_and_named_for_the_machine_and_the_run():
    """Runs on other days, machines, suites or precisions never overwrite each other's file."""
    import datetime

    script = _script()
    epyc = {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "gpus": []}
    day = datetime.date(2026, 11, 26)
    path = script.default_json_path(epyc, "inference", ["float32"], day=day)
    assert path == os.path.join(script.REPO, "benchmarks", "2026-11-26-amd-epyc-avx2-inference-float32.json")
    others = {script.default_json_path(epyc, "inference", ["bfloat16"], day=day),
              script.default_json_path(epyc, "training", ["float32"], day=day),
              script.default_json_path(epyc, "inference", ["float32"], dinov3=True, day=day),
              script.default_json_path(epyc, "inference", ["float32"], day=datetime.date(2026, 11, 27)),
              script.default_json_path({**epyc, "gpus": ["NVIDIA H100"]}, "inference", ["float32"], day=day)}
    assert len(others) == 5 and path not in others
