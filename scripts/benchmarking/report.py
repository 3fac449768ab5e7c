"""The report: the tables of every measurement, each library at its best and the ratios between them, the matmul
peak and the MFU."""

from __future__ import annotations

from .settings import ARCHITECTURES, BACKENDS, LIBRARIES, forward_gflop, image_gflop


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
        head = f"| {setting_label(r)} | {r['pass']} | {r['batch']} | {r['precision']} | {r['attention_path']} "
        if "skipped" in r:
            lines.append(head + f"| skipped: {r['skipped'][:160]} | |")
            continue
        base = einsum.get(key(r))
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}" if base else "—"
        lines.append(head + f"| {r['images_per_s']:.2f} | {ratio} |")
    return "\n".join(lines)


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


def setting_label(r) -> str:
    """How a row ran, e.g. "XLA", "no XLA", "predict, XLA", "JAX", "PyTorch, torch.compile", "XLA, all tokens",
    "JAX, from host", "torch.compile, TF32", "JAX, keras attention" (vit_keras forced onto an attention path).

    Example:
        >>> setting_label(dict(library="timm", torch_compile=True, input="host", tf32=False))
        'torch.compile, from host, no TF32'
    """
    if r.get("head_tokens_only") is False:
        return setting_label({**r, "head_tokens_only": True}) + ", all tokens"
    if r.get("tf32") is not None:
        return setting_label({**r, "tf32": None}) + (", TF32" if r["tf32"] else ", no TF32")
    if r.get("call"):  # Keras' own loop (predict, fit) around the compiled function: NumPy or tf.data in
        return f"{r['call']}, " + setting_label({**r, "call": None, "input": "device"})
    if r.get("input") == "host" and r["library"] != "onnxruntime" and r.get("runtime", "keras") == "keras":
        return setting_label({**r, "input": "device"}) + ", from host"
    if r.get("attention"):
        return setting_label({**r, "attention": None}) + f", {r['attention']} attention"
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
        head = f"| {_task(r)} | {r['library']} | {r['batch']} | {r['precision']} | {setting_label(r)} "
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
               "vit_keras_setting": setting_label(ours), "peers": {}, "ratios": {}}
        if model != "vit":
            row["model"] = model
        for library, peer in libraries.items():
            if library != "vit_keras":
                row["peers"][library] = {"images_per_s": peer["images_per_s"], "setting": setting_label(peer)}
                row["ratios"][library] = round(ours["images_per_s"] / peer["images_per_s"], 2)
        mine = [r for r in results if r["library"] == "vit_keras" and _group(r) == group and "images_per_s" in r]
        for r in mine:  # vit_keras' best on each backend (in Keras itself, not exported, its input on the device)
            if r.get("runtime", "keras") != "keras" or _from_host(r):
                continue
            backend = r.get("backend") or "tensorflow"
            best = row.setdefault("vit_keras_by_backend", {}).get(backend)
            if best is None or r["images_per_s"] > best["images_per_s"]:
                row["vit_keras_by_backend"][backend] = {"images_per_s": r["images_per_s"], "setting": setting_label(r)}
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
            row["from_host"] = {library: {"images_per_s": r["images_per_s"], "setting": setting_label(r)}
                                for library, r in hosted.items()}
            if "vit_keras" in hosted:
                row["from_host_ratios"] = {library: round(hosted["vit_keras"]["images_per_s"] / r["images_per_s"], 2)
                                           for library, r in hosted.items() if library != "vit_keras"}
        peak = peaks.get(precision)
        if peak and task in ("inference", "training"):
            achieved = ours["images_per_s"] * _row_gflop(ours)
            row["gflop_per_s"] = achieved
            row["fraction_of_matmul_peak"] = achieved / peak["gflop_per_s"]
            row["matmul_peak"] = {"gflop_per_s": peak["gflop_per_s"], "setting": setting_label(peak),
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
            found[setting_label(fit)] = {"ratio": round(fit["images_per_s"] / step["images_per_s"], 3),
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
                     f"({peak['library']} n={peak['batch']}, {setting_label(peak)})")
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
