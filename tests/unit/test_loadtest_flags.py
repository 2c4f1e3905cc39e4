"""The Locust file's own flags: a bad value is a usage error naming the flag, before any user
starts, whether it comes as a flag or as its LOADTEST_* variable."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.flagtypes import COUNT, SHARE, number

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--multi-ratio", "30"], {}, "--multi-ratio: expected a number at least 0 and at most 1"),
        (["--shape", "step", "--steps", "0"], {}, "--steps: expected a whole number at least 1"),
        ([], {"LOADTEST_HEADROOM": "0"}, "--headroom: expected a number above 0 and at most 1"),
    ],
)  # fmt: skip
def test_a_bad_value_stops_locust_with_the_flag_named(
    args: list[str], env: dict[str, str], said: str, tmp_path: Path
) -> None:
    cmd = [sys.executable, "-m", "locust", "-f", "loadtest/locustfile.py", "--headless"]
    proc = subprocess.run(
        [*cmd, "--host", "http://127.0.0.1:9", "--out", str(tmp_path), *args],
        cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert said in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "summary.json").exists()  # nothing ran


def test_number_keeps_its_bounds() -> None:
    assert COUNT("3") == 3 and SHARE("0") == 0.0 and SHARE("1") == 1.0
    for parse, text in ((COUNT, "2.5"), (COUNT, "0"), (SHARE, "nan"), (SHARE, "1.01")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
    above = number(float, 0, low_open=True)
    assert above("0.001") == 0.001
    with pytest.raises(argparse.ArgumentTypeError, match="above 0"):
        above("0")
