"""The ingress tier only tokenizes: its replicas must start without torch or transformers,
which cost each of them seconds of start-up and hundreds of MB."""

from __future__ import annotations

import subprocess
import sys


def test_the_ingress_module_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys, service.ingress; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
