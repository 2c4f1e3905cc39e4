"""The GPU bench's bench part: the command it runs, with the flags `--bench-args` adds."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from loadtest import bench
from loadtest.gpubench import _bench_cmd, run_all
from loadtest.gpuparts import Run


def test_bench_args_reach_the_bench_command(tmp_path: Path) -> None:
    extra = shlex.split("--torch-compile reduce-overhead")
    run = Run(tmp_path, tmp_path, smoke=False, deadline=time.monotonic() + 60, budgets={})
    run.bench_args = extra
    cmd = _bench_cmd(run, sys.executable)
    assert cmd[:3] == [sys.executable, "-m", "loadtest.bench"] and cmd[-2:] == extra
    assert "--synthetic-bert-base" in cmd and cmd[cmd.index("--dtype") + 1] == "float16"
    # A GPU pod's shape in the RayService, at most: its ingress replicas and calls in flight.
    flag = lambda name: cmd[cmd.index(name) + 1]  # noqa: E731
    spare = max(1, (os.cpu_count() or 3) - 2)
    assert flag("--ingress-replicas") == str(min(5, spare)) and flag("--calls-in-flight") == "2"
    # The tiny-model overhead section only when asked for (`gpubench --overhead`).
    assert "--no-overhead" in cmd
    run.overhead = True
    assert "--no-overhead" not in _bench_cmd(run, sys.executable)


@pytest.mark.parametrize(
    "flags",
    [
        ["--torch-compile", "fastest"],
        ["--calls-in-flight", "0"],
        ["--calls-in-flight", "65"],
        ["--overhead-only", "--no-overhead"],
        ["--device", "tpu"],
        ["--dtype", "float8"],
        ["--threads", "-1"],
        ["--profile-s", "-5"],
        ["--corpus", "/nonexistent/reviews.txt"],
    ],
    ids=lambda f: f[0],
)
def test_the_bench_refuses_a_bad_flag_before_measuring(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.main(flags)
    assert exit_.value.code == 2 and flags[0] in capsys.readouterr().err


def test_the_cpu_smoke_serves_behind_ray_s_proxy_and_its_rehearsal_behind_haproxy(
    tmp_path: Path,
) -> None:
    run = Run(tmp_path, tmp_path, smoke=True, deadline=time.monotonic() + 60, budgets={})
    ingress = lambda cmd: cmd[cmd.index("--ingress") + 1]  # noqa: E731
    assert ingress(_bench_cmd(run, sys.executable)) == "proxy"  # no fixed ports on CI
    run.rehearse = True  # as the GPU machine runs it, on the CPU
    cmd = _bench_cmd(run, sys.executable)
    assert ingress(cmd) == "haproxy" and "--quick" in cmd


def test_a_bundle_for_another_python_stops_the_run_at_once(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text(json.dumps({"python": "2.7"}))
    run = Run(
        tmp_path / "out", tmp_path / "work", smoke=False, deadline=time.monotonic() + 60, budgets={}
    )
    run_all(run, bundle, tmp_path / "no-pack")
    assert run.parts["bundle"]["status"].startswith("failed: the bundle is for Python 2.7")
    assert "preflight" not in run.parts  # nothing ran that would fail later without Ray
