"""API keys: the file format, the bearer check, and nothing of a key in errors."""

from __future__ import annotations

import asyncio
import hashlib
import logging
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


def test_a_keys_file_saved_with_a_byte_order_mark_and_crlf_lets_its_keys_in(
    tmp_path: Path,
) -> None:
    path = tmp_path / "keys"
    path.write_bytes(b"\xef\xbb\xbf" + f"{SECRET}\r\n{HASHED}\r\n".encode())
    keys = ApiKeys.load(path)
    keys.check(request(b"Bearer " + SECRET.encode()))
    keys.check(request(b"Bearer " + HASHED.encode()))


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


def rotate(path: Path, text: str) -> None:
    """A new version as a Secret volume makes one: a new file swapped in under the name."""
    new = path.with_name(path.name + ".new")
    new.write_text(text)
    new.replace(path)


def test_a_rotated_keys_file_is_taken_without_a_restart(tmp_path: Path) -> None:
    path = keys_file(tmp_path)
    keys = ApiKeys.load(path)
    assert keys.refresh() == "unchanged"
    rotate(path, "rotated-key\n")
    assert keys.refresh() == "taken" and keys.refused is None
    assert keys.valid(b"rotated-key") and not keys.valid(SECRET.encode())
    assert keys.refresh() == "unchanged"


@pytest.mark.parametrize("text", [None, "", "a key with spaces\n"])
def test_a_bad_new_version_is_refused_and_the_keys_in_force_stay(
    tmp_path: Path, text: str | None
) -> None:
    path = keys_file(tmp_path)
    keys = ApiKeys.load(path)
    if text is None:
        path.unlink()  # mid-swap, or deleted
    else:
        rotate(path, text)
    assert keys.refresh() == "refused"
    assert keys.valid(SECRET.encode()) and keys.refused is not None
    assert "a key with" not in keys.refused  # says which line, never what it holds
    assert keys.refresh() == "unchanged"  # refused once a version, not at every look
    rotate(path, f"{SECRET}\nanother\n")
    assert keys.refresh() == "taken" and keys.refused is None and keys.valid(b"another")


def test_the_watch_takes_new_versions_and_logs_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("service.auth.KEYS_POLL_S", 0.01)
    path = keys_file(tmp_path)
    keys = ApiKeys.load(path)

    async def run() -> None:
        watch = asyncio.create_task(keys.watch())
        rotate(path, "rotated-key\n")
        while not keys.valid(b"rotated-key"):
            await asyncio.sleep(0.01)
        rotate(path, "bad key\n")
        while keys.refused is None:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # several more looks at the same bad version
        watch.cancel()

    with caplog.at_level(logging.INFO, logger="ray.serve"):
        asyncio.run(run())
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "API keys file changed: 1 keys in force"
    assert [m for m in messages if "refused" in m] == [messages[1]]  # logged once
    assert not any("rotated-key" in m or "bad key" in m for m in messages)
