"""Core kinds with kubernetes-validate, custom resources against their CRD schemas."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

from k8s.checks.common import REPO, Doc, Loader, Report, find, name_of, walk_pod_specs

SCHEMAS_ENV = "K8S_SCHEMAS_DIR"
K8S_VERSION = "1.30.0"
CRD_FILES = {
    ("ray.io/v1", "RayService"): "ray.io_rayservices.yaml",
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_podmonitors.yaml",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
}


def schemas_dir(cli: Path | None) -> Path:
    """--schemas, else $K8S_SCHEMAS_DIR, else ../shared/k8s-schemas beside the repository
    when present, else the copies vendored in k8s/crds (same files, see its README)."""
    if cli is not None:
        return cli
    if os.environ.get(SCHEMAS_ENV):
        return Path(os.environ[SCHEMAS_ENV])
    shared = REPO.parent / "shared" / "k8s-schemas"
    return shared if shared.is_dir() else REPO / "k8s" / "crds"


@functools.cache
def crd_schema(path: Path, version: str) -> Doc:
    """The CRD's schema for `version`, made strict the way the API server reads it."""
    with path.open(encoding="utf-8") as f:
        crd = yaml.load(f, Loader=Loader)
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema: Doc = v["schema"]["openAPIV3Schema"]
            return strict(schema)
    raise KeyError(f"{path.name} has no version {version}")


def strict(node: Doc) -> Doc:
    """Unknown fields are errors; a required field with a default may be absent."""
    out = dict(node)
    props = out.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: strict(v) for k, v in props.items()}
        if "required" in out:
            out["required"] = [r for r in out["required"] if "default" not in props.get(r, {})]
        if (
            not out.get("x-kubernetes-preserve-unknown-fields")
            and "additionalProperties" not in out
        ):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = strict(out[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [strict(s) for s in out[key]]
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


def check_core(docs: list[Doc], report: Report) -> None:
    """kubernetes-validate --strict on core kinds and on the RayService's pod templates."""
    for doc in docs:
        if (doc.get("apiVersion"), doc["kind"]) in CRD_FILES:
            continue
        _kv(doc, f"{doc['kind']}/{name_of(doc)}", report)
    for ray in find(docs, "RayService"):
        for where, template in walk_pod_specs(ray):
            wrapped = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": "template"},
                "template": template,
            }
            _kv(wrapped, where, report)


def _kv(doc: Doc, where: str, report: Report) -> None:
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        report.fail("kubernetes-validate", f"{where}: {path}: {exc.message}")
    except kubernetes_validate.SchemaNotFoundError:
        report.fail("kubernetes-validate", f"{where}: no schema for {doc.get('apiVersion')}")


def check_crds(docs: list[Doc], schemas: Path, report: Report) -> None:
    """Custom resources against their CRD schemas."""
    for doc in docs:
        key = (str(doc.get("apiVersion")), str(doc["kind"]))
        if key not in CRD_FILES:
            continue
        path = schemas / CRD_FILES[key]
        if not path.is_file():
            report.fail("crd-schema", f"{path} not found (set {SCHEMAS_ENV})")
            continue
        schema = crd_schema(path, key[0].rsplit("/", 1)[1])
        body = {k: v for k, v in doc.items() if k != "metadata"}
        validator = jsonschema.Draft7Validator(schema)
        for error in sorted(validator.iter_errors(body), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in error.absolute_path) or "(top)"
            report.fail("crd-schema", f"{doc['kind']}/{name_of(doc)}: {where}: {error.message}")
