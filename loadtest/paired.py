"""The service, Ray Serve's floor and the Rust-fronted reference, taking turns at one level.

Measured one after another, minutes apart, the three read the machine at different moments:
on a shared 2-core machine two bench runs six minutes apart put the service at 0.455 and
0.707 of the reference's request rate. Here all three are up at once and take turns at the
same client count, a few seconds each, in an order rotated every round; each round gives a
ratio of neighbouring seconds, and the medians over the rounds are the figures. An idle server
costs little beside a busy one: Ray's background (a few percent of a core) is the largest, and
it runs through the reference's turns too.

A turn's server CPU comes from /proc like every other level's, less the processes that belong
to the other targets alone (the floor's replica in the service's turn, the service's replicas
in the floor's, every Ray process in the reference's), so the processes the two Ray
applications share (HAProxy, Ray's controller, GCS, raylet) count in both of theirs.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loadtest import cpu
from loadtest.clients import ClosedLoop
from loadtest.levels import ms_per

SERVICE, FLOOR, REFERENCE = "service", "floor", "reference"


@dataclass(frozen=True)
class Target:
    """A server to load: its name, URL and the process groups (loadtest.cpu) that are its
    own; `ray`: it runs in the bench's Ray, whose shared processes then count in its CPU."""

    name: str
    url: str
    own: tuple[str, ...]
    ray: bool = True


def rotated(targets: Sequence[Target], round_: int) -> list[Target]:
    """The turn order of round `round_`: each target starts one round in turn, so none is
    always the one measured first after the others warmed the machine."""
    k = round_ % len(targets) if targets else 0
    return [*targets[k:], *targets[:k]]


def turn_cpu_s(target: Target, targets: Sequence[Target], used: cpu.Usage) -> float:
    """CPU seconds of a turn that count as `target`'s: every server process but the other
    targets' own, and for a target outside Ray only its own."""
    if not target.ray:
        return sum(s for g, s in used.by_group.items() if g in target.own)
    others = {g for t in targets if t is not target for g in t.own}
    return sum(s for g, s in used.by_group.items() if g not in others)


async def alternate(
    targets: Sequence[Target],
    payloads: list[tuple[bytes, int]],
    clients: int,
    rounds: int,
    seconds: float,
    warmup_s: float,
    max_requests: int,
    load: ClosedLoop,
) -> dict[str, Any]:
    """`rounds` rounds of one warmed turn per target; each turn's rate and server CPU, and
    the medians (`medians`)."""
    me = os.getpid()  # the load generator: not the server, never counted
    turns: list[dict[str, dict[str, Any]]] = []
    for r in range(rounds):
        row: dict[str, dict[str, Any]] = {}
        for target in rotated(targets, r):
            await load(target.url, payloads, clients, warmup_s, max_requests)
            before = cpu.snapshot(me)
            result = await load(target.url, payloads, clients, seconds, max_requests)
            used = cpu.usage(before, cpu.snapshot(me))
            row[target.name] = {
                "requests_per_s": round(result.requests_per_s, 2),
                "server_cpu_ms_per_request": ms_per(
                    turn_cpu_s(target, targets, used), result.requests
                ),
                "errors": result.errors,
            }
        turns.append(row)
        print(
            f"alternating round {r + 1}/{rounds}, c={clients}: "
            + "  ".join(
                f"{name} {t['requests_per_s']:.1f} req/s {t['server_cpu_ms_per_request']} ms"
                for name, t in row.items()
            ),
            flush=True,
        )
    plan = {"clients": clients, "rounds": rounds, "seconds": seconds, "warmup_s": warmup_s}
    return {**plan, "targets": [t.name for t in targets], "turns": turns, **medians(turns)}


def medians(turns: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per round, the service's rate over the reference's and its CPU a request beyond the
    floor's; their medians. A round counts only where both turns ran without errors and were
    read (CPU None: no request answered; /proc's 10 ms ticks may read a short turn as 0.0,
    a value), and for the rate where the reference answered any."""

    def per_round(a: str, b: str, key: str, over: bool) -> list[float]:
        out = []
        for row in turns:
            x, y = row.get(a), row.get(b)
            if not x or not y or x["errors"] or y["errors"] or x[key] is None or y[key] is None:
                continue
            if over and not y[key]:  # nothing to divide by
                continue
            out.append(x[key] / y[key] if over else x[key] - y[key])
        return out

    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 3) if values else None

    ratios = per_round(SERVICE, REFERENCE, "requests_per_s", True)
    added = per_round(SERVICE, FLOOR, "server_cpu_ms_per_request", False)
    return {
        "rate_over_reference": [round(x, 3) for x in ratios],
        "rate_over_reference_median": median(ratios),
        "added_to_floor_cpu_ms": [round(x, 3) for x in added],
        "added_to_floor_cpu_ms_median": median(added),
    }


def targets(
    doc: dict[str, Any] | None, rate_goal: float, added_goal: float
) -> list[dict[str, Any]]:
    """The medians held to the goals: the service's CPU a request beyond the floor's and its
    rate over the reference's (where the reference took turns); none without turns."""
    if not doc:
        return []
    found = []
    head = f"taking turns at {doc['clients']} clients (median of {doc['rounds']} rounds)"
    added = doc["added_to_floor_cpu_ms_median"]
    found.append(
        {
            "name": f"{head}: server CPU ms per request added to Ray Serve's floor",
            "value": added,
            "goal": added_goal,
            "met": added is not None and added <= added_goal,
        }
    )
    if REFERENCE in doc["targets"]:
        rate = doc["rate_over_reference_median"]
        found.append(
            {
                "name": f"{head}: requests/s over the Rust-fronted reference's (mosec)",
                "value": rate,
                "goal": rate_goal,
                "met": rate is not None and rate >= rate_goal,
            }
        )
    return found


def report_lines(doc: dict[str, Any]) -> list[str]:
    """Each round's turns, one row per target, with the round's ratios."""
    names = doc["targets"]
    lines = [
        f"Taking turns: {', '.join(names)} up at once, {doc['clients']} clients each in turn, "
        f"{doc['seconds']} s after {doc['warmup_s']} s of warm-up, the order rotated every "
        "round; a turn's server CPU leaves out the other targets' own processes "
        "(loadtest/paired.py).",
        "",
        "| round | " + " | ".join(f"{n} requests/s (CPU ms/request)" for n in names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for i, row in enumerate(doc["turns"], 1):
        cells = [
            f"{row[n]['requests_per_s']:.1f} ({row[n]['server_cpu_ms_per_request']})" for n in names
        ]
        lines.append(f"| {i} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Per round, the service's CPU a request beyond the floor's: "
        f"{doc['added_to_floor_cpu_ms']} ms (median {doc['added_to_floor_cpu_ms_median']})"
        + (
            f"; its rate over the reference's: {doc['rate_over_reference']} "
            f"(median {doc['rate_over_reference_median']})."
            if REFERENCE in names
            else "."
        ),
    ]
    return lines
