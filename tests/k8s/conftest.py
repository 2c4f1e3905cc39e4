"""Load k8s/check.py (a standalone script, not a package) once for the k8s tests."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
COPIED = ("k8s", "loadtest", "Dockerfile", ".dockerignore", "pyproject.toml", "README.md")


@pytest.fixture(scope="session")
def check() -> ModuleType:
    """k8s/check.py as a module, so its checks run in-process (CRD schemas parsed once)."""
    spec = importlib.util.spec_from_file_location("k8s_check", REPO / "k8s" / "check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["k8s_check"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def schemas(check: ModuleType) -> Path:
    path: Path = check.schemas_dir(None)
    assert (path / "ray.io_rayservices.yaml").is_file(), (
        f"CRD schemas not found in {path}; set {check.SCHEMAS_ENV} to the folder that holds them"
    )
    return path


def copy_repo(dest: Path) -> Path:
    """The files k8s/check.py reads, copied so a test can break them."""
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest
