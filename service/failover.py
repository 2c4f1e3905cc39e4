"""Model calls that outlive the model replica they went to.

A model replica that dies (a crash, a SIGKILL, a lost node) fails every call it held. The
ingress sends each such call once more, with what is left of its texts' budgets: classifying
is idempotent, so computing a call twice is harmless, and Serve's router picks a live replica.

When no replica is alive (the only one died), Serve's router holds a call until Ray has
started a new one, which takes longer than a request's deadline. So a cheap probe asks whether
any replica answers within `probe_s`, whenever a call is resent, and whenever a call is still
out after `probe_s` and no replica has taken it (it may be held for a replica that died while
idle). A call a replica has taken is not probed for: that replica's death fails the call, and
a replica that is stopping (the app removed, a rolling update) finishes it, though no probe
can reach a replica then:
- one answers: a replica lives; the call is awaited (bounded by the request deadline, as
  every call is), so an answerable request is never refused, however slow;
- none does: the call is dropped and its requests get 503 with Retry-After; `on_down` tells
  the ingress to refuse new requests the same way, at once, until a replica answers again,
  instead of letting each of them wait out its deadline.
A second death of the same call is answered 503 too: clients may retry it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from service.coalescer import ModelCall
from service.encoding import CallResult, Packed
from service.errors import NotReady

NO_REPLICA = "no model replica is available; retry shortly"


class Failover:
    """A `ModelCall` that resends once on replica death and refuses while none is alive."""

    def __init__(
        self,
        call: ModelCall,
        probe: Callable[[], Awaitable[object]],
        lost: tuple[type[BaseException], ...],
        *,
        probe_s: float,
        retry_after_s: int,
        is_up: Callable[[], bool] = lambda: True,
        taken: Callable[[Awaitable[CallResult]], bool] = lambda _: False,
        on_resend: Callable[[], None] = lambda: None,
        on_down: Callable[[], None] = lambda: None,
    ) -> None:
        self.call = call
        self.probe = probe  # any cheap call that a live model replica answers
        self.lost = lost  # the errors that say the replica died with the call
        self.probe_s = probe_s
        self.retry_after_s = retry_after_s
        self.is_up = is_up
        self.taken = taken  # whether a replica has taken the call `call` returned
        self.on_resend = on_resend
        self.on_down = on_down
        self._probing: asyncio.Task[bool] | None = None

    def refusal(self, message: str) -> NotReady:
        """503 in the service's error shape, with Retry-After."""
        return NotReady(message, self.retry_after_s)

    async def __call__(self, packed: Packed, budgets: npt.NDArray[np.float32]) -> CallResult:
        if not self.is_up():  # the model is known to be gone: no waiting for it
            raise self.refusal(NO_REPLICA)
        sent = time.monotonic()
        response = self.call(packed, budgets)
        first = asyncio.ensure_future(response)
        try:
            # A call still out after `probe_s` may wait in Serve's router for a replica that
            # is gone (it died while idle, or this call went out after it died).
            if not await self._answered_or_alive(first, self.probe_s, response):
                raise self._gone()
            return await first
        except self.lost:
            self.on_resend()
        response = self.call(packed, budgets - np.float32(time.monotonic() - sent))
        resend = asyncio.ensure_future(response)
        if not await self._answered_or_alive(resend, 0.0, response):
            raise self._gone()
        try:
            return await resend
        except self.lost:
            raise self.refusal("the model replica failed twice; retry shortly") from None

    async def _answered_or_alive(
        self, call: asyncio.Future[CallResult], wait_s: float, response: Awaitable[CallResult]
    ) -> bool:
        """True once `call` is done (answered or failed) or taken by a replica, or when a model
        replica answers a probe while it is out; else `call` is dropped and False."""
        if wait_s > 0:
            await asyncio.wait({call}, timeout=wait_s)
        if call.done() or self.taken(response):
            return True
        probe = self._alive()
        either: set[asyncio.Future[Any]] = {call, probe}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if call.done() or await probe:
            return True
        call.cancel()
        return False

    def _gone(self) -> NotReady:
        self.on_down()
        return self.refusal(NO_REPLICA)

    def _alive(self) -> asyncio.Task[bool]:
        """One probe at a time, shared by every call that needs one meanwhile."""
        if self._probing is None or self._probing.done():
            self._probing = asyncio.ensure_future(self._probe())
        return self._probing

    async def _probe(self) -> bool:
        try:
            await asyncio.wait_for(self.probe(), self.probe_s)
        except Exception:  # timed out, or the replica it reached died too
            return False
        return True


def taken_by_replica(response: object) -> bool:
    """Whether Serve's router has handed a handle call (a `DeploymentResponse`) to a replica.

    Serve exposes no public way to ask; the response resolves a private future with the
    replica's result object once the router has chosen a replica. Where a Ray version lacks
    it, or for anything but a Serve response, the answer is False: the call is probed for, as
    every call was before."""
    future = getattr(response, "_replica_result_future", None)
    if future is None or not future.done() or future.cancelled():
        return False
    return future.exception() is None


def pickled_calls(handle: Any, **options: Any) -> Any:
    """`handle` (a Serve `DeploymentHandle`) with `options`, its calls pickled.

    Over gRPC, Serve serializes a call's arguments and answer with cloudpickle unless told
    otherwise, which looks at every object for what it must pickle by value. The model calls
    carry numpy arrays and importable types only, which the standard pickle writes at about
    half the cost: an empty call of the same arrays cost ~0.05 ms less CPU in the caller and
    ~0.03 ms less in the callee (docs/benchmarks.md). Ray's actor calls ignore the setting.
    """
    pickled = {"request_serialization": "pickle", "response_serialization": "pickle"}
    return handle.options(**pickled, **options)


def call_transport(response: object) -> str:
    """How a handle call (a `DeploymentResponse`) travels: "gRPC" with its serializer in
    brackets, or "actor calls" (Ray's default outside its throughput-optimized mode, and what
    anything else is taken for)."""
    if getattr(response, "by_reference", True):
        return "actor calls"
    metadata = getattr(response, "_request_metadata", None)  # private: the serializer
    serializer = getattr(metadata, "request_serialization", None)
    return f"gRPC ({serializer})" if serializer else "gRPC"
