"""Optional API keys for the classify route: `Authorization: Bearer <key>`.

The keys file (`SENTIMENT_API_KEYS_FILE`, mounted from a Secret in Kubernetes) holds one key a
line, either plain or as `sha256:<64 hex digits>` of the key; blank lines and lines starting
with `#` are skipped. Only SHA-256 digests are kept in memory, and a presented key is compared
with every digest in constant time, so neither timing nor a memory dump gives a key away.
Keys are never logged and never reach metrics.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from starlette.types import Scope

from service.errors import Unauthorized

PREFIX = "sha256:"


class KeysFileError(ValueError):
    """The keys file cannot be read or has a malformed line (the line is not echoed)."""


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def parse_keys(text: str) -> list[bytes]:
    """SHA-256 digests of the keys in a keys file's text."""
    digests = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(PREFIX):
            hexdigest = line[len(PREFIX) :].strip().lower()
            if len(hexdigest) != 64 or any(c not in "0123456789abcdef" for c in hexdigest):
                raise KeysFileError(f"line {number}: a sha256: entry needs 64 hex digits")
            digests.append(bytes.fromhex(hexdigest))
        elif any(c.isspace() for c in line):
            raise KeysFileError(f"line {number}: a key cannot contain spaces")
        else:
            digests.append(_digest(line.encode()))
    if not digests:
        raise KeysFileError("the file holds no key, so no client could ever be let in")
    return digests


class ApiKeys:
    """Checks a request's bearer key; with no keys configured, every request passes."""

    def __init__(self, digests: list[bytes]) -> None:
        self.digests = digests

    @classmethod
    def load(cls, path: Path | None) -> ApiKeys:
        """Keys from `path`; None: authentication is off."""
        if path is None:
            return cls([])
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise KeysFileError(f"cannot read API keys file {path}: {type(exc).__name__}") from None
        try:
            return cls(parse_keys(text))
        except KeysFileError as exc:
            raise KeysFileError(f"API keys file {path}: {exc}") from None

    @property
    def enabled(self) -> bool:
        """Whether requests need a key."""
        return bool(self.digests)

    def valid(self, key: bytes) -> bool:
        """Whether `key` is one of the keys, in time that does not depend on which one."""
        presented = _digest(key)
        found = False
        for digest in self.digests:  # no early exit: every digest is compared
            found |= hmac.compare_digest(presented, digest)
        return found

    def check(self, scope: Scope) -> None:
        """Raise Unauthorized (401) unless the request carries a valid bearer key."""
        if not self.digests:
            return
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, key = value.partition(b" ")
                if scheme.lower() == b"bearer" and self.valid(key.strip()):
                    return
                raise Unauthorized("the API key is not valid")
        raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
