"""The service on an ONNX Runtime backend chosen by `auto` from a recorded measurement."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from service.export import export_onnx
from service.model import SentimentModel
from tests.integration.conftest import Cluster
from tests.measured import record_speeds
from tests.tiny_bert import SAMPLE_TEXT

pytestmark = pytest.mark.integration


def test_auto_serves_the_measured_fastest_backend(
    cluster: Cluster, tiny_model_dir: Path, tmp_path: Path
) -> None:
    model_dir = tmp_path / "tiny-int8"
    shutil.copytree(tiny_model_dir, model_dir)
    export_onnx(model_dir, quantize="int8")
    speeds = {"torch": 100.0, "onnx": 200.0, "onnx-int8": 250.0}
    record_speeds(model_dir, speeds, list(speeds))

    app = cluster.deploy("int8", model_path=str(model_dir), backend="auto")
    ready = app.ready()
    assert ready["backend"] == "onnx-int8"  # warm-up ran every shape bucket on it: ready
    assert "measured fastest on cpu (250.0 texts/s)" in ready["backend_reason"]
    answer = app.classify({"texts": SAMPLE_TEXT})
    assert answer.status_code == 200
    local = SentimentModel.load(model_dir, device="cpu", max_length=32).classify(SAMPLE_TEXT)
    for result, expected in zip(answer.json()["results"], local, strict=True):
        for label, p in expected.items():
            assert result["probabilities"][label] == pytest.approx(p, abs=1e-2)
    cluster.wait_for(
        lambda: (
            cluster.metric("ray_sentiment_model_info", application="int8", backend="onnx-int8") == 1
        )
    )
    # The untrained tiny model answers about 0.5 for everything: too close to call in INT8,
    # so every text was recomputed on the FP32 graph, and the metric says so.
    rechecked = "ray_sentiment_int8_rechecked_texts_total"
    cluster.wait_for(lambda: cluster.metric(rechecked, application="int8") >= len(SAMPLE_TEXT))
    # A forward of this model costs a fraction of a millisecond: it ran on the event loop.
    assert ready["inline_forward_ms"] > 0
    forwards = "ray_sentiment_forward_seconds_count"
    cluster.wait_for(lambda: cluster.metric(forwards, application="int8", on="event_loop") >= 1)
