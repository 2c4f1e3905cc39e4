"""Figures of a fault rehearsal: what clients saw around one SIGKILLed replica.

Pure functions over the rehearsal's records (`loadtest.chaos` makes them): every request as
(start, end, status) and Ray's count of running replicas of the deployment killed from over
time, all in seconds since the load began. Status 0 is a request that got no HTTP answer
(connection error or client timeout): lost.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from loadtest.ranks import nearest_rank_value

AROUND_KILL_S = 5.0  # requests in flight at the kill or sent this soon after it


@dataclass(frozen=True)
class Request:
    """One client request: when it was sent and answered, and its HTTP status (0: none)."""

    start: float
    end: float
    status: int

    @property
    def latency(self) -> float:
        return self.end - self.start


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def healthy_again(running: list[tuple[float, int]], replicas: int, kill: float) -> dict[str, Any]:
    """When Ray noticed the death (fewer replicas RUNNING than `replicas`) and when it had
    them all RUNNING again, in seconds after the kill; None where it did not happen."""
    noticed = next((t for t, n in running if t >= kill and n < replicas), None)
    healthy = None
    if noticed is not None:
        healthy = next((t for t, n in running if t > noticed and n >= replicas), None)
    return {
        "noticed_s": _round(None if noticed is None else noticed - kill),
        "healthy_s": _round(None if healthy is None else healthy - kill),
    }


def figures(
    requests: list[Request], kill: float, running: list[tuple[float, int]], replicas: int
) -> dict[str, Any]:
    """The rehearsal's figures: statuses, lost requests, latencies overall and around the
    kill, how soon refusals came and how long until 200s came back."""
    statuses = Counter(r.status for r in requests)
    around = [r for r in requests if r.start <= kill + AROUND_KILL_S and r.end >= kill]
    after = sorted((r for r in requests if r.end >= kill), key=lambda r: r.end)
    failed = [r for r in after if r.status != 200]
    refused = [r for r in after if r.status == 503]
    # Service resumed: the first 200 for a request sent after the first failure was answered.
    resumed = None
    if failed:
        first_failure = failed[0].end
        resumed = next((r for r in after if r.status == 200 and r.start > first_failure), None)
    later = [r for r in after if resumed is not None and r.start > resumed.start]
    return {
        "requests": len(requests),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "lost": statuses.get(0, 0),
        "max_latency_s": _round(max((r.latency for r in requests), default=None)),
        "p50_latency_s": _round(
            nearest_rank_value([r.latency for r in requests if r.status == 200], 0.5)
        ),
        "around_kill": {
            "requests": len(around),
            "statuses": {str(k): v for k, v in sorted(Counter(r.status for r in around).items())},
            "max_latency_s": _round(max((r.latency for r in around), default=None)),
        },
        "first_failure_s": _round(failed[0].end - kill if failed else None),
        "refused_503": {
            "count": len(refused),
            "first_after_kill_s": _round(refused[0].end - kill if refused else None),
            "p50_latency_s": _round(nearest_rank_value([r.latency for r in refused], 0.5)),
            "max_latency_s": _round(max((r.latency for r in refused), default=None)),
        },
        "resumed_s": _round(resumed.end - kill if resumed else None),
        "failures_after_resumed": sum(1 for r in later if r.status != 200),
        "ray": healthy_again(running, replicas, kill),
    }


def timeline(requests: list[Request], kill: float, step_s: float = 1.0) -> list[dict[str, Any]]:
    """Answers per `step_s` by the time they came (seconds from the kill), by status."""
    bins: dict[int, Counter[int]] = {}
    for r in requests:
        bins.setdefault(int((r.end - kill) // step_s), Counter())[r.status] += 1
    return [
        {"t": k * step_s, "statuses": {str(s): n for s, n in sorted(c.items())}}
        for k, c in sorted(bins.items())
    ]


def _s(value: float | None, form: str = "{:.2f}") -> str:
    return "-" if value is None else form.format(value)


def markdown(scenarios: list[dict[str, Any]]) -> str:
    """One row per scenario (the deployment a replica was killed from, and its replicas)."""
    lines = [
        "| replicas, one killed | requests | by status | lost | max latency s | max latency s, "
        "in flight at the kill or sent 5 s after | first 503 after kill s | 503 latency "
        "p50 / max s | 200s again after kill s | Ray: noticed / all RUNNING again s | calls "
        "resent |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for doc in scenarios:
        f, refused, ray = doc["figures"], doc["figures"]["refused_503"], doc["figures"]["ray"]
        statuses = ", ".join(f"{k}: {v}" for k, v in f["statuses"].items())
        killed = doc.get("killed", "SentimentModel")
        if doc.get("client", "aiohttp") != "aiohttp":  # `make chaos --client http.client`
            killed += f" ({doc['client']} clients)"
        lines.append(
            f"| {doc['replicas']} {killed} | {f['requests']} | {statuses} | {f['lost']} | "
            f"{_s(f['max_latency_s'])} | {_s(f['around_kill']['max_latency_s'])} | "
            f"{_s(refused['first_after_kill_s'])} | {_s(refused['p50_latency_s'])} / "
            f"{_s(refused['max_latency_s'])} | {_s(f['resumed_s'])} | "
            f"{_s(ray['noticed_s'])} / {_s(ray['healthy_s'])} | "
            f"{_s(doc.get('resent_calls'), '{:g}')} |"
        )
    return "\n".join(lines)
