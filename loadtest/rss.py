"""Resident memory of a process tree over time: samples, and per-process figures.

The service's processes (the driver, Ray's GCS and raylet, every replica, HAProxy) all
descend from the `python -m service serve` process; each sample records the RSS of every
one alive. Ray names its workers by role (`ray::ServeReplica:...`), which is what the
figures are keyed by, with the pid to keep two replicas of one role apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psutil

MIB = 1024 * 1024


def label(proc: psutil.Process) -> str:
    """A short, stable name: Ray's process title, else the program and its first argument."""
    try:
        cmdline = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "?"
    if cmdline and cmdline[0].startswith("ray::"):
        # Ray appends the method an actor is running (`ray::ServeController.listen...`).
        return str(cmdline[0].split()[0].split(".")[0])
    words = [w.rsplit("/", 1)[-1] for w in cmdline[:3] if not w.startswith("-")]
    return " ".join(words)[:60] or str(proc.name())


def tree(root: int) -> list[psutil.Process]:
    """`root` and every descendant that is still alive."""
    try:
        parent = psutil.Process(root)
        return [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@dataclass
class Sampler:
    """Samples of (seconds since start, {process key: RSS bytes})."""

    root: int
    start: float = field(default_factory=time.monotonic)
    samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)

    def sample(self) -> dict[str, int]:
        """One sample of every live process of the tree."""
        found: dict[str, int] = {}
        for proc in tree(self.root):
            try:
                rss = proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            # Named once per pid: a process keeps its row even if its title changes.
            name = self.names.setdefault(proc.pid, f"{label(proc)} [{proc.pid}]")
            found[name] = rss
        self.samples.append((round(time.monotonic() - self.start, 1), found))
        return found


def summarise(samples: list[tuple[float, dict[str, int]]], warmup_s: float) -> dict[str, Any]:
    """Per process and in total: RSS at start, after warm-up, at the end, the maximum, and
    growth after warm-up (end over the first sample past `warmup_s`)."""
    if not samples:
        return {"processes": {}, "total": None}
    keys = sorted({k for _, found in samples for k in found})
    processes = {k: _figures([(t, f[k]) for t, f in samples if k in f], warmup_s) for k in keys}
    # The total counts only processes alive in the last sample: one that exited (a replica
    # Ray replaced) would otherwise look like memory freed.
    last = samples[-1][1]
    totals = [(t, sum(v for k, v in f.items() if k in last)) for t, f in samples]
    return {"processes": processes, "total": _figures(totals, warmup_s)}


def _figures(series: list[tuple[float, int]], warmup_s: float) -> dict[str, Any]:
    after = [v for t, v in series if t >= warmup_s] or [series[-1][1]]
    base, end = after[0], series[-1][1]
    return {
        "start_mib": round(series[0][1] / MIB, 1),
        "after_warmup_mib": round(base / MIB, 1),
        "end_mib": round(end / MIB, 1),
        "max_mib": round(max(v for _, v in series) / MIB, 1),
        "growth_after_warmup": round((end - base) / base, 4) if base else 0.0,
        "samples": len(series),
    }


def table(summary: dict[str, Any]) -> str:
    """A markdown table: one row per process, then the total."""
    head = "| process | start MiB | after warm-up | end | max | growth after warm-up |"
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: |"]
    rows = list(summary["processes"].items())
    if summary["total"] is not None:
        rows.append(("**total (processes alive at the end)**", summary["total"]))
    for name, f in rows:
        lines.append(
            f"| {name} | {f['start_mib']:.1f} | {f['after_warmup_mib']:.1f} | "
            f"{f['end_mib']:.1f} | {f['max_mib']:.1f} | {f['growth_after_warmup']:+.1%} |"
        )
    return "\n".join(lines)
