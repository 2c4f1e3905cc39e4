"""The rehearsal Job's layout works: the ConfigMap alone provides an importable `loadtest`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.k8s.conftest import REPO

CONFIGMAP = REPO / "k8s" / "loadtest-configmap.yaml"


def test_configmap_mounted_as_a_package_is_what_locust_imports(tmp_path: Path) -> None:
    # As in k8s/locust.yaml: the ConfigMap is mounted as <dir>/loadtest, <dir> on PYTHONPATH.
    data = yaml.safe_load(CONFIGMAP.read_text())["data"]
    package = tmp_path / "loadtest"
    package.mkdir()
    for name, text in data.items():
        (package / name).write_text(text)
    probe = "import loadtest, loadtest.locustfile; print(loadtest.__file__)"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # The mounted copy wins over the one installed in the image.
    assert Path(done.stdout.strip()).parent == package
