"""Where a lone request's time goes: the latency of each hop of the request path, one at a time.

At one client nothing is batched, so a request's latency is the sum of its hops. Measured on
the running service, from the load generator's process: a Serve handle call to a deployment
that does nothing (Ray's own cost of one hop between processes), the model replica's `info`
(the same hop to the real replica), one text through `infer` (hop plus one forward), HTTP to
`/healthz` (HAProxy and the ingress, no model) and to `/v1/classify` (everything).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

import numpy as np
from ray import serve

from loadtest.serving import as_replicas_call
from loadtest.timing import median_ms
from service.encoding import TextEncoder

ECHO_APP = "hops-echo"


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Echo:
    """A deployment that does nothing: the floor of one handle call."""

    async def ping(self) -> int:
        return 1


def _median_ms(call: Callable[[], object], count: int) -> float:
    return round(median_ms(call, count, warmup=max(1, count // 10)), 2)


def _post(url: str, body: bytes) -> Callable[[], object]:
    def call() -> object:
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()

    return call


def _get(url: str) -> Callable[[], object]:
    def call() -> object:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read()

    return call


def measure(classify_url: str, app_name: str, encoder: TextEncoder, count: int) -> dict[str, Any]:
    """Median milliseconds of each hop, `count` calls each, one at a time."""
    serve.run(Echo.bind(), name=ECHO_APP, route_prefix=f"/{ECHO_APP}")  # type: ignore[attr-defined]
    try:
        echo = as_replicas_call(serve.get_deployment_handle("Echo", app_name=ECHO_APP))
        text = "the battery lasts two days and the screen is bright"
        packed, _ = encoder.encode([text])
        budget = np.array([10.0], dtype=np.float32)
        body = json.dumps({"text": text}).encode()
        health = classify_url.replace("/v1/classify", "/healthz")
        hops: dict[str, Any] = {
            "handle_call_to_empty_deployment_ms": _median_ms(
                lambda: echo.ping.remote().result(), count
            ),
            # The co-located layout has no model deployment to call: those hops do not exist.
            "handle_call_to_model_info_ms": None,
            "handle_call_infer_one_text_ms": None,
        }
        if "SentimentModel" in serve.status().applications[app_name].deployments:
            model = as_replicas_call(
                serve.get_deployment_handle("SentimentModel", app_name=app_name)
            )
            hops["handle_call_to_model_info_ms"] = _median_ms(
                lambda: model.info.remote().result(), count
            )
            hops["handle_call_infer_one_text_ms"] = _median_ms(
                lambda: model.infer.remote(packed, budget).result(), count
            )
        hops["http_healthz_ms"] = _median_ms(_get(health), count)
        hops["http_classify_one_text_ms"] = _median_ms(_post(classify_url, body), count)
        hops["calls_each"] = count
        return hops
    finally:
        serve.delete(ECHO_APP)


def report_lines(hops: dict[str, Any]) -> list[str]:
    """A markdown table of the hops."""
    names = {
        "handle_call_to_empty_deployment_ms": "Serve handle call to a deployment that does nothing",
        "handle_call_to_model_info_ms": "handle call to the model replica's `info`",
        "handle_call_infer_one_text_ms": "handle call `infer`, one text (hop + one forward)",
        "http_healthz_ms": "HTTP `/healthz` (HAProxy + ingress, no model)",
        "http_classify_one_text_ms": "HTTP `/v1/classify`, one text (everything)",
    }
    lines = [
        f"Latency of each hop at one client (median of {hops['calls_each']} calls, "
        "from the load generator's process):",
        "",
        "| hop | ms |",
        "|---|---:|",
    ]
    lines += [f"| {label} | {_ms(hops[key])} |" for key, label in names.items()]
    return [*lines, ""]


def _ms(value: float | None) -> str:
    return "none (co-located layout)" if value is None else str(value)
