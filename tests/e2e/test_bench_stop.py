"""A bench stopped by a SIGTERM to its whole process group (what `timeout` and a CI job's end
send) leaves nothing listening. Ray's daemons share the group and die at once; Ray then ends
the bench before any `finally` runs, so only the watcher (service/reaper.py) can stop the
HAProxy that Ray's HAProxy actor started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.lifecycle import listeners

pytestmark = pytest.mark.slow

SCRIPT = """
import time
from loadtest import serving
with serving.ray_serve("haproxy", 1) as base:
    print(base, flush=True)
    time.sleep(300)
"""


def test_a_bench_killed_with_its_process_group_leaves_nothing_listening(tmp_path: Path) -> None:
    log = (tmp_path / "bench.log").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=log, text=True,
        start_new_session=True,
    )  # fmt: skip
    port = 0
    try:
        assert proc.stdout is not None
        base = proc.stdout.readline().strip()
        assert base.startswith("http://127.0.0.1:"), Path(log.name).read_text()[-3000:]
        port = int(base.rsplit(":", 1)[1])
        assert "haproxy" in listeners(port).values()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 60
        while listeners(port) or _group_alive(proc.pid):  # Ray's agents included
            assert time.monotonic() < deadline, (listeners(port), Path(log.name).read_text())
            time.sleep(0.5)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group may be gone already
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in listeners(port) if port else ():  # a failure must not leave one running
            os.kill(pid, signal.SIGKILL)
        log.close()


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True
