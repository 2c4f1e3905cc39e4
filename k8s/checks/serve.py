"""serveConfigV2 against Ray Serve's schema and the service's settings and application."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import yaml

from k8s.checks.common import REPO, Doc, Report


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
    from pydantic import ValidationError

    from service.envcheck import user_config_errors
    from service.settings import Settings, apply_user_config

    # The builder refuses a key that is not a setting (Settings alone would ignore it).
    args = app.get("args", {}) or {}
    deployments = app.get("deployments", [])
    configs = [d["user_config"] for d in deployments if "user_config" in d]
    if any(c != configs[0] for c in configs):
        # Both deployments read the same batch knobs (admission on the ingress, batching on
        # the model); two different dicts would configure half of each.
        report.fail("serve-config", f"{where}: the deployments' user_config differ")
    try:
        settings = Settings.model_validate(args)
        for config in configs:  # as the replicas' reconfigure will apply it to their args
            try:
                applied = apply_user_config(settings, config)
            except ValidationError as exc:  # told as a replica would refuse it
                said = "; ".join(user_config_errors(exc))
                report.fail("serve-config", f"{where}: user_config refused: {said}")
                continue
            asked, warmed = applied.batch.micro_batch_tokens, settings.batch.micro_batch_tokens
            if asked > warmed:  # a GPU model replica recorded its CUDA graphs for args' budget
                report.fail(
                    "serve-config",
                    f"{where}: user_config's micro_batch_tokens {asked} is above args' "
                    f"batch.micro_batch_tokens ({warmed}), which the model replicas warm up "
                    "for: a GPU replica would refuse the user_config",
                )
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
