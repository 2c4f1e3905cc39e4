"""A bench stopped by SIGTERM unwinds (loadtest.serving.sigterm_unwinds): its `finally` blocks,
which end Serve, Ray and the HAProxy the run started, run as they do on Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys, time
from pathlib import Path
from loadtest.serving import sigterm_unwinds
guard = sigterm_unwinds() if sys.argv[2] == "guarded" else __import__("contextlib").nullcontext()
with guard:
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        Path(sys.argv[1]).write_text("cleaned up")
"""


def _terminated(tmp_path: Path, mode: str) -> tuple[int, bool]:
    marker = tmp_path / f"{mode}.txt"
    child = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(marker), mode], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    return child.wait(30), marker.exists()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("guarded", (128 + signal.SIGTERM, True)), ("plain", (-signal.SIGTERM, False))],
)
def test_sigterm_runs_the_finally_blocks_only_where_guarded(
    tmp_path: Path, mode: str, expected: tuple[int, bool]
) -> None:
    # "plain" is Python's default: killed outright, nothing cleaned up (what left HAProxy).
    assert _terminated(tmp_path, mode) == expected
