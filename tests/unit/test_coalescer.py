"""The ingress coalescer on a plain event loop, with a real tokenizer and a fake model call."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from service.chunking import WindowEncoder
from service.coalescer import Coalescer, ModelCall
from service.encoding import EXPIRED, FAILED, CallResult, Packed
from service.errors import DeadlineExceeded, InternalError


class FakeModel:
    """Answers each text with [len, 1 - len] after a pause; records every call."""

    def __init__(
        self, pause_s: float = 0.05, expire: set[int] | None = None, idle_s: float = 0.0
    ) -> None:
        self.pause_s = pause_s
        self.expire = expire or set()  # call numbers whose first text reports EXPIRED
        self.idle_s = idle_s  # of each pause, the part it reports as a wait for company
        self.calls: list[int] = []

    async def __call__(self, packed: Packed, budgets: np.ndarray) -> CallResult:
        self.calls.append(len(packed))
        assert len(budgets) == len(packed) and (budgets > 0).all()
        await asyncio.sleep(self.pause_s)
        lengths = packed.lengths().astype(np.float32)
        probs = np.stack([lengths, 1 - lengths], axis=1)
        status = np.zeros(len(packed), dtype=np.uint8)
        if len(self.calls) in self.expire:
            status[0] = EXPIRED
        return probs, status, self.idle_s


@pytest.fixture(scope="module")
def encoder(tiny_model_dir: Path) -> WindowEncoder:
    """Texts to a request's rows as the ingress makes them (one window per text here)."""
    return WindowEncoder.load(tiny_model_dir, 32)


def test_concurrent_requests_share_calls_and_get_their_own_rows(encoder: WindowEncoder) -> None:
    model = FakeModel()

    async def main() -> list[np.ndarray]:
        coalescer = Coalescer(model, max_texts=64, in_flight=1)
        deadline = time.monotonic() + 10
        texts = [["ok"], ["great phone", "bad"], ["fine " * 5]]
        futures = [coalescer.submit(encoder.encode(t), deadline) for t in texts]
        return [(await f).probs for f in futures]

    first, second, third = asyncio.run(main())
    assert model.calls == [1, 3]  # the first went alone; the rest waited and went together
    expected = encoder.encode(["ok", "great phone", "bad", "fine " * 5]).packed.lengths()
    assert first[:, 0].tolist() == [expected[0]]
    assert second[:, 0].tolist() == list(expected[1:3])
    assert third[:, 0].tolist() == [expected[3]]


def test_calls_respect_the_text_limit(encoder: WindowEncoder) -> None:
    model = FakeModel()

    async def main() -> None:
        coalescer = Coalescer(model, max_texts=3, in_flight=1)
        deadline = time.monotonic() + 10
        futures = [coalescer.submit(encoder.encode([f"text {i}", "b"]), deadline) for i in range(4)]
        await asyncio.gather(*futures)

    asyncio.run(main())
    assert model.calls == [2, 2, 2, 2]  # two requests of two texts never fit in three


def test_an_expired_text_fails_only_its_own_request(encoder: WindowEncoder) -> None:
    model = FakeModel(expire={2})

    async def main() -> list[object]:
        coalescer = Coalescer(model, max_texts=64, in_flight=1)
        deadline = time.monotonic() + 10
        futures = [coalescer.submit(encoder.encode([t]), deadline) for t in ("a", "b", "c")]
        return await asyncio.gather(*futures, return_exceptions=True)

    first, second, third = asyncio.run(main())
    assert not isinstance(first, Exception) and not isinstance(third, Exception)
    assert isinstance(second, DeadlineExceeded)


def test_a_failed_call_fails_its_requests_and_the_next_call_still_runs(
    encoder: WindowEncoder,
) -> None:
    calls = 0

    async def flaky(packed: Packed, budgets: np.ndarray) -> CallResult:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.02)
        if calls == 1:
            raise RuntimeError("model replica died")
        return np.zeros((len(packed), 2), np.float32), np.zeros(len(packed), np.uint8), 0.0

    async def main() -> list[object]:
        coalescer = Coalescer(flaky, max_texts=64, in_flight=1)
        deadline = time.monotonic() + 10
        futures = [coalescer.submit(encoder.encode([t]), deadline) for t in ("a", "b")]
        return await asyncio.gather(*futures, return_exceptions=True)

    first, second = asyncio.run(main())
    assert isinstance(first, RuntimeError) and not isinstance(second, Exception)


def test_requests_gone_before_their_call_are_not_sent(encoder: WindowEncoder) -> None:
    model = FakeModel()

    async def main() -> None:
        coalescer = Coalescer(model, max_texts=64, in_flight=1)
        deadline = time.monotonic() + 10
        first = coalescer.submit(encoder.encode(["a"]), deadline)
        gone = coalescer.submit(encoder.encode(["b", "c"]), deadline)
        gone.cancel()  # the client left while the first call was out
        await first
        await asyncio.sleep(0.1)

    asyncio.run(main())
    assert model.calls == [1]


def test_a_request_gone_while_queued_leaves_the_queue_at_once(encoder: WindowEncoder) -> None:
    model = FakeModel(pause_s=0.2)

    async def main() -> None:
        coalescer = Coalescer(model, max_texts=64, in_flight=1)
        deadline = time.monotonic() + 10
        first = coalescer.submit(encoder.encode(["a"]), deadline)  # out to the model
        gone = coalescer.submit(encoder.encode(["b", "c"]), deadline)
        d = encoder.encode(["d"])
        kept = coalescer.submit(d, deadline)
        await asyncio.sleep(0.01)
        assert len(coalescer._queue) == 2
        gone.set_exception(DeadlineExceeded("deadline"))  # as the ingress's timer does
        await asyncio.sleep(0)
        queued = [w.request for w in coalescer._queue]
        assert len(queued) == 1 and queued[0] is d  # while the call is still out
        await asyncio.gather(first, kept)
        with pytest.raises(DeadlineExceeded):
            await gone

    asyncio.run(main())
    assert model.calls == [1, 1]


def test_a_failed_text_fails_only_its_own_request_with_a_500(encoder: WindowEncoder) -> None:
    async def one_fails(packed: Packed, budgets: np.ndarray) -> CallResult:
        status = np.zeros(len(packed), dtype=np.uint8)
        if len(packed) > 1:  # the second call: "b", "c", "d"; "c" fails even alone
            status[1] = FAILED
        return np.zeros((len(packed), 2), np.float32), status, 0.0

    async def main() -> list[object]:
        coalescer = Coalescer(one_fails, max_texts=64, in_flight=1)
        deadline = time.monotonic() + 10
        futures = [
            coalescer.submit(encoder.encode(t), deadline) for t in (["a"], ["b", "c"], ["d"])
        ]
        return await asyncio.gather(*futures, return_exceptions=True)

    first, second, third = asyncio.run(main())
    assert isinstance(second, InternalError) and second.status == 500
    assert not isinstance(first, Exception) and not isinstance(third, Exception)


def test_calls_with_work_queued_behind_them_time_the_pace(encoder: WindowEncoder) -> None:
    model = FakeModel(pause_s=0.05)
    paced: list[tuple[int, float]] = []

    async def main() -> None:
        coalescer = Coalescer(
            model, max_texts=1, in_flight=1, paced=lambda t, s: paced.append((t, s))
        )
        deadline = time.monotonic() + 10
        await coalescer.submit(encoder.encode(["alone"]), deadline)  # nothing behind it
        await asyncio.sleep(0.5)  # idle time must not count as the model's
        futures = [coalescer.submit(encoder.encode([f"text {i}"]), deadline) for i in range(3)]
        await asyncio.gather(*futures)

    asyncio.run(main())
    assert model.calls == [1, 1, 1, 1]
    tokens = len(encoder.encode(["text 0"]).packed.ids)
    # The second and third calls had requests waiting; the last one answered nobody waiting.
    assert [t for t, _ in paced] == [tokens, tokens]
    assert all(0.05 <= s < 0.5 for _, s in paced), paced


def timed_burst(call: ModelCall, encoder: WindowEncoder) -> list[tuple[int, float]]:
    """Three one-text requests at once, through one-row calls with one in flight: the
    (tokens, seconds) of each call the coalescer timed for the pace."""
    paced: list[tuple[int, float]] = []

    async def main() -> None:
        coalescer = Coalescer(
            call, max_texts=1, in_flight=1, paced=lambda t, s: paced.append((t, s))
        )
        deadline = time.monotonic() + 10
        futures = [coalescer.submit(encoder.encode([f"text {i}"]), deadline) for i in range(3)]
        await asyncio.gather(*futures)

    asyncio.run(main())
    return paced


def test_the_first_call_does_not_time_the_pace(encoder: WindowEncoder) -> None:
    # A replica's first call also opens its channel to the model replica: slow once. Timed,
    # it would make a new ingress replica refuse what it could answer.
    model = FakeModel(pause_s=0.05)
    first_pause = 0.6

    async def cold_then_warm(packed: Packed, budgets: np.ndarray) -> CallResult:
        model.pause_s = first_pause if not model.calls else 0.05
        return await model(packed, budgets)

    paced = timed_burst(cold_then_warm, encoder)
    assert model.calls == [1, 1, 1]
    # The first call had work behind it but is not timed; the second is; the third answered
    # nobody waiting.
    assert len(paced) == 1 and 0.05 <= paced[0][1] < first_pause, paced


def test_a_wait_for_company_in_the_model_is_not_its_pace(encoder: WindowEncoder) -> None:
    # With a batch wait, each call of a burst may sit in an idle model waiting for company:
    # counted as work, the pace read a fraction of the model's and admission refused what it
    # could answer in time.
    paced = timed_burst(FakeModel(pause_s=0.3, idle_s=0.25), encoder)
    assert len(paced) == 1  # the second call: the first is not timed, the third had none behind
    assert 0.05 <= paced[0][1] < 0.25, paced  # 0.3 s answered, 0.25 s of it idle
