"""RSS sampling of a process tree, and the soak's per-process figures."""

from __future__ import annotations

import os
import subprocess
import sys

from loadtest.rss import MIB, Sampler, summarise, table


def test_sampler_sees_the_tree_and_names_each_process_once() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler = Sampler(os.getpid())
        first, second = sampler.sample(), sampler.sample()
    finally:
        child.kill()
        child.wait()
    assert first.keys() == second.keys()
    mine = [k for k in first if k.endswith(f"[{os.getpid()}]")]
    theirs = [k for k in first if k.endswith(f"[{child.pid}]")]
    assert len(mine) == 1 and len(theirs) == 1
    assert first[mine[0]] > 0 and first[theirs[0]] > 0
    assert len(sampler.samples) == 2


def test_growth_counts_from_the_end_of_warm_up() -> None:
    samples = [
        (0.0, {"a": 100 * MIB, "gone": 50 * MIB}),
        (10.0, {"a": 200 * MIB, "gone": 50 * MIB}),  # warm-up ends here
        (20.0, {"a": 210 * MIB}),
    ]
    summary = summarise(samples, warmup_s=10)
    a = summary["processes"]["a"]
    assert (a["start_mib"], a["after_warmup_mib"], a["end_mib"], a["max_mib"]) == (
        100,
        200,
        210,
        210,
    )
    assert a["growth_after_warmup"] == 0.05
    # A process that exited is not counted as memory freed.
    assert summary["total"]["after_warmup_mib"] == 200
    assert summary["total"]["growth_after_warmup"] == 0.05
    rows = table(summary).splitlines()
    assert rows[2].startswith("| a | 100.0 | 200.0 | 210.0 | 210.0 | +5.0% |")
    assert "total" in rows[-1]


def test_no_samples_no_figures() -> None:
    assert summarise([], warmup_s=0) == {"processes": {}, "total": None}
