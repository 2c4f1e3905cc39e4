"""GPU worker pods: readiness that load cannot take away, draining on the way out, and a
disruption budget that keeps all but one of them up."""

from __future__ import annotations

import json
import re
from typing import Any

from k8s.checks.common import (
    RAY_NODE_TYPE,
    Doc,
    Report,
    containers,
    find,
    gpu_group,
    name_of,
    pod_labels,
    selects,
)

# (port, path) that Ray answers itself, outside every replica's request queue: the dashboard
# agent's raylet checks, and HAProxy's own /-/healthz (503 while the node drains).
OUT_OF_QUEUE = {
    (52365, "/api/local_raylet_healthz"),
    (52365, "/api/healthz"),
    (8000, "/-/healthz"),
}
RAYLET_PORT, PROXY_PORT = 52365, 8000
MIN_FAILURE_THRESHOLD = 3
# Seconds Ray's own processes get to stop after the preStop hook returns.
RAY_STOP_MARGIN_S = 10
URL = re.compile(r"https?://(?:localhost|127\.0\.0\.1)(?::(\d+))?(/[^\s|&;\"']*)?")


def check_lifecycle(docs: list[Doc], ray: Doc, config: Doc | None, report: Report) -> None:
    """Readiness probe, preStop drain and grace period of the GPU workers; their PDB."""
    group = gpu_group(ray)
    if group is None:
        return  # the cluster check reports it
    worker = containers(group["template"])[0]
    check_readiness(worker.get("readinessProbe"), report)
    if config is not None:
        check_drain(group["template"]["spec"], worker, config, report)
    check_budget(docs, ray, report)


def probe_urls(probe: Doc) -> list[tuple[int, str]]:
    """(port, path) of every local URL a probe calls (httpGet, or wget/curl in exec)."""
    if "httpGet" in probe:
        get = probe["httpGet"]
        return [(int(get.get("port", 80)), str(get.get("path", "/")))]
    text = " ".join(str(part) for part in probe.get("exec", {}).get("command", []))
    return [(int(m.group(1) or 80), m.group(2) or "/") for m in URL.finditer(text)]


def check_readiness(probe: Doc | None, report: Report) -> None:
    """Only paths Ray answers outside the queue; no single failure takes the pod out."""
    if not probe:
        report.fail("lifecycle", "GPU worker: no readiness probe")
        return
    urls = probe_urls(probe)
    for port, path in urls:
        if (port, path) not in OUT_OF_QUEUE:
            # Under a peak every pod would fail it at once and the Service lose all endpoints.
            report.fail(
                "lifecycle",
                f"GPU worker: the readiness probe calls :{port}{path}, which waits in the "
                "request queue under load; use a path Ray answers itself "
                f"({', '.join(f':{p}{q}' for p, q in sorted(OUT_OF_QUEUE))})",
            )
    # A probe in the manifest replaces KubeRay's, so it must make the same two checks.
    if not any(port == RAYLET_PORT for port, _ in urls):
        report.fail("lifecycle", "GPU worker: the readiness probe must check the raylet (:52365)")
    if (PROXY_PORT, "/-/healthz") not in urls:
        report.fail("lifecycle", "GPU worker: the readiness probe must check :8000/-/healthz")
    failures = int(probe.get("failureThreshold", 3))
    if failures < MIN_FAILURE_THRESHOLD:
        report.fail(
            "lifecycle",
            f"GPU worker: readiness failureThreshold {failures} < {MIN_FAILURE_THRESHOLD}: "
            "one slow answer would take the pod out of the Service",
        )
    command = " ".join(str(p) for p in probe.get("exec", {}).get("command", []))
    waits = sum(int(t) for t in re.findall(r"(?:-T|--timeout=?|--max-time)\s*(\d+)", command))
    if waits > int(probe.get("timeoutSeconds", 1)):
        report.fail(
            "lifecycle",
            f"GPU worker: readiness timeoutSeconds {probe.get('timeoutSeconds', 1)} is shorter "
            f"than the probe's own timeouts ({waits} s)",
        )


def shutdown_budget(config: Doc) -> tuple[float, float]:
    """(graceful shutdown, request deadline) in seconds, from serveConfigV2 or the
    service's defaults; the longest graceful shutdown of any deployment."""
    from service.settings import Settings

    defaults = Settings.model_fields
    graceful: list[float] = []
    deadline = float(defaults["request_timeout_s"].default)
    for app in config.get("applications", []):
        args = app.get("args", {}) or {}
        deadline = max(deadline, float(args.get("request_timeout_s", deadline)))
        app_graceful = args.get(
            "graceful_shutdown_timeout_s", defaults["graceful_shutdown_timeout_s"].default
        )
        for dep in app.get("deployments", []):
            graceful.append(float(dep.get("graceful_shutdown_timeout_s", app_graceful)))
            # A deadline set at run time (service.settings.RUN_TIME_LIMITS) overrides args.
            live = (dep.get("user_config") or {}).get("request_timeout_s")
            deadline = max(deadline, float(live)) if live is not None else deadline
        graceful.append(float(app_graceful))
    return max(graceful or [float(defaults["graceful_shutdown_timeout_s"].default)]), deadline


def _number(pattern: str, text: str) -> int | None:
    found = re.search(pattern, text)
    return int(found.group(1)) if found else None


def check_drain(spec: Doc, worker: Doc, config: Doc, report: Report) -> None:
    """preStop drains the Ray node and outlasts Serve's graceful stop; the grace period
    outlasts preStop."""
    graceful, deadline = shutdown_budget(config)
    hook: Any = worker.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    text = " ".join(str(p) for p in hook or [])
    if "ray drain-node" not in text:
        # Without it Serve keeps routing to this pod's replicas until Ray is killed.
        report.fail("lifecycle", "GPU worker: preStop must run `ray drain-node`")
        return
    drain = _number(r"--deadline-remaining-seconds[ =](\d+)", text)
    sleep = _number(r"\bsleep (\d+)", text)
    drain_timeout = _number(r"\btimeout (\d+) ray drain-node", text) or 0
    wanted = graceful + deadline
    if drain is None or drain < wanted:
        # Serve stops a draining node's replicas graceful_shutdown_timeout_s before the
        # deadline; the requests they hold then need up to the request deadline.
        report.fail(
            "lifecycle",
            f"GPU worker: drain deadline {drain} s must be at least graceful shutdown "
            f"({graceful:g} s) + request deadline ({deadline:g} s) = {wanted:g} s",
        )
    if sleep is None or (drain is not None and sleep < drain):
        report.fail(
            "lifecycle",
            f"GPU worker: preStop must sleep until the drain deadline ({drain} s), not {sleep}",
        )
    grace = int(spec.get("terminationGracePeriodSeconds", 30))
    needed = (sleep or 0) + drain_timeout + RAY_STOP_MARGIN_S
    if grace < needed:
        report.fail(
            "lifecycle",
            f"GPU worker: terminationGracePeriodSeconds {grace} < preStop ({sleep} s sleep + "
            f"{drain_timeout} s drain call) + {RAY_STOP_MARGIN_S} s for Ray to stop = {needed}",
        )


def check_budget(docs: list[Doc], ray: Doc, report: Report) -> None:
    """One PodDisruptionBudget over the Ray workers alone, maxUnavailable 1."""
    pods = pod_labels([ray])
    workers = [p for p in pods if p[RAY_NODE_TYPE] == "worker"]
    budgets = []
    for pdb in find(docs, "PodDisruptionBudget"):
        selector = pdb.get("spec", {}).get("selector", {})
        if selector.get("matchExpressions"):
            report.fail("lifecycle", f"PodDisruptionBudget/{name_of(pdb)}: use matchLabels only")
        match = selector.get("matchLabels", {})
        if any(selects(match, p) for p in workers):
            budgets.append(pdb)
            if any(selects(match, p) for p in pods if p[RAY_NODE_TYPE] == "head"):
                # The one head would share the budget: while it restarts no worker may go.
                report.fail("lifecycle", f"PodDisruptionBudget/{name_of(pdb)} selects the head")
    if len(budgets) != 1:
        report.fail(
            "lifecycle", f"expected one PodDisruptionBudget over the Ray workers: {len(budgets)}"
        )
        return
    spec = budgets[0]["spec"]
    # maxUnavailable follows the autoscaled group; a fixed minAvailable would block drains
    # at the minimum size or let all but that many go at the maximum.
    if "minAvailable" in spec or spec.get("maxUnavailable") != 1:
        report.fail(
            "lifecycle",
            f"PodDisruptionBudget/{name_of(budgets[0])}: want maxUnavailable 1 and no "
            f"minAvailable: {json.dumps({k: v for k, v in spec.items() if k != 'selector'})}",
        )
