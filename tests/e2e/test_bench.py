"""`make bench` in quick mode: it runs all four measurements and writes well-formed reports.

Speed is never asserted (benchmarks measure it); only that every figure is there and sane.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def test_quick_bench_writes_json_table_and_plot(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    # The overhead model on ONNX Runtime, as it runs wherever the real model does (the
    # limit and the service keep torch: this tiny model has no measured export).
    cmd = [sys.executable, "-m", "loadtest.bench", "--quick", "--model-path",
           str(tiny_model_dir), "--out", str(out), "--overhead-backend", "onnx",
           "--profile-s", "2"]  # fmt: skip
    # The layout with every part (two processes, the handle hops); a small machine's default
    # would be co-located (service.local.local_layout).
    # Forwards stay on the forward thread, so its CPU is read apart: a tiny model's would run
    # on the event loop on a fast CPU (service.placement).
    env = {**os.environ, "SENTIMENT_LAYOUT": "two-tier", "SENTIMENT_INLINE_FORWARD_MS": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=500, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "bench.json").read_text())
    # The report written before the overhead section (kept if a run is cut there) is replaced.
    assert "partial" not in doc and "overhead" in doc
    assert doc["layout"] == "two-tier"
    assert doc["limit"]["texts_per_s"] > 0 and doc["limit"]["cpu_ms_per_text"] > 0
    # The limit with only as many texts known as the top single-text level keeps in flight.
    grouped = doc["limit"]["at_a_time"]
    assert grouped["texts"] == max(doc["plan"]["singles"])
    assert grouped["texts_per_s"] > 0 and grouped["all_sorted_texts_per_s"] > 0
    # And with half as many: what one call in flight per ingress lets the batcher hold.
    assert (
        grouped["half_texts"] == max(1, grouped["texts"] // 2) and grouped["half_texts_per_s"] > 0
    )
    runs = {(r["target"], r["texts_per_request"], r["concurrency"]): r for r in doc["runs"]}
    plan = doc["plan"]
    kinds = ((1, plan["singles"]), (plan["multi_size"], plan["multis"]))
    expected = {(size, c) for size, levels in kinds for c in levels}
    assert set(runs) == {(t, size, c) for t in ("service", "naive") for size, c in expected}
    for r in runs.values():
        assert r["errors"] == 0, r
        assert r["requests"] > 0 and r["texts_per_s"] > 0
        assert r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]
        assert r["vs_limit"] > 0
        assert 0 <= r["client_busy_cores"] <= os.cpu_count()  # the load generator's share
        # Server CPU per text over the limit's, both read in this run.
        assert r["cpu_vs_limit"] == round(
            r["server_cpu_ms_per_text"] / doc["limit"]["cpu_ms_per_text"], 2
        )
    assert all(r["vs_naive"] > 0 for r in runs.values() if r["target"] == "service")
    for r in runs.values():  # where each run's server CPU went, read from /proc
        assert r["server_cpu_ms_per_text"] > 0, r
        served_by = "SentimentModel" if r["target"] == "service" else "NaiveClassifier"
        assert r["cpu_ms_per_text_by_group"][served_by] > 0, r
        if r["target"] == "service":
            assert r["model_replica_busy_cores"] > 0 and r["forward_thread_busy_cores"] > 0, r
            # The model core's own counts over the run (/readyz): it batched and forwarded.
            assert r["texts_per_batch"] >= r["texts_per_forward"] >= 1, r
            # Its busiest threads (the forward thread computes every forward here).
            assert "forward" in {t["thread"] for t in r["model_replica_threads"]}, r
            assert r["model_replica_threads_busy"] >= 1, r
    assert doc["half_load"]["requests"] > 0 and doc["half_load"]["errors"] == 0
    assert [t["goal"] for t in doc["targets"]] == [0.85, 0.9, 250.0, 3.0]
    # The idle penalty's baseline is measured beside the idle service, next to its lone run.
    lone = runs["service", 1, min(plan["singles"])]
    penalty = doc["targets"][-1]
    assert lone["alone_ms"] > 0 and "beside the idle service" in penalty["name"]
    assert penalty["value"] == round(lone["p50_ms"] - lone["alone_ms"], 1)
    assert doc["ingress"] == "haproxy" and doc["ingress_replicas"] >= 1
    table = (out / "bench.md").read_text()
    assert table.count("| service |") == len(runs) // 2
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "limit:" in proc.stdout and "half load:" in proc.stdout
    assert f"With only {grouped['texts']} texts known at a time" in table
    assert "The limit's best run spent" in table and "| CPU vs limit |" in table
    _check_overhead(doc["overhead"], table)
    # py-spy on each replica role under the top single-text level, after the measured runs.
    profiled = doc["profile"]
    assert profiled["clients"] == max(doc["plan"]["singles"]) and profiled["errors"] == 0
    assert set(profiled["replicas"]) == {"SentimentModel", "SentimentIngress"}
    for role, found in profiled["replicas"].items():
        assert found.get("samples", 0) > 0, (role, found)
        assert (out / f"profile-{role}.txt").is_file() and found["own"] and found["inclusive"]
        assert f"  {role} ({found['samples']} samples): " in proc.stdout
    assert "overhead c=256" in proc.stdout and "  model replica threads, cores: " in proc.stdout


def _check_overhead(section: dict[str, Any], table: str) -> None:
    """The tiny-model overhead run: every level answered, server CPU per request accounted."""
    assert section["forward_limit_texts_per_s"] > 0
    assert [r["concurrency"] for r in section["levels"]] == section["plan"]["levels"]
    assert section["plan"]["levels"] == [1, 64, 256]
    for r in section["levels"]:
        assert r["requests"] > 0 and r["errors"] == 0, r
        assert r["requests_per_s"] > 0 and r["p50_ms"] <= r["p99_ms"]
        assert isinstance(r["server_cpu_ms_per_request"], float)
        assert r["server_cpu_ms_per_request"] > 0
        assert r["forward_cpu_ms_per_text"] >= 0 and r["model_replica_cpu_ms_per_text"] >= 0
        assert r["texts_per_batch"] >= r["texts_per_forward"] >= 1, r
        assert {"SentimentIngress", "SentimentModel"} <= set(r["groups"]), r["groups"]
        total = sum(g["cpu_ms_per_request"] for g in r["groups"].values())
        assert abs(total - r["server_cpu_ms_per_request"]) < 0.01 + 0.01 * total
    assert section["backend"] == section["served_backend"] == "onnx"
    # Behind HAProxy the ingress calls the model replica over gRPC, though the bench's
    # process, which bound the model's handle into the application, imported Ray Serve
    # before its throughput-optimized mode was on (so its own handles make actor calls); its
    # calls are pickled (service.failover.pickled_calls), and the answers above came that way.
    assert section["model_calls"] == "gRPC (pickle)"
    # Ray Serve's floor, at the same levels in the same run: only its deployment answered.
    floors = section["floor_levels"]
    assert [f["concurrency"] for f in floors] == section["plan"]["levels"]
    for r, f in zip(section["levels"], floors, strict=True):
        assert f["requests"] > 0 and f["errors"] == 0, f
        assert f["groups"]["Floor"]["cpu_ms_per_request"] > 0, f["groups"]
        assert (
            "SentimentIngress" not in f["groups"]
            or f["groups"]["SentimentIngress"]["cpu_ms_per_request"]
            < r["groups"]["SentimentIngress"]["cpu_ms_per_request"]
        )
        added = r["server_cpu_ms_per_request"] - f["server_cpu_ms_per_request"]
        assert abs(r["added_to_floor_cpu_ms_per_request"] - added) < 0.002
    # The last: a lone request's idle penalty in two tiers (this run's layout), against the
    # tiny model's own forward of one text in-process.
    assert [t["goal"] for t in section["targets"]] == [1.0, 0.1, 0.1, 0.8, 0.1, 0.8, 3.0]
    assert section["layout"] == "two-tier" and section["forward_alone_ms"] > 0
    lone = section["levels"][0]
    penalty = section["targets"][-1]
    assert penalty["value"] == round(lone["p50_ms"] - section["forward_alone_ms"], 2)
    assert f"({section['forward_alone_ms']} ms)" in penalty["name"]
    # The Rust-fronted reference (mosec, a dev dependency), at the same levels, alone in /proc.
    assert section["reference"]["server"].startswith("mosec ")
    refs = section["reference_levels"]
    assert [f["concurrency"] for f in refs] == section["plan"]["levels"]
    for f in refs:
        assert f["requests"] > 0 and f["errors"] == 0, f
        assert f["groups"]["loadtest.reference"]["cpu_ms_per_request"] > 0, f["groups"]
        assert not {"SentimentIngress", "raylet"} & set(f["groups"]), f["groups"]  # no Ray yet
    assert "Rust-fronted reference in the same run" in table
    # The three up at once, taking turns at 64 clients: every turn answered and its CPU read.
    turns = section["turns"]
    assert turns["targets"] == ["service", "floor", "reference"] and turns["clients"] == 64
    assert len(turns["turns"]) == turns["rounds"] == section["plan"]["turn_rounds"]
    for row in turns["turns"]:
        for t in row.values():
            assert t["errors"] == 0 and t["requests_per_s"] > 0 and t["server_cpu_ms_per_request"]
    assert turns["rate_over_reference_median"] is not None
    assert section["targets"][5]["value"] == turns["rate_over_reference_median"]
    assert "Taking turns: service, floor, reference up at once" in table
    # The model replica called directly, by call size: every size answered, its CPU read.
    calls = section["two_tier_calls"]
    assert [r["texts_per_call"] for r in calls["sizes"]] == [1, 8, 32, 128]
    for r in calls["sizes"]:
        assert r["calls"] > 0 and r["own_cpu_ms_per_call"] > 0, r
        assert r["transport"] == "gRPC (pickle)", r  # as the ingress replicas call it
    assert calls["fit"]["per_call_ms"] is not None
    assert "called directly through a handle" in table
    assert "| clients | requests/s |" in table and "Server CPU by process group" in table
    assert "Ray Serve's floor in the same Ray and run" in table
    assert table.count("\n| 256 | ") == 3  # the service's table, the floor's, the reference's
    # What the service adds, split into the model's forwards (as measured, beside one thread
    # at its limit) and the request path.
    row = next(r for r in section["levels"] if r["concurrency"] == 64)
    model_ms = round(1000.0 / section["forward_limit_texts_per_s"], 3)
    forward = f"forwards took {row['forward_cpu_ms_per_text']:.3f} ms per text"
    assert f"{forward} ({model_ms:.3f} at its in-process limit)" in table
    # The one-client latency breakdown: every hop measured and shown.
    hops = section["hops"]
    assert hops["calls_each"] > 0
    hop_ms = [v for k, v in hops.items() if k.endswith("_ms")]
    assert len(hop_ms) == 5 and all(v > 0 for v in hop_ms)
    assert "| HTTP `/v1/classify`, one text (everything) |" in table
