"""What every check shares: the report, YAML loading and small accessors of objects."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from service.lifecycle import HAPROXY_ENV, LEAN_ENV

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: mypy and pytest (dev extra) bring tomli
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
Doc = dict[str, Any]
# libyaml's loader when PyYAML has it: the CRDs alone are 2 MB of YAML.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# The two deployments of the Serve application: HTTP ingress replicas (CPU) in front of the
# model replicas (one per GPU).
INGRESS_DEPLOYMENT = "SentimentIngress"
MODEL_DEPLOYMENT = "SentimentModel"
# Ray Serve's high-throughput ingress and Ray's trimmed background work, as `make serve` sets
# them (service.lifecycle); every Ray node must start with the same values.
HIGH_THROUGHPUT_ENV = {**HAPROXY_ENV, **LEAN_ENV}
# Labels KubeRay adds to the pods it creates, on top of the template's own.
RAY_NODE_TYPE = "ray.io/node-type"


@dataclass
class Report:
    """Problems found, each tagged with the check that found it."""

    problems: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)

    def fail(self, check: str, message: str) -> None:
        self.problems.append(f"[{check}] {message}")

    @property
    def ok(self) -> bool:
        return not self.problems


def load_yaml_docs(path: Path) -> list[Doc]:
    """Every non-empty document of a YAML file."""
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=Loader) if d is not None]


def pyproject(root: Path) -> Doc:
    """The repository's pyproject.toml."""
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))


def name_of(doc: Doc) -> str:
    return str(doc.get("metadata", {}).get("name", "?"))


def find(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d.get("kind") == kind]


def walk_pod_specs(doc: Doc) -> Iterator[tuple[str, Doc]]:
    """(where, pod template) for every pod template in a workload or a RayService."""
    kind, spec = doc["kind"], doc.get("spec", {})
    if kind in {"Job", "Deployment", "StatefulSet", "DaemonSet"}:
        yield f"{kind}/{name_of(doc)}", spec.get("template", {})
    elif kind == "RayService":
        cluster = spec.get("rayClusterConfig", {})
        yield (
            f"RayService/{name_of(doc)} head",
            cluster.get("headGroupSpec", {}).get("template", {}),
        )
        for group in cluster.get("workerGroupSpecs", []):
            yield f"RayService/{name_of(doc)} {group.get('groupName')}", group.get("template", {})


def labels(template: Doc) -> dict[str, str]:
    return dict(template.get("metadata", {}).get("labels", {}))


def containers(template: Doc) -> list[Doc]:
    return list(template.get("spec", {}).get("containers", []))


def port(container: Doc, name: str) -> int | None:
    """The number of a named container port."""
    for item in container.get("ports", []):
        if item.get("name") == name:
            return int(item["containerPort"])
    return None


def env(container: Doc) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}


def selects(selector: dict[str, str], pod: dict[str, str]) -> bool:
    return all(pod.get(k) == v for k, v in selector.items())


def cpus(quantity: Any) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def pod_labels(docs: list[Doc]) -> list[dict[str, str]]:
    """Labels of every pod the manifests create, with those KubeRay adds to Ray pods."""
    pods = []
    for doc in docs:
        for where, template in walk_pod_specs(doc):
            found = labels(template)
            if doc["kind"] == "RayService":
                found[RAY_NODE_TYPE] = "head" if where.endswith(" head") else "worker"
            pods.append(found)
    return pods


def gpu_group(ray: Doc) -> Doc | None:
    """The RayService's one worker group whose pods hold a GPU, if exactly one does."""
    groups = [
        g
        for g in ray.get("spec", {}).get("rayClusterConfig", {}).get("workerGroupSpecs", [])
        for c in containers(g.get("template", {}))[:1]
        if "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
    ]
    return groups[0] if len(groups) == 1 else None
