"""The tiny-model overhead run's targets and its part of bench.md (see loadtest.overhead)."""

from __future__ import annotations

from typing import Any

from loadtest import callsize, hops, paired, tally
from loadtest.levels import MODEL_GROUP
from loadtest.overhead import (
    ADDED_CPU_MS_PER_REQUEST,
    IDLE_PENALTY_MS,
    MODEL_OWN_CPU_MS_PER_TEXT,
    OVERHEAD_CLIENTS,
    SERVER_CPU_MS_PER_REQUEST,
)

# The service's requests/s over the Rust-fronted reference's (loadtest.reference), at least.
REFERENCE_RATE_RATIO = 0.8


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    """Server CPU per request and the model replica's own CPU per text, at 64 clients; the
    request rate against the Rust-fronted reference's where it was measured; a lone
    request's idle penalty in two tiers where that was measured."""
    row = _headline_row(section)
    # The model replica's figure is read where it has a process of its own: the service's
    # layout when that is two tiers, else the extra two-tier level.
    model_row = _model_row(section)
    has_model = model_row is not None and MODEL_GROUP in model_row["groups"]
    server = row["server_cpu_ms_per_request"]
    own = model_row["model_replica_cpu_ms_per_text"] if model_row else None
    added = row.get("added_to_floor_cpu_ms_per_request")
    c = row["concurrency"]
    return [
        {
            "name": f"server CPU ms per request, {c} clients",
            "value": server,
            "goal": SERVER_CPU_MS_PER_REQUEST,
            "met": server is not None and server <= SERVER_CPU_MS_PER_REQUEST and not row["errors"],
        },
        {
            "name": f"model replica CPU ms per text (excl. forward), {c} clients",
            "value": own if has_model else None,
            "goal": MODEL_OWN_CPU_MS_PER_TEXT,
            "met": has_model and own is not None and own <= MODEL_OWN_CPU_MS_PER_TEXT,
        },
        {
            "name": f"server CPU ms per request added to Ray Serve's floor, {c} clients",
            "value": added,
            "goal": ADDED_CPU_MS_PER_REQUEST,
            "met": added is not None and added <= ADDED_CPU_MS_PER_REQUEST and not row["errors"],
        },
        *_reference_targets(section),
        *paired.targets(section.get("turns"), REFERENCE_RATE_RATIO, ADDED_CPU_MS_PER_REQUEST),
        *_lone_targets(section),
    ]


def lone_rows(section: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The one-client levels by layout ("colocated", "two-tier"), where they ran: the
    service's own levels in its layout, and the extra two-tier levels."""
    found: dict[str, dict[str, Any]] = {}
    for layout, levels in [
        (section.get("layout"), section["levels"]),
        ("two-tier", section.get("two_tier_levels") or []),
    ]:
        lone = [r for r in levels if r["concurrency"] == 1]
        if layout and lone:
            found[layout] = lone[0]
    return found


def _lone_targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The idle penalty in two tiers, the GPU layout (the main bench holds `make serve`'s
    layout to it with the default model): a lone request crosses to the model replica."""
    row = lone_rows(section).get("two-tier")
    alone = section.get("forward_alone_ms")
    if row is None or alone is None:
        return []
    penalty = round(row["p50_ms"] - alone, 2)
    return [
        {
            "name": "idle penalty in two tiers: p50 at one client minus one in-process forward "
            f"({alone} ms), ms",
            "value": penalty,
            "goal": IDLE_PENALTY_MS,
            "met": penalty <= IDLE_PENALTY_MS and not row["errors"],
        }
    ]


def _reference_targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The request rate against the Rust-fronted reference's, where it was measured."""
    row = _headline_row(section)
    ratio = _reference_ratio(section, row)
    if ratio is None:
        return []
    return [
        {
            "name": f"requests/s at {row['concurrency']} clients over the Rust-fronted "
            "reference's (mosec)",
            "value": ratio,
            "goal": REFERENCE_RATE_RATIO,
            "met": ratio >= REFERENCE_RATE_RATIO and not row["errors"],
        }
    ]


def _reference_ratio(section: dict[str, Any], row: dict[str, Any]) -> float | None:
    """The service's requests/s over the reference's at the headline level (`row`)."""
    found = [
        r for r in section.get("reference_levels") or [] if r["concurrency"] == row["concurrency"]
    ]
    if not found or found[0]["errors"]:
        return None
    ratio = _rate_over(row, found[0])
    return None if ratio is None else round(ratio, 3)


def _rate_over(service: dict[str, Any], reference: dict[str, Any]) -> float | None:
    """The service's requests/s over the reference's at one level (None: it answered none)."""
    rate = float(reference["requests_per_s"])
    return float(service["requests_per_s"]) / rate if rate else None


def report_lines(section: dict[str, Any]) -> list[str]:
    """The overhead run: one row per client count, the 64-client breakdown, the targets."""
    m, plan = section["model"], section["plan"]
    lines = [
        f"Serving overhead: a random BERT ({m['layers']} layers, hidden {m['hidden']}, "
        f"{m['heads']} heads, intermediate {m['intermediate']}) with the {m['tokenizer']} "
        f"tokenizer, {section['torch_threads']} torch thread, backend "
        f"{section.get('backend', 'torch')}; single-text requests from "
        f"keep-alive clients, closed loop, {plan['seconds']} s per level after "
        f"{plan['warmup_s']} s warm-up. Server CPU is every server process (Ray, replicas, "
        "HAProxy; not the load generator), read from /proc over the measured window.",
        f"In-process forward-only limit of this model: "
        f"**{section['forward_limit_texts_per_s']:.0f} texts/s**.",
        "",
        "| clients | requests/s | p50 ms | p99 ms | server CPU ms/request | model replica CPU "
        "ms/text (excl. forward) | forward CPU ms/text | texts per batch (forward) | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in section["levels"]:
        lines.append(
            f"| {r['concurrency']} | {r['requests_per_s']:.1f} | {r['p50_ms']:.1f} | "
            f"{r['p99_ms']:.1f} | {_num(r['server_cpu_ms_per_request'])} | "
            f"{_num(r['model_replica_cpu_ms_per_text'])} | "
            f"{_num(r['forward_cpu_ms_per_text'])} | {tally.shown(r, 'n/a')} | {r['errors']} |"
        )
    if "floor_levels" in section:
        lines += ["", *_floor_lines(section), "", _split_line(section)]
    if section.get("reference_levels"):
        lines += ["", *_reference_lines(section)]
    if section.get("turns"):
        lines += ["", *paired.report_lines(section["turns"])]
    if section.get("two_tier_levels"):
        lines += ["", *_two_tier_lines(section)]
    if calls := section.get("two_tier_calls"):
        lines += [
            "",
            *callsize.report_lines(calls["sizes"], calls["fit"], MODEL_OWN_CPU_MS_PER_TEXT),
        ]
    if "hops" in section:
        lines += ["", *hops.report_lines(section["hops"])]
    row = _headline_row(section)
    lines += [
        "",
        f"Server CPU by process group at {row['concurrency']} clients (the model replica's "
        "includes its forward thread):",
        "",
        "| process group | processes | CPU ms/request |",
        "|---|---:|---:|",
    ]
    groups = sorted(row["groups"].items(), key=lambda g: -(g[1]["cpu_ms_per_request"] or 0))
    for name, g in groups:
        lines.append(f"| {name} | {g['processes']} | {_num(g['cpu_ms_per_request'])} |")
    lines += ["", "| target | measured | goal | met |", "|---|---:|---:|---|"]
    for t in section["targets"]:
        met = "yes" if t["met"] else "NO"
        lines.append(f"| {t['name']} | {_num(t['value'])} | {t['goal']} | {met} |")
    return lines


def _floor_lines(section: dict[str, Any]) -> list[str]:
    """The floor beside the service, level by level."""
    lines = [
        "Ray Serve's floor in the same Ray and run: a deployment that answers a constant JSON "
        "body, the same bodies and clients (loadtest/floor.py).",
        "",
        "| clients | floor requests/s | floor p50 ms | floor p99 ms | floor server CPU "
        "ms/request | service adds, ms/request |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r, f in zip(section["levels"], section["floor_levels"], strict=True):
        lines.append(
            f"| {f['concurrency']} | {f['requests_per_s']:.1f} | {f['p50_ms']:.1f} | "
            f"{f['p99_ms']:.1f} | {_num(f['server_cpu_ms_per_request'])} | "
            f"{_num(r.get('added_to_floor_cpu_ms_per_request'))} |"
        )
    return lines


def _reference_lines(section: dict[str, Any]) -> list[str]:
    """The Rust-fronted reference, level by level, against the service."""
    ref = section["reference"]
    lines = [
        f"The Rust-fronted reference in the same run: {ref['server']} (Rust HTTP front, "
        f"dynamic batches of up to {ref['max_batch']} texts after a wait of up to "
        f"{ref['wait_ms']} ms, one Python worker over IPC) serving the same model directory "
        "the same way: one tokenizer call a batch, the same planned forwards "
        "(loadtest/reference.py).",
        "",
        "| clients | reference requests/s | p50 ms | p99 ms | server CPU ms/request | "
        "service / reference, requests/s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r, f in zip(section["levels"], section["reference_levels"], strict=True):
        ratio = _rate_over(r, f)
        lines.append(
            f"| {f['concurrency']} | {f['requests_per_s']:.1f} | {f['p50_ms']:.1f} | "
            f"{f['p99_ms']:.1f} | {_num(f['server_cpu_ms_per_request'])} | {_num(ratio)} |"
        )
    return lines


def _split_line(section: dict[str, Any]) -> str:
    """What the service adds to the floor, split into the model's forwards (their measured
    CPU: forward threads from /proc, event-loop forwards from the model core's own count)
    and the rest, the request path."""
    row = _headline_row(section)
    added, forward = row.get("added_to_floor_cpu_ms_per_request"), row["forward_cpu_ms_per_text"]
    if added is None or forward is None:
        return "The floor or the forwards' CPU was not measured: no split of what is added."
    limit = _model_ms_per_text(section)
    at_limit = f" ({limit:.3f} at its in-process limit)" if limit is not None else ""
    return (
        f"Of the {added:.3f} ms the service adds at {row['concurrency']} clients, the model's "
        f"forwards took {forward:.3f} ms per text{at_limit}; the request path itself "
        f"{added - forward:.3f} ms."
    )


def _two_tier_lines(section: dict[str, Any]) -> list[str]:
    """The extra two-tier levels: the model replica's own CPU apart from its forwards, and a
    lone request against the co-located one."""
    r = _nearest(section["two_tier_levels"])
    lone = lone_rows(section)
    extra = []
    if "colocated" in lone and "two-tier" in lone and "forward_alone_ms" in section:
        near, far = lone["colocated"]["p50_ms"], lone["two-tier"]["p50_ms"]
        extra = [
            "",
            f"A lone request (one client, p50): {near:.2f} ms co-located, {far:.2f} ms in two "
            f"tiers, against {section['forward_alone_ms']:.2f} ms for the model's forward "
            f"alone in-process: the hop to a model replica of its own adds {far - near:.2f} ms "
            "(Ray's own handle call, below).",
        ]
    return [
        f"The same tiny model in two tiers (ingress and model replica apart, the GPU layout), "
        f"{r['concurrency']} clients: {r['requests_per_s']:.1f} requests/s, server CPU "
        f"{_num(r['server_cpu_ms_per_request'])} ms/request, of which the model replica "
        f"{_num(r['model_replica_cpu_ms_per_text'])} ms per text beside its forwards' "
        f"{_num(r['forward_cpu_ms_per_text'])}; texts per batch (forward) {tally.shown(r, 'n/a')}.",
        *extra,
    ]


def _model_row(section: dict[str, Any]) -> dict[str, Any] | None:
    """The level the model replica's own CPU is read at (None: not measured)."""
    if levels := section.get("two_tier_levels"):
        return _nearest(levels)
    row = _headline_row(section)
    return row if MODEL_GROUP in row["groups"] else None


def _model_ms_per_text(section: dict[str, Any]) -> float | None:
    """CPU per text of the model's forwards in-process: the limit runs on one thread."""
    limit = section.get("forward_limit_texts_per_s")
    if not limit or section.get("torch_threads") != 1:
        return None
    return round(1000.0 / float(limit), 3)


def _headline_row(section: dict[str, Any]) -> dict[str, Any]:
    """The level the targets are read at: the one nearest OVERHEAD_CLIENTS."""
    return _nearest(section["levels"])


def _nearest(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """The level whose client count is nearest OVERHEAD_CLIENTS."""
    row: dict[str, Any] = min(levels, key=lambda r: abs(r["concurrency"] - OVERHEAD_CLIENTS))
    return row


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
