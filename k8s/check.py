#!/usr/bin/env python3
"""Offline checks of k8s/, the Dockerfile and the alert rules (`make k8s-check`).

The checks live in the package k8s/checks/ (one module per kind of check); this script runs
them, like `python -m k8s.checks`. `--sync` rewrites k8s/loadtest-configmap.yaml from
loadtest/. The CRD schemas are read from $K8S_SCHEMAS_DIR, else from ../shared/k8s-schemas
beside the repository when present, else from the copies in k8s/crds.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, Python puts k8s/ first on the path; the package is k8s.checks.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k8s.checks.cli import main

if __name__ == "__main__":
    sys.exit(main())
