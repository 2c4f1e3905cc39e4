"""The model replica's health check: a stalled forward or a failing probe is unhealthy."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from service.health import Unhealthy, Watchdog
from service.retry import Rows


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def fine() -> None:
    return None


async def broken() -> None:
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def test_idle_replica_with_a_working_probe_is_healthy() -> None:
    clock = Clock()
    dog = Watchdog(30.0, clock)
    clock.now += 3600  # idle for an hour is not a stall
    asyncio.run(dog.check(0, fine))


def test_a_failing_probe_is_unhealthy() -> None:
    with pytest.raises(Unhealthy, match="probe"):
        asyncio.run(Watchdog(30.0, Clock()).check(0, broken))


def test_a_hung_probe_is_unhealthy() -> None:
    async def hang() -> None:
        await asyncio.sleep(60)

    with pytest.raises(Unhealthy, match="probe"):
        asyncio.run(Watchdog(0.05).check(0, hang))


def test_work_without_progress_for_stall_s_is_unhealthy() -> None:
    clock = Clock()
    dog = Watchdog(30.0, clock)
    asyncio.run(dog.check(0, fine))  # idle: the clock starts now
    clock.now += 20
    asyncio.run(dog.check(5, broken))  # waiting, but not for long: no probe, healthy
    clock.now += 11
    with pytest.raises(Unhealthy, match="5 texts wait"):
        asyncio.run(dog.check(5, fine))


def test_a_forward_that_never_ends_is_unhealthy() -> None:
    clock = Clock()
    dog = Watchdog(30.0, clock)
    release = threading.Event()

    def stuck(rows: Rows) -> tuple[np.ndarray, float]:
        release.wait(10)
        return np.zeros((len(rows), 2), np.float32), 0.0

    thread = threading.Thread(target=dog.watch(stuck), args=([np.zeros(1, np.int32)],))
    thread.start()
    try:
        for _ in range(1000):  # the thread starts within a second
            if dog.running:
                break
            threading.Event().wait(0.001)
        clock.now += 31
        with pytest.raises(Unhealthy, match="1 forward runs"):
            asyncio.run(dog.check(0, fine))
    finally:
        release.set()
        thread.join(10)
    assert dog.running == 0
    asyncio.run(dog.check(0, fine))


def test_a_stuck_forward_beside_others_that_finish_is_unhealthy() -> None:
    # With parallel forwards, the other thread's forwards keep starting and ending: progress,
    # but the stuck one's texts never come back.
    clock = Clock()
    dog = Watchdog(30.0, clock)
    release = threading.Event()

    def forward(rows: Rows) -> tuple[np.ndarray, float]:
        if len(rows) > 1:
            release.wait(10)
        return np.zeros((len(rows), 2), np.float32), 0.0

    watched = dog.watch(forward)
    stuck = threading.Thread(target=watched, args=([np.zeros(1, np.int32)] * 2,))
    stuck.start()
    try:
        for _ in range(1000):
            if dog.running:
                break
            threading.Event().wait(0.001)
        for _ in range(4):  # 40 s of quick forwards beside it
            clock.now += 10
            watched([np.zeros(1, np.int32)])
        with pytest.raises(Unhealthy, match="a forward has run for 40"):
            asyncio.run(dog.check(0, fine))
    finally:
        release.set()
        stuck.join(10)
    asyncio.run(dog.check(0, fine))
