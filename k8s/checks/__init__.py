"""Offline checks of k8s/, the Dockerfile and the alert rules (`make k8s-check`).

One module per kind of check: `render` (kustomize), `schemas` (kubernetes-validate, CRD
schemas), `prometheus` (promtool), `serve` (serveConfigV2 against Ray and the service),
`cluster` (the RayService's numbers), `wiring` (names across objects), `lifecycle` (probes,
draining, disruption budget), `access` (NetworkPolicies), `security` (pod hardening),
`dockerfile`, `loadtest_sync` (with `closure`: what the Locust Jobs import), `scanner`
(checkov); `cli` runs them all.
"""

from k8s.checks.cli import main, run_checks
from k8s.checks.common import Report

__all__ = ["Report", "main", "run_checks"]
