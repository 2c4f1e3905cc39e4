"""Changing a running application's Serve config: request limits in `user_config` change in
place, a bad `user_config` is refused without taking the service down, and a new `args` value
restarts both deployments without a moment with no replica to answer."""

from __future__ import annotations

import json
import threading

import pytest
import requests
from ray import serve

from tests.integration.conftest import TEST_ARGS, TEST_BATCH, Cluster

pytestmark = pytest.mark.integration


def test_request_limits_change_on_the_running_replicas(cluster: Cluster) -> None:
    app = cluster.deploy("limits")
    before = app.ready()
    three = {"texts": ["fine", "great phone", "awful"]}
    assert app.classify(three).status_code == 200

    # A new deadline or size limit in user_config reaches the running ingress in place: the
    # model replica (a GPU one in production) neither restarts nor sees it.
    limits = {"max_texts_per_request": 2, "max_text_chars": 50, "max_body_bytes": 200}
    cluster.deploy("limits", limits={**limits, "request_timeout_s": 5.0})
    after = app.ready()
    assert after["limits"] == {**limits, "request_timeout_s": 5.0}
    assert (after["replica"], after["ingress_replica"]) == (
        before["replica"],
        before["ingress_replica"],
    )
    too_many = app.classify(three)
    assert too_many.status_code == 422
    [detail] = too_many.json()["error"]["details"]
    assert detail["field"] == "texts" and "at most 2 items" in detail["reason"]
    assert app.classify({"text": "y" * 51}).status_code == 422
    assert app.classify({"text": "y" * 250}).status_code == 413
    assert app.classify({"texts": three["texts"][:2]}).status_code == 200
    spec = requests.get(f"{app.url}/openapi.json", timeout=10).json()
    body_schema = json.dumps(spec["paths"]["/v1/classify"]["post"]["requestBody"])
    assert '"maxItems": 2' in body_schema and '"maxLength": 50' in body_schema

    # Left out of user_config again, a limit is the application's args' once more.
    cluster.deploy("limits")
    wanted = TEST_ARGS["max_texts_per_request"]
    cluster.wait_for(lambda: app.ready()["limits"]["max_texts_per_request"] == wanted)
    assert app.classify(three).status_code == 200


def test_a_bad_user_config_is_refused_and_the_service_keeps_answering(cluster: Cluster) -> None:
    app = cluster.deploy("refuse")
    before = app.ready()
    refused = "ray_sentiment_user_config_refused"
    # A typo and a value out of range: Ray would stop every replica whose reconfigure raised.
    for deployment in cluster.apps["refuse"]["deployments"]:
        deployment["user_config"] = {**TEST_BATCH, "max_body_byte": 100, "request_timeout_s": 0}
    cluster.apply()
    cluster.wait_for(lambda: app.ready()["user_config_refused"] is not None, timeout=60)
    why = app.ready()["user_config_refused"]
    assert "max_body_byte" in why and "request_timeout_s" in why, why
    assert app.classify({"texts": ["fine", "great phone"]}).status_code == 200
    after = app.ready()
    assert (after["replica"], after["ingress_replica"]) == (
        before["replica"],
        before["ingress_replica"],
    )
    assert after["limits"] == before["limits"]  # the previous settings stay in force
    cluster.wait_for(lambda: serve.status().applications["refuse"].status == "RUNNING")

    def refused_by(deployment: str) -> float:
        return cluster.metric(refused, application="refuse", deployment=deployment)

    cluster.wait_for(lambda: refused_by("SentimentIngress") == 1 == refused_by("SentimentModel"))

    cluster.deploy("refuse", limits={"request_timeout_s": 4.0})  # a good one clears it
    assert app.ready()["user_config_refused"] is None
    cluster.wait_for(lambda: cluster.metric(refused, application="refuse") == 0)


def test_a_restart_for_new_args_leaves_no_gap(cluster: Cluster) -> None:
    """Changing `args` replaces every replica; Ray starts the new ones before it stops the old
    (service.deployment.SURGE_PERCENT), so a one-replica deployment answers throughout."""
    app = cluster.deploy("surge")
    before = app.ready()
    statuses: list[int] = []
    stop = threading.Event()

    def client() -> None:  # one client, bounded by the event and by its 30 s timeout a call
        with requests.Session() as session:
            while not stop.is_set():
                url = f"{app.url}/v1/classify"
                statuses.append(session.post(url, json={"text": "fine"}, timeout=30).status_code)

    thread = threading.Thread(target=client)
    thread.start()
    try:
        cluster.deploy("surge", retry_after_s=2)  # an arg: both deployments restart
        cluster.wait_for(lambda: app.ready()["replica"] != before["replica"], timeout=120)
        cluster.wait_for(lambda: app.ready()["ingress_replica"] != before["ingress_replica"])
        count = len(statuses)
        cluster.wait_for(lambda: len(statuses) > count + 20)  # and the new ones answer
    finally:
        stop.set()
        thread.join(timeout=60)
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
