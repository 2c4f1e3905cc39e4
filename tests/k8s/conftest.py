"""Shared fixtures of the k8s tests: the CRD schemas and copies of the repository to break."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from k8s.checks.loadtest_sync import LOADTEST_CONFIGMAP, loadtest_configmap, loadtest_files
from k8s.checks.schemas import SCHEMAS_ENV, schemas_dir

REPO = Path(__file__).resolve().parents[2]
COPIED = (
    "k8s",
    "loadtest",
    "constraints",
    "Dockerfile",
    ".dockerignore",
    "pyproject.toml",
    "README.md",
)
# The ConfigMap's text by the loadtest files it is made of: dumping it as YAML takes ~0.2 s,
# and every broken copy of a session starts from the same files.
_CONFIGMAPS: dict[tuple[tuple[str, str], ...], str] = {}


@pytest.fixture(scope="session")
def schemas() -> Path:
    path = schemas_dir(None)
    assert (path / "ray.io_rayservices.yaml").is_file(), (
        f"CRD schemas not found in {path}; set {SCHEMAS_ENV} to the folder that holds them"
    )
    return path


def copy_repo(dest: Path) -> Path:
    """The files the checks read, copied so a test can break them."""
    for name in COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def synced_copy(dest: Path) -> Path:
    """A copy with the loadtest ConfigMap regenerated, so only the test's edit differs."""
    root = copy_repo(dest)
    files = tuple(loadtest_files(root).items())
    if files not in _CONFIGMAPS:
        _CONFIGMAPS[files] = loadtest_configmap(root)
    (root / "k8s" / LOADTEST_CONFIGMAP).write_text(_CONFIGMAPS[files])
    return root
