"""`make gpu-bench` measures the GPU pod the RayService runs: the same ingress replicas per
model replica, and the same model calls in flight per ingress replica."""

from __future__ import annotations

import yaml

from loadtest import gpubench
from tests.k8s.conftest import REPO


def test_the_gpu_bench_runs_the_rayservice_pod_shape() -> None:
    (service, *_) = yaml.safe_load_all((REPO / "k8s" / "rayservice.yaml").read_text())
    (app,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    floor = {d["name"]: d["autoscaling_config"]["min_replicas"] for d in app["deployments"]}
    per_gpu = floor["SentimentIngress"] / floor["SentimentModel"]
    assert per_gpu == gpubench.INGRESS_PER_GPU
    assert app["args"]["ingress_calls_in_flight"] == gpubench.CALLS_IN_FLIGHT
