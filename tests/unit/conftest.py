"""Fixtures of the unit tier: the exported tiny BERT the backend tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.exported import build_exported


@pytest.fixture(scope="session")
def exported_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A briefly trained tiny BERT with its FP32 and INT8 ONNX exports (tests.exported)."""
    return build_exported(tiny_model_dir, tmp_path_factory.mktemp("exported") / "tiny-onnx")
