"""FSDP2 over two CPU processes (gloo): trains, checkpoints, resumes exactly, writes one model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from service.model import SentimentModel
from tests.net import free_port
from tests.tiny_bert import build_tiny_bert
from tests.unit.test_training_loop import make_examples, write_csv

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_fsdp_trains_checkpoints_resumes_and_writes_one_servable_model(tmp_path: Path) -> None:
    rows = make_examples(120, seed=11)
    encoder = build_tiny_bert(tmp_path / "encoder", texts=[r.text for r in rows], seed=2)
    data = write_csv(tmp_path / "reviews.csv", rows)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}",
        "-m", "tests.e2e.fsdp_job", str(encoder), str(data), str(tmp_path),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("held-out accuracy") == 3, proc.stdout  # rank 0 only, per run

    full, resumed = tmp_path / "full", tmp_path / "resumed"
    state = torch.load(tmp_path / "step-2" / "training_state.pt", weights_only=True)
    assert state["strategy"] == "fsdp" and state["world_size"] == 2 and state["step"] == 2
    assert (full / "checkpoint").is_dir()  # --keep-checkpoint
    metrics = json.loads((resumed / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == 2 and metrics["train_steps"] == 4
    assert metrics["config"]["strategy"] == "fsdp" and metrics["world_size"] == 2
    assert metrics["config"]["gradient_checkpointing"] is True
    assert "FSDP" in (resumed / "README.md").read_text()  # the model card says how

    weights = {
        run: load_file(tmp_path / run / "model.safetensors") for run in ("full", "resumed", "ddp")
    }
    for name, tensor in weights["full"].items():
        # Resuming replays the same steps; FSDP with checkpointing computes what DDP computes.
        assert torch.allclose(weights["resumed"][name], tensor, atol=1e-6), name
        assert torch.allclose(weights["ddp"][name], tensor, atol=1e-5), name
    for out in (full, resumed):
        assert sorted(p.name for p in out.iterdir() if p.suffix == ".safetensors") == [
            "model.safetensors"
        ]
        assert {"config.json", "tokenizer.json", "metrics.json", "README.md"} <= {
            p.name for p in out.iterdir()
        }
        model = SentimentModel.load(out, device="cpu", max_length=64)
        assert set(model.classify(["the phone was great"])[0]) == {"negative", "positive"}
