"""`make soak` end to end, briefly: the real service, Locust's soak shape, RSS samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_short_soak_reports_every_server_process(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak"
    command = [sys.executable, "-m", "loadtest.soak", "--model-path", str(tiny_model_dir)]
    command += ["--minutes", "0.15", "--users", "2", "--warmup-s", "2", "--interval-s", "1"]
    # Growth over 9 s of a tiny model says nothing; the 10-minute run is the measurement.
    command += ["--max-growth", "100", "--out", str(out)]
    # Two tiers, so both replica roles are sampled and the serve command's two-application
    # path runs end to end (on a small CPU machine it would pick the co-located layout, which
    # test_serve_cli.py covers).
    env = {**os.environ, "SENTIMENT_LAYOUT": "two-tier"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((out / "soak.json").read_text())
    assert doc["requests"] > 0 and doc["failures"] == 0
    processes = doc["rss"]["processes"]
    roles = " ".join(processes)
    for role in ("SentimentModel", "SentimentIngress", "raylet", "haproxy"):
        assert role in roles, roles
    assert all(p["max_mib"] >= p["end_mib"] > 0 for p in processes.values())
    assert len(doc["series"]) >= 3
    assert "| **total (processes alive at the end)** |" in done.stdout
    assert doc["service_exit"] == 0  # SIGTERM stopped it cleanly
