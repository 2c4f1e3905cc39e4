"""The rehearsal Job's layout works: the ConfigMap alone provides an importable `loadtest`,
and it holds only what the Jobs import, small enough for `kubectl apply`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from k8s.checks.cli import run_checks
from k8s.checks.closure import import_closure
from k8s.checks.loadtest_sync import (
    LOADTEST_CONFIGMAP,
    configmap_text,
    loadtest_configmap,
    needed_modules,
)
from tests.k8s.conftest import REPO, synced_copy

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


def test_closure_follows_every_form_of_import(tmp_path: Path) -> None:
    sources = {
        "__init__.py": "",
        "main.py": "from loadtest import a\nimport loadtest.b as b\n",
        "a.py": "def f():\n    from loadtest.c import X\n    return X\n",
        "b.py": "from . import d\nfrom .e import Y\n",
        "c.py": "X = 1\n",
        "d.py": "",
        "e.py": "Y = 2\n",
        "unused.py": "import loadtest.main\n",
    }
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    wanted = ["__init__.py", "a.py", "b.py", "c.py", "d.py", "e.py", "main.py"]
    assert import_closure(tmp_path, ["main.py"]) == wanted


def test_configmap_holds_only_what_the_jobs_import() -> None:
    data = yaml.safe_load(CONFIGMAP.read_text())["data"]
    assert sorted(data) == needed_modules(REPO)
    assert {"__init__.py", "locustfile.py", "scrape.py", "ranks.py"} <= set(data)
    assert not {"bench.py", "chaos.py", "gpubench.py"} & set(data)


def _problems(root: Path) -> list[str]:
    return run_checks(root, Path("unused"), only=("loadtest-sync",)).problems


def test_a_configmap_with_unimported_modules_fails(tmp_path: Path) -> None:
    # The ConfigMap as it was: every loadtest/*.py, over the annotation cap.
    root = synced_copy(tmp_path)
    files = {p.name: p.read_text() for p in sorted((root / "loadtest").glob("*.py"))}
    (root / "k8s" / LOADTEST_CONFIGMAP).write_text(configmap_text(files))
    problems = _problems(root)
    assert any("holds other files than the Jobs import" in p and "bench.py" in p for p in problems)
    assert any("last-applied annotation, over the 262,144" in p for p in problems)


def test_a_configmap_over_the_annotation_cap_fails(tmp_path: Path) -> None:
    root = synced_copy(tmp_path)
    (root / "loadtest" / "big.py").write_text("# padding\n" * 30_000)  # 300 KB
    with (root / "loadtest" / "scrape.py").open("a") as f:
        f.write("from loadtest import big  # noqa: E402\n")
    (root / "k8s" / LOADTEST_CONFIGMAP).write_text(loadtest_configmap(root))
    (problem,) = _problems(root)
    assert "last-applied annotation, over the 262,144" in problem


def test_a_job_running_a_missing_module_fails(tmp_path: Path) -> None:
    root = synced_copy(tmp_path)
    jobs = root / "k8s" / "locust.yaml"
    jobs.write_text(jobs.read_text().replace("loadtest/locustfile.py\n", "loadtest/gone.py\n"))
    assert any("runs loadtest/gone.py, which does not exist" in p for p in _problems(root))


def test_a_job_module_is_mounted_with_its_imports(tmp_path: Path) -> None:
    root = synced_copy(tmp_path)
    (root / "loadtest" / "extra.py").write_text("from loadtest import soak\n")
    jobs = root / "k8s" / "locust.yaml"
    jobs.write_text(jobs.read_text().replace("loadtest/locustfile.py\n", "loadtest/extra.py\n"))
    assert {"extra.py", "soak.py"} <= set(needed_modules(root))


def test_the_locustfile_importing_service_fails(tmp_path: Path) -> None:
    # The Jobs mount only loadtest/: service/ would be the image's copy, maybe an older one.
    root = synced_copy(tmp_path)
    with (root / "loadtest" / "timeline.py").open("a") as f:
        f.write("import service.settings  # noqa: E402\n")
    assert any("timeline.py imports service" in p for p in _problems(root))
