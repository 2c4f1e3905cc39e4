"""A hardened application over real HTTP: API keys, a short deadline, and injected faults.

One application carries them all, so the suite pays for one deployment: its forwards raise
when they hold 3 texts or more (`fault_forward_min_texts`) and hang when they hold a text of
32 tokens (`fault_hang_min_tokens`), and its health check looks for a stall after 2 s. The
hang test runs last in this module: it has the model replica replaced.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from service.auth import KEYS_POLL_S
from service.model import SentimentModel
from tests.integration.conftest import Cluster, Deployed
from tests.integration.load import burst

pytestmark = pytest.mark.integration

KEY = "integration-test-key"
HASHED_KEY = "second-client-key"  # its file line holds only its SHA-256
DEADLINE_S = 5.0
LONG_TEXT = "great phone " * 30  # windows of max_seq_len (32) tokens: the hang fault's size


@dataclass
class Keyed(Deployed):
    """An application whose classify calls carry a valid API key."""

    def classify(self, body: object, timeout: float = 30) -> requests.Response:
        headers = {"authorization": f"Bearer {KEY}"}
        return requests.post(f"{self.url}/v1/classify", json=body, headers=headers, timeout=timeout)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "api-keys"
    digest = hashlib.sha256(HASHED_KEY.encode()).hexdigest()
    path.write_text(f"# test clients\n{KEY}\nsha256:{digest}\n")
    return path


@pytest.fixture(scope="module")
def app(cluster: Cluster, keys: Path) -> Iterator[Keyed]:
    deployed = cluster.deploy(
        "hardened",
        batch={"batch_wait_timeout_s": 0.3},  # a burst's texts meet in one batch
        api_keys_file=str(keys),
        request_timeout_s=DEADLINE_S,
        fault_forward_min_texts=3,
        fault_hang_min_tokens=32,
        health_stall_s=2.0,
        health_check_period_s=1.0,
        health_check_timeout_s=5.0,
        graceful_shutdown_timeout_s=1.0,
    )
    yield Keyed(deployed.name, deployed.url)
    cluster.remove("hardened")


def test_api_keys_guard_classify_only(app: Keyed) -> None:
    url, body = f"{app.url}/v1/classify", {"text": "great phone"}
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": KEY}):
        response = requests.post(url, json=body, headers=headers, timeout=30)
        assert response.status_code == 401, headers
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
        assert KEY not in response.text
    for key in (KEY, HASHED_KEY):
        headers = {"authorization": f"Bearer {key}"}
        response = requests.post(url, json=body, headers=headers, timeout=30)
        assert response.status_code == 200 and len(response.json()["results"]) == 1
    assert requests.get(f"{app.url}/healthz", timeout=10).status_code == 200
    assert requests.get(f"{app.url}/readyz", timeout=10).status_code == 200


def test_a_rotated_keys_file_is_taken_without_a_restart(
    cluster: Cluster, app: Keyed, keys: Path
) -> None:
    def status(key: str) -> int:
        headers = {"authorization": f"Bearer {key}"}
        url = f"{app.url}/v1/classify"
        return requests.post(url, json={"text": "fine"}, headers=headers, timeout=30).status_code

    def swap_in(text: str) -> None:  # as a Secret volume updates: a new file under the name
        new = keys.with_name("api-keys.new")
        new.write_text(text)
        new.replace(keys)

    replica, original = app.ready()["ingress_replica"], keys.read_text()
    assert status("rotated-in") == 401
    swap_in(original + "rotated-in\n")
    try:
        cluster.wait_for(lambda: status("rotated-in") == 200, timeout=30)
        swap_in("a key with spaces\n")  # refused: the keys in force stay
        time.sleep(3 * KEYS_POLL_S)
        assert status("rotated-in") == 200 and status(KEY) == 200
        assert app.ready()["ingress_replica"] == replica
    finally:
        swap_in(original)
    cluster.wait_for(lambda: status("rotated-in") == 401, timeout=30)
    assert status(KEY) == 200


def test_a_slow_body_gets_408_within_the_deadline(cluster: Cluster, app: Keyed) -> None:
    body = json.dumps({"text": "great phone, and then some more words"}).encode()
    head = (
        f"POST /{app.name}/v1/classify HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", cluster.http_port), timeout=10) as sock:
        sock.sendall(head)
        start = time.monotonic()
        answer = b""
        for byte in body[:20]:  # a byte a second: the body would take 20 s
            sock.sendall(bytes([byte]))
            sock.settimeout(1.0)
            try:
                answer = sock.recv(4096)
            except TimeoutError:
                continue
            break
        waited = time.monotonic() - start
        sock.settimeout(5.0)
        for _ in range(10):  # the JSON body may come in its own segments
            if answer.endswith(b"}}") or not (more := sock.recv(4096)):
                break
            answer += more
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
    assert waited < DEADLINE_S + 3.0  # the deadline, plus the pacing and scheduling slack


def test_forwards_failing_above_a_size_lose_no_text(
    cluster: Cluster, app: Keyed, tiny_model_dir: Path
) -> None:
    texts = [f"review {i}: {'great' if i % 2 else 'awful'} phone" for i in range(8)]
    response = app.classify({"texts": texts})  # 8 texts fail, then 4, then 2 run
    assert response.status_code == 200, response.text
    local = SentimentModel.load(tiny_model_dir, device="cpu", max_length=32).classify(texts)
    for result, probs in zip(response.json()["results"], local, strict=True):
        assert result["probabilities"] == pytest.approx(probs, abs=1e-5)  # each in its place

    bodies: list[object] = [
        {"texts": [f"client {i} text {j}" for j in range(1 + i % 3)]} for i in range(12)
    ]
    responses = burst(app, bodies)  # 24 texts from 12 clients in one batch
    assert [r.status_code for r in responses] == [200] * len(bodies)
    for body, r in zip(bodies, responses, strict=True):
        assert len(r.json()["results"]) == len(body["texts"])  # type: ignore[index]
    cluster.wait_for(
        lambda: cluster.metric(
            "ray_sentiment_forward_failures_total", application=app.name, reason="error"
        ) >= 3
    )  # fmt: skip


def _replica(app: Deployed) -> str | None:
    try:
        replica: str = app.ready()["replica"]
        return replica
    except requests.RequestException:
        return None  # not ready: the replica is being replaced


def test_a_hung_forward_gets_the_replica_replaced(cluster: Cluster, app: Keyed) -> None:
    first = _replica(app)
    assert first is not None
    t0 = time.monotonic()
    hung = app.classify({"texts": [LONG_TEXT]})  # its forward never ends
    assert hung.status_code == 504 and time.monotonic() - t0 < DEADLINE_S + 5  # deadline held
    cluster.wait_for(lambda: _replica(app) not in (None, first), timeout=120)
    after = app.classify({"texts": ["the new replica", "answers"]})
    assert after.status_code == 200 and len(after.json()["results"]) == 2
