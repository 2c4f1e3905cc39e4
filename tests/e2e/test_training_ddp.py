"""Two CPU processes (gloo) under torchrun train one model, written once by rank 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.model import SentimentModel
from tests.net import free_port
from tests.tiny_bert import build_tiny_bert
from tests.unit.test_training_loop import make_examples, write_csv


@pytest.mark.slow
def test_torchrun_two_cpu_processes_write_one_model(tmp_path: Path) -> None:
    rows = make_examples(160, seed=11)
    encoder = build_tiny_bert(tmp_path / "encoder", texts=[r.text for r in rows], seed=2)
    data = write_csv(tmp_path / "reviews.csv", rows)
    out = tmp_path / "model"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        "-m",
        "training",
        "train",
        f"--model={encoder}",
        f"--data={data}",
        f"--out={out}",
        "--max-steps=6",
        "--batch-size=8",
        "--grad-accum=2",  # exercises no_sync on the inner micro-step
        "--max-length=32",
        "--lr=1e-3",
        "--checkpoint-every=3",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Only rank 0 logs: the summary line appears once.
    assert proc.stdout.count("held-out accuracy") == 1, proc.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["train_steps"] == 6
    assert "2 CPU process(es)" in metrics["hardware"]
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".safetensors") == [
        "model.safetensors"
    ]
    assert not (out / "checkpoint").exists()
    model = SentimentModel.load(out, device="cpu", max_length=64)
    assert set(model.classify(["the phone was great"])[0]) == {"negative", "positive"}
