"""The probe routes: /healthz, and /readyz answering what the ingress gives or its refusal."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from service.errors import NotReady, ShuttingDown
from service.http import create_app
from service.probes import add_probes


def client_for(ready: Any) -> TestClient:
    app = create_app()
    add_probes(app, ready)
    return TestClient(app)


def test_not_ready_and_draining_answer_503_in_the_error_shape() -> None:
    async def loading() -> dict[str, Any]:
        raise NotReady("model is loading or warming up", 1)

    async def draining() -> dict[str, Any]:
        raise ShuttingDown(3)

    for ready, code, retry in ((loading, "not_ready", "1"), (draining, "shutting_down", "3")):
        answer = client_for(ready).get("/readyz")
        assert answer.status_code == 503 and answer.json()["error"]["code"] == code
        assert answer.headers["Retry-After"] == retry  # every 503 says when to come back
    assert client_for(loading).get("/healthz").json() == {"status": "ok"}


def test_readyz_is_documented_with_its_fields_and_its_503() -> None:
    async def ready() -> dict[str, Any]:
        return {"status": "ready"}

    spec = client_for(ready).get("/openapi.json").json()
    get = spec["paths"]["/readyz"]["get"]
    assert get["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ReadyResponse"
    }
    assert "503" in get["responses"] and "head" not in spec["paths"]["/readyz"]
    documented = spec["components"]["schemas"]["ReadyResponse"]["properties"]
    assert {"backend", "batch", "limits", "model_calls"} <= documented.keys()
