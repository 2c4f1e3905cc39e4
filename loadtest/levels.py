"""One level of the overhead run, measured: a closed loop of single-text requests, bracketed by
/proc snapshots of every server process and by the model core's own counts, as one row of
figures (loadtest.overhead runs the levels; loadtest.overheadreport reads them)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from loadtest import cpu, tally
from loadtest.clients import ClosedLoop, pool
from loadtest.httpload import RunResult

MODEL_GROUP = "SentimentModel"


@dataclass(frozen=True)
class OverheadPlan:
    """Levels and durations; every load loop also stops at `max_requests`."""

    levels: list[int]
    seconds: float
    warmup_s: float
    max_requests: int
    hop_calls: int  # calls per hop in the one-client latency breakdown (loadtest.hops)
    # The service, the floor and the reference taking turns (loadtest.paired): rounds, and
    # each turn's seconds after its warm-up.
    turn_rounds: int = 3
    turn_s: float = 4.0
    turn_warmup_s: float = 1.0


def ms_per(seconds: float, count: int) -> float | None:
    """Milliseconds of `seconds` per one of `count` (None for none), to three places."""
    return round(seconds * 1000 / count, 3) if count else None


def level_row(
    concurrency: int,
    result: RunResult,
    used: cpu.Usage,
    batching: dict[str, float | None] | None = None,
) -> dict[str, Any]:
    """One level's figures; CPU per request (= per text: single-text requests). `batching`:
    the model core's own counts over the window (loadtest.tally.between), whose forwards on
    the event loop /proc counts as that process's own work."""
    batching = batching or {}
    loop_forward_s = batching.get("loop_forward_s") or 0.0
    n = result.requests
    model = used.by_group.get(MODEL_GROUP, 0.0)
    forward_here = used.forwards_of(MODEL_GROUP, loop_forward_s)
    # Co-located, the ingress runs the forwards (on its thread or its loop).
    forward = sum(used.forward_by_group.values()) + loop_forward_s
    return {
        "concurrency": concurrency,
        "requests": n,
        "errors": result.errors,
        "statuses": {str(k): v for k, v in sorted(result.statuses.items())},
        "seconds": round(result.seconds, 3),
        "client_busy_cores": result.client_busy_cores,
        "requests_per_s": round(result.requests_per_s, 2),
        "p50_ms": round(result.percentile(0.50) * 1000, 2),
        "p99_ms": round(result.percentile(0.99) * 1000, 2),
        "server_cpu_ms_per_request": ms_per(used.total, n),
        # Co-located there is no model replica process: its figure does not exist.
        "model_replica_cpu_ms_per_text": (
            ms_per(model - forward_here, n) if MODEL_GROUP in used.by_group else None
        ),
        "forward_cpu_ms_per_text": ms_per(forward, n),
        "texts_per_batch": batching.get("texts_per_batch"),
        "texts_per_forward": batching.get("texts_per_forward"),
        "groups": {
            g: {"processes": used.processes[g], "cpu_ms_per_request": ms_per(s, n)}
            for g, s in sorted(used.by_group.items())
        },
    }


async def measure(
    url: str,
    payloads: list[tuple[bytes, int]],
    plan: OverheadPlan,
    label: str = "overhead",
    readyz: str | None = None,
    levels: list[int] | None = None,
    client_processes: int = 1,
) -> list[dict[str, Any]]:
    """Each level: a warm-up, then a measured closed loop bracketed by /proc snapshots (and,
    with `readyz`, by the model core's own counts: loadtest.tally); the load from
    `client_processes` processes (loadtest.clients)."""
    async with pool(client_processes) as load:
        return await _measure(url, payloads, plan, label, readyz, levels or plan.levels, load)


async def _measure(
    url: str,
    payloads: list[tuple[bytes, int]],
    plan: OverheadPlan,
    label: str,
    readyz: str | None,
    levels: list[int],
    load: ClosedLoop,
) -> list[dict[str, Any]]:
    rows = []
    me = os.getpid()  # the load generator: not the server, never counted
    for c in levels:
        await load(url, payloads, c, plan.warmup_s, plan.max_requests)
        counted = tally.read(readyz)  # outside the /proc window: the call costs CPU too
        before = cpu.snapshot(me)
        result = await load(url, payloads, c, plan.seconds, plan.max_requests)
        used = cpu.usage(before, cpu.snapshot(me))
        row = level_row(c, result, used, tally.between(counted, tally.read(readyz)))
        rows.append(row)
        # What the model core did and its replica's own CPU, where there are: on a GPU box
        # this printed line may be all that comes back of a run stopped on its time limit.
        core = ""
        if readyz is not None:  # the service's levels, not a floor's
            per = (row["texts_per_batch"], row["texts_per_forward"])
            core = f"  texts per batch {per[0]} (forward {per[1]})"
            if row["model_replica_cpu_ms_per_text"] is not None:
                core += f"  model replica {row['model_replica_cpu_ms_per_text']} ms/text"
        print(
            f"{label} c={c:3d}: {row['requests_per_s']:8.1f} req/s  p99 {row['p99_ms']:7.1f} ms"
            f"  server CPU {row['server_cpu_ms_per_request']} ms/request  errors {result.errors}"
            f"{core}  client {result.client_busy_cores} cores",
            flush=True,
        )
    return rows
