"""Request parsing: every bad body becomes a 400/422 naming the field and the reason."""

from __future__ import annotations

import codecs
import json

import pytest

from service.errors import BadRequest, ServiceError, ValidationFailed
from service.schemas import ClassifyRequestBase, parse_request, plain_texts, request_model


@pytest.fixture
def model() -> type[ClassifyRequestBase]:
    return request_model(max_texts=3, max_chars=10)


def test_texts_and_text_forms(model: type[ClassifyRequestBase]) -> None:
    assert parse_request(b'{"texts": ["a", "b"]}', model).all_texts() == ["a", "b"]
    assert parse_request(b'{"text": "one"}', model).all_texts() == ["one"]
    body = json.dumps({"text": "很好 ça"}).encode()
    assert parse_request(body, model).all_texts() == ["很好 ça"]


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"texts": []}, "texts", "at least 1 item"),
        ({"texts": ["ok", "   "]}, "texts[1]", "empty or only whitespace"),
        ({"texts": [""]}, "texts[0]", "at least 1 character"),
        ({"texts": ["a", "b", "c", "d"]}, "texts", "at most 3 items"),
        ({"texts": ["x" * 11]}, "texts[0]", "at most 10 characters"),
        ({"text": "x" * 11}, "text", "at most 10 characters"),
        ({"texts": [1]}, "texts[0]", "valid string"),
        ({"texts": "abc"}, "texts", "valid list"),
        ({"text": 5}, "text", "valid string"),
        ({"text": "a", "texts": ["b"]}, "body", "exactly one of"),
        ({}, "body", "exactly one of"),
        ({"texts": ["a"], "lang": "en"}, "lang", "Extra inputs"),
        ([1, 2], "body", "expected an object, got an array"),
        (None, "body", "expected an object, got null"),
    ],
)
def test_invalid_bodies_name_field_and_reason(
    model: type[ClassifyRequestBase], body: object, field: str, reason: str
) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_request(json.dumps(body).encode(), model)
    assert info.value.status == 422
    details = info.value.details
    assert any(d["field"] == field and reason in d["reason"] for d in details), details


@pytest.mark.parametrize(
    ("raw", "message"),
    [(b"{bad", "not valid JSON"), (b"\xff\xfe{}", "not valid UTF-8"), (b"", "not valid JSON"),
     (b'{"text": ' + b"9" * 5000 + b"}", "too many digits")],
)  # fmt: skip
def test_undecodable_bodies_are_400(
    model: type[ClassifyRequestBase], raw: bytes, message: str
) -> None:
    with pytest.raises(BadRequest, match=message) as info:
        parse_request(raw, model)
    assert info.value.status == 400


def test_a_leading_byte_order_mark_is_ignored(model: type[ClassifyRequestBase]) -> None:
    assert parse_request(codecs.BOM_UTF8 + b'{"text": "fine"}', model).all_texts() == ["fine"]
    with pytest.raises(BadRequest, match=r"byte 5\)"):  # counted from the body's start
        parse_request(codecs.BOM_UTF8 + b'{"\xff": 1}', model)
    with pytest.raises(BadRequest, match="not valid JSON"):  # only a leading one
        parse_request(b" " + codecs.BOM_UTF8 + b'{"text": "fine"}', model)


def test_a_body_with_thousands_of_problems_gets_a_short_answer(
    model: type[ClassifyRequestBase],
) -> None:
    body = {"text": "ok"} | {f"field{i}": 1 for i in range(5000)}
    with pytest.raises(ValidationFailed) as info:
        parse_request(json.dumps(body).encode(), model)
    assert "5000 problems, the first 20" in info.value.body()["error"]["message"]
    assert [d["field"] for d in info.value.details] == [f"field{i}" for i in range(20)]


def test_limits_show_in_the_json_schema(model: type[ClassifyRequestBase]) -> None:
    schema = json.dumps(model.model_json_schema())
    assert '"maxItems": 3' in schema and '"maxLength": 10' in schema


def test_errors_are_service_errors(model: type[ClassifyRequestBase]) -> None:
    with pytest.raises(ServiceError):
        parse_request(b"[]", model)


BODIES: list[object] = [
    {"texts": ["a", "b"]},
    {"text": "one"},
    {"text": "很好 ça"},
    {"texts": ["x" * 10]},
    {"texts": []},
    {"texts": ["ok", "   "]},
    {"texts": [""]},
    {"texts": ["a", "b", "c", "d"]},
    {"texts": ["x" * 11]},
    {"text": "x" * 11},
    {"text": "\t\n"},
    {"texts": [1]},
    {"texts": "abc"},
    {"text": None},
    {"texts": None},
    {"text": "a", "texts": None},
    {"text": "a", "texts": ["b"]},
    {},
    {"lang": "en"},
    [1, 2],
    "text",
]


@pytest.mark.parametrize("body", BODIES)
def test_fast_check_accepts_only_what_the_model_accepts(
    model: type[ClassifyRequestBase], body: object
) -> None:
    raw = json.dumps(body, ensure_ascii=False).encode()
    texts = plain_texts(raw, max_texts=3, max_chars=10)
    if texts is not None:
        assert parse_request(raw, model).all_texts() == texts


def test_fast_check_takes_the_ordinary_bodies() -> None:
    for body in ({"texts": ["a", "b"]}, {"text": "one"}, {"text": "很好 ça"}):
        assert plain_texts(json.dumps(body).encode(), 3, 10) is not None
    assert plain_texts(b"\xff", 3, 10) is None
    assert plain_texts(b"[" * 5000, 3, 10) is None


def test_deeply_nested_json_is_a_400() -> None:
    with pytest.raises(BadRequest, match="nested too deeply"):
        parse_request(b"[" * 5000 + b"]" * 5000, request_model(3, 10))


INVISIBLE = [
    "\u200b",
    "\u0000",
    "\u200b\u200d ",
    "\ufeff\u2060",
    "\u00a0\u3000",
    "\x1b\x7f",
    "\ue000",
]


@pytest.mark.parametrize("text", INVISIBLE)
def test_invisible_texts_are_refused_like_blank_ones(
    model: type[ClassifyRequestBase], text: str
) -> None:
    raw = json.dumps({"texts": ["fine", text]}).encode()
    assert plain_texts(raw, max_texts=3, max_chars=10) is None
    with pytest.raises(ValidationFailed) as info:
        parse_request(raw, model)
    [detail] = info.value.details
    assert detail["field"] == "texts[1]" and "zero-width" in detail["reason"]


@pytest.mark.parametrize("text", ["a\u200b", "\u200bok\n", "\u00e9\u0301", "🙂", "很好", "1"])
def test_texts_with_something_visible_pass_both_checks(
    model: type[ClassifyRequestBase], text: str
) -> None:
    raw = json.dumps({"text": text}).encode()
    assert plain_texts(raw, max_texts=3, max_chars=10) == [text]
    assert parse_request(raw, model).all_texts() == [text]


# JSON escapes that decode to half a surrogate pair: an emoji cut in two, its halves swapped.
LONE_SURROGATES = ["\\ud83d", "ok \\ude00", "\\ude00\\ud83d", "\\ud83d\\ud83d"]


@pytest.mark.parametrize("escape", LONE_SURROGATES)
def test_half_a_surrogate_pair_is_422_not_a_tokenizer_failure(
    model: type[ClassifyRequestBase], escape: str
) -> None:
    raw = b'{"texts": ["fine", "' + escape.encode() + b'"]}'
    # The fast check used to pass it, and the tokenizer then failed the request with a 500.
    assert plain_texts(raw, max_texts=3, max_chars=10) is None
    with pytest.raises(ValidationFailed) as info:
        parse_request(raw, model)
    [detail] = info.value.details
    assert detail["field"] == "texts[1]" and "surrogate pair" in detail["reason"]
    assert detail["reason"].startswith("text is not valid Unicode")


def test_half_a_surrogate_pair_in_a_key_blames_the_key(model: type[ClassifyRequestBase]) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_request(b'{"texts": ["fine"], "\\ud83d": 1}', model)
    [detail] = info.value.details
    assert detail["field"] == "body" and detail["reason"].startswith("a key is not valid Unicode")


def test_a_whole_surrogate_pair_is_one_character(model: type[ClassifyRequestBase]) -> None:
    raw = b'{"text": "ok \\ud83d\\ude00"}'
    assert plain_texts(raw, max_texts=3, max_chars=10) == ["ok \U0001f600"]
    assert parse_request(raw, model).all_texts() == ["ok \U0001f600"]


@pytest.mark.parametrize("escape", [True, False])
def test_the_character_limit_counts_characters_not_bytes(escape: bool) -> None:
    limit = 20_000
    model = request_model(max_texts=3, max_chars=limit)
    fits = json.dumps({"text": "好" * limit}, ensure_ascii=escape).encode()  # 60 kB or more
    assert plain_texts(fits, 3, limit) == ["好" * limit]
    assert parse_request(fits, model).all_texts() == ["好" * limit]
    over = json.dumps({"text": "好" * (limit + 1)}, ensure_ascii=escape).encode()
    assert plain_texts(over, 3, limit) is None
    with pytest.raises(ValidationFailed, match="validation"):
        parse_request(over, model)


@pytest.mark.parametrize(
    ("raw", "key"),
    [(b'{"text": "awful", "text": "great"}', '"text"'),
     (b'{"texts": ["a"], "texts": ["b"]}', '"texts"'),
     (b'{"text": "ok", "x": {"y": 1, "y": 2}}', '"y"'),
     (b'{"' + b"k" * 100 + b'": 1, "' + b"k" * 100 + b'": 2}', '"kkk')],
)  # fmt: skip
def test_a_key_named_twice_is_422_not_one_of_its_values(
    model: type[ClassifyRequestBase], raw: bytes, key: str
) -> None:
    # Parsers disagree on which value wins: answering one of them would label a text the
    # client may not have meant, and one a proxy in front may have checked the other.
    assert plain_texts(raw, 100, 1000) is None  # the fast check leaves it to full validation
    with pytest.raises(ValidationFailed) as info:
        parse_request(raw, model)
    [detail] = info.value.details
    assert detail["field"] == "body" and detail["reason"].startswith(f"the key {key}")
    assert len(detail["reason"]) < 80
