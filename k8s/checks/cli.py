"""Run every check (`python k8s/check.py`, `python -m k8s.checks`); `--sync` regenerates
the loadtest ConfigMap. Exit status 0 when everything holds, else one line per problem."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection
from pathlib import Path

from k8s.checks.access import check_access
from k8s.checks.cluster import check_cluster
from k8s.checks.common import REPO, Report, find
from k8s.checks.dockerfile import check_dockerfile
from k8s.checks.lifecycle import check_lifecycle
from k8s.checks.loadtest_sync import LOADTEST_CONFIGMAP, check_loadtest_sync, loadtest_configmap
from k8s.checks.prometheus import check_prometheus
from k8s.checks.render import render
from k8s.checks.scanner import check_checkov, checkov_path
from k8s.checks.schemas import SCHEMAS_ENV, check_core, check_crds, schemas_dir
from k8s.checks.security import check_security
from k8s.checks.serve import check_serve_config, serve_config
from k8s.checks.wiring import check_wiring


def run_checks(
    root: Path, schemas: Path, checkov: str | None = None, only: Collection[str] | None = None
) -> Report:
    """Every offline check on the repository at `root`; checkov only when given its path.

    With `only`, just the steps with those keys (rendering and reading the RayService always
    run): a test that breaks one thing needs only the step meant to catch it.
    """
    report = Report()
    docs = render(root / "k8s", report)
    rays = find(docs, "RayService")
    if len(rays) != 1:
        report.fail("consistency", f"expected one RayService, found {len(rays)}")
    ray = rays[0] if len(rays) == 1 else None
    config = serve_config(ray, report) if ray is not None else None

    def on_ray(step: Callable[[dict[str, object]], None]) -> Callable[[], None]:
        return lambda: step(ray) if ray is not None else None

    steps: list[tuple[str, str, Callable[[], None]]] = [
        ("core", "core kinds (kubernetes-validate --strict)", lambda: check_core(docs, report)),
        ("crds", "custom resources (CRD schemas)", lambda: check_crds(docs, schemas, report)),
        (
            "prometheus",
            "alert rules and dashboard queries (promtool)",
            lambda: check_prometheus(docs, report),
        ),
        (
            "serve",
            "serveConfigV2 (Ray Serve schema, import path)",
            lambda: check_serve_config(config, root, report) if config is not None else None,
        ),
        ("cluster", "RayService numbers", on_ray(lambda r: check_cluster(r, config, report))),
        ("wiring", "names across objects", on_ray(lambda r: check_wiring(docs, r, report))),
        (
            "lifecycle",
            "readiness, draining, disruption budget",
            on_ray(lambda r: check_lifecycle(docs, r, config, report)),
        ),
        ("access", "NetworkPolicies", on_ray(lambda r: check_access(docs, r, report))),
        ("security", "pod security", lambda: check_security(docs, report)),
        (
            "dockerfile",
            "Dockerfile (hadolint, pyproject)",
            lambda: check_dockerfile(root, docs, report),
        ),
        ("loadtest-sync", "loadtest ConfigMap in sync", lambda: check_loadtest_sync(root, report)),
    ]
    if checkov is not None:
        steps.append(("checkov", "checkov", lambda: check_checkov(root, docs, checkov, report)))
    # A key no step has (a typo, or checkov without its path) would silently check nothing.
    unknown = set(only or ()) - {key for key, _, _ in steps}
    if unknown:
        known = ", ".join(key for key, _, _ in steps)
        raise ValueError(f"unknown check steps {sorted(unknown)}; known: {known}")
    for key, name, step in steps:
        if only is not None and key not in only:
            continue
        before = len(report.problems)
        step()
        if len(report.problems) == before:
            report.passed.append(name)
    return report


def main(argv: list[str] | None = None) -> int:
    """The command line of `make k8s-check`."""
    parser = argparse.ArgumentParser(description="Offline checks of k8s/ and the Dockerfile")
    parser.add_argument("--root", type=Path, default=REPO, help="repository root to check")
    parser.add_argument("--schemas", type=Path, help=f"CRD folder (default ${SCHEMAS_ENV})")
    parser.add_argument(
        "--sync", action="store_true", help=f"rewrite k8s/{LOADTEST_CONFIGMAP} from loadtest/"
    )
    parser.add_argument("--checkov", help="checkov executable (default: .venv-checkov, PATH)")
    parser.add_argument("--no-checkov", action="store_true", help="skip the checkov scan")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    if args.sync:
        (root / "k8s" / LOADTEST_CONFIGMAP).write_text(loadtest_configmap(root), encoding="utf-8")
        print(f"wrote k8s/{LOADTEST_CONFIGMAP}")
        return 0
    checkov = None if args.no_checkov else checkov_path(args.checkov)
    report = run_checks(root, schemas_dir(args.schemas), checkov)
    if checkov is None and not args.no_checkov:
        report.fail("checkov", "checkov not found: `make checkov-tools` installs it")
    for name in report.passed:
        print(f"ok    {name}")
    for problem in report.problems:
        print(f"FAIL  {problem}")
    print(
        "k8s-check: all checks passed"
        if report.ok
        else f"k8s-check: {len(report.problems)} problem(s)"
    )
    return 0 if report.ok else 1
