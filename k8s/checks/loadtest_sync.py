"""k8s/loadtest-configmap.yaml mirrors loadtest/*.py (`python k8s/check.py --sync`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from k8s.checks.common import Report

LOADTEST_CONFIGMAP = "loadtest-configmap.yaml"
LOADTEST_CONFIGMAP_NAME = "sentiment-loadtest"
CONFIGMAP_LIMIT_BYTES = 1_000_000


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings as `|` blocks, so the ConfigMap reads like the files."""


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str_presenter)


def loadtest_files(loadtest_dir: Path) -> dict[str, str]:
    """The files of the loadtest package that the rehearsal Job mounts."""
    files: dict[str, str] = {}
    if not loadtest_dir.is_dir():
        return files
    for path in sorted(loadtest_dir.iterdir()):
        if path.is_file() and path.suffix == ".py":
            files[path.name] = path.read_text(encoding="utf-8")
    return files


def loadtest_configmap(root: Path) -> str:
    """The text of k8s/loadtest-configmap.yaml for the current loadtest/."""
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": LOADTEST_CONFIGMAP_NAME,
            # Also set by kustomize; written so the file alone never lands in `default`.
            "namespace": "sentiment",
            "labels": {"app.kubernetes.io/name": "sentiment-loadtest"},
        },
        "data": loadtest_files(root / "loadtest"),
    }
    header = (
        "# Generated from loadtest/*.py by `python k8s/check.py --sync`; do not edit.\n"
        "# `make k8s-check` fails when it differs from loadtest/.\n"
    )
    return header + yaml.dump(doc, Dumper=_LiteralDumper, sort_keys=False, width=1000)


def check_loadtest_sync(root: Path, report: Report) -> None:
    path = root / "k8s" / LOADTEST_CONFIGMAP
    wanted = loadtest_configmap(root)
    if not (root / "loadtest" / "locustfile.py").is_file():
        report.fail("loadtest-sync", "loadtest/locustfile.py is missing")
    if len(wanted.encode()) > CONFIGMAP_LIMIT_BYTES:
        report.fail("loadtest-sync", "loadtest/ is too big for one ConfigMap (1 MB)")
    if not path.is_file() or path.read_text(encoding="utf-8") != wanted:
        report.fail(
            "loadtest-sync",
            f"k8s/{LOADTEST_CONFIGMAP} is out of date with loadtest/: "
            "run `python k8s/check.py --sync` and commit it",
        )
