"""The alert rules and every dashboard query through `promtool check rules`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

from k8s.checks.common import Doc, Report, find

# Grafana variables, replaced by a concrete value so each query is plain PromQL.
DASHBOARD_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$application": "sentiment",
    "${application}": "sentiment",
}


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
