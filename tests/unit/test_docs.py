"""The README documents every setting and every metric the code defines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.batchconfig import BatchConfig
from service.metrics import EXPORTED_PREFIX, PREFIX
from service.settings import Settings

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()


def env_names() -> list[str]:
    names = [f"SENTIMENT_{n.upper()}" for n in Settings.model_fields if n != "batch"]
    names += [f"SENTIMENT_BATCH__{n.upper()}" for n in BatchConfig.model_fields]
    return names


@pytest.mark.parametrize("name", env_names())
def test_every_setting_is_documented(name: str) -> None:
    assert f"`{name}`" in README


def test_every_metric_is_documented() -> None:
    source = (ROOT / "service" / "metrics.py").read_text()
    defined = re.findall(r'PREFIX \+ "(\w+)"|_hist\(\s*"(\w+)"', source)
    names = {a or b for a, b in defined}
    assert len(names) >= 15
    for name in names:
        exported = EXPORTED_PREFIX + name
        counter = exported + "_total"
        assert f"`{exported}`" in README or f"`{counter}`" in README, name
    assert PREFIX == "sentiment_"


def _markdown_files() -> list[Path]:
    docs = sorted((ROOT / "docs").glob("*.md"))
    return [ROOT / "README.md", ROOT / "k8s" / "README.md", ROOT / "training" / "README.md", *docs]


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    # Benchmark pages move between files as they age; a link to a moved page or plot must not
    # dangle.
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t)]
    missing = [t for t in local if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"
