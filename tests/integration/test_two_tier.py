"""The two-tier path: ingress replicas coalesce requests into calls to one model replica.

Proven from the exported metrics: the ingress's `call_texts` histogram (by replica) and the
model replica's `batch_texts` histogram.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from service.model import SentimentModel
from tests.integration.conftest import Cluster
from tests.integration.load import burst

pytestmark = pytest.mark.integration
CALLS = "ray_sentiment_call_texts"
BATCHES = "ray_sentiment_batch_texts"


def calls_by_replica(cluster: Cluster, app: str) -> dict[str, float]:
    """Model calls sent by each ingress replica of `app`."""
    return {
        labels["replica"]: value
        for labels, value in cluster.scrape(CALLS).get(f"{CALLS}_count", [])
        if labels.get("application") == app and value > 0
    }


def forward_processes(app: str = "tiers") -> list[int]:
    """Live forward processes started by `app`'s model replica (unit tests start others)."""
    found = subprocess.run(["pgrep", "-f", "service.forwardproc"], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split() if f"ServeReplica:{app}:" in _parent(pid)]


def _parent(pid: str) -> str:
    """The command line of a process's parent ("" once either has ended)."""
    try:
        ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        return Path(f"/proc/{ppid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_texts_from_several_ingress_replicas_share_one_model_batch(
    cluster: Cluster, tiny_model_dir: Path
) -> None:
    # An idle model waits 1 s for company, and each ingress may keep every request's call in
    # flight at once: all calls of the burst join the first batch. Forwards run in a forward
    # process, as on a GPU (the other apps here run them in a thread). The deadline leaves room
    # for the forward process's reload below: on a busy 2-core machine it outlasted the
    # default 10 s, and the requests that waited for it got 504.
    app = cluster.deploy(
        "tiers",
        batch={"batch_wait_timeout_s": 1.0},
        ingress_replicas=2,
        ingress_calls_in_flight=16,
        forward_in="process",
        request_timeout_s=60.0,
    )
    assert app.ready()["forward_in"] == "process"
    assert forward_processes(), "no forward process runs"
    bodies: list[object] = [{"text": f"review number {i}, arrived fast"} for i in range(16)]
    responses = burst(app, bodies)
    assert [r.status_code for r in responses] == [200] * 16

    cluster.wait_for(lambda: cluster.metric("ray_sentiment_texts_total", application="tiers") == 16)
    cluster.wait_for(lambda: cluster.metric(f"{BATCHES}_count", application="tiers") >= 1)
    senders = calls_by_replica(cluster, "tiers")
    assert len(senders) == 2, f"calls came from {sorted(senders)}, not from both ingress replicas"
    assert cluster.metric(f"{BATCHES}_count", application="tiers") == 1
    assert cluster.metric(f"{BATCHES}_bucket", application="tiers", le="8.0") == 0

    # Coalesced or not, each answer is the model's own, in order.
    local = SentimentModel.load(tiny_model_dir, device="cpu", max_length=32)
    expected = local.classify([body["text"] for body in bodies])  # type: ignore[index]
    for response, probs in zip(responses, expected, strict=True):
        [result] = response.json()["results"]
        assert result["probabilities"] == pytest.approx(probs, abs=1e-5)

    # A forward process killed between forwards is replaced before the next: no request fails.
    [child] = forward_processes()
    os.kill(child, signal.SIGKILL)
    again = burst(app, bodies[:4])
    assert [r.status_code for r in again] == [200] * 4
    for response, probs in zip(again, expected, strict=False):
        assert response.json()["results"][0]["probabilities"] == pytest.approx(probs, abs=1e-5)
    assert forward_processes() and child not in forward_processes()

    # Shutting the application down ends its forward process too.
    cluster.remove("tiers")
    cluster.wait_for(lambda: not forward_processes(), timeout=60)


def test_bad_requests_never_reach_the_model_replica(cluster: Cluster) -> None:
    app = cluster.deploy("gate")
    bad: list[object] = [{"texts": []}, {"text": "   "}, {"texts": ["ok", 3]}, {"txt": "ok"}]
    assert [r.status_code for r in burst(app, bad)] == [422] * len(bad)
    assert app.classify({"text": "fine"}).status_code == 200
    cluster.wait_for(lambda: cluster.metric(f"{BATCHES}_count", application="gate") == 1)
    # The ingress replica exports its metrics on its own clock, apart from the model replica's.
    cluster.wait_for(lambda: cluster.metric(f"{CALLS}_count", application="gate") >= 1)
    # One call and one batch, holding the one valid text; the model saw nothing else.
    assert cluster.metric(f"{CALLS}_count", application="gate") == 1
    assert cluster.metric(f"{CALLS}_bucket", application="gate", le="1.0") == 1
    assert cluster.metric("ray_sentiment_queue_wait_seconds_count", application="gate") == 1
    cluster.wait_for(
        lambda: cluster.metric("ray_sentiment_rejections_total", application="gate") == len(bad)
    )
