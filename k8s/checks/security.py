"""Pod hardening on every pod template, the RayService's included (which checkov's
Kubernetes checks cannot see inside): the properties its CKV_K8S checks ask for."""

from __future__ import annotations

from k8s.checks.common import Doc, Report, containers, walk_pod_specs

# KubeRay's autoscaler runs as a sidecar of the head pod and calls the Kubernetes API with
# the pod's service-account token; no other pod here talks to the API.
NEEDS_API_TOKEN = " head"


def check_security(docs: list[Doc], report: Report) -> None:
    """seccomp, non-root, no escalation, capabilities dropped, read-only root with a
    writable /tmp, no service-account token where unneeded, requests and limits."""
    for doc in docs:
        autoscaling = bool(
            doc.get("spec", {}).get("rayClusterConfig", {}).get("enableInTreeAutoscaling")
        )
        for where, template in walk_pod_specs(doc):
            _check_pod(where, template.get("spec", {}), report)
            token = template.get("spec", {}).get("automountServiceAccountToken")
            if doc["kind"] == "RayService" and where.endswith(NEEDS_API_TOKEN):
                if autoscaling and token is False:
                    report.fail("security", f"{where}: the autoscaler sidecar needs the API token")
            elif token is not False:
                report.fail("security", f"{where}: set automountServiceAccountToken: false")


def _check_pod(where: str, spec: Doc, report: Report) -> None:
    pod = spec.get("securityContext", {})
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            report.fail("security", f"{where}: {flag} must be off")
    if pod.get("runAsNonRoot") is not True:
        report.fail("security", f"{where}: securityContext.runAsNonRoot must be true")
    writable = {
        m.get("mountPath")
        for c in containers({"spec": spec})
        for m in c.get("volumeMounts", [])
        if not m.get("readOnly")
    }
    for c in containers({"spec": spec}):
        own = c.get("securityContext", {})
        name = f"{where} container {c.get('name')}"
        seccomp = own.get("seccompProfile", pod.get("seccompProfile", {}))
        if seccomp.get("type") != "RuntimeDefault":
            report.fail("security", f"{name}: seccompProfile must be RuntimeDefault")
        if own.get("allowPrivilegeEscalation") is not False or own.get("privileged"):
            report.fail("security", f"{name}: allowPrivilegeEscalation must be false")
        if "ALL" not in own.get("capabilities", {}).get("drop", []):
            report.fail("security", f"{name}: capabilities must drop ALL")
        if own.get("readOnlyRootFilesystem") is not True:
            report.fail("security", f"{name}: readOnlyRootFilesystem must be true")
        elif "/tmp" not in writable:
            # Ray (sessions, logs, HAProxy's config) and Python's tempfile write there.
            report.fail("security", f"{name}: a read-only root needs a writable /tmp volume")
        resources = c.get("resources", {})
        for kind in ("requests", "limits"):
            if not {"cpu", "memory"} <= set(resources.get(kind, {})):
                report.fail("security", f"{name}: resource {kind} for cpu and memory required")
