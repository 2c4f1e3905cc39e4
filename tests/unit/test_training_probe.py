"""The training probe: its advice respects the limit, OOM is a result, a real run reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import training.memprobe as memprobe
from service.peakmem import peak_memory
from training.loop import DistContext, TrainResult
from training.memprobe import Cell, Grid, Setting, run_grid
from training.probereport import advise, format_table, parse_size

GIB = 1 << 30


def cell(batch: int, peak_gib: float, ckpt: bool = False, length: int = 128, **kw: Any) -> Cell:
    seconds = 0.01 * batch * (1.3 if ckpt else 1.0)
    return Cell(
        "ddp",
        "bf16",
        ckpt,
        batch,
        length,
        step_seconds=seconds,
        samples_per_s=batch / seconds,
        tokens_per_s=batch * length / seconds,
        peak_bytes=int(peak_gib * GIB),
        base_bytes=GIB,
        **kw,
    )


def measured() -> list[Cell]:
    return [
        cell(8, 10),
        cell(16, 20),
        cell(32, 38),  # over 90% of 40 GiB
        cell(64, 0, status="too-big"),
        cell(8, 6, ckpt=True),
        cell(16, 11, ckpt=True),
        cell(32, 21, ckpt=True),
        cell(64, 0, ckpt=True, status="oom"),
        cell(8, 39, length=512),  # nothing fits at 512 without checkpointing
        cell(8, 20, ckpt=True, length=512),  # the largest tried, and it fits
    ]


def test_advice_gives_the_largest_batch_under_the_limit_per_setting_and_length() -> None:
    advice = advise(measured(), 40 * GIB)
    assert advice.usable_bytes == 36 * GIB
    got = {(f.length, f.checkpointing): f for f in advice.fits}
    assert got[(128, False)].batch == 16 and not got[(128, False)].open_ended
    assert got[(128, True)].batch == 32 and not got[(128, True)].open_ended  # 64 ran out
    assert got[(512, False)].batch == 0
    assert got[(512, True)].batch == 8 and got[(512, True)].open_ended
    # The line through (16, 20 GiB) and (32, 38 GiB) reaches 36 GiB at batch ~30.
    assert got[(128, False)].estimated_batch == 30
    for fit in advice.fits:
        assert fit.peak_bytes <= advice.usable_bytes
    # Per length the fastest that fits: without checkpointing at 128 (less recompute), only
    # the checkpointed setting at 512.
    assert [(f.length, f.checkpointing, f.batch) for f in advice.best] == [
        (128, False, 16),
        (512, True, 8),
    ]


def test_a_tighter_limit_picks_smaller_batches_and_can_leave_nothing() -> None:
    advice = advise(measured(), 12 * GIB)
    got = {(f.length, f.checkpointing): f.batch for f in advice.fits}
    assert got == {(128, False): 8, (128, True): 8, (512, False): 0, (512, True): 0}
    assert all(f.peak_bytes <= 12 * GIB * 0.9 for f in advice.best)
    assert "none: no measured point fits" in format_table(measured(), advise(measured(), GIB), "x")


def test_the_table_shows_every_point_and_the_verdicts() -> None:
    cells = measured()
    text = format_table(cells, advise(cells, 40 * GIB), "synthetic bert-base")
    assert text.startswith("Training probe on synthetic bert-base")
    rows = [line for line in text.splitlines() if line.strip().startswith("ddp")]
    assert len(rows) == len(cells)
    assert "no: OOM" in text and rows[2].endswith(" no") and rows[1].endswith(" yes")
    assert "length 128: --strategy ddp, AMP bf16, checkpointing off, batch 16" in text
    assert "Memory limit 40960 MiB" in text and "36864 MiB" in text


def test_sizes_parse() -> None:
    assert parse_size("40GiB") == 40 * GIB
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("1000") == 1000


def test_cpu_peak_is_the_high_water_mark_of_the_block() -> None:
    with peak_memory(torch.device("cpu")) as memory:
        block = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, touched
        del block
    assert memory["peak"] - memory["base"] >= 60 << 20


def test_running_out_of_memory_is_a_result_and_stops_bigger_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[tuple[int, int]] = []

    def fake_train(model: Any, rows: Any, cfg: Any, ctx: Any, **kw: Any) -> TrainResult:
        ran.append((cfg.batch_size, len(rows.ids[0])))
        if cfg.batch_size * len(rows.ids[0]) >= 64:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return TrainResult(cfg.max_steps, [0.7], 0.2, step_seconds=[0.1, 0.1])

    monkeypatch.setattr(memprobe, "train", fake_train)
    monkeypatch.setattr(memprobe, "trim_heap", lambda: None)  # slow, and beside the point
    grid = Grid([Setting("ddp", "off", False)], batches=[2, 4, 8], lengths=[16, 32])
    cells, params = run_grid(lambda: torch.nn.Linear(2, 2), DistContext(), grid)
    assert params == 6
    status = {(c.batch, c.length): c.status for c in cells}
    assert status == {
        (2, 16): "ok",
        (4, 16): "oom",
        (8, 16): "too-big",
        (2, 32): "oom",
        (4, 32): "too-big",
        (8, 32): "too-big",
    }
    assert ran == [(2, 16), (4, 16), (2, 32)]  # nothing bigger than a failure ran
    assert cells[0].tokens_per_s == pytest.approx(2 * 16 / 0.1)


@pytest.fixture
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_thread")
def test_a_tiny_real_probe_prints_the_table_and_writes_json(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from training.__main__ import main

    out = tmp_path / "probe.json"
    args = ["probe", "--model", str(tiny_model_dir), "--batch-sizes", "1,4", "--lengths", "8"]
    args += ["--amp", "off", "--memory-limit", "40GiB", "--json", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "Training probe on" in text and "Fastest setting that fits, per length:" in text
    doc = json.loads(out.read_text())
    assert doc["device"] == "cpu" and doc["world_size"] == 1 and doc["parameters"] > 0
    assert len(doc["cells"]) == 2 * 2  # batches x checkpointing off/on
    assert all(c["status"] == "ok" and c["peak_bytes"] > 0 for c in doc["cells"])
    assert {c["checkpointing"] for c in doc["cells"]} == {False, True}
    assert [b["length"] for b in doc["advice"]["best"]] == [8]
    assert all(b["peak_bytes"] <= doc["advice"]["usable_bytes"] for b in doc["advice"]["best"])

    # A limit below the runtime itself: the first point does not fit, bigger ones are not run.
    args = ["probe", "--model", str(tiny_model_dir), "--batch-sizes", "1,4", "--lengths", "8"]
    args += ["--amp", "off", "--checkpointing", "off", "--memory-limit", "1MiB", "--json", str(out)]
    assert main(args) == 0
    doc = json.loads(out.read_text())
    assert [c["status"] for c in doc["cells"]] == ["ok", "too-big"]
    assert doc["advice"]["best"] == [] and "none: no measured point fits" in capsys.readouterr().out
