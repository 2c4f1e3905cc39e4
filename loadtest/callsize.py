"""The model replica's own CPU by the size of its calls.

The model replica's own CPU per text (loadtest.overhead's target) is mostly a cost per handle
call spread over the texts the call carries, and at 64 single-text clients the clients, not
the service, set that count (the ingress sends what queued while its last call was out). So
the two-tier run also calls the model deployment directly through a Serve handle, as an
ingress does (packed ids, `IN_FLIGHT` calls out at a time), with calls of fixed sizes; for
each size, the replica's own CPU per call and per text (forwards excluded), and a line
`own CPU per call = per call + per text x texts` fitted through them: the smallest call that
keeps a text under the target follows from it. Beside each size, Ray's own floor of such a
call: a deployment that takes the same arrays and answers zeros, in the same Ray.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from typing import Any

import numpy as np
import numpy.typing as npt
from ray import serve

from loadtest import cpu, tally
from loadtest.floor import logged_as_service
from loadtest.serving import as_replicas_call
from service.calibration import fit
from service.encoding import CallResult, Packed, TextEncoder
from service.failover import call_transport

SIZES = (1, 8, 32, 128)
IN_FLIGHT = 2  # calls out at a time, as with two ingress replicas, each with one out
MODEL_GROUP = "SentimentModel"
FLOOR_GROUP = "EmptyInfer"  # loadtest.cpu.GROUPS knows it
FLOOR_APP = "bench-call-floor"


@serve.deployment(ray_actor_options={"num_cpus": 0})
class EmptyInfer:
    """Takes a model call's arguments and answers zeros: what Ray alone costs per call."""

    async def infer(self, packed: Packed, budgets: npt.NDArray[np.float32]) -> CallResult:
        return np.zeros((len(packed), 2), dtype=np.float32), np.zeros(len(packed), np.uint8), 0.0


def size_row(
    texts_per_call: int,
    calls: int,
    seconds: float,
    used: cpu.Usage,
    batching: dict[str, float | None],
) -> dict[str, Any]:
    """One call size's figures: the model replica's CPU less its forwards (on its forward
    threads and, per its own count, on its event loop), per call and per text."""
    forwards = used.forwards_of(MODEL_GROUP, batching.get("loop_forward_s") or 0.0)
    own = used.by_group.get(MODEL_GROUP, 0.0) - forwards
    texts = calls * texts_per_call
    return {
        "texts_per_call": texts_per_call,
        "calls": calls,
        "calls_per_s": round(calls / seconds, 1) if seconds else 0.0,
        "own_cpu_ms_per_call": round(own * 1000 / calls, 3) if calls else None,
        "own_cpu_ms_per_text": round(own * 1000 / texts, 4) if texts else None,
        "forward_cpu_ms_per_text": round(forwards * 1000 / texts, 4) if texts else None,
        "texts_per_forward": batching.get("texts_per_forward"),
    }


def fitted(rows: list[dict[str, Any]], target_ms_per_text: float) -> dict[str, Any]:
    """Own CPU per call fitted as `per_call_ms + per_text_ms * texts`, and the fewest texts a
    call must carry for a text to cost at most `target_ms_per_text` (None: no size does)."""
    points = [(r["texts_per_call"], r["own_cpu_ms_per_call"]) for r in rows]
    points = [(n, ms) for n, ms in points if ms is not None]
    if len({n for n, _ in points}) < 2:
        return {"per_call_ms": None, "per_text_ms": None, "texts_per_call_for_target": None}
    per_call, per_text = fit(points)
    enough = None
    if per_text < target_ms_per_text:
        enough = max(1, math.ceil(per_call / (target_ms_per_text - per_text)))
    return {
        "per_call_ms": round(per_call, 3),
        "per_text_ms": round(per_text, 4),
        "texts_per_call_for_target": enough,
    }


async def measure(
    app_name: str,
    encoder: TextEncoder,
    texts: list[str],
    seconds: float,
    warmup_s: float,
    readyz: str,
    sizes: tuple[int, ...] = SIZES,
) -> list[dict[str, Any]]:
    """Each size: a warm-up, then `IN_FLIGHT` loops of calls for `seconds`, bracketed by /proc
    snapshots and the model core's own counts; then the same calls to Ray's floor (running:
    `deploy_floor`)."""
    model = as_replicas_call(serve.get_deployment_handle(MODEL_GROUP, app_name=app_name))
    floor = as_replicas_call(serve.get_deployment_handle(FLOOR_GROUP, app_name=FLOOR_APP))
    probe = model.info.remote()  # the transport these calls take, as the ingress's do
    transport = call_transport(probe)
    await probe
    rows = []
    for size in sizes:
        pool = texts * -(-size // len(texts))  # every call full, of different texts
        calls = [
            encoder.encode(pool[i : i + size])[0] for i in range(0, len(pool) - size + 1, size)
        ]
        await _drive(model, calls, warmup_s)
        counted = await asyncio.to_thread(tally.read, readyz)  # outside the /proc window
        done, elapsed, used = await _measured(model, calls, seconds)
        batching = tally.between(counted, await asyncio.to_thread(tally.read, readyz))
        row = size_row(size, done, elapsed, used, batching)
        await _drive(floor, calls, warmup_s)
        done, _, used = await _measured(floor, calls, seconds)
        spent = used.by_group.get(FLOOR_GROUP, 0.0)
        row["ray_floor_cpu_ms_per_call"] = round(spent * 1000 / done, 3) if done else None
        row["transport"] = transport
        rows.append(row)
    return rows


async def _measured(
    handle: Any, calls: list[Packed], seconds: float
) -> tuple[int, float, cpu.Usage]:
    """`_drive` for `seconds` between two /proc snapshots of the server: calls answered,
    seconds taken, CPU used (the caller's own process is never counted)."""
    me = os.getpid()
    before = cpu.snapshot(me)
    t0 = time.perf_counter()
    done = await _drive(handle, calls, seconds)
    elapsed = time.perf_counter() - t0
    return done, elapsed, cpu.usage(before, cpu.snapshot(me))


def deploy_floor(access_log: bool) -> None:
    """Run Ray's floor of a model call beside the service, before `measure`."""
    serve.run(logged_as_service(EmptyInfer, access_log).bind(), name=FLOOR_APP, route_prefix=None)


def remove_floor() -> None:
    """Delete the floor, so that it costs nothing in later measurements."""
    serve.delete(FLOOR_APP)


async def _drive(model: Any, calls: list[Packed], seconds: float) -> int:
    """Calls, `IN_FLIGHT` at a time, until `seconds` have passed; how many were answered."""
    end = time.monotonic() + seconds
    budget = {len(c): np.full(len(c), 30.0, dtype=np.float32) for c in calls}
    done = 0

    async def loop(first: int) -> None:
        nonlocal done
        k = first
        while time.monotonic() < end:
            packed = calls[k % len(calls)]
            await model.infer.remote(packed, budget[len(packed)])
            done += 1
            k += IN_FLIGHT

    await asyncio.gather(*(loop(i) for i in range(IN_FLIGHT)))
    return done


def report_lines(rows: list[dict[str, Any]], line: dict[str, Any], target: float) -> list[str]:
    """A table of the call sizes and the fitted line."""
    via = rows[0].get("transport", "") if rows else ""
    lines = [
        f"The model replica called directly through a handle ({via}), {IN_FLIGHT} calls out at "
        "a time (its own CPU, forwards excluded), and a deployment that takes the same arrays "
        "and answers zeros (Ray's floor of a call):",
        "",
        "| texts per call | calls/s | own CPU ms per call | own CPU ms per text "
        "| texts per forward | Ray's floor, ms per call |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['texts_per_call']} | {r['calls_per_s']} | {r['own_cpu_ms_per_call']} | "
            f"{r['own_cpu_ms_per_text']} | {r['texts_per_forward']} | "
            f"{r.get('ray_floor_cpu_ms_per_call')} |"
        )
    if line["per_call_ms"] is not None:
        enough = line["texts_per_call_for_target"]
        lines += [
            "",
            f"Fitted: {line['per_call_ms']} ms per call + {line['per_text_ms']} ms per text; "
            + (
                f"a text costs at most {target} ms from {enough} texts per call."
                if enough
                else f"no call size brings a text under {target} ms."
            ),
        ]
    return lines
