"""Failover on a plain event loop: a fake model call that dies, and a fake liveness probe."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from service.chunking import WindowEncoder
from service.coalescer import Coalescer, Reply
from service.encoding import CallResult, Packed
from service.errors import NotReady
from service.failover import Failover, call_transport


class ReplicaDied(Exception):
    """Stands in for Ray's RayActorError."""


class Model:
    """Fails its first `deaths` calls as a killed replica would; later calls wait `hang_s`
    (no replica to route to) or answer each text with [len, 1 - len]."""

    def __init__(
        self, deaths: int, error: type[Exception] = ReplicaDied, hang_s: float = 0.0
    ) -> None:
        self.deaths, self.error, self.hang_s = deaths, error, hang_s
        self.budgets: list[np.ndarray] = []
        self.cancelled = 0

    async def __call__(self, packed: Packed, budgets: np.ndarray) -> CallResult:
        self.budgets.append(budgets.copy())
        if len(self.budgets) <= self.deaths:
            await asyncio.sleep(0.02)
            raise self.error("the replica died")
        try:
            await asyncio.sleep(self.hang_s or 0.01)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        lengths = packed.lengths().astype(np.float32)
        probs = np.stack([lengths, 1 - lengths], axis=1)
        return probs, np.zeros(len(packed), dtype=np.uint8), 0.0


class Probe:
    """A liveness probe that answers after `delay_s`, or never (None)."""

    def __init__(self, delay_s: float | None) -> None:
        self.delay_s, self.calls = delay_s, 0

    async def __call__(self) -> None:
        self.calls += 1
        await asyncio.sleep(3600 if self.delay_s is None else self.delay_s)


@pytest.fixture(scope="module")
def encoder(tiny_model_dir: Path) -> WindowEncoder:
    return WindowEncoder.load(tiny_model_dir, 32)


def _run(
    encoder: WindowEncoder, failover: Failover, requests: list[list[str]]
) -> list[Reply | BaseException]:
    coalescer = Coalescer(failover, max_texts=64, in_flight=1)

    async def main() -> list[Reply | BaseException]:
        deadline = time.monotonic() + 5
        futures = [coalescer.submit(encoder.encode(texts), deadline) for texts in requests]
        return await asyncio.gather(*futures, return_exceptions=True)

    return asyncio.run(main())


def test_a_call_whose_replica_died_is_sent_once_more(encoder: WindowEncoder) -> None:
    model, resent, down = Model(deaths=1, hang_s=0.3), [], []
    failover = Failover(
        model, Probe(0.01), (ReplicaDied,), probe_s=0.2, retry_after_s=1,
        on_resend=lambda: resent.append(1), on_down=lambda: down.append(1),
    )  # fmt: skip
    replies = _run(encoder, failover, [["good"], ["bad", "fine"]])
    # The resend outlasts the probe bound, yet a live replica answered the probe: awaited.
    assert [len(r.probs) for r in replies if isinstance(r, Reply)] == [1, 2]
    assert resent == [1] and down == []
    first, second = model.budgets[:2]  # the first request went out alone, and died
    assert (second < first).all()  # the time the dead call took is gone from the budgets


def test_no_live_replica_is_a_503_within_the_probe_bound(encoder: WindowEncoder) -> None:
    up = [True]
    model, probe = Model(deaths=1, hang_s=3600), Probe(None)
    failover = Failover(
        model, probe, (ReplicaDied,), probe_s=0.2, retry_after_s=3,
        is_up=lambda: up[0], on_down=lambda: up.__setitem__(0, False),
    )  # fmt: skip
    t0 = time.monotonic()
    replies = _run(encoder, failover, [["good"], ["bad"]])
    assert time.monotonic() - t0 < 2  # not the hour the resend would have waited
    for reply in replies:
        assert isinstance(reply, NotReady) and reply.status == 503
        assert reply.headers == {"Retry-After": "3"}
    # The resend was dropped; the model is marked down, so the queued request was refused
    # without a call of its own.
    assert model.cancelled == 1 and len(model.budgets) == 2 and up == [False]
    assert probe.calls == 1


def test_a_call_held_for_a_gone_replica_is_a_503_after_the_probe(encoder: WindowEncoder) -> None:
    down: list[int] = []
    model, probe = Model(deaths=0, hang_s=3600), Probe(None)
    failover = Failover(
        model, probe, (ReplicaDied,), probe_s=0.1, retry_after_s=1, on_down=lambda: down.append(1)
    )
    (reply,) = _run(encoder, failover, [["the replica died while idle"]])
    assert isinstance(reply, NotReady) and model.cancelled == 1 and down == [1]


def test_a_call_a_stopping_replica_holds_is_awaited_though_no_probe_answers(
    encoder: WindowEncoder,
) -> None:
    """An app being removed (or a single replica being replaced): the replica that took the
    call finishes it, while no probe can reach any replica."""
    down: list[int] = []
    model, probe = Model(deaths=0, hang_s=0.4), Probe(None)
    failover = Failover(
        model, probe, (ReplicaDied,), probe_s=0.1, retry_after_s=1,
        taken=lambda response: True, on_down=lambda: down.append(1),
    )  # fmt: skip
    (reply,) = _run(encoder, failover, [["held by a replica that is stopping"]])
    assert isinstance(reply, Reply) and model.cancelled == 0 and down == []
    assert probe.calls == 0


def test_a_slow_call_to_a_live_replica_is_awaited(encoder: WindowEncoder) -> None:
    model, probe = Model(deaths=0, hang_s=0.4), Probe(0.01)
    failover = Failover(model, probe, (ReplicaDied,), probe_s=0.1, retry_after_s=1)
    (reply,) = _run(encoder, failover, [["a long batch"]])
    assert isinstance(reply, Reply) and probe.calls == 1 and model.cancelled == 0


def test_calls_failing_together_share_one_probe(encoder: WindowEncoder) -> None:
    model, probe = Model(deaths=3, hang_s=0.05), Probe(0.05)
    failover = Failover(model, probe, (ReplicaDied,), probe_s=1, retry_after_s=1)
    coalescer = Coalescer(failover, max_texts=1, in_flight=3)

    async def main() -> list[Reply]:
        deadline = time.monotonic() + 5
        return await asyncio.gather(
            *(coalescer.submit(encoder.encode([t]), deadline) for t in "abc")
        )

    assert len(asyncio.run(main())) == 3 and probe.calls == 1


def test_a_second_death_is_a_503_and_another_error_the_answer(encoder: WindowEncoder) -> None:
    twice = Failover(Model(deaths=2), Probe(0.01), (ReplicaDied,), probe_s=1, retry_after_s=1)
    (reply,) = _run(encoder, twice, [["good"]])
    assert isinstance(reply, NotReady) and "failed twice" in reply.message
    other = Model(deaths=1, error=ValueError)
    failover = Failover(other, Probe(0.01), (ReplicaDied,), probe_s=1, retry_after_s=1)
    (reply,) = _run(encoder, failover, [["good"]])
    assert isinstance(reply, ValueError) and len(other.budgets) == 1  # not resent


def test_call_transport_names_grpc_calls_serializer() -> None:
    # /readyz's `model_calls`: how the ingress's calls to the model replica travel.
    metadata = SimpleNamespace(request_serialization="pickle")
    assert call_transport(SimpleNamespace(by_reference=False, _request_metadata=metadata)) == (
        "gRPC (pickle)"
    )
    assert call_transport(SimpleNamespace(by_reference=False)) == "gRPC"  # a Ray without it
    assert call_transport(SimpleNamespace(by_reference=True)) == "actor calls"
    assert call_transport(object()) == "actor calls"
