"""Draining before a shutdown: once asked, every ingress replica refuses new requests with 503
(never a 404), finishes those in flight, and reports drained through Ray's key-value store."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from service import drain
from tests.integration.conftest import Cluster

pytestmark = pytest.mark.integration


def test_a_drained_ingress_refuses_new_requests_and_finishes_those_in_flight(
    cluster: Cluster,
) -> None:
    # The requests meet in one batch whose forward takes 2 s more: they stay in flight while
    # the drain is watched.
    app = cluster.deploy(
        "drainflag",
        batch={"batch_wait_timeout_s": 0.5},
        ingress_replicas=2,
        fault_slow_forward_s=2.0,
    )
    started = threading.Event()

    def send(i: int) -> requests.Response:
        started.set()
        return app.classify({"text": f"in flight {i}"})

    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = [pool.submit(send, i) for i in range(6)]
        started.wait()
        time.sleep(0.3)  # admitted: waiting in the model replica's batch
        drain.request("drainflag")
        time.sleep(3 * drain.DRAIN_POLL_S)  # both replicas have seen the flag
        late = app.classify({"text": "too late"})
        ready = requests.get(f"{app.url}/readyz", timeout=10)
        # A replica that holds none of them may report at once; not both.
        assert drain.wait_drained("drainflag", 2, 0.0) < 2, "drained with requests in flight"
        answered = [f.result() for f in futures]

    assert [r.status_code for r in answered] == [200] * 6
    for response in (late, ready):
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "1"
        assert response.json()["error"]["code"] == "shutting_down"
    assert drain.wait_drained("drainflag", 2, timeout_s=10) == 2
    drain.clear("drainflag")
    assert not drain.requested("drainflag")
