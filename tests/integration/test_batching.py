"""Dynamic batching seen from outside: coalescing proven by the exported batch metrics, and
batch knobs changed at run time on a live replica."""

from __future__ import annotations

import pytest

from service.batching import pad_multiple, round_up
from service.encoding import TextEncoder
from tests.integration.conftest import TEST_ARGS, Cluster
from tests.integration.load import burst, singles

pytestmark = pytest.mark.integration
BATCH_TEXTS = "ray_sentiment_batch_texts"


def batches(cluster: Cluster, app: str) -> tuple[float, float, float]:
    """(batches, texts answered, batches of exactly one text) for an application.

    Texts come from the exact counter: Ray exports a histogram's `_sum` from bucket midpoints,
    so only its `_count` and buckets are exact.
    """
    count = cluster.metric(f"{BATCH_TEXTS}_count", application=app)
    texts = cluster.metric("ray_sentiment_texts_total", application=app)
    ones = cluster.metric(f"{BATCH_TEXTS}_bucket", application=app, le="1.0")
    return count, texts, ones


def test_concurrent_requests_are_coalesced(cluster: Cluster) -> None:
    app = cluster.deploy("coalesce", batch={"batch_wait_timeout_s": 0.25})
    responses = burst(app, singles(32))
    assert [r.status_code for r in responses] == [200] * 32
    # The model core's own count is exact; its metrics are exported on their own tick, which
    # can come after the ingress's text counter reads 32.
    made = app.ready()["batches"]
    cluster.wait_for(lambda: batches(cluster, "coalesce")[:2] == (made, 32))
    count, total, ones = batches(cluster, "coalesce")
    assert count < total, "every text ran in a batch of its own"
    assert ones < count, "no batch held more than one text"


def test_batch_knobs_change_on_the_running_replica(cluster: Cluster) -> None:
    app = cluster.deploy("live", batch={"max_batch_texts": 1, "batch_wait_timeout_s": 0.25})
    replica = app.ready()["replica"]
    assert all(r.status_code == 200 for r in burst(app, singles(12)))
    cluster.wait_for(lambda: batches(cluster, "live") == (12, 12, 12))
    count, total, ones = batches(cluster, "live")
    assert count == total == ones == 12  # max_batch_texts=1: one text per batch

    cluster.deploy("live", batch={"max_batch_texts": 64, "batch_wait_timeout_s": 0.25})
    assert app.ready()["replica"] == replica, "the replica restarted instead of reconfiguring"
    assert all(r.status_code == 200 for r in burst(app, singles(12, "again")))
    cluster.wait_for(lambda: batches(cluster, "live")[1] == 24)
    cluster.wait_for(lambda: batches(cluster, "live")[0] > 12)
    count, _, ones = batches(cluster, "live")
    assert count < 24 and ones < count


def test_forward_metrics_describe_the_work(cluster: Cluster) -> None:
    app = cluster.deploy("forwards")
    texts = ["ok", "great phone, fast delivery"]
    encoder = TextEncoder.load(cluster.model_dir, TEST_ARGS["max_seq_len"])
    lengths = encoder.encode(texts)[0].lengths().tolist()
    assert burst(app, [{"texts": texts}])[0].status_code == 200
    # Counted on the loop and published as counters with the gauges, so exact.
    forward_texts = "ray_sentiment_forward_texts_total"
    cluster.wait_for(lambda: cluster.metric(forward_texts, application="forwards") == 2)
    tokens = cluster.metric("ray_sentiment_forward_tokens_total", application="forwards")
    padded = cluster.metric("ray_sentiment_forward_padded_tokens_total", application="forwards")
    assert tokens == sum(lengths)
    multiple = pad_multiple(app.ready()["backend"], "cpu")  # what the served backend pads to
    together = round_up(max(lengths), multiple) * 2
    apart = sum(round_up(n, multiple) for n in lengths)
    assert padded in (together, apart)
    forwards = "ray_sentiment_forward_seconds_count"
    cluster.wait_for(
        lambda: cluster.metric(forwards, application="forwards") == (1 if padded == together else 2)
    )
    assert cluster.metric("ray_sentiment_queue_wait_seconds_count", application="forwards") >= 1
    assert cluster.metric("ray_sentiment_tokenize_seconds_count", application="forwards") >= 1
    cluster.wait_for(
        lambda: cluster.metric("ray_sentiment_model_info", application="forwards") == 1
    )
    info = [
        labels
        for labels, _ in cluster.scrape()["ray_sentiment_model_info"]
        if labels.get("application") == "forwards"
    ]
    assert info[0]["model"] == "tiny" and info[0]["device"] == "cpu"
    assert info[0]["dtype"] == "float32"
    # On CPU the GPU gauges exist and read 0 (documented), so dashboards keep their series.
    assert cluster.metric("ray_sentiment_gpu_memory_allocated_bytes", application="forwards") == 0
    assert "ray_sentiment_gpu_memory_peak_bytes" in cluster.scrape()
    assert "ray_serve_num_http_requests_total" in cluster.scrape()
