"""The co-located layout: one replica is ingress and model at once, deployed through the same
config path as production (`build_app` with `layout: colocated`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ray import serve

from service.model import SentimentModel
from service.probes import ReadyResponse
from tests.integration.conftest import Cluster
from tests.integration.load import burst, singles

pytestmark = pytest.mark.integration


def test_one_replica_answers_like_the_model_in_process(
    cluster: Cluster, tiny_model_dir: Path
) -> None:
    app = cluster.deploy("colo", batch={"batch_wait_timeout_s": 0.3}, layout="colocated")
    deployments = serve.status().applications["colo"].deployments
    assert set(deployments) == {"SentimentIngress"}, "no model deployment beside it"
    ready = app.ready()
    assert ready["replica"] == ready["ingress_replica"], "the model answers from the ingress"
    assert ReadyResponse.model_validate(ready).model_calls == "in process"

    bodies = singles(12)
    responses = burst(app, bodies)
    assert [r.status_code for r in responses] == [200] * 12
    local = SentimentModel.load(tiny_model_dir, device="cpu", max_length=32)
    expected = local.classify([body["text"] for body in bodies])  # type: ignore[index]
    for response, probs in zip(responses, expected, strict=True):
        [result] = response.json()["results"]
        assert result["probabilities"] == pytest.approx(probs, abs=1e-5)
    assert app.classify({"texts": []}).status_code == 422

    # The batcher runs in the same replica, so requests still meet in batches.
    cluster.wait_for(lambda: cluster.metric("ray_sentiment_texts_total", application="colo") == 12)
    batches = cluster.metric("ray_sentiment_batch_texts_count", application="colo")
    assert 1 <= batches < 12
