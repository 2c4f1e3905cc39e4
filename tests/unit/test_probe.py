"""`python -m service probe` on the tiny model, and the advice it derives from a grid."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from service.__main__ import main
from service.probe import Cell, advise, parse_size

ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+\d+\s+[\d.]+\s+[\d.]+$")


def cell(batch: int, length: int, tokens_per_s: float, extra_mib: float) -> Cell:
    return Cell(batch, length, 1.0, 1.0, tokens_per_s, 0, int(extra_mib * 2**20))


def test_probe_prints_a_well_formed_table_and_json(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "probe.json"
    grid = ["--batch-sizes", "1,4", "--lengths", "8,32", "--repeats", "1"]
    limits = ["--memory-limit", "4GiB", "--json", str(out)]
    argv = ["probe", "--model-path", str(tiny_model_dir), *grid, *limits]
    assert main(argv) == 0
    text = capsys.readouterr().out
    rows = [ROW.match(line) for line in text.splitlines()]
    cells = [(int(m[1]), int(m[2]), int(m[3])) for m in rows if m]
    assert cells == [(1, 8, 8), (4, 8, 32), (1, 32, 32), (4, 32, 128)]
    budget = re.search(r"SENTIMENT_BATCH__MICRO_BATCH_TOKENS=(\d+)", text)
    assert budget and int(budget[1]) >= 32
    assert "SENTIMENT_BATCH__MAX_BATCH_TEXTS=" in text
    doc = json.loads(out.read_text())
    assert len(doc["cells"]) == 4
    assert doc["advice"]["memory_limit_bytes"] == 4 * 2**30
    assert all(c["tokens_per_s"] > 0 and c["peak_bytes"] > 0 for c in doc["cells"])


def test_advice_stops_where_speed_stops_growing() -> None:
    cells = [cell(1, 64, 1000, 1), cell(8, 64, 4000, 4), cell(32, 64, 3900, 16)]
    advice = advise(cells, memory_limit=16 << 30, base=1 << 30, typical_length=64)
    assert advice.micro_batch_tokens == 512  # the fastest cell, 8 x 64
    assert advice.max_batch_tokens == 4 * 512
    assert advice.fits


def test_advice_shrinks_the_budget_to_the_memory_limit() -> None:
    # 32 x 256 tokens cost 1 GiB above the model: 128 KiB per padded token.
    cells = [cell(32, 256, 9000, 1024), cell(1, 256, 100, 32)]
    advice = advise(cells, memory_limit=2 << 30, base=1 << 30, typical_length=64)
    assert advice.bytes_per_token == 128 * 1024
    room = (2 << 30) * 0.9 - (1 << 30)
    assert 256 <= advice.micro_batch_tokens <= room / (128 * 1024)
    tight = advise(cells, memory_limit=(1 << 30) + (1 << 20), base=1 << 30, typical_length=64)
    assert not tight.fits


def test_sizes_parse_with_units() -> None:
    assert parse_size("16GiB") == 16 * 2**30
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("1024") == 1024


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--batch-sizes", "1,x"], "--batch-sizes: expected whole numbers like 1,8,32"),
        (["--lengths", "0"], "--lengths: expected whole numbers of at least 1"),
        (["--repeats", "0"], "--repeats: expected a whole number of at least 1"),
        (["--repeats", "1,2"], "--repeats: expected a whole number of at least 1"),
        (["--typical-length", "0"], "--typical-length: expected a whole number of at least 1"),
        (["--memory-limit", "12XB"], "--memory-limit: expected a size like 16GiB"),
        (["--memory-limit", "inf GiB"], "--memory-limit: expected a size like 16GiB"),
    ],
)
def test_bad_probe_flags_are_usage_errors_naming_the_flag(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str], flags: list[str], says: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", "--model-path", str(tiny_model_dir), *flags])
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err


def test_a_grid_with_no_cell_under_the_cap_says_so(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["probe", "--model-path", str(tiny_model_dir), "--max-cell-tokens", "4"]
    assert main([*argv, "--batch-sizes", "8", "--lengths", "32"]) == 2
    assert "no batch x length cell is within --max-cell-tokens 4" in capsys.readouterr().err
