"""Draining the ingress before a shutdown: new requests get 503 with Retry-After, requests in
flight finish, and only then does the listener close.

Deleting a Serve application removes its route first: HAProxy then answers 404 to every new
request until the replicas are gone, and a load balancer does not retry a 404. So the `serve`
command does not delete the ingress. It raises a drain flag in Ray's key-value store (the GCS,
which every replica of the cluster reaches), each ingress replica notices it within
`DRAIN_POLL_S`, refuses new requests with 503, and reports back once its own requests in
flight are answered. Then everything stops at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import ModuleType

NAMESPACE = "sentiment"
# Each poll is a round trip to the GCS from a worker thread: at 4 a second the idle replica
# and the GCS spent ~10 ms of CPU a second on it (measured); once a second a drain starts
# at most a second late.
DRAIN_POLL_S = 1.0


def _kv() -> ModuleType:
    # Ray's own key-value store, the one Serve keeps its checkpoints in; imported late so this
    # module loads without Ray.
    from ray.experimental import internal_kv

    return internal_kv


def _flag(app: str) -> bytes:
    return f"drain:{app}".encode()


def _drained_prefix(app: str) -> bytes:
    return f"drained:{app}:".encode()


def request(app: str) -> None:
    """Ask every ingress replica of `app` to drain (the driver's side)."""
    _kv()._internal_kv_put(_flag(app), b"1", True, namespace=NAMESPACE)


def clear(app: str) -> None:
    """Forget an earlier drain of `app` (a cluster that outlived a previous run)."""
    kv = _kv()
    kv._internal_kv_del(_flag(app), namespace=NAMESPACE)
    kv._internal_kv_del(_drained_prefix(app), del_by_prefix=True, namespace=NAMESPACE)


def requested(app: str) -> bool:
    """Has a drain of `app` been asked for? (each ingress replica polls this)"""
    return bool(_kv()._internal_kv_exists(_flag(app), namespace=NAMESPACE))


def report_drained(app: str, replica: str) -> None:
    """This replica has nothing in flight any more."""
    key = _drained_prefix(app) + replica.encode()
    _kv()._internal_kv_put(key, b"1", True, namespace=NAMESPACE)


def wait_drained(app: str, replicas: int, timeout_s: float) -> int:
    """Wait until `replicas` replicas of `app` report drained, or `timeout_s` passes; how many
    did."""
    kv = _kv()
    deadline = time.monotonic() + timeout_s
    while True:
        done = len(kv._internal_kv_list(_drained_prefix(app), namespace=NAMESPACE))
        if done >= replicas or time.monotonic() > deadline:
            return int(done)
        time.sleep(DRAIN_POLL_S / 2)


class DrainWatch:
    """An ingress replica's side: `draining` turns true once a drain of its application is
    asked for, and the replica reports drained once `busy()` is zero."""

    def __init__(self, app: str, replica: str, busy: Callable[[], int]) -> None:
        self.app, self.replica, self.busy = app, replica, busy
        self.draining = False

    async def run(self) -> None:
        """Poll until drained. The store is asked off the event loop: a slow GCS must never
        stall the requests this replica is answering."""
        while not self.draining:
            await asyncio.sleep(DRAIN_POLL_S)
            try:
                self.draining = await asyncio.to_thread(requested, self.app)
            except Exception:  # the GCS is away: keep serving, ask again later
                continue
        while self.busy():
            await asyncio.sleep(DRAIN_POLL_S / 5)
        await asyncio.to_thread(report_drained, self.app, self.replica)
