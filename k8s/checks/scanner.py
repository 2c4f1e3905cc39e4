"""checkov on k8s/, the Dockerfile and the RayService's pod templates rendered as Pods.

checkov cannot look inside a custom resource, so each Ray pod template is written out as a
plain Pod (with the template's labels and annotations, suppressions included) into the
scanned folder. Every failed check is a problem; a suppression without a reason is one too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from k8s.checks.common import REPO, Doc, Report, find, name_of, walk_pod_specs

CHECKOV_ENV = "CHECKOV"
CHECKOV_VENV = ".venv-checkov"
RENDERED = "rendered-ray-pods.yaml"


def checkov_path(cli: str | None) -> str | None:
    """--checkov, else $CHECKOV, else the Makefile's .venv-checkov, else PATH; a relative
    path is made absolute, since checkov runs in the scan folder."""
    given = cli or os.environ.get(CHECKOV_ENV)
    if given:
        return str(Path(given).absolute()) if os.sep in given else given
    beside = REPO / CHECKOV_VENV / "bin" / "checkov"
    return str(beside) if beside.exists() else shutil.which("checkov")


def ray_pods(docs: list[Doc]) -> list[Doc]:
    """The RayService's pod templates as plain Pods, named after their group."""
    pods = []
    for ray in find(docs, "RayService"):
        meta = ray.get("metadata", {})
        for where, template in walk_pod_specs(ray):
            group = where.rsplit(" ", 1)[-1]
            tmeta = template.get("metadata", {})
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name_of(ray)}-{group}",
                        "namespace": meta.get("namespace", "default"),
                        "labels": dict(tmeta.get("labels", {})),
                        "annotations": dict(tmeta.get("annotations", {})),
                    },
                    "spec": template.get("spec", {}),
                }
            )
    return pods


def scan_folder(root: Path, docs: list[Doc], dest: Path) -> None:
    """What checkov scans: k8s/*.yaml as written, the Dockerfile, the rendered Ray pods."""
    (dest / "k8s").mkdir(parents=True)
    for path in sorted((root / "k8s").glob("*.yaml")):
        shutil.copy2(path, dest / "k8s" / path.name)
    if (root / "Dockerfile").is_file():
        shutil.copy2(root / "Dockerfile", dest / "Dockerfile")
    text = yaml.safe_dump_all(ray_pods(docs), sort_keys=False)
    (dest / "k8s" / RENDERED).write_text(text, encoding="utf-8")


def findings(output: Any) -> tuple[list[str], list[str], int]:
    """(failed checks, suppressions without a reason, checks passed) from checkov's JSON."""
    reports = output if isinstance(output, list) else [output]
    failed, unexplained, passed = [], [], 0
    for item in reports:
        results = item.get("results", {})
        summary = item.get("summary", {})
        passed += int(summary.get("passed", 0))
        if summary.get("parsing_errors"):
            failed.append(f"{item.get('check_type')}: {summary['parsing_errors']} parsing error(s)")
        for check in results.get("failed_checks", []):
            failed.append(
                f"{check['check_id']} {check['check_name']}: {check['resource']} "
                f"({str(check['file_path']).lstrip('/')})"
            )
        for check in results.get("skipped_checks", []):
            reason = str(check.get("check_result", {}).get("suppress_comment") or "").strip()
            if not reason or reason == "No comment provided":
                unexplained.append(f"{check['check_id']} on {check['resource']}")
    return failed, unexplained, passed


def check_checkov(root: Path, docs: list[Doc], tool: str, report: Report) -> None:
    """Run checkov once over the scan folder; one problem per failed check."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        scan_folder(root, docs, folder)
        # No platform look-ups: the scan runs offline, from the checks in the package.
        env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": ""}
        proc = subprocess.run(
            [tool, "-d", str(folder), "--framework", "kubernetes", "dockerfile",
             "--skip-download", "--compact", "-o", "json"],
            capture_output=True, text=True, check=False, env=env, cwd=folder,
        )  # fmt: skip
    try:
        output = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except json.JSONDecodeError:
        output = None
    if output is None or proc.returncode not in (0, 1):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        report.fail("checkov", f"checkov did not run (status {proc.returncode}): {tail[0]}")
        return
    failed, unexplained, passed = findings(output)
    if not passed and not failed:
        report.fail("checkov", "checkov scanned nothing")
    for line in failed:
        report.fail("checkov", line)
    for line in unexplained:
        report.fail("checkov", f"suppressed without a reason: {line}")
