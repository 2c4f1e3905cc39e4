"""The FastAPI shell: framework errors and unexpected failures use the one error shape."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.http import create_app


def client() -> TestClient:
    app = create_app()

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret connection string")

    @app.get("/items/{n}")
    async def item(n: int) -> dict[str, int]:
        return {"n": n}

    return TestClient(app, raise_server_exceptions=False)


def test_unexpected_exception_is_a_generic_500() -> None:
    response = client().get("/boom")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert "secret" not in response.text


def test_framework_validation_uses_our_shape() -> None:
    response = client().get("/items/abc")
    assert response.status_code == 422
    [detail] = response.json()["error"]["details"]
    assert detail["field"] == "path.n"


def test_unknown_route_uses_our_shape() -> None:
    response = client().get("/nowhere")
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "Not Found"}}


def test_wrong_method_names_the_allowed_ones() -> None:
    response = client().post("/items/1")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert response.headers["allow"] == "GET"


def test_a_trailing_slash_is_an_unknown_route_not_a_redirect() -> None:
    response = client().get("/items/1/", follow_redirects=False)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
