"""Build a model folder beside its destination, then swap it in whole.

`train`, `build-default` and `build-multilingual` write weights, tokenizer, metrics.json, card
and calibration texts into `OUT.building`; OUT is replaced only once all of it is there. A
stopped run therefore never leaves new weights under an old card, nor an old model's
calibration.txt, ONNX exports or measurements beside new weights.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUFFIX = ".building"


def staging_dir(out: Path) -> Path:
    """Where a run builds `out`: a sibling, so the final rename stays on one filesystem."""
    return out.with_name(out.name + SUFFIX)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def begin(out: Path, keep: Path | None = None) -> Path:
    """An empty staging folder for `out`; what a stopped run left there is removed (and said
    so), except the entry holding `keep`: the checkpoint this run resumes from."""
    staging = staging_dir(out)
    kept: Path | None = None
    if keep is not None and keep.resolve().is_relative_to(staging.resolve()):
        inner = keep.resolve().relative_to(staging.resolve())
        kept = staging / inner.parts[0] if inner.parts else None
    if staging.is_dir():
        left = [p for p in staging.iterdir() if p != kept]
        if left:
            note = f", keeping {kept}" if kept else ""
            print(f"removing what a stopped run left in {staging}{note}", flush=True)
        for path in left:
            _remove(path)
    staging.mkdir(parents=True, exist_ok=True)
    return staging


def swap_in(staging: Path, out: Path) -> None:
    """Replace `out` with the finished `staging` folder.

    The old folder is renamed aside first and deleted last, so `out` is missing only between
    two renames (then it is `OUT.old`), never half deleted."""
    old = out.with_name(out.name + ".old")
    if old.exists():
        _remove(old)
    if out.exists() or out.is_symlink():
        out.rename(old)
    staging.rename(out)
    if old.exists() or old.is_symlink():
        _remove(old)


def _report_stopped(out: Path, staging: Path) -> None:
    if not staging.is_dir():
        return
    if not any(staging.iterdir()):
        staging.rmdir()  # nothing was written: leave no trace
        return
    checkpoint = staging / "checkpoint"
    resume = f"; continue with --resume {checkpoint}" if checkpoint.is_dir() else ""
    print(
        f"stopped: {out} is unchanged; this run's files are in {staging} (the next run there "
        f"removes them){resume}",
        file=sys.stderr,
        flush=True,
    )


@contextmanager
def staged(out: Path, keep: Path | None = None, writer: bool = True) -> Iterator[Path]:
    """Yield the staging folder to build `out` in; swap it in when the block ends normally.

    `writer`: this process writes the model (rank 0). Other ranks get the path only, and never
    clear, swap or report."""
    if not writer:
        yield staging_dir(out)
        return
    staging = begin(out, keep)
    try:
        yield staging
    except BaseException:  # Ctrl-C and kills too: say where the partial run is
        _report_stopped(out, staging)
        raise
    swap_in(staging, out)
