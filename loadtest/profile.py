"""Where the served replicas' Python goes under load: py-spy on one replica of each role.

After the bench's measured runs (py-spy's own CPU would count as the server's in them), the
top single-text level runs again while py-spy samples the model replica and one ingress
replica (co-located, the ingress is both) at 100 Hz, active threads only. Each replica's raw
stacks are kept beside the report (`profile-<role>.txt`, flamegraph.pl's input), and the JSON
holds its top functions by share of samples: own (the frame itself) and inclusive (anywhere
on the stack). On a GPU this says what a replica's CPU does per forward and per call.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from loadtest import cpu
from loadtest.httpload import closed_loop

ROLES = ("SentimentModel", "SentimentIngress")
RATE_HZ = 100
TOP = 12
_LINE = re.compile(r":\d+\)$")  # a frame's line number: functions are summed over their lines


def py_spy() -> str | None:
    """The py-spy program: on PATH (the GPU bundle puts its own there), else beside Python."""
    found = shutil.which("py-spy")
    beside = Path(sys.executable).parent / "py-spy"
    return found or (str(beside) if beside.is_file() else None)


def replicas(root: int) -> dict[str, int]:
    """One process per role among the server processes below `root` (the lowest pid)."""
    found: dict[str, int] = {}
    for sample in sorted(cpu.snapshot(root).samples.values(), key=lambda s: s.pid):
        if sample.group in ROLES and sample.group not in found:
            found[sample.group] = sample.pid
    return found


def summarize(raw: str, top: int = TOP) -> dict[str, Any]:
    """Samples, and the `top` functions by own and by inclusive share, from py-spy's raw
    (collapsed) output: one `frame;frame;... count` line per distinct stack, leaf last."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_LINE.sub(")", frame) for frame in stack.split(";")]
        n = int(count)
        total += n
        own[frames[-1]] += n
        for frame in dict.fromkeys(frames):  # once per stack, in stack order (ties: outer first)
            anywhere[frame] += n

    def shares(counts: Counter[str]) -> list[list[Any]]:
        return [[frame, round(n / total, 3)] for frame, n in counts.most_common(top)]

    return {"samples": total, "own": shares(own), "inclusive": shares(anywhere)}


async def record(pid: int, seconds: float, out: Path) -> dict[str, Any]:
    """py-spy on `pid` for `seconds` into `out`; its summary, or why there is none."""
    program = py_spy()
    if program is None:
        return {"error": "py-spy not found (pip install py-spy)"}
    cmd = [program, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
    cmd += ["--rate", str(RATE_HZ), "--format", "raw", "--output", str(out), "--nonblocking"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    said, _ = await proc.communicate()
    if proc.returncode != 0 or not out.is_file():
        # py-spy needs ptrace: root, or CAP_SYS_PTRACE in a container.
        return {"error": said.decode(errors="replace").strip()[-500:] or "no output"}
    return {"pid": pid, "file": out.name, **summarize(out.read_text())}


async def run(
    url: str, payloads: list[tuple[bytes, int]], concurrency: int, seconds: float, out: Path
) -> dict[str, Any]:
    """Profile each role's replica while `concurrency` clients load `url` for `seconds`."""
    out.mkdir(parents=True, exist_ok=True)
    found = replicas(os.getpid())
    if not found:
        return {"error": "no SentimentModel or SentimentIngress process below this one"}
    load = asyncio.create_task(closed_loop(url, payloads, concurrency, seconds + 2, 1_000_000))
    await asyncio.sleep(1)  # clients connected and batches filling before sampling starts
    spies = [record(pid, seconds, out / f"profile-{role}.txt") for role, pid in found.items()]
    results = await asyncio.gather(*spies)
    answered = await load
    doc: dict[str, Any] = {"clients": concurrency, "seconds": seconds, "rate_hz": RATE_HZ}
    doc["requests"], doc["errors"] = answered.requests, answered.errors
    doc["replicas"] = dict(zip(found, results, strict=True))
    return doc


def lines(doc: dict[str, Any], top: int = 5) -> list[str]:
    """A few printable lines: each replica's samples and its top functions by own share."""
    if "error" in doc:
        return [f"profile: {doc['error']}"]
    said = [f"profile: {doc['clients']} clients, {doc['seconds']} s, {doc['requests']} requests"]
    for role, found in doc["replicas"].items():
        if "error" in found:
            said.append(f"  {role}: {found['error']}")
            continue
        tops = ", ".join(f"{frame} {share:.0%}" for frame, share in found["own"][:top])
        said.append(f"  {role} ({found['samples']} samples): {tops}")
    return said
