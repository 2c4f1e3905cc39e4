"""Overload, deadlines and shutdown: 429 with Retry-After, 504 without compute, no lost texts."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.integration.conftest import Cluster
from tests.integration.load import burst, singles

pytestmark = pytest.mark.integration


def test_overload_answers_429_and_loses_nothing_accepted(cluster: Cluster) -> None:
    app = cluster.deploy(
        "tight",
        batch={"max_pending_texts": 4, "batch_wait_timeout_s": 0.5},
        max_texts_per_request=4,
    )
    bodies: list[object] = [
        {"texts": [f"review {i} part {j}" for j in range(1 + i % 3)]} for i in range(24)
    ]
    responses = burst(app, bodies)
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 429}, codes
    assert codes.count(429) > 0 and codes.count(200) > 0
    for body, response in zip(bodies, responses, strict=True):
        if response.status_code == 429:
            assert response.headers["Retry-After"] == "1"
            assert response.json()["error"]["code"] == "overloaded"
        else:  # accepted: exactly one answer per text
            assert len(response.json()["results"]) == len(body["texts"])  # type: ignore[index]
    rejected = codes.count(429)
    cluster.wait_for(
        lambda: cluster.metric("ray_sentiment_rejections_total", application="tight",
                               reason="overloaded") == rejected
    )  # fmt: skip


def test_a_request_that_would_only_time_out_behind_admitted_work_gets_429(
    cluster: Cluster,
) -> None:
    """Every forward here takes 0.3 s longer and a call carries one text, so a burst of 16
    cannot all be answered within the 3 s deadline. The first burst teaches the ingress the
    pace of its calls (its warm-up estimate knows nothing of the injected delay); from then
    on a request the admitted work would hold past its deadline gets 429 at once, and every
    request admitted is answered."""
    app = cluster.deploy(
        "behind", batch={"max_batch_texts": 1}, request_timeout_s=3.0, fault_slow_forward_s=0.3
    )
    first = burst(app, singles(16, "learn"))
    assert {r.status_code for r in first} <= {200, 429, 504}
    pace = app.ready()["ingress_pace_tokens_per_s"]
    assert 0 < pace < 1_000  # a text of ~12 tokens a call, a call 0.3 s or more
    responses = burst(app, singles(16))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 429}, codes
    assert codes.count(200) >= 2 and codes.count(429) >= 1, codes
    for response in responses:
        if response.status_code == 429:
            assert response.json()["error"]["code"] == "overloaded"
            assert int(response.headers["Retry-After"]) >= 1
        else:
            assert len(response.json()["results"]) == 1
    refused = codes.count(429) + [r.status_code for r in first].count(429)
    cluster.wait_for(
        lambda: cluster.metric("ray_sentiment_rejections_total", application="behind",
                               reason="behind") == refused
    )  # fmt: skip
    published = "ray_sentiment_ingress_pace_tokens_per_second"
    cluster.wait_for(lambda: 0 < cluster.metric(published, application="behind") < 1_000)


def test_expired_requests_get_504_and_are_not_computed(cluster: Cluster) -> None:
    app = cluster.deploy("deadline", batch={"batch_wait_timeout_s": 1.0}, request_timeout_s=0.2)
    responses = burst(app, singles(6))
    assert [r.status_code for r in responses] == [504] * 6
    assert responses[0].json()["error"]["code"] == "deadline_exceeded"
    cluster.wait_for(
        lambda: cluster.metric("ray_sentiment_rejections_total", application="deadline",
                               reason="deadline") == 6
    )  # fmt: skip
    time.sleep(2.5)  # a forward, had one run, would have been exported by now
    assert cluster.metric("ray_sentiment_forward_texts_total", application="deadline") == 0
    assert cluster.metric("ray_sentiment_texts_total", application="deadline") == 0


def test_removing_an_app_finishes_requests_in_flight(cluster: Cluster) -> None:
    """Removing an application (`serve deploy` without it) lets the model replica finish the
    calls it holds. Ray stops both deployments at once, so rows still queued in an ingress
    would find no model replica and get a retryable 503: each request here is its own call
    (eight calls in flight), and all eight are at the model (its forward takes 3 s longer)
    when the app goes. The `serve` command drains the ingress first (test_drain.py), so
    nothing meets that 503."""
    app = cluster.deploy(
        "drain",
        batch={"batch_wait_timeout_s": 1.0},
        ingress_calls_in_flight=8,
        fault_slow_forward_s=3.0,
    )

    def send(i: int) -> requests.Response:
        return app.classify({"text": f"in flight {i}"}, timeout=60)

    calls = "ray_sentiment_call_texts_count"
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(send, i) for i in range(8)]
        # All eight calls sent; the model replica holds them for 1 s of batch wait + 4 s.
        cluster.wait_for(lambda: cluster.metric(calls, application="drain") == 8, timeout=3.5)
        cluster.remove("drain")
        responses = [f.result() for f in futures]
    assert [r.status_code for r in responses] == [200] * 8, [r.text[:200] for r in responses]
    assert all(len(r.json()["results"]) == 1 for r in responses)


def test_the_readiness_probe_path_answers_while_the_service_is_saturated(
    cluster: Cluster,
) -> None:
    """Pods probe `/-/healthz`, which Ray's front answers itself (the Python proxy here, HAProxy
    in production), never through the ingress's queue: load cannot fail the probe."""
    app = cluster.deploy(
        "saturated",
        batch={"max_pending_texts": 4},
        max_texts_per_request=4,
        fault_slow_forward_s=0.5,
    )
    stop = time.monotonic() + 4.0

    def client(i: int) -> list[int]:
        codes = []
        with requests.Session() as session:
            while time.monotonic() < stop:
                body = {"text": f"flash sale {i}"}
                codes.append(
                    session.post(f"{app.url}/v1/classify", json=body, timeout=30).status_code
                )
        return codes

    probe = f"http://127.0.0.1:{cluster.http_port}/-/healthz"
    with ThreadPoolExecutor(max_workers=24) as pool:
        loads = [pool.submit(client, i) for i in range(24)]
        time.sleep(1.0)  # the queue is full by now
        probes = []
        while time.monotonic() < stop:
            probes.append(requests.get(probe, timeout=2).status_code)  # the pods' probe timeout
            time.sleep(0.2)
        codes = [code for future in loads for code in future.result()]
    assert set(codes) <= {200, 429} and codes.count(429) > codes.count(200) > 0, codes
    assert probes and set(probes) == {200}, probes
