"""Text files handed to the commands: a byte order mark is dropped, other trouble is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.textfile import TextFileError, read_text, text_lines


def test_lines_are_stripped_blank_ones_skipped_and_a_byte_order_mark_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "texts.txt"
    path.write_bytes(b"\xef\xbb\xbfgreat phone\r\n\r\n  broke after a day \n\xef\xbb\xbfkept\n")
    # Only the leading mark is the file's; one inside is text and stays.
    assert text_lines(path) == ["great phone", "broke after a day", "\ufeffkept"]


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("latin1.txt", b"fine\nna\xefve\n", "latin1.txt: line 2: not UTF-8 text"),
        ("missing.txt", None, "missing.txt: no such file"),
        (".", None, "cannot read it"),
    ],
)
def test_trouble_names_the_file_and_line(
    tmp_path: Path, name: str, content: bytes | None, says: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(TextFileError, match=says):
        read_text(path)
