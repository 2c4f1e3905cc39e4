"""`make gpu-bench`'s orchestrator in CPU smoke mode: parts run apart, reports are complete.

The benchmark part (Ray Serve over HTTP) is left out by a zero budget: `test_bench.py` covers
it, and a skipped part must not lose the other parts' figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_cpu_smoke_writes_summary_and_keeps_figures_of_parts_that_ran(tmp_path: Path) -> None:
    out = tmp_path / "gpu-bench"
    cmd = [sys.executable, "-m", "loadtest.gpubench", "--cpu-smoke", "--out", str(out),
           "--bundle", str(tmp_path / "no-bundle"), "--budget", "bench=0",
           "--parity-pack", str(tmp_path / "no-pack"),
           "--train-probe"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    # The bench given no time and no parity pack: both left out on purpose, not failures.
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "summary.json").read_text())
    assert doc["mode"] == "cpu-smoke" and doc["all_ok"] is True
    status = doc["status"]
    parts = ("prepare", "training", "probe", "convoy", "train-probe-tiny")
    assert [status[p] for p in parts] == ["ok"] * 5, doc
    assert status["bench"] == "skipped: budget 0" and status["parity"].startswith("skipped")
    assert doc["preflight"]["cuda"] is False and doc["preflight"]["cores"] >= 1
    train = doc["parts"]["training"]["result"]
    assert train["samples_per_s"] > 0 and train["samples"] == 2 * 4
    assert doc["figures"]["training_samples_per_s"] == train["samples_per_s"]
    assert doc["figures"]["probe_advice"]["micro_batch_tokens"] > 0
    convoy = doc["figures"]["convoy"]
    assert [r["forward_in"] for r in convoy] == ["thread", "process"]
    assert all(r["alone_ms"] > 0 and r["beside_busy_ms"] > 0 for r in convoy)
    assert [t["goal"] for t in doc["targets"]] == [20_000.0, 8_000.0, 320.0]
    best = doc["figures"]["train_probe"]["train-probe-tiny"]
    assert [f["length"] for f in best] == [16] and best[0]["batch"] == 2
    for name in ("training.json", "probe.json", "training.log", "probe.log", "prepare.log",
                 "train-probe-tiny.json"):  # fmt: skip
        assert (out / name).is_file(), name
    table = (out / "summary.md").read_text()
    assert "one forward in a process: ms alone / beside a busy thread" in table
    assert "| training | ok |" in table and "| bench | skipped" in table
    assert "| training samples/s (published A100 figure) |" in table
    assert "| train-probe-tiny | ok |" in table and "train-probe-tiny, length 16" in table
