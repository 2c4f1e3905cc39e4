"""Reading the text files people hand to the commands (calibration texts, corpora, data):
UTF-8 with or without a byte order mark, and a clear error naming the line otherwise."""

from __future__ import annotations

from pathlib import Path


class TextFileError(ValueError):
    """A text file is missing, unreadable or not UTF-8; the message names the file."""


def read_text(path: Path | str) -> str:
    """The file's text; a leading byte order mark (some editors write one) is dropped."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise TextFileError(f"{path}: no such file") from None
    except OSError as exc:
        raise TextFileError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TextFileError(f"{path}: line {line}: not UTF-8 text ({exc.reason})") from None


def text_lines(path: Path | str) -> list[str]:
    """One text per line, stripped, blank lines skipped."""
    return [line for raw in read_text(path).splitlines() if (line := raw.strip())]
