"""The fault rehearsal's pure parts: finding replica processes, and the figures of an outage."""

from __future__ import annotations

from pathlib import Path

from loadtest.chaos import replica_pids
from loadtest.outage import Request, figures, healthy_again, markdown, timeline


def _process(proc: Path, pid: int, ppid: int, title: str) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    rest = ["0"] * 50
    rest[0] = str(ppid)  # field 4 follows the state
    (d / "stat").write_text(f"{pid} (x) S {' '.join(rest)}\n")
    (d / "cmdline").write_bytes(title.encode() + b"\0")


def test_replica_pids_are_this_apps_model_replicas_below_the_root(tmp_path: Path) -> None:
    _process(tmp_path, 1, 0, "/sbin/init")
    _process(tmp_path, 10, 1, "python -m loadtest.chaos")
    _process(tmp_path, 11, 10, "raylet")
    _process(tmp_path, 12, 11, "ray::ServeReplica:chaos:SentimentModel")
    _process(tmp_path, 13, 11, "ray::ServeReplica:chaos:SentimentModel.infer")  # busy
    _process(tmp_path, 14, 11, "ray::ServeReplica:chaos:SentimentIngress")
    _process(tmp_path, 15, 11, "ray::ServeReplica:other:SentimentModel")
    _process(tmp_path, 16, 1, "ray::ServeReplica:chaos:SentimentModel")  # another run's
    assert replica_pids("chaos", "SentimentModel", 10, tmp_path) == [12, 13]


def _load(kill: float, outage: tuple[float, float] | None, until: float) -> list[Request]:
    """One client every 0.1 s, each request 0.05 s; 503 sent during `outage`."""
    requests, t = [], 0.0
    while t < until:
        refused = outage is not None and outage[0] <= t < outage[1]
        requests.append(Request(t, t + 0.05, 503 if refused else 200))
        t = round(t + 0.1, 3)
    return requests


def test_two_replicas_without_a_failure() -> None:
    running = [(0.0, 2), (10.5, 1), (20.0, 2)]
    f = figures(_load(10.0, None, 30.0), 10.0, running, replicas=2)
    assert f["statuses"] == {"200": 300} and f["lost"] == 0
    assert f["first_failure_s"] is None and f["resumed_s"] is None
    assert f["refused_503"]["count"] == 0
    assert f["ray"] == {"noticed_s": 0.5, "healthy_s": 10.0}
    assert f["around_kill"]["requests"] == 51  # the one answered at the kill, then 5 s


def test_one_replica_refused_then_resumed() -> None:
    requests = _load(10.0, (10.0, 14.0), 20.0)
    requests.append(Request(9.95, 41.0, 0))  # a lost one: no answer
    f = figures(requests, 10.0, [(0.0, 1), (11.0, 0), (13.9, 1)], replicas=1)
    assert f["statuses"] == {"0": 1, "200": 160, "503": 40} and f["lost"] == 1
    assert f["refused_503"]["first_after_kill_s"] == 0.05
    assert f["refused_503"]["max_latency_s"] == 0.05
    assert f["resumed_s"] == 4.05  # the request sent at 14.0, answered 0.05 s later
    assert f["failures_after_resumed"] == 0  # the lost one was sent before the kill
    assert f["max_latency_s"] == 31.05
    assert f["ray"] == {"noticed_s": 1.0, "healthy_s": 3.9}
    rows = markdown([{"replicas": 1, "figures": f}]).splitlines()
    row = "| 1 SentimentModel | 201 | 0: 1, 200: 160, 503: 40 | 1 |"
    assert len(rows) == 3 and rows[2].startswith(row)
    blocking = {"replicas": 1, "figures": f, "client": "http.client"}
    assert markdown([blocking]).splitlines()[2].startswith("| 1 SentimentModel (http.client")


def test_ray_never_noticing_or_never_recovering_is_none() -> None:
    assert healthy_again([(0.0, 2), (5.0, 2)], 2, 1.0) == {"noticed_s": None, "healthy_s": None}
    assert healthy_again([(2.0, 1)], 2, 1.0) == {"noticed_s": 1.0, "healthy_s": None}


def test_timeline_counts_answers_per_second_from_the_kill() -> None:
    requests = [Request(0, 0.5, 200), Request(0, 1.2, 503), Request(1, 1.9, 503)]
    assert timeline(requests, kill=1.0) == [
        {"t": -1.0, "statuses": {"200": 1}},
        {"t": 0.0, "statuses": {"503": 2}},
    ]
