"""Command-line value types: a bad value is a usage error naming its flag, not a traceback
from deep inside a run."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from service.modeldir import ModelLoadError, check_model_dir


def counts(text: str) -> list[int]:
    """`1,8,32` -> [1, 8, 32]: whole numbers of at least 1."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected whole numbers like 1,8,32, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected whole numbers of at least 1, got {text!r}")
    return values


def count(text: str) -> int:
    """One whole number of at least 1."""
    return _whole(text, 1)


def whole(text: str) -> int:
    """One whole number of at least 0 (where 0 means "off" or "the default")."""
    return _whole(text, 0)


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of at least {least}, got {text!r}"
        )
    return value


def ranged(check: Callable[[float], bool], wanted: str) -> Callable[[str], float]:
    """A type for a finite number that `check` accepts; `wanted` says which ("in (0, 1)")."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not check(value):
            raise argparse.ArgumentTypeError(f"expected a number {wanted}, got {text!r}")
        return value

    return parse


positive = ranged(lambda v: v > 0, "above 0")
not_negative = ranged(lambda v: v >= 0, "of at least 0")


def size(text: str) -> int:
    """`16GiB`, `512MiB`, `2GB` or plain bytes -> bytes, at least 1."""
    from service.probe import parse_size

    try:
        value = parse_size(text)
    except (ValueError, OverflowError):  # "12XB", "inf GiB"
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a size like 16GiB, 512MiB or 2GB, got {text!r}")
    return value


def one_of_each(*allowed: str) -> Callable[[str], list[str]]:
    """A type for comma-separated values, each one of `allowed`."""

    def parse(text: str) -> list[str]:
        values = [part.strip() for part in text.split(",") if part.strip()]
        wrong = [v for v in values if v not in allowed]
        if wrong or not values:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated values from {', '.join(allowed)}, got {text!r}"
            )
        return values

    return parse


def device(text: str) -> str:
    """Where a model serves: auto, cpu, cuda or cuda:N."""
    from service.settings import check_device

    try:
        return check_device(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_model_path(parser: argparse.ArgumentParser, path: Path) -> None:
    """A usage error naming --model-path unless `path` holds a model the service would load
    (its own rule), before a command's minutes of start-up."""
    try:
        check_model_dir(path)
    except ModelLoadError as exc:
        parser.error(f"--model-path: {exc}")
