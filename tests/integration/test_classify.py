"""The real service over HTTP: answers, order, every kind of bad input, docs and health."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from transformers import AutoTokenizer

from service.model import SentimentModel
from service.probes import ReadyResponse
from service.schemas import RESPONSE_EXAMPLE
from tests.integration.conftest import Cluster, Deployed

pytestmark = pytest.mark.integration

TEXTS = [
    "great phone, fast delivery",
    "broke after a day",
    "the screen is bright and the camera takes lovely photos, highly recommended",
    "ok",
]


@pytest.fixture(scope="module")
def local_model(tiny_model_dir: Path) -> SentimentModel:
    return SentimentModel.load(tiny_model_dir, device="cpu", max_length=32)


def test_multi_text_answers_in_order_and_match_the_model(
    main_app: Deployed, local_model: SentimentModel
) -> None:
    response = main_app.classify({"texts": TEXTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "tiny"
    assert len(body["results"]) == len(TEXTS)
    expected = local_model.classify(TEXTS)
    for result, probs in zip(body["results"], expected, strict=True):
        assert result["probabilities"] == pytest.approx(probs, abs=1e-5)
        assert result["label"] == max(probs, key=probs.__getitem__)
        assert result["score"] == pytest.approx(max(probs.values()), abs=1e-5)
        assert result["truncated"] is False


def test_single_text_form(main_app: Deployed) -> None:
    response = main_app.classify({"text": "great phone"})
    assert response.status_code == 200
    [result] = response.json()["results"]
    assert sum(result["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)


def test_long_token_sequences_are_read_in_windows_and_say_so(main_app: Deployed) -> None:
    response = main_app.classify({"texts": ["great phone " * 30, "ok"]})  # 62 and 3 tokens
    assert response.status_code == 200
    results = response.json()["results"]
    assert [(r["windows"], r["truncated"]) for r in results] == [(3, False), (1, False)]


def test_a_text_the_model_cannot_read_says_so_and_is_counted(
    cluster: Cluster, main_app: Deployed, tiny_model_dir: Path
) -> None:
    unreadable = "ray_sentiment_unreadable_texts_total"
    before = cluster.metric(unreadable, application="main")
    # The tiny model's vocabulary is English: it lacks every Chinese character.
    texts = ["great phone", "质量很好", "great phone, 质量"]
    response = main_app.classify({"texts": texts})
    assert response.status_code == 200, response.text
    hf = AutoTokenizer.from_pretrained(tiny_model_dir)
    shares = [hf.tokenize(t).count(hf.unk_token) / len(hf.tokenize(t)) for t in texts]
    assert shares == [0.0, 1.0, 0.4]
    assert [r["unknown_share"] for r in response.json()["results"]] == shares
    # Only the text over half unknown is counted.
    cluster.wait_for(lambda: cluster.metric(unreadable, application="main") == before + 1)


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"texts": []}, 422, "texts"),
        ({"texts": ["fine", " \n\t "]}, 422, "texts[1]"),
        ({"texts": [""]}, 422, "texts[0]"),
        ({"texts": ["x"] * 9}, 422, "texts"),
        ({"texts": ["x" * 401]}, 422, "texts[0]"),
        ({"texts": [42]}, 422, "texts[0]"),
        ({"texts": "not a list"}, 422, "texts"),
        ({"text": None}, 422, "body"),
        ({"text": "a", "texts": ["b"]}, 422, "body"),
        ({"txt": "typo"}, 422, "txt"),
        (["a list"], 422, "body"),
    ],
)
def test_invalid_json_bodies_get_422_with_field(
    main_app: Deployed, body: object, status: int, field: str
) -> None:
    response = main_app.classify(body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in [d["field"] for d in error["details"]], error


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b"{not json", 400, "bad_request"),
        (b"\xff\xfe\x00garbage", 400, "bad_request"),
        (b"", 400, "bad_request"),
        (json.dumps({"texts": ["y" * 300] * 8}).encode() + b" " * 2000, 413, "payload_too_large"),
        (b'{"text": "awful", "text": "great"}', 422, "validation_error"),  # which one is meant?
    ],
)
def test_undecodable_oversized_or_ambiguous_bodies(
    main_app: Deployed, raw: bytes, status: int, code: str
) -> None:
    response = requests.post(f"{main_app.url}/v1/classify", data=raw, timeout=30)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_oversized_chunked_body_without_length_is_413(main_app: Deployed) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"texts": ["'
        for _ in range(10):
            yield b"z" * 1000
        yield b'"]}'

    response = requests.post(f"{main_app.url}/v1/classify", data=chunks(), timeout=30)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_unknown_route_and_wrong_method_use_the_error_shape(main_app: Deployed) -> None:
    missing = requests.get(f"{main_app.url}/v2/nothing", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = requests.get(f"{main_app.url}/v1/classify", timeout=10)
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    assert wrong.headers["allow"] == "POST"  # HTTP requires a 405 to name what is allowed
    # Not a 307 to an http:// URL (a downgrade behind a TLS-terminating balancer).
    slash = requests.post(f"{main_app.url}/v1/classify/", json={"text": "ok"}, timeout=10)
    assert slash.status_code == 404 and not slash.history
    assert slash.json()["error"]["code"] == "not_found"


def test_health_readiness_and_docs(main_app: Deployed) -> None:
    assert requests.get(f"{main_app.url}/healthz", timeout=10).json() == {"status": "ok"}
    for probe in ("healthz", "readyz"):  # as GET, without the body
        head = requests.head(f"{main_app.url}/{probe}", timeout=10)
        assert head.status_code == 200 and head.content == b""
    ready = requests.get(f"{main_app.url}/readyz", timeout=10)
    assert ready.status_code == 200
    assert ready.json()["model"] == "tiny" and ready.json()["device"] == "cpu"
    ReadyResponse.model_validate(ready.json())  # the answer is what the spec documents
    spec = requests.get(f"{main_app.url}/openapi.json", timeout=10).json()
    body_schema = json.dumps(spec["paths"]["/v1/classify"]["post"]["requestBody"])
    assert '"maxItems": 8' in body_schema and '"maxLength": 400' in body_schema
    assert "429" in spec["paths"]["/v1/classify"]["post"]["responses"]
    # What /docs offers to send ("Try it out") is answered.
    examples = spec["paths"]["/v1/classify"]["post"]["requestBody"]["content"]
    for example in examples["application/json"]["examples"].values():
        sent = requests.post(f"{main_app.url}/v1/classify", json=example["value"], timeout=30)
        texts = example["value"].get("texts") or [example["value"]["text"]]
        assert sent.status_code == 200 and len(sent.json()["results"]) == len(texts)
        # The answer /docs shows has every field a real one has, and no other.
        assert sent.json().keys() == RESPONSE_EXAMPLE.keys()
        assert sent.json()["results"][0].keys() == RESPONSE_EXAMPLE["results"][0].keys()
    docs = requests.get(f"{main_app.url}/docs", timeout=10)
    assert docs.status_code == 200 and "/docs/assets/swagger-ui-bundle.js" in docs.text
    # Served by the ingress itself through Ray Serve (no CDN): tests/unit/test_apidocs.py.
    script = requests.get(f"{main_app.url}/docs/assets/swagger-ui-bundle.js", timeout=10)
    assert script.status_code == 200 and b"SwaggerUIBundle" in script.content
