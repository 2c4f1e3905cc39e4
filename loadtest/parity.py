"""`python -m loadtest.parity` (`make parity`): every backend against torch FP32, one run.

On the model's held-out test split (the texts its `metrics.json` accuracy comes from; never
training data: the default model's, or for the multilingual model its English and Chinese
ones) it reports, per backend: accuracy, max and mean absolute difference of probabilities
against torch FP32, and label agreement, per language too where there are two; then in-process
texts/s (tokenize, sort, planned forwards, as loadtest.limit measures the limit), interleaved
round by round so every backend sees the same machine, with the ratio to torch. Backends that
hold parity (FP32: max diff <= 1e-3; INT8: accuracy within 0.5 points of torch; all: >= 99.5%
same label; each in every language) are recorded with their speed in the model's
onnx/manifest.json, where SENTIMENT_BACKEND=auto reads them. Writes parity.json and parity.md
into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from loadtest.limit import run_once, single_text_ms
from service.artifacts import (
    current_measurement,
    read_manifest,
    weights_sha256,
    write_manifest,
)
from service.batchconfig import BatchConfig
from service.batching import plan_micro_batches
from service.calibration import calibrate
from service.model import ModelLoadError, SentimentModel
from training.data import Example

FP32_MAX_DIFF = 1e-3
DEFAULT_MAX_LENGTH = 64  # the default model's recipe
AGREEMENT = 0.995
INT8_ACCURACY_LOSS = 0.005
CANDIDATES = ("torch", "onnx", "onnx-int8")


def recipe(model_path: Path) -> dict[str, Any]:
    """How the model was built, from its metrics.json (empty for a model built elsewhere)."""
    path = model_path / "metrics.json"
    found = json.loads(path.read_text()).get("recipe") if path.is_file() else None
    return found if isinstance(found, dict) else {}


def held_out(data_dir: Path, model_path: Path) -> dict[str, list[Example]]:
    """The model's test split by language, rebuilt exactly as its build made it: the
    multilingual model's English and Chinese ones, else the default model's, short texts only
    (full-length reviews would be read in windows, which the backends share anyway)."""
    if "chinese_split" in recipe(model_path):
        from training.multilingual import load_splits

        splits = load_splits(data_dir)
        return {"english": splits.en_test, "chinese": splits.zh_test}
    from training.data import clean
    from training.default_data import load_all, split
    from training.default_model import SPLIT_SEED
    from training.reviews import FULL_SOURCE

    examples, _ = clean(load_all(data_dir))
    _, test = split(examples, SPLIT_SEED)
    return {"english": [e for e in test if e.source != FULL_SOURCE]}


def flatten(
    split: dict[str, list[Example]],
) -> tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.str_]]:
    """A split's texts, labels and languages in one order: language by language, each as the
    split holds it."""
    test = [(e, lang) for lang, examples in split.items() for e in examples]
    texts = [e.text for e, _ in test]
    return texts, np.array([e.label for e, _ in test]), np.array([lang for _, lang in test])


def probabilities(
    model: SentimentModel, texts: list[str], overhead: int | None = None
) -> npt.NDArray[np.float32]:
    """Probabilities for every text, computed in the service's length-sorted forwards at its
    default budget, planned with `overhead` (a forward's fixed cost in tokens; unset, the
    service's CPU default)."""
    ids = [e.ids for e in model.encode(texts)]
    out = np.zeros((len(texts), len(model.labels)), dtype=np.float32)
    config = BatchConfig()
    planned = config.overhead_for("cpu") if overhead is None else overhead
    lengths = [len(i) for i in ids]
    plan = plan_micro_batches(lengths, config.micro_batch_tokens, planned, model.pad_multiple)
    for group in plan:
        out[group] = model.predict([ids[i] for i in group]).numpy()
    return out


def differences(probs: npt.NDArray[np.float32], ref: npt.NDArray[np.float32]) -> dict[str, float]:
    """How far probabilities are from a reference's, and how often the label is the same."""
    diff = np.abs(probs - ref)
    return {
        "max_abs_diff": float(f"{diff.max():.3g}"),
        "mean_abs_diff": float(f"{diff.mean():.3g}"),
        "label_agreement": round(float((probs.argmax(1) == ref.argmax(1)).mean()), 5),
    }


def compare(
    probs: npt.NDArray[np.float32],
    ref: npt.NDArray[np.float32],
    labels: npt.NDArray[np.int64],
    languages: npt.NDArray[np.str_] | None = None,
) -> dict[str, Any]:
    """Accuracy, and how far these probabilities are from torch FP32's; the same per language
    when there are several (a loss in one must not hide in the mean)."""

    def one(rows: npt.NDArray[np.bool_]) -> dict[str, float]:
        accuracy = round(float((probs[rows].argmax(1) == labels[rows]).mean()), 5)
        return {"accuracy": accuracy, **differences(probs[rows], ref[rows])}

    row: dict[str, Any] = one(np.ones(len(labels), dtype=bool))
    if languages is not None and len(names := sorted(set(languages.tolist()))) > 1:
        row["languages"] = {name: one(languages == name) for name in names}
    return row


def holds(name: str, row: dict[str, Any], torch_row: dict[str, Any]) -> bool:
    """Whether a backend may serve in torch's place (the parity targets), overall and in every
    language."""
    pairs = [(row, torch_row)] + [
        (part, torch_row["languages"][lang]) for lang, part in row.get("languages", {}).items()
    ]
    for got, ref in pairs:
        if got["label_agreement"] < AGREEMENT:
            return False
        if name.endswith("int8"):
            if got["accuracy"] < ref["accuracy"] - INT8_ACCURACY_LOSS:
                return False
        elif got["max_abs_diff"] > FP32_MAX_DIFF:
            return False
    return True


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Load each backend, compare it with torch, then time them all, interleaved."""
    torch.set_num_threads(args.threads)
    split = held_out(args.data_dir, args.model_path)
    texts, labels, languages = flatten(split)
    if args.max_length is None:
        args.max_length = int(recipe(args.model_path).get("max_length", DEFAULT_MAX_LENGTH))
    models: dict[str, SentimentModel] = {}
    for name in args.backends:
        try:
            models[name] = SentimentModel.load(
                args.model_path, "cpu", "auto", args.max_length, backend=name
            )
        except ModelLoadError as exc:
            print(f"{name}: skipped ({exc})", flush=True)
    if "torch" not in models:
        raise SystemExit("error: the torch backend is the reference and must load")
    ref = probabilities(models["torch"], texts)
    rows: dict[str, dict[str, Any]] = {}
    for name, model in models.items():
        t0 = time.perf_counter()
        probs = ref if name == "torch" else probabilities(model, texts)
        rows[name] = compare(probs, ref, labels, languages)
        print(f"{name}: {rows[name]} ({time.perf_counter() - t0:.0f} s)", flush=True)
    # An equal share of each language (the first texts of each, as the split orders them).
    share = args.speed_texts // len(split)
    speed_texts = [e.text for examples in split.values() for e in examples[:share]]
    # The service's own warm-up per backend: every shape once, and the forward's fixed cost
    # measured for the planner, as each backend would be planned when it serves.
    overheads = {
        name: BatchConfig().overhead_for(
            model.device.type, calibrate(model, args.budgets[0]).overhead_tokens, model.cuts_runs
        )
        for name, model in models.items()
    }
    runs: dict[str, list[float]] = {name: [] for name in models}
    for r in range(args.rounds):
        for name, model in models.items():
            best = max(run_once(model, speed_texts, b, overheads[name]) for b in args.budgets)
            runs[name].append(best)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in runs.items()))
    base = max(runs["torch"])
    for name, model in models.items():
        rows[name]["texts_per_s"] = round(max(runs[name]), 1)
        rows[name]["texts_per_s_runs"] = [round(v, 1) for v in runs[name]]
        rows[name]["vs_torch"] = round(max(runs[name]) / base, 2)
        rows[name]["single_text_ms"] = round(single_text_ms(model, speed_texts), 2)
        rows[name]["holds_parity"] = holds(name, rows[name], rows["torch"])
    return {
        "model": str(args.model_path),
        "device": "cpu",
        "threads": args.threads,
        "max_length": args.max_length,
        "texts": len(texts),
        "texts_by_language": {lang: len(examples) for lang, examples in split.items()},
        "speed_texts": len(speed_texts),
        "rounds": args.rounds,
        "budgets": args.budgets,
        "backends": rows,
        "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def record(model_path: Path, results: dict[str, Any]) -> None:
    """Put the speeds of the backends that hold parity where `auto` looks for them."""
    manifest = read_manifest(model_path)
    rows = results["backends"]
    manifest.setdefault("measurements", {})[results["device"]] = {
        "weights_sha256": weights_sha256(model_path),
        "texts_per_s": {name: row["texts_per_s"] for name, row in rows.items()},
        "eligible": [name for name, row in rows.items() if row["holds_parity"]],
        "source": "make parity (loadtest.parity)",
        "threads": results["threads"],
        "created": results["created"],
    }
    write_manifest(model_path, manifest)


def table(results: dict[str, Any]) -> str:
    """The report as a markdown table."""
    lines = [
        f"Parity and speed on {results['texts']} held-out texts (speed: {results['speed_texts']}"
        f" texts, best of {results['rounds']} interleaved rounds, {results['threads']} threads)",
        "",
        "| backend | accuracy | max abs diff | mean abs diff | same label | texts/s | vs torch"
        " | 1 text ms | holds parity |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results["backends"].items():
        lines.append(
            f"| {name} | {r['accuracy']:.2%} | {r['max_abs_diff']:.2g} | "
            f"{r['mean_abs_diff']:.2g} | {r['label_agreement']:.2%} | {r['texts_per_s']:.1f} | "
            f"{r['vs_torch']:.2f}x | {r['single_text_ms']:.1f} | "
            f"{'yes' if r['holds_parity'] else 'NO'} |"
        )
    by_language = [(n, r["languages"]) for n, r in results["backends"].items() if "languages" in r]
    if by_language:
        names = list(by_language[0][1])
        head = " | ".join(f"{n}: accuracy, same label" for n in names)
        lines += ["", f"| backend | {head} |", "| --- |" + " --- |" * len(names)]
        for backend, parts in by_language:
            cells = [parts[n] for n in names]
            text = " | ".join(f"{c['accuracy']:.2%}, {c['label_agreement']:.2%}" for c in cells)
            lines.append(f"| {backend} | {text} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse flags, measure, print the table, write the reports and the measurement."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.parity", description=__doc__)
    parser.add_argument("--model-path", type=Path, default=Path("models/default"))
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, default=Path("results/parity"))
    parser.add_argument("--backends", default=",".join(CANDIDATES), help="comma-separated")
    parser.add_argument(
        "--max-length",
        type=int,
        default=None,
        help=f"tokens per text; default: the model's recipe's ({DEFAULT_MAX_LENGTH} without one)",
    )
    parser.add_argument("--speed-texts", type=int, default=512, help="texts per timed run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--budgets", default="1024,4096", help="micro-batch tokens tried")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-record", action="store_true", help="leave the manifest alone")
    parser.add_argument(
        "--if-missing",
        action="store_true",
        help="do nothing when these exports already have a measurement for this device",
    )
    args = parser.parse_args(argv)
    args.backends = [b for b in args.backends.split(",") if b]
    args.budgets = [int(b) for b in args.budgets.split(",") if b]
    if args.if_missing and current_measurement(args.model_path, "cpu") is not None:
        print(f"{args.model_path}: parity already measured for these exports on cpu")
        return 0
    results = measure(args)
    if not args.no_record:
        record(args.model_path, results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "parity.json").write_text(json.dumps(results, indent=2) + "\n")
    report = table(results)
    (args.out / "parity.md").write_text(report + "\n")
    print("\n" + report)
    print(f"wrote {args.out}/parity.json and parity.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
