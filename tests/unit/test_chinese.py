"""Chinese text on a tiny XLM-R-style model: in-process answers, token truncation, char limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.encoding import TextEncoder
from service.errors import ValidationFailed
from service.model import SentimentModel
from service.schemas import parse_request, plain_texts, request_model

TEXTS = ["手机质量很好，非常满意。", "服务很差，失望。", "great phone"]


def test_chinese_texts_get_distinct_probabilities(tiny_multilingual_dir: Path) -> None:
    model = SentimentModel.load(tiny_multilingual_dir, device="cpu", max_length=32)
    assert model.name == "tiny-中文"
    results = model.classify(TEXTS)
    assert [sorted(r) for r in results] == [["negative", "positive"]] * 3
    for probs in results:
        assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5)
    assert results[0]["positive"] != pytest.approx(results[1]["positive"], abs=1e-7)


def test_chinese_is_cut_by_tokens_with_the_xlmr_specials(tiny_multilingual_dir: Path) -> None:
    encoder = TextEncoder.load(tiny_multilingual_dir, 16)
    long_text = "手机质量很好" * 10  # 60 characters, 30 pieces (手机 / 质量 / 很 / 好 ...)
    packed, truncated = encoder.encode([long_text, TEXTS[0]])
    assert truncated == [True, False]
    cut = packed.row(0).tolist()
    assert len(cut) == 16 and cut[0] == 0 and cut[-1] == 2  # <s> ... </s>
    assert 3 not in packed.row(1).tolist()  # every character of the short text is known


def test_character_limits_count_characters_not_bytes() -> None:
    ten = "很" * 10  # 10 characters, 30 bytes of UTF-8
    model = request_model(4, 10)
    body = json.dumps({"texts": [ten]}, ensure_ascii=False).encode("utf-8")
    assert parse_request(body, model).all_texts() == [ten]
    assert plain_texts(body, 4, 10) == [ten]
    too_long = json.dumps({"texts": [ten + "好"]}, ensure_ascii=False).encode("utf-8")
    assert plain_texts(too_long, 4, 10) is None
    with pytest.raises(ValidationFailed):
        parse_request(too_long, model)
