"""Access, draining, readiness and pod security: the manifests pass, broken copies fail.

Each broken copy is rendered like `kubectl apply -k` would and given only to the check it
breaks, which keeps these tests quick; test_check.py runs every check end to end.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s.checks.access import Peer, Target, admitted, check_access
from k8s.checks.common import Doc, Report, find
from k8s.checks.lifecycle import check_lifecycle
from k8s.checks.render import render
from k8s.checks.scanner import findings, ray_pods
from k8s.checks.schemas import check_core
from k8s.checks.security import check_security
from k8s.checks.serve import serve_config
from tests.k8s.conftest import REPO, copy_repo

Docs = list[dict[str, Any]]


def edit(path: str, change: Callable[[Docs], None]) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        file = root / path
        docs = [d for d in yaml.safe_load_all(file.read_text()) if d is not None]
        change(docs)
        file.write_text(yaml.safe_dump_all(docs, sort_keys=False))

    return apply


def named(docs: Docs, name: str, kind: str = "NetworkPolicy") -> Doc:
    (doc,) = [d for d in docs if d["metadata"]["name"] == name and d["kind"] == kind]
    return doc


def worker_pod(docs: Docs) -> Doc:
    spec: Doc = docs[0]["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    return spec


def head_pod(docs: Docs) -> Doc:
    spec: Doc = docs[0]["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    return spec


def worker(docs: Docs) -> Doc:
    container: Doc = worker_pod(docs)["containers"][0]
    return container


def serve_args(change: Callable[[Doc], None]) -> Callable[[Docs], None]:
    def apply(docs: Docs) -> None:
        config = yaml.safe_load(docs[0]["spec"]["serveConfigV2"])
        change(config["applications"][0]["args"])
        docs[0]["spec"]["serveConfigV2"] = yaml.safe_dump(config)

    return apply


def run_time_deadline(seconds: float) -> Callable[[Docs], None]:
    """A request deadline set in every deployment's user_config, over the args' one."""

    def apply(docs: Docs) -> None:
        config = yaml.safe_load(docs[0]["spec"]["serveConfigV2"])
        for deployment in config["applications"][0]["deployments"]:
            deployment["user_config"]["request_timeout_s"] = seconds
        docs[0]["spec"]["serveConfigV2"] = yaml.safe_dump(config)

    return apply


def replace(path: str, old: str, new: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        file = root / path
        assert old in file.read_text()
        file.write_text(file.read_text().replace(old, new))

    return apply


def run(root: Path) -> list[str]:
    """The access, lifecycle and security checks on the rendered copy."""
    report = Report()
    docs = render(root / "k8s", report)
    (ray,) = find(docs, "RayService")
    config = serve_config(ray, report)
    check_access(docs, ray, report)
    check_lifecycle(docs, ray, config, report)
    check_security(docs, report)
    return report.problems


RAY = "k8s/rayservice.yaml"
POLICIES = "k8s/networkpolicies.yaml"
LOCUST = "k8s/locust.yaml"

BREAKAGES: list[tuple[str, Callable[[Path], None], str]] = [
    (
        "dashboard-open-to-everyone",
        edit(
            POLICIES,
            lambda d: named(d, "sentiment-dashboard-operator")["spec"]["ingress"].append(
                {"ports": [{"port": 8265}]}
            ),
        ),
        "[access] Ray head port 8265 (dashboard / job API) admits a pod of another namespace",
    ),
    (
        "ray-ports-open-to-the-namespace",
        edit(
            POLICIES,
            lambda d: named(d, "sentiment-ray-internal")["spec"]["ingress"][0].update(
                {"from": [{"podSelector": {}}]}
            ),
        ),
        "[access] Ray head port 6379 (GCS) admits the Locust master",
    ),
    (
        "serve-open-to-the-internet",
        edit(
            POLICIES,
            lambda d: named(d, "sentiment-serve-clients")["spec"]["ingress"][0]["from"].append(
                {"ipBlock": {"cidr": "0.0.0.0/0"}}
            ),
        ),
        "[access] Ray worker port 8000 (Serve HTTP) admits an address outside the cluster",
    ),
    (
        "clients-shut-out",
        replace(POLICIES, 'sentiment-client: "true"', 'sentiment-clients: "true"'),
        "[access] Ray worker port 8000 (Serve HTTP) refuses a client namespace",
    ),
    (
        "metrics-from-anywhere",
        edit(POLICIES, lambda d: named(d, "sentiment-metrics")["spec"]["ingress"][0].pop("from")),
        "[access] Ray worker port 8080 (metrics) admits a pod of another namespace",
    ),
    (
        "no-policy-at-all",
        replace("k8s/kustomization.yaml", "  - networkpolicies.yaml\n", ""),
        "[access] Ray head port 10001 (Ray client) admits an address outside the cluster",
    ),
    (
        "readiness-through-the-queue",
        replace(
            RAY,
            "http://localhost:8000/-/healthz\n",
            "http://localhost:8000/-/healthz\n"
            "                        && wget -T 1 -q -O /dev/null http://localhost:8000/readyz\n",
        ),
        "[lifecycle] GPU worker: the readiness probe calls :8000/readyz, which waits in the "
        "request queue",
    ),
    (
        "readiness-one-failure",
        edit(RAY, lambda d: worker(d)["readinessProbe"].update(failureThreshold=1)),
        "[lifecycle] GPU worker: readiness failureThreshold 1 < 3",
    ),
    (
        "readiness-without-raylet",
        replace(
            RAY,
            "wget -T 2 -q -O /dev/null http://localhost:52365/api/local_raylet_healthz\n"
            "                        && ",
            "",
        ),
        "[lifecycle] GPU worker: the readiness probe must check the raylet",
    ),
    (
        "no-prestop",
        edit(RAY, lambda d: worker(d).pop("lifecycle")),
        "[lifecycle] GPU worker: preStop must run `ray drain-node`",
    ),
    (
        "drain-deadline-short",
        replace(RAY, "--deadline-remaining-seconds 40", "--deadline-remaining-seconds 20"),
        "drain deadline 20 s must be at least graceful shutdown (30 s) + request deadline "
        "(10 s) = 40 s",
    ),
    (
        "longer-graceful-shutdown-in-serve-config",
        edit(RAY, serve_args(lambda a: a.update(graceful_shutdown_timeout_s=60))),
        "drain deadline 40 s must be at least graceful shutdown (60 s) + request deadline "
        "(10 s) = 70 s",
    ),
    (
        "longer-deadline-set-at-run-time",
        edit(RAY, run_time_deadline(20)),
        "drain deadline 40 s must be at least graceful shutdown (30 s) + request deadline "
        "(20 s) = 50 s",
    ),
    (
        "grace-period-short",
        edit(RAY, lambda d: worker_pod(d).update(terminationGracePeriodSeconds=45)),
        "[lifecycle] GPU worker: terminationGracePeriodSeconds 45 < preStop",
    ),
    (
        "no-disruption-budget",
        replace("k8s/kustomization.yaml", "  - pdb.yaml\n", ""),
        "[lifecycle] expected one PodDisruptionBudget over the Ray workers: 0",
    ),
    (
        "budget-min-available",
        edit("k8s/pdb.yaml", lambda d: d[0]["spec"].update(minAvailable=1)),
        "[lifecycle] PodDisruptionBudget/sentiment-ray-workers: want maxUnavailable 1",
    ),
    (
        "budget-over-the-head-too",
        edit("k8s/pdb.yaml", lambda d: d[0]["spec"]["selector"]["matchLabels"].popitem()),
        "[lifecycle] PodDisruptionBudget/sentiment-ray-workers selects the head",
    ),
    (
        "worker-without-seccomp",
        edit(RAY, lambda d: worker_pod(d)["securityContext"].pop("seccompProfile")),
        "[security] RayService/sentiment a100 container ray-worker: seccompProfile must be",
    ),
    (
        "worker-mounts-api-token",
        edit(RAY, lambda d: worker_pod(d).pop("automountServiceAccountToken")),
        "[security] RayService/sentiment a100: set automountServiceAccountToken: false",
    ),
    (
        "head-without-api-token",
        edit(RAY, lambda d: head_pod(d).update(automountServiceAccountToken=False)),
        "[security] RayService/sentiment head: the autoscaler sidecar needs the API token",
    ),
    (
        "head-writable-root",
        edit(
            RAY,
            lambda d: head_pod(d)["containers"][0]["securityContext"].pop("readOnlyRootFilesystem"),
        ),
        "[security] RayService/sentiment head container ray-head: readOnlyRootFilesystem",
    ),
    (
        "read-only-root-without-tmp",
        edit(
            LOCUST,
            lambda d: named(d, "sentiment-loadtest-workers", "Job")["spec"]["template"]["spec"][
                "containers"
            ][0]["volumeMounts"].pop(),
        ),
        "[security] Job/sentiment-loadtest-workers container locust: a read-only root needs",
    ),
    (
        "job-without-limits",
        edit(
            LOCUST,
            lambda d: named(d, "sentiment-loadtest-master", "Job")["spec"]["template"]["spec"][
                "containers"
            ][0]["resources"].pop("limits"),
        ),
        "[security] Job/sentiment-loadtest-master container locust: resource limits",
    ),
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return run(copy_repo(tmp_path_factory.mktemp("pristine")))


def test_repository_passes(pristine: list[str]) -> None:
    assert pristine == []


@pytest.mark.parametrize(("change", "words"), [pytest.param(*b[1:], id=b[0]) for b in BREAKAGES])
def test_broken_copy_fails(
    tmp_path: Path, pristine: list[str], change: Callable[[Path], None], words: str
) -> None:
    root = copy_repo(tmp_path)
    change(root)
    new = [p for p in run(root) if p not in pristine]
    assert any(words in p for p in new), new


def test_policy_semantics() -> None:
    target = Target("pod", "ns", {"app": "x", "tier": "db"}, {"serve": 8000})
    inside = Peer("inside", "10.0.0.5", "ns", {"kubernetes.io/metadata.name": "ns"}, {"a": "1"})
    outside = Peer("outside", "203.0.113.9")
    policy = {
        "metadata": {"namespace": "ns"},
        "spec": {
            "podSelector": {
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]
            },
            "ingress": [
                {
                    "ports": [{"port": "serve"}, {"port": 9000, "endPort": 9010}],
                    "from": [{"podSelector": {"matchLabels": {"a": "1"}}}],
                },
            ],
        },
    }
    assert admitted([], target, 1234, outside)  # no policy: open
    assert admitted([policy], target, 8000, inside)  # named port
    assert admitted([policy], target, 9005, inside)  # inside the range
    assert not admitted([policy], target, 9011, inside)
    assert not admitted([policy], target, 8000, outside)
    other_ns = Peer("other", "10.9.0.1", "web", {"kubernetes.io/metadata.name": "web"}, {"a": "1"})
    assert not admitted([policy], target, 8000, other_ns)  # podSelector alone: same namespace
    egress_only = {"metadata": {"namespace": "ns"}, "spec": {"policyTypes": ["Egress"]}}
    assert admitted([egress_only], target, 8000, outside)


def test_ray_pods_for_the_scanner_are_valid_pods() -> None:
    report = Report()
    docs = render(REPO / "k8s", report)
    pods = ray_pods(docs)
    assert [p["metadata"]["name"] for p in pods] == ["sentiment-head", "sentiment-a100"]
    check_core(pods, report)
    assert report.problems == []
    # Suppressions written on the templates reach the scanner.
    assert all("checkov.io/skip1" in p["metadata"]["annotations"] for p in pods)


def test_checkov_output_without_a_reason_is_a_problem() -> None:
    output = [
        {
            "check_type": "kubernetes",
            "summary": {"passed": 3, "failed": 1, "parsing_errors": 0},
            "results": {
                "failed_checks": [
                    {
                        "check_id": "CKV_K8S_31",
                        "check_name": "seccomp",
                        "resource": "Job.a",
                        "file_path": "/k8s/locust.yaml",
                    },
                ],
                "skipped_checks": [
                    {
                        "check_id": "CKV_K8S_43",
                        "resource": "Job.a",
                        "check_result": {"suppress_comment": "No comment provided"},
                    },
                ],
            },
        }
    ]
    failed, unexplained, passed = findings(output)
    assert failed == ["CKV_K8S_31 seccomp: Job.a (k8s/locust.yaml)"]
    assert unexplained == ["CKV_K8S_43 on Job.a"]
    assert passed == 3
