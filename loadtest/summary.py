"""The rehearsal summary: client figures, server figures, SLO verdict and capacity."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadtest.capacity import Capacity, StepResult


def slo_verdict(
    p99_ms: float, error_ratio: float, slo_p99_ms: float, slo_errors: float
) -> list[str]:
    """Empty when the SLO holds, else one line per miss."""
    misses = []
    if p99_ms > slo_p99_ms:
        misses.append(f"p99 latency {p99_ms:.0f} ms is over the SLO of {slo_p99_ms:.0f} ms")
    if error_ratio > slo_errors:
        misses.append(f"error ratio {error_ratio:.4f} is over the SLO of {slo_errors:.4f}")
    return misses


def markdown(doc: dict[str, Any]) -> str:
    """Human-readable summary of the document `write` saves."""
    c, s = doc["client"], doc["server"]
    lines = [
        f"# Rehearsal: {doc['shape']} against {doc['host']}",
        "",
        f"Client: {c['requests']} requests, {c['texts']} texts answered, "
        f"{c['texts_per_s']:.1f} texts/s; p50 {c['p50_ms']:.0f} ms, p95 {c['p95_ms']:.0f} ms, "
        f"p99 {c['p99_ms']:.0f} ms; errors {c['failures']} ({c['error_ratio']:.4f}), "
        f"429s {c['rejected']}.",
    ]
    if s.get("available"):
        lines.append(
            f"Server: {s['replicas']} replica(s); {s['texts_per_forward']} texts per forward, "
            f"{s['texts_per_batch']} per dynamic batch; padding ratio ~{s['padding_ratio_mean']}; "
            f"queue wait p50 {s['queue_wait_p50_ms']} ms, p99 {s['queue_wait_p99_ms']} ms; "
            f"forward p99 {s['forward_p99_ms']} ms; "
            f"forwards by where they ran {s.get('forwards_by_place') or 'none'}; "
            f"max pending texts {s['pending_texts_max']:.0f}; "
            f"GPU memory peak {s['gpu_memory_peak_bytes_max'] / 2**20:.0f} MiB; "
            f"rejections {s['rejections_by_reason'] or 'none'}."
        )
    else:
        lines.append(f"Server metrics unavailable: {s.get('reason')}.")
    slo = doc["slo"]
    verdict = "met" if not slo["misses"] else "MISSED: " + "; ".join(slo["misses"])
    lines.append(f"SLO (p99 <= {slo['p99_ms']:.0f} ms, errors <= {slo['error_ratio']}): {verdict}.")
    if doc.get("steps"):
        lines += [
            "",
            "| users | texts/s | requests/s | p99 ms | error ratio | within SLO |",
            "|---:|---:|---:|---:|---:|---|",
        ]
        for r in doc["steps"]:
            ok = "yes" if r["meets_slo"] else "no"
            lines.append(
                f"| {r['users']} | {r['texts_per_s']:.1f} | {r['requests_per_s']:.1f} | "
                f"{r['p99_ms']:.0f} | {r['error_ratio']:.4f} | {ok} |"
            )
        cap = doc["capacity"]
        lines.append("")
        lines.append(
            f"Capacity: {cap['best_texts_per_s']:.1f} texts/s within the SLO on "
            f"{cap['replicas_measured']} replica(s) ({cap['replicas_from']}) = "
            f"{cap['per_replica_texts_per_s']:.1f} texts/s per replica (one replica per GPU)."
        )
        if cap["replicas_needed"] is not None:
            lines.append(
                f"A peak of {cap['peak_texts_per_s']:.0f} texts/s at {cap['headroom']:.0%} "
                f"utilisation needs **{cap['replicas_needed']} replicas / GPUs**."
            )
        elif cap["per_replica_texts_per_s"] == 0:
            lines.append("No step met the SLO: lower the load or relax the SLO.")
        else:
            lines.append("Give --peak-texts-per-s to get the replicas a peak needs.")
    return "\n".join(lines) + "\n"


def write(
    out: Path,
    doc: dict[str, Any],
    steps: list[StepResult] | None = None,
    cap: Capacity | None = None,
) -> str:
    """Save summary.json and summary.md in `out`; return the markdown."""
    if steps is not None:
        doc["steps"] = [asdict(r) for r in steps]
    if cap is not None:
        doc["capacity"] = asdict(cap)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = markdown(doc)
    (out / "summary.md").write_text(text)
    return text
