"""NetworkPolicies, evaluated: which callers reach which port of which pod.

Each kind of caller (a Ray pod, a client namespace, Prometheus, the KubeRay operator, an
unrelated pod, the outside world) is tried on each port that matters, with the semantics of
the NetworkPolicy API: a pod no Ingress policy selects admits everyone; otherwise a
connection passes when any rule of any selecting policy admits both its source and its port.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from k8s.checks.common import (
    RAY_NODE_TYPE,
    Doc,
    Report,
    containers,
    find,
    labels,
    name_of,
    walk_pod_specs,
)

CLIENT_NAMESPACE_LABEL = {"sentiment-client": "true"}
MONITORING_NAMESPACE = "monitoring"
OPERATOR_NAMESPACE = "kuberay-system"
NAME = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Peer:
    """A caller: a pod (labels, namespace and its labels) or an address outside."""

    name: str
    ip: str
    namespace: str = ""
    namespace_labels: dict[str, str] = field(default_factory=dict)
    pod: dict[str, str] | None = None


@dataclass(frozen=True)
class Target:
    """A pod the manifests create: namespace, labels, named container ports."""

    name: str
    namespace: str
    labels: dict[str, str]
    ports: dict[str, int]


def peers(ns: str, ray_head: Target, ray_worker: Target, locust: dict[str, Target]) -> list[Peer]:
    """Every kind of caller the rules below are about."""

    def here(name: str, pod: dict[str, str], ip: str) -> Peer:
        return Peer(name, ip, ns, {NAME: ns}, pod)

    out = [
        here("the Ray head", ray_head.labels, "10.0.0.1"),
        here("a Ray worker", ray_worker.labels, "10.0.0.2"),
        here("a pod of this namespace outside the Ray cluster", {"run": "debug"}, "10.0.0.9"),
        Peer(
            "a client namespace", "10.1.0.1", "shop", {NAME: "shop", **CLIENT_NAMESPACE_LABEL}, {}
        ),
        Peer(
            "Prometheus (monitoring namespace)",
            "10.2.0.1",
            MONITORING_NAMESPACE,
            {NAME: MONITORING_NAMESPACE},
            {"app.kubernetes.io/name": "prometheus"},
        ),
        Peer(
            "the KubeRay operator",
            "10.3.0.1",
            OPERATOR_NAMESPACE,
            {NAME: OPERATOR_NAMESPACE},
            {"app.kubernetes.io/name": "kuberay-operator"},
        ),
        Peer("a pod of another namespace", "10.4.0.1", "default", {NAME: "default"}, {}),
        Peer("an address outside the cluster", "203.0.113.7"),
    ]
    out += [
        here(f"the Locust {role}", t.labels, f"10.0.1.{i}")
        for i, (role, t) in enumerate(sorted(locust.items()), start=1)
    ]
    return out


def matches(selector: Doc | None, found: dict[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions); empty selects everything."""
    selector = selector or {}
    if any(found.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if (
            (op == "In" and found.get(key) not in values)
            or (op == "NotIn" and key in found and found[key] in values)
            or (op == "Exists" and key not in found)
            or (op == "DoesNotExist" and key in found)
        ):
            return False
    return True


def _port_matches(rules: list[Doc] | None, port: int, target: Target) -> bool:
    if not rules:
        return True
    for rule in rules:
        if rule.get("protocol", "TCP") != "TCP":
            continue
        wanted = rule.get("port")
        if wanted is None:
            return True
        number = target.ports.get(wanted) if isinstance(wanted, str) else int(wanted)
        if number is not None and number <= port <= int(rule.get("endPort", number)):
            return True
    return False


def _peer_matches(sources: list[Doc] | None, policy_ns: str, peer: Peer) -> bool:
    if not sources:
        return True
    for source in sources:
        if "ipBlock" in source:
            # Whether an ipBlock also covers pod addresses depends on the network plugin;
            # assume it does, which is the permissive reading.
            block = source["ipBlock"]
            address = ipaddress.ip_address(peer.ip)
            if address in ipaddress.ip_network(block["cidr"]) and not any(
                address in ipaddress.ip_network(e) for e in block.get("except", [])
            ):
                return True
            continue
        if peer.pod is None:
            continue
        ns_selector, pod_selector = source.get("namespaceSelector"), source.get("podSelector")
        in_namespace = (
            matches(ns_selector, peer.namespace_labels)
            if ns_selector is not None
            else peer.namespace == policy_ns
        )
        if in_namespace and (pod_selector is None or matches(pod_selector, peer.pod)):
            return True
    return False


def admitted(policies: list[Doc], target: Target, port: int, peer: Peer) -> bool:
    """Whether `peer` may open a TCP connection to `port` on `target`."""
    selecting = []
    for policy in policies:
        spec = policy.get("spec", {})
        types = spec.get("policyTypes") or ["Ingress"]
        namespace = policy.get("metadata", {}).get("namespace", "")
        if (
            "Ingress" in types
            and namespace == target.namespace
            and matches(spec.get("podSelector"), target.labels)
        ):
            selecting.append((namespace, spec))
    if not selecting:
        return True
    return any(
        _port_matches(rule.get("ports"), port, target)
        and _peer_matches(rule.get("from"), namespace, peer)
        for namespace, spec in selecting
        for rule in spec.get("ingress") or []
    )


def _target(name: str, doc: Doc, template: Doc, extra: dict[str, str]) -> Target:
    ports = {
        str(p["name"]): int(p["containerPort"])
        for c in containers(template)
        for p in c.get("ports", [])
        if "name" in p
    }
    ns = str(doc.get("metadata", {}).get("namespace", ""))
    return Target(name, ns, {**labels(template), **extra}, ports)


def check_access(docs: list[Doc], ray: Doc, report: Report) -> None:
    """Each (pod, port) admits the callers it must and no other."""
    policies = find(docs, "NetworkPolicy")
    templates = dict(walk_pod_specs(ray))
    head_where = f"RayService/{name_of(ray)} head"
    head = _target("Ray head", ray, templates.pop(head_where, {}), {RAY_NODE_TYPE: "head"})
    if not templates:
        return  # the cluster check reports a missing worker group
    worker = _target("Ray worker", ray, next(iter(templates.values())), {RAY_NODE_TYPE: "worker"})
    locust = {
        str(labels(t).get("app.kubernetes.io/component", name_of(job))): _target(
            f"Locust {name_of(job)}", job, t, {}
        )
        for job in find(docs, "Job")
        for _, t in walk_pod_specs(job)
    }
    callers = {p.name: p for p in peers(head.namespace, head, worker, locust)}
    ray_pods = {"the Ray head", "a Ray worker"}
    clients = {"a client namespace", *(f"the Locust {r}" for r in locust)}
    # (target, port, what it is, callers that must get through, callers that may)
    rules: list[tuple[Target, int, str, set[str], set[str]]] = [
        (worker, 8000, "Serve HTTP", clients, ray_pods),
        (worker, 8080, "metrics", {"Prometheus (monitoring namespace)"}, ray_pods | clients),
        (head, 8080, "metrics", {"Prometheus (monitoring namespace)"}, ray_pods | clients),
        (head, 8265, "dashboard / job API", ray_pods | {"the KubeRay operator"}, set()),
        (head, 6379, "GCS", ray_pods, set()),
        (head, 10001, "Ray client", ray_pods, set()),
        (head, 52365, "dashboard agent", ray_pods, set()),
        (worker, 52365, "dashboard agent", ray_pods, set()),
        (worker, 10002, "Ray worker processes", ray_pods, set()),
        (worker, 30000, "direct ingress", ray_pods, set()),
        (worker, 45000, "a replica's gRPC port", ray_pods, set()),
    ]
    if "master" in locust:
        rules.append((locust["master"], 5557, "Locust master", {"the Locust worker"}, set()))
    for target, port, what, must, may in rules:
        for name, peer in callers.items():
            ok = admitted(policies, target, port, peer)
            if name in must and not ok:
                report.fail("access", f"{target.name} port {port} ({what}) refuses {name}")
            elif ok and name not in must | may:
                report.fail("access", f"{target.name} port {port} ({what}) admits {name}")
