"""HAProxy processes a local run leaves behind, found from /proc and ended.

Ray's HAProxy actor starts HAProxy outside Ray's own process tracking; a reload under load
(`haproxy ... -sf PID`) starts a new process that is reparented and can outlive Ray, holding
the HTTP port. Found by the command line, so ended only where a run started them.
"""

from __future__ import annotations

import os
import re
import signal
import time
from contextlib import suppress

from loadtest import cpu


def haproxy_processes(below: int | None = None) -> dict[tuple[int, int], str]:
    """HAProxy processes, (pid, start time) -> command line; only those under `below` if set."""
    stats = cpu.processes()
    tree = cpu.descendants({p: s.ppid for p, s in stats.items()}, below) if below else None
    found = {}
    for pid, stat in stats.items():
        line = cpu.cmdline(pid)
        if cpu.is_haproxy(line) and (tree is None or pid in tree):
            found[(pid, stat.start)] = line
    return found


def end_haproxy(seen: dict[tuple[int, int], str], wait_s: float = 5.0) -> list[int]:
    """Terminate the HAProxy processes in `seen`, and any that read the same config file (a
    reload starts a new process, and a stray one is reparented). Returns their pids."""
    configs = {m.group(1) for line in seen.values() for m in re.finditer(r"-f (\S+)", line)}
    targets = [
        key[0]
        for key, line in haproxy_processes().items()
        if key in seen or any(c in line for c in configs)
    ]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in targets:
            with suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(_alive(p) for p in targets):
            time.sleep(0.1)
        if not any(_alive(p) for p in targets):
            break
    return targets


def _alive(pid: int) -> bool:
    try:
        # A zombie child has no process left to end; it only waits to be reaped.
        state = (cpu.PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"
