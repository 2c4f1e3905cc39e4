"""What `kubectl apply -k k8s/` would apply, for the subset of kustomize the folder uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from k8s.checks.common import Doc, Report, load_yaml_docs

CLUSTER_SCOPED = {"Namespace"}
KUSTOMIZATION_KEYS = {
    "apiVersion",
    "kind",
    "namespace",
    "resources",
    "configMapGenerator",
    "images",
}


def render(k8s_dir: Path, report: Report) -> list[Doc]:
    """Every object of the kustomization, with its namespace, generated ConfigMaps, images."""
    kpath = k8s_dir / "kustomization.yaml"
    if not kpath.is_file():
        report.fail("kustomize", f"{kpath.name} is missing")
        return []
    kust = yaml.safe_load(kpath.read_text(encoding="utf-8")) or {}
    unknown = set(kust) - KUSTOMIZATION_KEYS
    if unknown:
        report.fail("kustomize", f"fields the offline check does not render: {sorted(unknown)}")
    docs: list[Doc] = []
    for name in kust.get("resources", []):
        path = k8s_dir / name
        if not path.is_file():
            report.fail("kustomize", f"resource {name} does not exist")
            continue
        try:
            docs.extend(load_yaml_docs(path))
        except yaml.YAMLError as exc:
            report.fail("kustomize", f"{name} is not valid YAML: {exc}")
    for gen in kust.get("configMapGenerator", []):
        docs.extend(_generate_configmap(k8s_dir, gen, report))
    namespace = kust.get("namespace")
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc:
            report.fail("kustomize", f"a document is not a Kubernetes object: {str(doc)[:80]}")
            continue
        if namespace and doc["kind"] not in CLUSTER_SCOPED:
            doc.setdefault("metadata", {})["namespace"] = namespace
    for image in kust.get("images", []):
        for doc in docs:
            _set_image(doc, image)
    return [d for d in docs if isinstance(d, dict) and "kind" in d]


def _generate_configmap(k8s_dir: Path, gen: Doc, report: Report) -> list[Doc]:
    options = gen.get("options", {})
    if not options.get("disableNameSuffixHash"):
        # kustomize would append a content hash the offline check cannot reproduce.
        report.fail(
            "kustomize", f"configMapGenerator {gen.get('name')} needs disableNameSuffixHash"
        )
    data: dict[str, str] = {}
    for spec in gen.get("files", []):
        key, _, rel = spec.rpartition("=") if "=" in spec else (Path(spec).name, "", spec)
        path = k8s_dir / rel
        if not path.is_file() or k8s_dir.resolve() not in path.resolve().parents:
            report.fail("kustomize", f"configMapGenerator file {rel} is missing or outside k8s/")
            continue
        data[key] = path.read_text(encoding="utf-8")
    meta: Doc = {"name": gen.get("name")}
    if options.get("labels"):
        meta["labels"] = dict(options["labels"])
    if options.get("annotations"):
        meta["annotations"] = dict(options["annotations"])
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}]


def _set_image(node: Any, image: Doc) -> None:
    if isinstance(node, dict):
        ref = node.get("image")
        if isinstance(ref, str) and isinstance(node.get("name"), str):
            name, _, tag = ref.partition(":")
            if name == image["name"]:
                node["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
        for value in node.values():
            _set_image(value, image)
    elif isinstance(node, list):
        for value in node:
            _set_image(value, image)
