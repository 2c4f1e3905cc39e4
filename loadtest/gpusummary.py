"""The GPU sizing run's headline figures, held against the targets, as JSON and markdown."""

from __future__ import annotations

from typing import Any

from loadtest.gpuparts import LEFT_OUT

# Per GPU, BERT-base size, FP16 (see README, GPU sizing).
MULTI_TEXTS_PER_S = 20_000.0  # with 32-text requests
SINGLE_REQUESTS_PER_S = 8_000.0  # single-text requests
TRAIN_SAMPLES_PER_S_A100 = 320.0  # published: BERT-base fine-tuning, length 128, one A100
PARTS = ("bundle", "preflight", "prepare", "training", "probe", "convoy", "bench", "parity")
TRAIN_PROBES = ("train-probe-tiny", "train-probe-bert-base", "train-probe-bert-large")


def _cpu_figures(doc: Any, path: str = "") -> dict[str, Any]:
    """Every number under a key naming the CPU (the replica's CPU per text and the like)."""
    found: dict[str, Any] = {}
    if isinstance(doc, dict):
        for key, value in doc.items():
            where = f"{path}.{key}" if path else str(key)
            if "cpu" in str(key).lower() and isinstance(value, (int, float)):
                found[where] = value
            else:
                found.update(_cpu_figures(value, where))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found.update(_cpu_figures(value, f"{path}[{i}]"))
    return found


def _best(runs: list[dict[str, Any]], per_request: int) -> dict[str, Any] | None:
    rows = [
        r
        for r in runs
        if r.get("target") == "service" and r.get("texts_per_request") == per_request
    ]
    return max(rows, key=lambda r: r.get("texts_per_s", 0.0), default=None)


def bench_figures(bench: dict[str, Any]) -> dict[str, Any]:
    """Best single- and multi-text service runs, the limit, GPU peaks, CPU figures."""
    runs = bench.get("runs", [])
    multi_size = bench.get("plan", {}).get("multi_size", 32)
    model = bench.get("model", {})
    figures: dict[str, Any] = {
        "partial": bench.get("partial"),  # where a run stopped short, if it did
        "forwards": {k: model.get(k) for k in ("backend", "backend_reason", "records_graphs")},
        "limit_texts_per_s": bench.get("limit", {}).get("texts_per_s"),
        "limit_gpu_peak_bytes": bench.get("limit", {}).get("gpu_peak_bytes"),
        "service_gpu_peak_bytes": bench.get("half_load", {}).get("gpu_peak_bytes"),
        "half_load_p99_ms": bench.get("half_load", {}).get("p99_ms"),
        "cpu": _cpu_figures({k: v for k, v in bench.items() if k not in ("hardware", "profile")}),
        # Each profiled replica's top functions by own share of samples (loadtest.profile).
        "profile": {
            role: found["error"] if "error" in found else found["own"][:5]
            for role, found in bench.get("profile", {}).get("replicas", {}).items()
        },
    }
    for label, size in (("single", 1), ("multi", multi_size)):
        row = _best(runs, size)
        if row is not None:
            figures[label] = {
                k: row.get(k)
                for k in ("texts_per_request", "concurrency", "texts_per_s", "p50_ms", "p99_ms")
            }
    return figures


PARITY_KEYS = (
    "holds_parity",
    "parity_reference",
    "max_abs_diff",
    "max_abs_diff_vs_fp16_weights_cpu",
    "label_agreement",
    "texts_per_s",
)


def parity_figures(parity: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each dtype's parity verdict and speed from the parity part (loadtest.gpuparity), so the
    summary alone says whether the served precision holds."""
    rows = parity.get("rows", {})
    return {name: {k: row.get(k) for k in PARITY_KEYS} for name, row in rows.items()}


def _target(name: str, value: float | None, goal: float) -> dict[str, Any]:
    return {"name": name, "value": value, "goal": goal, "met": value is not None and value >= goal}


def summarize(parts: dict[str, dict[str, Any]], mode: str) -> dict[str, Any]:
    """Status per part, headline figures and targets (targets only mean something on a GPU)."""
    status = {
        name: parts[name].get("status", "ok") for name in PARTS + TRAIN_PROBES if name in parts
    }
    # The parity part is optional: it needs a pack made where the model's data is; a part
    # given no time (`--budget convoy=0`, the convoy's default) was left out on purpose.
    optional = ("skipped: no parity pack", LEFT_OUT)
    all_ok = all(s == "ok" or s.startswith(optional) for s in status.values())
    doc: dict[str, Any] = {"mode": mode, "status": status, "all_ok": all_ok, "parts": parts}
    doc["preflight"] = {k: v for k, v in parts.get("preflight", {}).items() if k != "status"}
    train = parts.get("training", {}).get("result", {})
    bench = parts.get("bench", {}).get("result", {})
    probe = parts.get("probe", {}).get("result", {})
    figures = bench_figures(bench) if bench else {}
    doc["figures"] = {
        "training_samples_per_s": train.get("samples_per_s"),
        "training_amp": train.get("amp_dtype"),
        "training_gpu_peak_bytes": train.get("gpu_peak_bytes"),
        "probe_advice": probe.get("advice"),
        "convoy": parts.get("convoy", {}).get("result", {}).get("rows", []),
        "bench": figures,
        "train_probe": {
            name: parts[name].get("result", {}).get("advice", {}).get("best", [])
            for name in TRAIN_PROBES
            if name in parts
        },
        "parity": parity_figures(parts.get("parity", {}).get("result", {})),
    }
    single = figures.get("single", {}).get("texts_per_s")
    multi = figures.get("multi", {})
    doc["targets"] = [
        _target(
            f"{multi.get('texts_per_request', 32)}-text requests: texts/s per GPU",
            multi.get("texts_per_s"),
            MULTI_TEXTS_PER_S,
        ),
        _target("single-text requests/s per GPU", single, SINGLE_REQUESTS_PER_S),
        _target(
            "training samples/s (published A100 figure)",
            train.get("samples_per_s"),
            TRAIN_SAMPLES_PER_S_A100,
        ),
    ]
    return doc


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}{unit}"
    return f"{value}{unit}"


def _mib(value: Any) -> str:
    return "-" if not value else f"{value / 2**20:,.0f} MiB"


def markdown(doc: dict[str, Any]) -> str:
    """Parts, headline figures and targets as the README's tables."""
    pre, fig = doc["preflight"], doc["figures"]
    bench = fig["bench"]
    lines = [
        f"GPU sizing run ({doc['mode']}): {pre.get('gpu') or 'no GPU'}, {pre.get('cores')} cores, "
        f"Python {pre.get('python')}, torch {pre.get('torch')}; {doc.get('seconds', '-')} s.",
        "",
        "| part | status | seconds |",
        "|---|---|---:|",
    ]
    for name, status in doc["status"].items():
        lines.append(f"| {name} | {status} | {_fmt(doc['parts'][name].get('seconds'))} |")
    lines += ["", "| figure | value |", "|---|---:|"]
    rows: list[tuple[str, str]] = [
        ("training samples/s (AMP " + _fmt(fig["training_amp"]) + ")",
         _fmt(fig["training_samples_per_s"])),
        ("training GPU peak", _mib(fig["training_gpu_peak_bytes"])),
        ("forward-only limit, texts/s", _fmt(bench.get("limit_texts_per_s"))),
        ("limit GPU peak", _mib(bench.get("limit_gpu_peak_bytes"))),
        ("service replica GPU peak", _mib(bench.get("service_gpu_peak_bytes"))),
    ]  # fmt: skip
    for label in ("single", "multi"):
        run = bench.get(label)
        if run:
            rows.append(
                (
                    f"{run['texts_per_request']}-text requests, c={run['concurrency']}: texts/s "
                    "(p50 / p99 ms)",
                    f"{_fmt(run['texts_per_s'])} ({_fmt(run['p50_ms'])} / {_fmt(run['p99_ms'])})",
                )
            )
    rows += [(f"CPU: {k}", _fmt(v)) for k, v in bench.get("cpu", {}).items()]
    for role, top in bench.get("profile", {}).items():
        said = top if isinstance(top, str) else ", ".join(f"{f} {n:.0%}" for f, n in top)
        said = said or "no samples"
        rows.append((f"profile, {role}: top functions by own share", said.replace("|", "/")))
    for r in fig.get("convoy", []):
        rows.append(
            (
                f"one forward in a {r['forward_in']}: ms alone / beside a busy thread",
                f"{_fmt(r['alone_ms'])} / {_fmt(r['beside_busy_ms'])}",
            )
        )
    advice = fig.get("probe_advice") or {}
    if advice:
        rows.append(
            ("probe: recommended micro-batch tokens", _fmt(advice.get("micro_batch_tokens")))
        )
    for name, best in fig.get("train_probe", {}).items():
        for f in best:
            rows.append(
                (
                    f"{name}, length {f['length']}, fits 40 GiB: batch (AMP, checkpointing)",
                    f"{f['batch']} ({f['amp']}, {'on' if f['checkpointing'] else 'off'}): "
                    f"{_fmt(f['tokens_per_s'])} tokens/s, {_mib(f['peak_bytes'])}",
                )
            )
    for name, r in fig.get("parity", {}).items():
        verdict = "holds" if r["holds_parity"] else "DOES NOT hold"
        rows.append(
            (
                f"parity, {name} (judged against {r['parity_reference'] or '-'}): max abs diff "
                "vs original / FP16-rounded weights, same label, texts/s",
                f"{verdict}: {r['max_abs_diff']} / {r['max_abs_diff_vs_fp16_weights_cpu']}, "
                f"{r['label_agreement']}, {_fmt(r['texts_per_s'])}",
            )
        )
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "| target | measured | goal | met |", "|---|---:|---:|---|"]
    for t in doc["targets"]:
        met = "yes" if t["met"] else "NO"
        lines.append(f"| {t['name']} | {_fmt(t['value'])} | {_fmt(t['goal'])} | {met} |")
    return "\n".join(lines) + "\n"
