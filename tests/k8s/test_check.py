"""k8s/check.py passes on the repository and fails, naming the problem, on broken copies."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s.checks import run_checks
from k8s.checks.loadtest_sync import LOADTEST_CONFIGMAP
from k8s.checks.scanner import checkov_path
from k8s.checks.schemas import strict
from tests.k8s.conftest import REPO, synced_copy

Docs = list[dict[str, Any]]


def edit_yaml(path: Path, change: Callable[[Docs], None]) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    change(docs)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def edit_serve_config(change: Callable[[dict[str, Any]], None]) -> Callable[[Docs], None]:
    def apply(docs: Docs) -> None:
        spec = docs[0]["spec"]
        config = yaml.safe_load(spec["serveConfigV2"])
        change(config)
        spec["serveConfigV2"] = yaml.safe_dump(config, sort_keys=False)

    return apply


def worker(docs: Docs) -> dict[str, Any]:
    group: dict[str, Any] = docs[0]["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    return group


def named(docs: Docs, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["metadata"]["name"] == name and d["kind"] == "Job"]
    return doc


def master(docs: Docs) -> dict[str, Any]:
    return named(docs, "sentiment-loadtest-master")


def workers(docs: Docs) -> dict[str, Any]:
    return named(docs, "sentiment-loadtest-workers")


def head(docs: Docs) -> dict[str, Any]:
    group: dict[str, Any] = docs[0]["spec"]["rayClusterConfig"]["headGroupSpec"]
    return group


def deployment(config: dict[str, Any], name: str = "SentimentModel") -> dict[str, Any]:
    (dep,) = [d for d in config["applications"][0]["deployments"] if d["name"] == name]
    found: dict[str, Any] = dep
    return found


def ingress(config: dict[str, Any]) -> dict[str, Any]:
    return deployment(config, "SentimentIngress")


def too_many_texts_per_request(config: dict[str, Any]) -> None:
    """A request limit set at run time that admission could never hold."""
    for dep in config["applications"][0]["deployments"]:
        dep["user_config"]["max_texts_per_request"] = 4096


def replace_text(old: str, new: str) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        text = path.read_text()
        assert old in text, f"{old!r} not in {path.name}"
        path.write_text(text.replace(old, new))

    return apply


def append(text: str) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        path.write_text(path.read_text() + text)

    return apply


def yaml_edit(change: Callable[[Docs], None]) -> Callable[[Path], None]:
    return lambda path: edit_yaml(path, change)


def set_in(*keys: Any, value: Any) -> Callable[[Any], None]:
    def apply(node: Any) -> None:
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return apply


# (id, file, edit, check tag, words the problem must contain, the run_checks steps meant to
# catch it). Only those steps run on the broken copy (rendering always does): the full suite
# takes ~1 s a copy, and test_repository_passes and the baseline run all of it.
BREAKAGES: list[tuple[str, str, Callable[[Path], None], str, str, tuple[str, ...]]] = [
    (
        "job-unknown-field",
        "k8s/locust.yaml",
        yaml_edit(
            lambda d: master(d)["spec"]["template"]["spec"]["containers"][0].update(resource={})
        ),
        "kubernetes-validate",
        "'resource' was unexpected",
        ("core",),
    ),
    (
        "job-type-error",
        "k8s/locust.yaml",
        yaml_edit(lambda d: workers(d)["spec"].update(parallelism="four")),
        "kubernetes-validate",
        "Job/sentiment-loadtest-workers",
        ("core",),
    ),
    (
        "rayservice-unknown-field",
        "k8s/rayservice.yaml",
        yaml_edit(lambda d: worker(d).update(maxReplica=8)),
        "crd-schema",
        "'maxReplica' was unexpected",
        ("crds",),
    ),
    (
        "rayservice-type-error",
        "k8s/rayservice.yaml",
        yaml_edit(lambda d: worker(d).update(minReplicas="one")),
        "crd-schema",
        "'one' is not of type 'integer'",
        ("crds",),
    ),
    (
        "rayservice-pod-template-unknown-field",
        "k8s/rayservice.yaml",
        yaml_edit(lambda d: worker(d)["template"]["spec"]["containers"][0].update(gpus=1)),
        "kubernetes-validate",
        "RayService/sentiment a100",
        ("core",),
    ),
    (
        "podmonitor-unknown-field",
        "k8s/podmonitors.yaml",
        yaml_edit(lambda d: d[0]["spec"]["podMetricsEndpoints"][0].update(scrapeEvery="15s")),
        "crd-schema",
        "'scrapeEvery' was unexpected",
        ("crds",),
    ),
    (
        "prometheusrule-bad-promql",
        "k8s/prometheusrule.yaml",
        replace_text("> 0.25", "> > 0.25"),
        "promtool",
        "PrometheusRule",
        ("prometheus",),
    ),
    (
        "prometheusrule-type-error",
        "k8s/prometheusrule.yaml",
        yaml_edit(lambda d: d[0]["spec"]["groups"][0].update(rules="none")),
        "crd-schema",
        "is not of type 'array'",
        ("crds",),
    ),
    (
        "dashboard-bad-promql",
        "k8s/grafana-dashboard.json",
        replace_text("sum by (status) (rate(", "sum by (status) (rate(("),
        "promtool",
        "dashboard",
        ("prometheus",),
    ),
    (
        "serve-import-path",
        "k8s/rayservice.yaml",
        yaml_edit(
            edit_serve_config(
                lambda c: c["applications"][0].update(import_path="service.deployment:nope")
            )
        ),
        "serve-config",
        "import_path 'service.deployment:nope'",
        ("serve",),
    ),
    (
        "serve-unknown-arg",
        "k8s/rayservice.yaml",
        yaml_edit(edit_serve_config(lambda c: c["applications"][0]["args"].update(num_gpu=1))),
        "serve-config",
        "args key 'num_gpu' is not a service setting",
        ("serve",),
    ),
    (
        "serve-bad-user-config",
        "k8s/rayservice.yaml",
        yaml_edit(edit_serve_config(lambda c: deployment(c)["user_config"].update(max_batch=8))),
        "serve-config",
        "user_config refused: max_batch=8: no such key; did you mean",
        ("serve",),
    ),
    (
        "serve-budget-over-warm-up",
        "k8s/rayservice.yaml",
        yaml_edit(
            edit_serve_config(
                lambda c: c["applications"][0]["args"]["batch"].update(micro_batch_tokens=4096)
            )
        ),
        "serve-config",
        "user_config's micro_batch_tokens 16384 is above args' batch.micro_batch_tokens (4096)",
        ("serve",),
    ),
    (
        "serve-limit-over-admission",
        "k8s/rayservice.yaml",
        yaml_edit(edit_serve_config(too_many_texts_per_request)),
        "serve-config",
        "max_pending_texts (2048) must be at least max_texts_per_request (4096)",
        ("serve",),
    ),
    (
        "serve-autoscaling-typo",
        "k8s/rayservice.yaml",
        yaml_edit(edit_serve_config(lambda c: deployment(c)["autoscaling_config"].update(max=3))),
        "serve-config",
        "unknown key 'max'",
        ("serve",),
    ),
    (
        "serve-schema",
        "k8s/rayservice.yaml",
        yaml_edit(edit_serve_config(lambda c: deployment(c).update(max_ongoing_requests=-1))),
        "serve-config",
        "ServeDeploySchema rejects",
        ("serve",),
    ),
    (
        "autoscaling-bounds",
        "k8s/rayservice.yaml",
        yaml_edit(
            edit_serve_config(lambda c: deployment(c)["autoscaling_config"].update(max_replicas=16))
        ),
        "consistency",
        "max_replicas (16) must equal the worker group's maxReplicas (8)",
        ("cluster",),
    ),
    (
        "half-a-gpu",
        "k8s/rayservice.yaml",
        yaml_edit(
            edit_serve_config(lambda c: deployment(c)["ray_actor_options"].update(num_gpus=0.5))
        ),
        "consistency",
        "must both be 1",
        ("cluster",),
    ),
    (
        "ingress-asks-for-a-gpu",
        "k8s/rayservice.yaml",
        yaml_edit(edit_serve_config(lambda c: ingress(c)["ray_actor_options"].update(num_gpus=1))),
        "consistency",
        "deployment SentimentIngress: num_gpus 1: only SentimentModel uses the GPU",
        ("cluster",),
    ),
    (
        "model-deployment-renamed",
        "k8s/rayservice.yaml",
        yaml_edit(edit_serve_config(lambda c: deployment(c).update(name="SentimentClassifier"))),
        "serve-config",
        "deployment 'SentimentClassifier' is not in the application",
        ("serve",),
    ),
    (
        "ingress-bounds-not-per-pod",
        "k8s/rayservice.yaml",
        yaml_edit(
            edit_serve_config(lambda c: ingress(c)["autoscaling_config"].update(min_replicas=2))
        ),
        "consistency",
        "must be the same multiple k of the worker group's minReplicas/maxReplicas (1..8)",
        ("cluster",),
    ),
    (
        "pod-cpus-overcommitted",
        "k8s/rayservice.yaml",
        yaml_edit(edit_serve_config(lambda c: ingress(c)["ray_actor_options"].update(num_cpus=2))),
        "consistency",
        "= 12 must leave at least one of the pod's 8 CPUs",
        ("cluster",),
    ),
    (
        "model-takes-too-few-calls",
        "k8s/rayservice.yaml",
        yaml_edit(edit_serve_config(lambda c: deployment(c).update(max_ongoing_requests=64))),
        "consistency",
        "max_ongoing_requests (64) must exceed SentimentIngress max_replicas x "
        "ingress_calls_in_flight (80)",
        ("cluster",),
    ),
    (
        "model-without-surge",
        "k8s/rayservice.yaml",
        yaml_edit(edit_serve_config(lambda c: deployment(c).pop("max_surge_percent"))),
        "consistency",
        "deployment SentimentModel: set max_surge_percent (1-100)",
        ("cluster",),
    ),
    (
        "user-configs-differ",
        "k8s/rayservice.yaml",
        yaml_edit(
            edit_serve_config(lambda c: ingress(c)["user_config"].update(max_pending_texts=64))
        ),
        "serve-config",
        "the deployments' user_config differ",
        ("serve",),
    ),
    (
        "worker-without-haproxy",
        "k8s/rayservice.yaml",
        yaml_edit(
            lambda d: worker(d)["template"]["spec"]["containers"][0].update(
                env=[{"name": "SENTIMENT_METRICS_PORT", "value": "8080"}]
            )
        ),
        "consistency",
        "RayService/sentiment a100: env RAY_SERVE_ENABLE_HA_PROXY must be '1' on every node",
        ("cluster",),
    ),
    (
        "not-on-a100",
        "k8s/rayservice.yaml",
        yaml_edit(lambda d: worker(d)["template"]["spec"].pop("affinity")),
        "consistency",
        "not pinned to A100",
        ("cluster",),
    ),
    (
        "head-takes-replicas",
        "k8s/rayservice.yaml",
        yaml_edit(lambda d: head(d)["rayStartParams"].pop("num-cpus")),
        "consistency",
        "num-cpus 0",
        ("cluster",),
    ),
    (
        "podmonitor-selects-nothing",
        "k8s/podmonitors.yaml",
        yaml_edit(set_in(1, "spec", "selector", "matchLabels", "ray.io/node-type", value="wrkr")),
        "consistency",
        "no PodMonitor selects the Ray worker pods",
        ("wiring",),
    ),
    (
        "missing-configmap",
        "k8s/locust.yaml",
        yaml_edit(
            lambda d: workers(d)["spec"]["template"]["spec"]["volumes"][0].update(
                configMap={"name": "loadtest-files"}
            )
        ),
        "consistency",
        "ConfigMap loadtest-files does not exist",
        ("wiring",),
    ),
    (
        "locust-wrong-host",
        "k8s/locust.yaml",
        replace_text("http://sentiment-serve-svc:8000", "http://sentiment-svc:8000"),
        "consistency",
        "is not the Serve service sentiment-serve-svc",
        ("wiring",),
    ),
    (
        "service-selects-nothing",
        "k8s/locust.yaml",
        replace_text("    ray.io/node-type: worker\n", "    ray.io/node-type: workers\n"),
        "consistency",
        "Service/sentiment-ray-workers selects no pod",
        ("wiring",),
    ),
    (
        "locust-worker-count",
        "k8s/locust.yaml",
        yaml_edit(lambda d: workers(d)["spec"].update(parallelism=2, completions=2)),
        "consistency",
        "parallelism 2 != the master's WORKERS {'4'}",
        ("wiring",),
    ),
    (
        "locust-starts-on-apply",
        "k8s/locust.yaml",
        yaml_edit(lambda d: master(d)["spec"].pop("suspend")),
        "consistency",
        "Job/sentiment-loadtest-master must be created suspended",
        ("wiring",),
    ),
    (
        "kustomization-missing-resource",
        "k8s/kustomization.yaml",
        replace_text("  - locust.yaml\n", "  - locust.yaml\n  - hpa.yaml\n"),
        "kustomize",
        "resource hpa.yaml does not exist",
        (),
    ),
    (
        "dockerfile-ray-version",
        "Dockerfile",
        replace_text("rayproject/ray:2.60.0-py311-gpu", "rayproject/ray:2.59.0-py311-gpu"),
        "dockerfile",
        "RayService rayVersion 2.60.0 != image Ray 2.59.0",
        ("dockerfile",),
    ),
    (
        "dockerfile-torch-outside-pyproject",
        "Dockerfile",
        replace_text("TORCH_VERSION=2.13.0", "TORCH_VERSION=2.15.0"),
        "dockerfile",
        "torch 2.15.0 is outside pyproject's",
        ("dockerfile",),
    ),
    (
        "dockerfile-hadolint",
        "Dockerfile",
        replace_text("USER 1000\n", "USER 1000\nRUN pip install locust\n"),
        "hadolint",
        "DL3013",
        ("dockerfile",),
    ),
    (
        "dockerfile-root",
        "Dockerfile",
        replace_text("USER 1000\n", "USER 1000\nUSER root\n"),
        "dockerfile",
        "non-root USER",
        ("dockerfile",),
    ),
    (
        "dockerfile-without-haproxy",
        "Dockerfile",
        replace_text("RAY_SERVE_ENABLE_HA_PROXY=1", "RAY_SERVE_ENABLE_HA_PROXY=0"),
        "dockerfile",
        "the image must default to ENV RAY_SERVE_ENABLE_HA_PROXY=1",
        ("dockerfile",),
    ),
    (
        "dockerfile-model-path",
        "Dockerfile",
        replace_text("SENTIMENT_MODEL_PATH=/home/ray/models/default", "SENTIMENT_MODEL_PATH=/m"),
        "dockerfile",
        "not the image's SENTIMENT_MODEL_PATH",
        ("dockerfile",),
    ),
    (
        "dockerfile-without-lock",
        "Dockerfile",
        replace_text("-c constraints/py3.11.txt ", ""),
        "dockerfile",
        "installed with its lock: -c constraints/py3.11.txt",
        ("dockerfile",),
    ),
    (
        "lock-pins-another-ray",
        "constraints/py3.11.txt",
        replace_text("\nray==2.60.0\n", "\nray==2.61.0\n"),
        "dockerfile",
        "constraints/py3.11.txt pins 2.61.0, the image has Ray 2.60.0",
        ("dockerfile",),
    ),
    (
        "dockerignore-drops-sources",
        ".dockerignore",
        replace_text("!training\n", ""),
        "dockerfile",
        "COPY training: excluded by .dockerignore",
        ("dockerfile",),
    ),
    (
        "loadtest-out-of-sync",
        "loadtest/__init__.py",
        append("# changed\n"),
        "loadtest-sync",
        "out of date with loadtest/",
        ("loadtest-sync",),
    ),
]


@pytest.fixture(scope="module")
def baseline(schemas: Path, tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Problems of an unbroken, freshly synced copy (none once loadtest/ is complete)."""
    root = synced_copy(tmp_path_factory.mktemp("baseline"))
    return set(run_checks(root, schemas).problems)


def test_repository_passes(schemas: Path) -> None:
    report = run_checks(REPO, schemas)
    assert report.problems == []
    assert len(report.passed) == 11


@pytest.mark.parametrize(
    ("file", "edit", "tag", "words", "steps"),
    [pytest.param(*b[1:], id=b[0]) for b in BREAKAGES],
)
def test_broken_copy_fails_with_the_reason(
    schemas: Path,
    baseline: set[str],
    tmp_path: Path,
    file: str,
    edit: Callable[[Path], None],
    tag: str,
    words: str,
    steps: tuple[str, ...],
) -> None:
    root = synced_copy(tmp_path)
    edit(root / file)
    report = run_checks(root, schemas, only=steps)
    new = [p for p in report.problems if p not in baseline]
    assert any(p.startswith(f"[{tag}]") and words in p for p in new), new


def test_a_step_key_no_step_has_is_an_error(schemas: Path) -> None:
    # A misspelt key, or checkov asked for without its path, would otherwise check nothing.
    for only in (["wirng"], ["checkov"]):
        with pytest.raises(ValueError, match="unknown check steps"):
            run_checks(REPO, schemas, only=only)


def test_crd_defaults_fill_required_fields() -> None:
    # The API server fills defaults before validating: a required field with a default may
    # be absent, one without may not.
    schema = strict(
        {
            "type": "object",
            "required": ["a", "b"],
            "properties": {"a": {"type": "string", "default": "x"}, "b": {"type": "string"}},
        }
    )
    assert schema["required"] == ["b"]
    assert schema["additionalProperties"] is False


def test_cli_exit_status_and_sync(schemas: Path, tmp_path: Path) -> None:
    root = synced_copy(tmp_path)
    (root / "loadtest" / "extra_module.py").write_text("VALUE = 1\n")
    # Only a module the locustfile imports goes into the ConfigMap.
    with (root / "loadtest" / "locustfile.py").open("a") as f:
        f.write("from loadtest import extra_module  # noqa: E402\n")
    cli = [sys.executable, str(REPO / "k8s" / "check.py"), "--root", str(root)]
    stale = subprocess.run(
        [*cli, "--schemas", str(schemas), "--no-checkov"], capture_output=True, text=True
    )
    assert stale.returncode == 1
    assert "FAIL  [loadtest-sync] k8s/loadtest-configmap.yaml is out of date" in stale.stdout
    # The package's own entry point does the same as the script.
    module = [sys.executable, "-m", "k8s.checks", "--root", str(root), "--sync"]
    subprocess.run(module, check=True, capture_output=True, cwd=REPO)
    synced = (root / "k8s" / LOADTEST_CONFIGMAP).read_text()
    assert "extra_module.py: |\n    VALUE = 1\n" in synced
    problems = run_checks(root, schemas).problems
    assert not any("is out of date" in p for p in problems), problems


def test_a_relative_checkov_path_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make k8s-check` passes .venv-checkov/bin/checkov, and checkov runs in the scan folder."""
    monkeypatch.chdir(tmp_path)
    assert checkov_path("tools/bin/checkov") == str(tmp_path / "tools" / "bin" / "checkov")
    assert checkov_path("checkov") == "checkov"  # a bare name is looked up on PATH
