"""Ray Serve's own floor, measured beside the service in the same run.

A deployment that answers every request with a constant JSON body and reads nothing, served
by the same Ray, behind the same ingress (HAProxy and direct ingress by default), loaded with
the same request bodies and clients as the tiny-model service. What it costs per request is
what any Ray Serve application costs on this machine; what the service costs beyond it is
what the service adds. Both come from /proc in the same run, so a slow or busy machine moves
both.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve import Deployment
from starlette.requests import Request
from starlette.responses import Response

FLOOR_APP = "bench-floor"
ANSWER = b'{"model":"floor","results":[]}'


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Floor:
    """Answers a constant JSON body without reading the request."""

    async def __call__(self, request: Request) -> Response:
        return Response(ANSWER, media_type="application/json")


def logged_as_service(deployment: Any, access_log: bool) -> Deployment:
    """A floor `deployment` logging as the service does (`Settings.access_log`): Ray's access
    log line per request costs CPU on every request, so a floor pays it only when the
    service does."""
    logged: Deployment = deployment.options(logging_config={"enable_access_log": access_log})
    return logged


def deploy(base_url: str, access_log: bool) -> str:
    """Run the floor application next to whatever is deployed; its URL."""
    serve.run(
        logged_as_service(Floor, access_log).bind(), name=FLOOR_APP, route_prefix=f"/{FLOOR_APP}"
    )
    return f"{base_url}/{FLOOR_APP}"


def remove() -> None:
    """Delete the floor application, so that it costs nothing in later measurements."""
    serve.delete(FLOOR_APP)


def added(service: dict[str, Any], floor: dict[str, Any]) -> float | None:
    """Server CPU ms per request the service spends beyond the floor at the same level."""
    s, f = service["server_cpu_ms_per_request"], floor["server_cpu_ms_per_request"]
    return None if s is None or f is None else round(s - f, 3)
