"""Baselines for the Chinese split: TF-IDF on character n-grams, and snownlp's Naive Bayes.

snownlp ships a Naive Bayes sentiment classifier trained on the very pos.txt / neg.txt our
Chinese data come from, held-out rows included, so its figure on our split is optimistic
(contaminated). Its API can retrain the same classifier on our training split; that is exact
but slow, because its pure-Python word segmenter takes about 0.1 s per review, so it is opt-in.
snownlp runs in a child process from the unpacked sdist: the build never installs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.corpora import CHINESE, download
from training.data import Example
from training.pipeline import classification_metrics, grouped_metrics

# Runs inside the child: reads {"test": [...], "train": [[text, label], ...] | null} from the
# file named by argv[1], prints one JSON list of P(positive) per test text on stdout.
_WORKER = r"""
import json, sys
from snownlp import sentiment
with open(sys.argv[1], encoding="utf-8") as f:
    job = json.load(f)
clf = sentiment.classifier
if job["train"] is not None:
    clf = sentiment.Sentiment()
    neg = [t for t, y in job["train"] if y == 0]
    pos = [t for t, y in job["train"] if y == 1]
    print(f"snownlp: segmenting {len(neg) + len(pos)} reviews", file=sys.stderr, flush=True)
    clf.train(neg, pos)
out = []
for i, text in enumerate(job["test"], 1):
    out.append(clf.classify(text))
    if i % 250 == 0 or i == len(job["test"]):
        print(f"snownlp: classified {i}/{len(job['test'])}", file=sys.stderr, flush=True)
json.dump(out, sys.stdout)
"""


def tfidf_char_baseline(train: Sequence[Example], test: Sequence[Example]) -> dict[str, Any]:
    """TF-IDF on character 1-3 grams + logistic regression: word n-grams need segmentation."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True, min_df=2)
    x_train = vec.fit_transform([e.text for e in train])
    clf = LogisticRegression(C=4.0, max_iter=2000)
    clf.fit(x_train, [e.label for e in train])
    preds = [int(p) for p in clf.predict(vec.transform([e.text for e in test]))]
    result: dict[str, Any] = {"name": "TF-IDF character 1-3 grams + logistic regression (C=4)"}
    result.update(classification_metrics([e.label for e in test], preds))
    result["per_source"] = grouped_metrics(test, preds)
    return result


def unpack_snownlp(data_dir: Path) -> Path:
    """The snownlp package folder from its sdist, unpacked once; returns its parent."""
    target = data_dir / "snownlp" / f"{CHINESE.name}-{CHINESE.version}"
    if (target / "snownlp" / "__init__.py").is_file():
        return target
    archive = download(CHINESE, data_dir / "downloads")
    with tarfile.open(archive) as tf:
        members = [m for m in tf.getmembers() if m.name.split("/", 1)[-1].startswith("snownlp/")]
        for m in members:
            m.name = m.name.split("/", 1)[1]
        tf.extractall(target, members=members, filter="data")
    return target


class SnownlpRun:
    """snownlp's Naive Bayes scoring in a child process; start it, do other work, `finish()`.

    As shipped (`train=None`) or retrained on `train` through its own API.
    """

    def __init__(
        self, data_dir: Path, test: Sequence[Example], train: Sequence[Example] | None = None
    ) -> None:
        package = unpack_snownlp(data_dir)
        self.test = list(test)
        self.retrained = train is not None
        job = {
            "test": [e.text for e in test],
            "train": None if train is None else [[e.text, e.label] for e in train],
        }
        # A file, not a pipe: the child starts working now, while the caller does other work.
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(job, f)
        self.job_file = Path(f.name)
        env = {**os.environ, "PYTHONPATH": str(package.resolve())}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(self.job_file)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def finish(self) -> dict[str, Any]:
        """Wait for the scores; accuracy and macro-F1 on the test rows."""
        out, _ = self.proc.communicate()
        self.job_file.unlink(missing_ok=True)
        if self.proc.returncode != 0:
            raise RuntimeError(f"snownlp baseline failed (exit {self.proc.returncode})")
        probs: list[float] = json.loads(out)
        preds = [int(p > 0.5) for p in probs]
        if self.retrained:
            name = "snownlp 0.12.3 Naive Bayes retrained on this training split"
        else:
            name = "snownlp 0.12.3 Naive Bayes as shipped (trained on all of pos/neg: contaminated)"
        result: dict[str, Any] = {"name": name, "contaminated": not self.retrained}
        result.update(classification_metrics([e.label for e in self.test], preds))
        return result
