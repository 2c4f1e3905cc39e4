"""A real Ray Serve instance on 127.0.0.1, started once per test session.

Applications are deployed the way production deploys them (KubeRay's serveConfigV2): a
declarative config naming `service.deployment:build_app`, validated against Ray's deploy schema
and sent to the dashboard's REST API, the request `serve deploy` and KubeRay send. That is
also the path on which a new `user_config` reaches running replicas through `reconfigure`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import ray
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families
from ray import serve
from ray.dashboard.modules.serve.sdk import ServeSubmissionClient
from ray.serve.schema import ServeDeploySchema

from tests.net import free_port

DEPLOYMENTS = ("SentimentIngress", "SentimentModel")
TEST_ARGS: dict[str, Any] = {
    "max_seq_len": 32,
    "max_texts_per_request": 8,
    "max_text_chars": 400,
    "max_body_bytes": 4096,
    "num_cpus": 0.25,
    "ingress_num_cpus": 0.1,
    "metrics_refresh_s": 0.5,
}
TEST_BATCH: dict[str, Any] = {
    "max_batch_texts": 64,
    "batch_wait_timeout_s": 0.0,
    "max_batch_tokens": 1024,
    "micro_batch_tokens": 256,
    "max_pending_texts": 256,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the monitoring module first of the tests on the session's cluster.

    Ray's metrics agent keeps the counters and histograms of every replica the session ever
    ran, so its metrics page grows with each application a test deploys; the monitoring tests
    scrape it with a real Prometheus every second. Run after a dozen applications on two busy
    cores, that Prometheus lost series which Ray's endpoint still exported; run first, it sees
    the page a production Prometheus sees from a long-lived cluster's few applications."""
    mine = [i for i, item in enumerate(items) if "tests/integration/" in item.nodeid]
    block = [items[i] for i in mine]
    block.sort(key=lambda item: "test_monitoring.py" not in item.nodeid)  # stable
    for i, item in zip(mine, block, strict=True):
        items[i] = item


def _named(line: str, names: tuple[str, ...]) -> bool:
    """Whether an exposition line (sample, HELP or TYPE) belongs to a family in `names`."""
    if line.startswith("# "):
        parts = line.split(" ", 3)
        return len(parts) > 2 and parts[2].startswith(names)
    return line.startswith(names)


@dataclass
class Deployed:
    """One application in the shared Serve instance."""

    name: str
    url: str

    def classify(self, body: object, timeout: float = 30) -> requests.Response:
        return requests.post(f"{self.url}/v1/classify", json=body, timeout=timeout)

    def ready(self) -> dict[str, Any]:
        response = requests.get(f"{self.url}/readyz", timeout=10)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result


@dataclass
class Cluster:
    http_port: int
    metrics_port: int
    dashboard_port: int
    model_dir: Path
    config_path: Path
    apps: dict[str, dict[str, Any]] = field(default_factory=dict)

    def deploy(
        self,
        name: str,
        batch: dict[str, Any] | None = None,
        limits: dict[str, Any] | None = None,
        **args: Any,
    ) -> Deployed:
        """Add or update application `name` and wait until it serves that `user_config`:
        the batch knobs, and any request `limits` to set at run time."""
        user_config = {**TEST_BATCH, **(batch or {}), **(limits or {})}
        colocated = args.get("layout") == "colocated"  # one deployment, the ingress
        deployments = DEPLOYMENTS[:1] if colocated else DEPLOYMENTS
        self.apps[name] = {
            "name": name,
            "route_prefix": f"/{name}",
            "import_path": "service.deployment:build_app",
            "args": {"model_path": str(self.model_dir), **TEST_ARGS, **args},
            "deployments": [{"name": d, "user_config": user_config} for d in deployments],
        }
        self.apply()
        app = Deployed(name, f"http://127.0.0.1:{self.http_port}/{name}")
        self.wait_for(lambda: _serves(app, user_config), timeout=180)
        return app

    def remove(self, *names: str) -> None:
        """Shut applications down (gracefully, as `serve deploy` does for a dropped app)."""
        for name in names:
            del self.apps[name]
        self.apply()

    def apply(self) -> None:
        """Deploy the whole config; apps missing from it are shut down gracefully. The config
        is also written out, for reading after a failure."""
        config = {"applications": list(self.apps.values())}
        self.config_path.write_text(yaml.safe_dump(config))
        # `serve deploy`'s own steps, in this process: a CLI process per call spent seconds
        # importing Ray before sending this one request.
        schema = ServeDeploySchema.model_validate(config)
        client = ServeSubmissionClient(f"http://127.0.0.1:{self.dashboard_port}")
        client.deploy_applications(schema.model_dump(exclude_unset=True))

    def scrape(self, *names: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Parse Ray's metrics endpoint with prometheus_client's own parser; with `names`, only
        the families whose names start with one of them (the page holds every replica the
        session ran, megabytes late in a run, and tests poll it)."""
        text = requests.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        if names:
            text = "".join(line + "\n" for line in text.splitlines() if _named(line, names))
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples.setdefault(s.name, []).append((dict(s.labels), s.value))
        return samples

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a sample's values over the series whose labels include `labels`."""
        return sum(
            value
            for got, value in self.scrape(name).get(name, [])
            if all(got.get(k) == v for k, v in labels.items())
        )

    def wait_for(self, condition: Callable[[], bool], timeout: float = 30.0) -> None:
        """Poll until `condition` holds (Ray exports metrics once a second here)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s")
            time.sleep(0.25)


def _serves(app: Deployed, user_config: dict[str, Any]) -> bool:
    status = serve.status().applications.get(app.name)
    if status is not None and status.status == "DEPLOY_FAILED":
        raise AssertionError(f"{app.name} failed to deploy: {status.message}")
    try:
        ready = app.ready()
        serving = {**(ready.get("batch") or {}), **(ready.get("limits") or {})}
        return all(serving.get(key) == value for key, value in user_config.items())
    except requests.RequestException:
        return False


@pytest.fixture(scope="session")
def cluster(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Export metrics every second instead of every ten, so tests wait less for them.
    os.environ["RAY_metrics_report_interval_ms"] = "1000"  # noqa: SIM112  # Ray's own spelling
    c = Cluster(
        http_port=free_port(),
        metrics_port=free_port(),
        dashboard_port=free_port(),
        model_dir=tiny_model_dir,
        config_path=tmp_path_factory.mktemp("serve") / "config.yaml",
    )
    ray.init(
        # Logical CPUs: room for every test application's reservations at once.
        num_cpus=8,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        dashboard_port=c.dashboard_port,
        _metrics_export_port=c.metrics_port,
        log_to_driver=False,
    )
    serve.start(http_options={"host": "127.0.0.1", "port": c.http_port})
    yield c
    serve.shutdown()
    ray.shutdown()


@pytest.fixture(autouse=True)
def _remove_test_apps(request: pytest.FixtureRequest) -> Iterator[None]:
    """Shut down the applications a test deployed once it ends: idle replicas of finished
    tests would otherwise keep polling and exporting beside every later test on few cores."""
    if "cluster" not in request.fixturenames:
        yield
        return
    cluster: Cluster = request.getfixturevalue("cluster")
    before = set(cluster.apps)
    yield
    added = set(cluster.apps) - before
    if added:
        cluster.remove(*added)
        # Wait until they are gone: replicas dying during the next test would take their
        # exported series with them while that test reads the metrics.
        cluster.wait_for(lambda: not added & set(serve.status().applications), timeout=120)


@pytest.fixture(scope="session")
def main_app(cluster: Cluster) -> Deployed:
    """The application most tests share; its batch knobs stay at TEST_BATCH."""
    return cluster.deploy("main")
