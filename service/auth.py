"""Optional API keys for the classify route: `Authorization: Bearer <key>`.

The keys file (`SENTIMENT_API_KEYS_FILE`, mounted from a Secret in Kubernetes) holds one key a
line, either plain or as `sha256:<64 hex digits>` of the key; blank lines and lines starting
with `#` are skipped. Only SHA-256 digests are kept in memory, and a presented key is compared
with every digest in constant time, so neither timing nor a memory dump gives a key away.
Keys are never logged and never reach metrics. The file is watched: a rotated Secret's new
keys are taken within KEYS_POLL_S, without a restart; a new version that cannot be read or
parsed is refused, and the keys in force stay.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
from pathlib import Path
from typing import Literal

from starlette.types import Scope

from service.errors import Unauthorized
from service.textfile import TextFileError, read_text

PREFIX = "sha256:"
# How often the keys file is looked at (a stat); a Secret's update takes up to a minute or so
# to reach the pods anyway.
KEYS_POLL_S = 2.0
logger = logging.getLogger("ray.serve")


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


def _read(path: Path) -> list[bytes]:
    try:
        # read_text drops an editor's byte order mark, which would otherwise join the first
        # key, so that it matched no client and nothing said why.
        text = read_text(path)
    except TextFileError as exc:  # names the file and a line, never a line's content
        raise KeysFileError(f"cannot read API keys file {exc}") from None
    try:
        return parse_keys(text)
    except KeysFileError as exc:
        raise KeysFileError(f"API keys file {path}: {exc}") from None


def _stamp(path: Path) -> tuple[int, ...] | None:
    """What tells a new version of the file: a Secret's update swaps a symlink to a new file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class ApiKeys:
    """Checks a request's bearer key; with no keys configured, every request passes."""

    def __init__(
        self, digests: list[bytes], path: Path | None = None, seen: tuple[int, ...] | None = None
    ) -> None:
        self.digests = digests
        self.path = path  # watched for new versions when set
        self.seen = seen  # the version last looked at (service.auth._stamp)
        self.refused: str | None = None  # why the file's latest version was not taken

    @classmethod
    def load(cls, path: Path | None) -> ApiKeys:
        """Keys from `path`; None: authentication is off."""
        if path is None:
            return cls([])
        stamp = _stamp(path)  # before reading: a change during the read is seen next time
        return cls(_read(path), path, stamp)

    def refresh(self) -> Literal["unchanged", "taken", "refused"]:
        """Read the file again if it changed since it was last looked at; one that cannot be
        taken leaves the keys in force and says why in `refused`."""
        stamp = _stamp(self.path) if self.path else None
        if self.path is None or stamp == self.seen:
            return "unchanged"
        self.seen = stamp
        try:
            self.digests = _read(self.path)
        except KeysFileError as exc:
            self.refused = str(exc)
            return "refused"
        self.refused = None
        return "taken"

    async def watch(self) -> None:
        """Take each new version of the keys file, and log it (never a key), forever."""
        while self.path is not None:
            await asyncio.sleep(KEYS_POLL_S)
            outcome = self.refresh()
            if outcome == "taken":
                logger.info("API keys file changed: %d keys in force", len(self.digests))
            elif outcome == "refused":
                logger.error("API keys file refused, the previous keys stay: %s", self.refused)

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
