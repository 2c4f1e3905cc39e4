"""API keys: the file format, the bearer check, and nothing of a key in errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from service.auth import ApiKeys, KeysFileError, parse_keys
from service.errors import Unauthorized

SECRET = "s3cret-key-for-tests"
HASHED = "another-key"


def keys_file(tmp_path: Path) -> Path:
    digest = hashlib.sha256(HASHED.encode()).hexdigest()
    path = tmp_path / "keys"
    path.write_text(f"# clients\n{SECRET}\n\n  sha256:{digest.upper()}  \n")
    return path


def request(authorization: bytes | None) -> dict[str, object]:
    headers = [(b"authorization", authorization)] if authorization is not None else []
    return {"type": "http", "headers": [(b"host", b"x"), *headers]}


def test_plain_and_hashed_keys_let_in(tmp_path: Path) -> None:
    keys = ApiKeys.load(keys_file(tmp_path))
    assert keys.enabled
    keys.check(request(b"Bearer " + SECRET.encode()))
    keys.check(request(b"bearer " + HASHED.encode()))


@pytest.mark.parametrize(
    "authorization",
    [None, b"", b"Bearer", b"Bearer wrong", b"Basic " + SECRET.encode(), SECRET.encode(),
     b"Bearer sha256:" + hashlib.sha256(HASHED.encode()).hexdigest().encode()],
)  # fmt: skip
def test_missing_or_wrong_keys_are_401(tmp_path: Path, authorization: bytes | None) -> None:
    keys = ApiKeys.load(keys_file(tmp_path))
    with pytest.raises(Unauthorized) as info:
        keys.check(request(authorization))
    assert info.value.status == 401 and info.value.headers == {"WWW-Authenticate": "Bearer"}
    assert SECRET not in str(info.value.body())


def test_without_a_keys_file_everyone_is_let_in() -> None:
    keys = ApiKeys.load(None)
    assert not keys.enabled
    keys.check(request(None))


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "no key"), ("# only a comment\n", "no key"), ("sha256:abc\n", "64 hex"),
     ("two words\n", "spaces"), ("sha256:" + "g" * 64, "64 hex")],
)  # fmt: skip
def test_malformed_files_are_refused_without_echoing_lines(text: str, message: str) -> None:
    with pytest.raises(KeysFileError, match=message) as info:
        parse_keys(text)
    assert "words" not in str(info.value)


def test_an_unreadable_file_names_the_file_not_its_content(tmp_path: Path) -> None:
    with pytest.raises(KeysFileError, match="cannot read"):
        ApiKeys.load(tmp_path / "missing")
