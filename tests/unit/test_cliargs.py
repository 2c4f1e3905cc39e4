"""Command-line value types: each bad value is an argparse usage error naming the flag."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from service.cliargs import (
    check_model_path,
    count,
    counts,
    device,
    one_of_each,
    ranged,
    size,
    whole,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tool", exit_on_error=False)
    p.add_argument("--sizes", type=counts)
    p.add_argument("--steps", type=count)
    p.add_argument("--every", type=whole)
    p.add_argument("--share", type=ranged(lambda v: 0 < v < 1, "in (0, 1)"))
    p.add_argument("--limit", type=size)
    p.add_argument("--amp", type=one_of_each("off", "bf16"))
    p.add_argument("--device", type=device)
    return p


def test_good_values_parse() -> None:
    argv = ["--sizes", "1, 8,32", "--steps", "3", "--every", "0", "--share", "0.25"]
    args = parser().parse_args(
        [*argv, "--limit", "2GiB", "--amp", "off,bf16", "--device", "cuda:1"]
    )
    assert args.sizes == [1, 8, 32] and args.steps == 3 and args.every == 0
    assert args.share == 0.25 and args.limit == 2 << 30 and args.amp == ["off", "bf16"]
    assert args.device == "cuda:1"


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--sizes", "1,x", "whole numbers like 1,8,32"),
        ("--sizes", "8,0", "whole numbers of at least 1"),
        ("--sizes", ",", "whole numbers of at least 1"),
        ("--steps", "0", "a whole number of at least 1"),
        ("--steps", "2.5", "a whole number of at least 1"),
        ("--every", "-1", "a whole number of at least 0"),
        ("--share", "1", "a number in (0, 1)"),
        ("--share", "nan", "a number in (0, 1)"),
        ("--share", "half", "a number in (0, 1)"),
        ("--limit", "12XB", "a size like 16GiB"),
        ("--limit", "inf GiB", "a size like 16GiB"),
        ("--limit", "0", "a size like 16GiB"),
        ("--amp", "fp8", "comma-separated values from off, bf16"),
        ("--device", "tpu", "auto, cpu, cuda or cuda:N"),  # torch would read some of these
        ("--device", "cuda:x", "auto, cpu, cuda or cuda:N"),
        ("--device", "cpu:0", "auto, cpu, cuda or cuda:N"),
    ],
)
def test_bad_values_name_the_flag_and_what_it_takes(flag: str, value: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentError) as info:
        parser().parse_args([flag, value])
    message = str(info.value)
    assert message.startswith(f"argument {flag}: expected {says}"), message
    assert message.endswith(f", got {value!r}"), message


def test_a_model_path_the_service_would_refuse_is_a_usage_error(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_model_path(argparse.ArgumentParser(prog="tool"), tiny_model_dir)  # a model: no error
    with pytest.raises(SystemExit) as exit_:
        check_model_path(argparse.ArgumentParser(prog="tool"), tmp_path)
    assert exit_.value.code == 2
    assert "tool: error: --model-path: no model at" in capsys.readouterr().err
