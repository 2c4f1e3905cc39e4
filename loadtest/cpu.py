"""Server CPU time from /proc (Linux): every process of a local Ray Serve, grouped by role.

The server is every descendant of the bench process (`ray.init(address="local")` makes Ray's
daemons its children, and workers are the raylet's) plus HAProxy if it was reparented, but
not the bench's own load-generator processes (loadtest.clients).
Two snapshots bracket a measured window; their difference is the CPU the server spent in it.
A process that starts inside the window counts in full; one that ends inside it is lost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
# Matched in order against the command line; Ray names its workers `ray::<actor>`.
GROUPS = (
    "SentimentIngress",
    "SentimentModel",
    "NaiveClassifier",
    "Floor",  # loadtest.floor's deployment
    "EmptyInfer",  # loadtest.callsize's floor of a model call
    "ServeController",
    "HAProxyManager",  # the Ray actor that starts and reloads HAProxy
    "ProxyActor",
    "haproxy",
    "raylet",
    "gcs_server",
    "loadtest.reference",  # the Rust-fronted reference's launcher and its worker
    "mosec",  # its HTTP front
)
OTHER = "ray other"
FORWARD_THREAD = "forward"
# Only these processes' threads are read: the ones that may run forwards (the ingress does in
# the co-located layout).
MODEL_GROUPS = ("SentimentModel", "SentimentIngress")
# A model replica's child that runs its forwards (service.forwardproc): all of its CPU is
# forward work, counted in its parent's group.
FORWARD_PROCESS = "service.forwardproc"
# The bench's load-generator processes (loadtest.clients): below the bench, but no server.
LOAD_CLIENT = "loadtest.clients"


@dataclass(frozen=True)
class Stat:
    """The fields of /proc/PID/stat (or /proc/PID/task/TID/stat) that CPU accounting needs."""

    pid: int
    comm: str
    ppid: int
    ticks: int  # utime + stime, in clock ticks
    start: int  # start time since boot, in clock ticks: with pid, names a process uniquely


@dataclass(frozen=True)
class Sample:
    """One server process at one moment."""

    pid: int
    group: str
    ticks: int
    forward_ticks: int  # of its threads named `forward` (0 outside MODEL_GROUPS)
    # (tid, name, ticks) of each thread, read in MODEL_GROUPS processes and forward processes
    threads: tuple[tuple[int, str, int], ...] = ()
    forward_process: bool = False  # a model replica's child that runs its forwards


@dataclass(frozen=True)
class Snapshot:
    """Every server process, keyed by (pid, start time) so a reused pid is a new process."""

    samples: dict[tuple[int, int], Sample] = field(default_factory=dict)


@dataclass(frozen=True)
class ThreadUse:
    """One thread's CPU seconds in a window: its name, and whether it ran in a replica or in
    the replica's forward process."""

    name: str
    where: str  # "replica" or "forward process"
    seconds: float


@dataclass(frozen=True)
class Usage:
    """CPU seconds spent between two snapshots, per group, and by forward threads per group;
    `threads`: per thread of the groups whose threads are read, busiest first."""

    by_group: dict[str, float]
    forward_by_group: dict[str, float]
    processes: dict[str, int]
    threads: dict[str, list[ThreadUse]] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.by_group.values())

    def forwards_of(self, group: str, loop_forward_s: float = 0.0) -> float:
        """CPU seconds `group` spent in forwards: its forward threads' from /proc, plus
        `loop_forward_s` run on its event loop (the model core's own count: /proc cannot tell
        them from the loop's other work). 0 when no process of the group was seen."""
        if group not in self.by_group:
            return 0.0
        return self.forward_by_group.get(group, 0.0) + loop_forward_s


def parse_stat(text: str) -> Stat:
    """Parse one stat line; `comm` may hold spaces and parentheses, so split at the last ')'."""
    head, _, tail = text.rpartition(")")
    pid_text, _, comm = head.partition(" (")
    fields = tail.split()
    # fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15, starttime 22.
    return Stat(
        pid=int(pid_text),
        comm=comm,
        ppid=int(fields[1]),
        ticks=int(fields[11]) + int(fields[12]),
        start=int(fields[19]),
    )


def parse_cmdline(raw: bytes) -> str:
    """/proc/PID/cmdline as one line (arguments are NUL-separated)."""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")


def group_of(cmdline: str) -> str:
    """The role of a server process, by the first GROUPS name in its command line."""
    return next((g for g in GROUPS if g in cmdline), OTHER)


def is_haproxy(cmdline: str) -> bool:
    """An HAProxy process (its program name, not just any mention of it)."""
    program = cmdline.split(" ", 1)[0]
    return "haproxy" in os.path.basename(program)


def descendants(parents: dict[int, int], root: int) -> set[int]:
    """Every process below `root` in the tree given as pid -> parent pid (root excluded)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:  # the process or thread ended meanwhile
        return None


def _threads(task_dir: Path) -> tuple[tuple[int, str, int], ...]:
    """(tid, name, ticks) of every thread of a process."""
    try:
        tids = list(task_dir.iterdir())
    except OSError:
        return ()
    found = []
    for tid in tids:
        raw = _read(tid / "stat")
        if raw is not None:
            stat = parse_stat(raw.decode(errors="replace"))
            found.append((stat.pid, stat.comm, stat.ticks))
    return tuple(found)


def processes(proc: Path = PROC) -> dict[int, Stat]:
    """Every process's stat line, by pid."""
    stats: dict[int, Stat] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            raw = _read(entry / "stat")
            if raw is not None:
                stats[int(entry.name)] = parse_stat(raw.decode(errors="replace"))
    return stats


def cmdline(pid: int, proc: Path = PROC) -> str:
    """A process's command line ("" once it has ended)."""
    raw = _read(proc / str(pid) / "cmdline")
    return parse_cmdline(raw) if raw else ""


def snapshot(root: int, proc: Path = PROC) -> Snapshot:
    """The server processes below `root` (itself and its load-generator processes excluded)
    plus orphaned HAProxy processes (reparented to init: their Ray parent ended), with CPU
    ticks. HAProxy under another live process belongs to someone else's run and is left out."""
    stats = processes(proc)
    below = descendants({pid: s.ppid for pid, s in stats.items()}, root)
    samples: dict[tuple[int, int], Sample] = {}
    for pid, stat in stats.items():
        line = cmdline(pid, proc)
        orphan = is_haproxy(line) and (stat.ppid <= 1 or stat.ppid not in stats)
        if pid == root or (pid not in below and not orphan) or LOAD_CLIENT in line:
            continue
        group = "haproxy" if is_haproxy(line) else group_of(line)
        child = FORWARD_PROCESS in line  # all of its CPU is forward work, in its parent's group
        if child:
            group = group_of(cmdline(stat.ppid, proc))
        threads = _threads(proc / str(pid) / "task") if child or group in MODEL_GROUPS else ()
        forward = (
            stat.ticks
            if child
            else sum(t for _, name, t in threads if name.startswith(FORWARD_THREAD))
        )
        samples[(pid, stat.start)] = Sample(pid, group, stat.ticks, forward, threads, child)
    return Snapshot(samples)


def usage(before: Snapshot, after: Snapshot, ticks_per_s: float | None = None) -> Usage:
    """CPU seconds each group spent between the snapshots."""
    hz = ticks_per_s or float(os.sysconf("SC_CLK_TCK"))
    by_group: dict[str, float] = {}
    forward: dict[str, float] = {}
    processes: dict[str, int] = {}
    threads: dict[str, list[ThreadUse]] = {}
    for key, end in after.samples.items():
        start = before.samples.get(key)
        ticks = end.ticks - (start.ticks if start else 0)
        fwd = end.forward_ticks - (start.forward_ticks if start else 0)
        by_group[end.group] = by_group.get(end.group, 0.0) + ticks / hz
        forward[end.group] = forward.get(end.group, 0.0) + fwd / hz
        processes[end.group] = processes.get(end.group, 0) + 1
        if end.threads:
            where = "forward process" if end.forward_process else "replica"
            was = {tid: t for tid, _, t in start.threads} if start else {}
            threads.setdefault(end.group, []).extend(
                ThreadUse(name, where, (t - was.get(tid, 0)) / hz) for tid, name, t in end.threads
            )
    for found in threads.values():
        found.sort(key=lambda t: -t.seconds)
    return Usage(by_group, forward, processes, threads)
