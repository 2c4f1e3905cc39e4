"""A parity measurement written as `make parity` writes it (loadtest.parity.record), for tests
of what `auto` picks."""

from __future__ import annotations

from pathlib import Path

from loadtest.parity import record


def record_speeds(model_dir: Path, speeds: dict[str, float], eligible: list[str]) -> None:
    """Record CPU texts/s per backend; `eligible` are those that held parity."""
    backends = {
        name: {"texts_per_s": v, "holds_parity": name in eligible} for name, v in speeds.items()
    }
    record(model_dir, {"device": "cpu", "threads": 1, "created": "test", "backends": backends})
