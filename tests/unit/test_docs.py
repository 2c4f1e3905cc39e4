"""The README documents every setting and every metric the code defines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.metrics import EXPORTED_PREFIX, PREFIX
from service.settings import BatchConfig, Settings

README = (Path(__file__).parents[2] / "README.md").read_text()


def env_names() -> list[str]:
    names = [f"SENTIMENT_{n.upper()}" for n in Settings.model_fields if n != "batch"]
    names += [f"SENTIMENT_BATCH__{n.upper()}" for n in BatchConfig.model_fields]
    return names


@pytest.mark.parametrize("name", env_names())
def test_every_setting_is_documented(name: str) -> None:
    assert f"`{name}`" in README


def test_every_metric_is_documented() -> None:
    source = (Path(__file__).parents[2] / "service" / "metrics.py").read_text()
    defined = re.findall(r'PREFIX \+ "(\w+)"|_hist\(\s*"(\w+)"', source)
    names = {a or b for a, b in defined}
    assert len(names) >= 15
    for name in names:
        exported = EXPORTED_PREFIX + name
        counter = exported + "_total"
        assert f"`{exported}`" in README or f"`{counter}`" in README, name
    assert PREFIX == "sentiment_"
