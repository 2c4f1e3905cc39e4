"""A model replica SIGKILLed under load: with two replicas every request is answered 200 (the
ingress resends the dead replica's calls); with one, clients get 503 at once, not a hang, and
200s return once Ray has replaced it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest
import requests
from ray import serve
from ray.serve._private.common import ReplicaState

from loadtest.chaos import busiest, replica_pids
from tests.integration.conftest import Cluster, Deployed

pytestmark = pytest.mark.integration

DEADLINE_S = 10.0
Answer = tuple[float, float, int, str | None]


@contextmanager
def load(app: Deployed, clients: int) -> Iterator[list[Answer]]:
    """`clients` threads sending single texts until the block ends; yields the growing list of
    (sent, answered, status, Retry-After), status 0 when no HTTP answer came."""
    answers: list[Answer] = []
    stop = threading.Event()

    def client(i: int) -> None:
        with requests.Session() as session:
            n = 0
            while not stop.is_set() and n < 2000:
                n += 1
                sent = time.monotonic()
                url, body = f"{app.url}/v1/classify", {"text": f"client {i} review {n}"}
                try:
                    response = session.post(url, json=body, timeout=DEADLINE_S + 20)
                    status, retry = response.status_code, response.headers.get("retry-after")
                except requests.RequestException:
                    status, retry = 0, None
                answers.append((sent, time.monotonic(), status, retry))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    try:
        yield answers
    finally:
        stop.set()
        for t in threads:
            t.join()


@pytest.fixture(scope="module")
def app(cluster: Cluster) -> Iterator[Deployed]:
    deployed = cluster.deploy(
        "replica-loss",
        # A call waits at its replica for company: a killed replica surely holds calls.
        batch={"batch_wait_timeout_s": 0.4},
        num_replicas=2,
        ingress_calls_in_flight=4,
        request_timeout_s=DEADLINE_S,
        model_probe_s=1.0,
    )
    yield deployed
    cluster.remove(deployed.name)


def _pids(app: Deployed) -> list[int]:
    return replica_pids(app.name, "SentimentModel", os.getpid())


def _both_running(cluster: Cluster, app: Deployed) -> None:
    def running() -> bool:
        states = serve.status().applications[app.name].deployments["SentimentModel"]
        return states.replica_states.get(ReplicaState.RUNNING) == 2 and len(_pids(app)) == 2

    cluster.wait_for(running, timeout=120)


def _resent(cluster: Cluster, app: Deployed) -> float:
    return cluster.metric("ray_sentiment_resent_model_calls_total", application=app.name)


def _rose_above(cluster: Cluster, app: Deployed, before: float, timeout: float) -> bool:
    with suppress(AssertionError):
        cluster.wait_for(lambda: _resent(cluster, app) > before, timeout=timeout)
        return True
    return False


def test_killing_one_of_two_replicas_loses_no_request(cluster: Cluster, app: Deployed) -> None:
    # The tiny model's forwards barely show in CPU time, so the kill may land on a replica that
    # held no call at that instant (nothing to resend). Every round must lose nothing; one at
    # least must have had calls die with the replica, and resent.
    for _ in range(3):
        _both_running(cluster, app)  # a test or round before may have killed them
        before = _resent(cluster, app)
        with load(app, clients=12) as answers:
            time.sleep(2.0)
            os.kill(busiest(_pids(app)), signal.SIGKILL)
            killed = time.monotonic()
            time.sleep(4.0)
        statuses = Counter(status for *_, status, _ in answers)
        assert statuses == {200: len(answers)}, statuses
        assert any(sent < killed < answered for sent, answered, *_ in answers)
        if _rose_above(cluster, app, before, timeout=15.0):
            return
    raise AssertionError("in three kills no replica held a call: the resend path never ran")


def test_with_no_replica_alive_clients_get_503_then_200(cluster: Cluster, app: Deployed) -> None:
    with load(app, clients=6) as answers:
        time.sleep(1.0)
        killed = time.monotonic()

        def refused() -> bool:
            # Every model replica stays dead (Ray may be starting one) until clients hear so.
            for pid in _pids(app):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return any(status == 503 for _, _, status, _ in answers)

        def resumed() -> bool:
            return any(sent > killed and status == 200 for sent, _, status, _ in answers[-6:])

        cluster.wait_for(refused, timeout=60)
        cluster.wait_for(resumed, timeout=120)  # Ray replaced them, and the ingress noticed
    after = [(status, retry) for _, answered, status, retry in answers if answered > killed]
    statuses = Counter(status for status, _ in after)
    # Refused in time, never failed (500), left to its deadline (504) or unanswered (0).
    assert statuses[503] > 0 and set(statuses) == {200, 503}, statuses
    assert {retry for status, retry in after if status == 503} == {"1"}  # Retry-After
    assert app.classify({"text": "the new replicas answer"}).status_code == 200
