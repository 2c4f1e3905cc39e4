"""Frees the service's ports when `python -m service serve` (or a bench) dies without stopping.

Ray ties its own daemons to the process that started it, but not the HAProxy that its HAProxy
actor starts, nor its dashboard agent: a server killed outright (SIGKILL, the OOM killer, or a
SIGTERM to its whole process group, which stops Ray under it) left HAProxy on the HTTP port and
the agent on the metrics port, and the next start could not bind them. `spawn` starts a small
process in a session of its own that waits for the server to exit, then ends whatever of those
still listens on its ports. After a clean stop there is nothing left and it just exits.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from service.lifecycle import stop_listeners

# What may be left listening, by port role: Ray's HAProxy, and Ray's dashboard agent (the
# metrics export), as /proc/<pid>/comm names them (15 characters at most).
HTTP_LEFTOVER, METRICS_LEFTOVER = "haproxy", "ray::DashboardA"
POLL_S = 0.5


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (field 3 on); OSError if gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # names hold spaces


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of /proc/<pid>/stat), or None when it
    is gone or a zombie; comparing it tells a reused pid from the server."""
    try:
        fields = _stat(pid)
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def watch(pid: int, started: str, ports: dict[int, str], group: int) -> list[int]:
    """Wait for `pid` (started at `started`) to exit, then stop the leftovers on `ports` and
    Ray's agents still in its process group `group`."""
    while _start_time(pid) == started:
        time.sleep(POLL_S)
    stopped: list[int] = []
    for port, name in ports.items():
        stopped += stop_listeners(port, name)
    return sorted(set(stopped + _stop_ray_agents(group)))


def _stop_ray_agents(group: int) -> list[int]:
    """Ray's processes (comm `ray::...`) left orphaned in the server's process group: the
    runtime-env agent outlives a killed server like the dashboard agent, though it holds no
    fixed port. One whose parent is still a raylet belongs to a live Ray and is left alone."""
    stopped = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            parent = _stat(entry)[1]
            live = Path(f"/proc/{parent}/comm").read_text().strip() == "raylet"
            if comm.startswith("ray::") and not live and os.getpgid(int(entry)) == group:
                os.kill(int(entry), signal.SIGKILL)
                stopped.append(int(entry))
        except OSError:  # gone meanwhile, or not ours
            continue
    return stopped


def spawn(http_port: int, metrics_port: int) -> subprocess.Popen[bytes] | None:
    """Start the watcher for this process (Linux only: it reads /proc). A process that stops
    Ray Serve itself and lives on (a bench) ends the watcher then, with `dismiss`."""
    started = _start_time(os.getpid())
    if started is None:
        return None
    args = [sys.executable, "-m", "service.reaper", str(os.getpid()), started, str(os.getpgid(0))]
    args += [f"{http_port}={HTTP_LEFTOVER}", f"{metrics_port}={METRICS_LEFTOVER}"]
    # A session of its own: a Ctrl-C or a signal to the server's group does not reach it.
    return subprocess.Popen(args, start_new_session=True, stdin=subprocess.DEVNULL)


def dismiss(watcher: subprocess.Popen[bytes] | None) -> None:
    """End a watcher whose server has stopped cleanly, so that it cannot act on ports that
    later belong to someone else."""
    if watcher is not None:
        watcher.terminate()
        watcher.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.reaper", description=__doc__)
    parser.add_argument("pid", type=int)
    parser.add_argument("started", help="the server's start time, /proc/<pid>/stat field 22")
    parser.add_argument("group", type=int, help="the server's process group")
    parser.add_argument("ports", nargs="+", help="PORT=NAME: a port and the process to end")
    args = parser.parse_args(argv)
    ports = {int(p): name for p, name in (item.split("=", 1) for item in args.ports)}
    stopped = watch(args.pid, args.started, ports, args.group)
    if stopped:
        print(
            f"pid {args.pid} exited without stopping Ray Serve; ended what it left behind "
            f"(listeners on ports {', '.join(map(str, ports))}, Ray agents): pids {stopped}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
