"""Modules that must start without torch or transformers, which cost seconds of start-up and
hundreds of MB: the ingress tier only tokenizes, and building the application (what
`serve deploy` does in a fresh worker before any replica starts) only binds deployments."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["service.ingress", "service.deployment"])
def test_module_imports_neither_torch_nor_transformers(module: str) -> None:
    code = (
        f"import sys, {module}; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
