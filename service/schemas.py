"""Request and response models. Limits come from Settings, so the request model is built from it."""

from __future__ import annotations

import codecs
import json
import unicodedata
from functools import lru_cache
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    create_model,
    model_validator,
)

from service.errors import BadRequest, ValidationFailed

# A body with thousands of unknown fields or bad texts would otherwise get an answer several
# times its own size, each detail saying the same.
MAX_DETAILS = 20
BLANK_REASON = "text is empty or only whitespace, control or zero-width characters"
# What pydantic's "unable to parse raw data as a unicode string" means for a string that JSON
# decoded: the one way such a string can fail to be text.
SURROGATE_REASON = (
    "{} is not valid Unicode: it holds half of a UTF-16 surrogate pair (a \\ud800-\\udfff "
    "escape without its other half, e.g. an emoji cut in two)"
)


class DuplicateKey(ValueError):
    """A JSON object names a key twice: parsers disagree on which value wins (Python's keeps
    the last, others the first), so the body is refused rather than read one way."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return data


# One decoder, built once: as fast as json.loads on an ordinary body (measured), which makes
# a decoder of its own whenever it is given a hook.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


def is_blank(text: str) -> bool:
    """True when no character of `text` can be seen: only whitespace, control, format
    (zero-width), separator, private-use or unassigned characters. Such a text carries nothing
    to classify, yet the model would still give it a confident label."""
    if text.isprintable():  # the usual case: every character visible, or an ASCII space
        return text.isspace() or not text
    return not any(unicodedata.category(c)[0] in "LMNPS" for c in text)


def _has_lone_surrogate(text: str) -> bool:
    """True when `text` holds half of a UTF-16 surrogate pair. JSON can carry one (`"\\ud83d"`,
    an emoji cut in two by a client that truncates UTF-16 strings), but it is no Unicode
    character: the request model refuses it, and the tokenizer would fail the request."""
    if text.isprintable():  # surrogates are not printable: the usual text stops here
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _not_blank(text: str) -> str:
    if is_blank(text):
        raise ValueError(BLANK_REASON)
    return text


class ClassifyRequestBase(BaseModel):
    """Either `texts` (a list) or `text` (one string), never both."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="after")
    def _one_of(self) -> ClassifyRequestBase:
        texts, text = getattr(self, "texts", None), getattr(self, "text", None)
        if (texts is None) == (text is None):
            raise ValueError("give exactly one of 'texts' (a list of strings) or 'text'")
        return self

    def all_texts(self) -> list[str]:
        """The texts in request order."""
        texts: list[str] | None = getattr(self, "texts", None)
        return texts if texts is not None else [getattr(self, "text")]  # noqa: B009


@lru_cache(maxsize=8)
def request_model(max_texts: int, max_chars: int) -> type[ClassifyRequestBase]:
    """A request model with the configured limits (also what /docs shows)."""
    text_type = Annotated[
        StrictStr, Field(min_length=1, max_length=max_chars), AfterValidator(_not_blank)
    ]
    return create_model(
        "ClassifyRequest",
        __base__=ClassifyRequestBase,
        texts=(list[text_type] | None, Field(None, min_length=1, max_length=max_texts)),  # type: ignore[valid-type]
        text=(text_type | None, None),  # type: ignore[valid-type]
    )


class TextResult(BaseModel):
    """The answer for one text."""

    label: str = Field(description="The most probable label.")
    score: float = Field(description="Probability of `label`.")
    probabilities: dict[str, float] = Field(description="Probability of every label.")
    truncated: bool = Field(
        description="True when part of the text was not read: cut to max_seq_len tokens "
        "(long_texts=truncate), or longer than max_windows windows (its middle is dropped)."
    )
    windows: int = Field(
        ge=1,
        description="Windows of at most max_seq_len tokens the text was read in; their "
        "probabilities are averaged, weighted by window length. 1 for a text that fits.",
    )
    unknown_share: float = Field(
        ge=0,
        le=1,
        description="Share of the text's tokens the model's vocabulary lacks (its unknown "
        "token). Near 0 for a text in the model's languages; a high share (e.g. Chinese "
        "sent to an English model) means the label is a guess from what little it could read; "
        "1 when the tokenizer kept nothing of the text.",
    )


# What /docs shows for a 200: the answer to its first request example.
RESPONSE_EXAMPLE: dict[str, Any] = {
    "model": "default",
    "results": [
        {"label": "positive", "score": 0.98, "probabilities": {"negative": 0.02, "positive": 0.98},
         "truncated": False, "windows": 1, "unknown_share": 0.0},
        {"label": "negative", "score": 0.95, "probabilities": {"negative": 0.95, "positive": 0.05},
         "truncated": False, "windows": 1, "unknown_share": 0.0},
    ],
}  # fmt: skip


class ClassifyResponse(BaseModel):
    """One result per input text, in input order."""

    model_config = ConfigDict(json_schema_extra={"examples": [RESPONSE_EXAMPLE]})

    model: str
    results: list[TextResult]


class ErrorDetail(BaseModel):
    field: str
    reason: str


class ErrorBody(BaseModel):
    code: str
    message: str
    details: list[ErrorDetail] = []


class ErrorResponse(BaseModel):
    """The one error shape every non-2xx answer uses."""

    error: ErrorBody


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("function-after[_not_blank()]", "constrained-str", "str"):
            continue  # pydantic's internal validator names mean nothing to a client
        else:
            path += f".{part}" if path else str(part)
    return path or "body"


def _reason(kind: str, message: str, field: str) -> str:
    if kind == "string_unicode":  # a key has no field of its own: it is the body's
        return SURROGATE_REASON.format("a key" if field == "body" else "text")
    return message.removeprefix("Value error, ")


def parse_request(raw: bytes, model: type[ClassifyRequestBase]) -> ClassifyRequestBase:
    """Decode and validate a body: 400 for bytes/JSON problems, 422 with field and reason."""
    # RFC 8259 lets a parser ignore a leading byte order mark; some clients send one.
    body = raw.removeprefix(codecs.BOM_UTF8)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = exc.start + len(raw) - len(body)
        raise BadRequest(f"body is not valid UTF-8 (byte {start})") from None
    try:
        data: Any = _DECODER.decode(text)
    except DuplicateKey as exc:
        key = json.dumps(exc.key)
        key = key if len(key) <= 40 else key[:36] + '..."'
        raise ValidationFailed(
            "body names a key twice",
            [{"field": "body", "reason": f"the key {key} appears more than once"}],
        ) from None
    except json.JSONDecodeError as exc:
        raise BadRequest(f"body is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise BadRequest("body is not valid JSON: nested too deeply") from None
    except ValueError:  # the one other refusal: an integer longer than Python reads
        raise BadRequest("body holds an integer with too many digits to read") from None
    if not isinstance(data, dict):
        raise ValidationFailed(
            "body must be a JSON object",
            [{"field": "body", "reason": f"expected an object, got {_json_type(data)}"}],
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        details = []
        for e in errors[:MAX_DETAILS]:
            field = _field_path(e["loc"])
            details.append({"field": field, "reason": _reason(e["type"], e["msg"], field)})
        message = "request failed validation"
        if len(errors) > MAX_DETAILS:
            message += f": {len(errors)} problems, the first {MAX_DETAILS} in details"
        raise ValidationFailed(message, details) from None


def _json_type(value: object) -> str:
    """What JSON calls the type of a decoded value."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), "a number")


def plain_texts(raw: bytes, max_texts: int, max_chars: int) -> list[str] | None:
    """The texts of a plainly valid body (`{"text": s}` or `{"texts": [s, ...]}` within the
    limits), checked without building a model; None when `parse_request` must decide.

    Everything accepted here is accepted by the request model too (same limits, same blank
    rule), so the fast check changes no answer, only what an ordinary request costs.
    """
    try:
        data = _DECODER.decode(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # DuplicateKey is a ValueError
        return None
    if type(data) is not dict or len(data) != 1:
        return None
    texts = [data["text"]] if "text" in data else data.get("texts")
    if type(texts) is not list or not 0 < len(texts) <= max_texts:
        return None
    for text in texts:
        if type(text) is not str or not 0 < len(text) <= max_chars or is_blank(text):
            return None
        if _has_lone_surrogate(text):
            return None
    return texts
