"""The GIL convoy, measured: a launch-bound forward alone, beside a busy Python thread, and
in a forward process (service.forwardproc) beside the same thread.

The model is the overhead run's tiny BERT with 12 layers (hundreds of small ops per forward, the
way a GPU forward looks from Python), or `--model DIR` on `--device` (`make gpu-bench` times
BERT-base on the GPU). The busy thread stands for a model replica's event loop under load (the
worst case: it never sleeps). `python -m loadtest.convoy`; part of `make bench-launch`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import torch

from loadtest.timing import median_ms
from loadtest.tinymodel import build_tiny_model
from service.cliargs import device
from service.forwardproc import ForwardProcess
from service.model import SentimentModel
from service.settings import DTYPES

LAYERS = 12
WARMUP = 5  # forwards before timing: the first runs of a shape pay one-time setup
TEXTS = ["a fine product, it arrived on time and works as described"] * 4


@contextmanager
def busy_thread() -> Iterator[None]:
    """A thread that runs Python without pause until the block ends."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(i * i for i in range(200))

    thread = threading.Thread(target=spin, name="busy")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def run(model_dir: Path, device: str, dtype: str, repeats: int) -> dict[str, Any]:
    """Forward ms, median, for each place the forward runs, alone and beside a busy thread."""
    torch.set_num_threads(1)
    load = {"path": model_dir, "device": device, "dtype": dtype}
    here = SentimentModel.load(**load)  # type: ignore[arg-type]
    rows = [e.ids for e in here.encode(TEXTS)]
    child = ForwardProcess(load, threads=1)
    beside_repeats = max(1, repeats // 6)
    results = []
    try:
        for name, model in (("thread", here), ("process", child)):
            forward = partial(model.predict, rows)
            alone = median_ms(forward, repeats, WARMUP)
            with busy_thread():  # a convoyed forward can take seconds: fewer, already warm
                beside = median_ms(forward, beside_repeats, 1)
            results.append(
                {
                    "forward_in": name,
                    "alone_ms": round(alone, 2),
                    "beside_busy_ms": round(beside, 2),
                }
            )
            print(
                f"forward in a {name:7s}: alone {alone:8.2f} ms, beside a busy thread "
                f"{beside:8.2f} ms",
                flush=True,
            )
    finally:
        child.close()
    return {
        "model": str(model_dir.name),
        "device": str(here.device),
        "dtype": str(here.dtype).removeprefix("torch."),
        "texts": len(TEXTS),
        "repeats": {"alone": repeats, "beside_busy": beside_repeats},
        "rows": results,
    }


def main(argv: list[str] | None = None) -> int:
    """Measure and write convoy.json."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.convoy", description=__doc__)
    parser.add_argument(
        "--model-path", type=Path, default=Path("models/default"), help="the stand-in's tokenizer"
    )
    parser.add_argument("--model", type=Path, help="time this model instead of the stand-in")
    parser.add_argument("--device", type=device, default="cpu", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--dtype", choices=DTYPES, default="auto")
    parser.add_argument("--out", type=Path, default=Path("results/convoy.json"))
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--layers", type=int, default=LAYERS, help="the stand-in's depth")
    args = parser.parse_args(argv)
    model = args.model or build_tiny_model(
        args.model_path, Path(tempfile.mkdtemp()) / "convoy-stand-in", 0, args.layers
    )
    result = run(model, args.device, args.dtype, args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
