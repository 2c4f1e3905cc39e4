"""/docs and /redoc work without a CDN: every file their pages load is served by the app."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from service.http import create_app, document_request_body
from service.schemas import (
    RESPONSE_EXAMPLE,
    ClassifyResponse,
    parse_request,
    plain_texts,
    request_model,
)
from service.settings import Settings

JS_TYPES = ("text/javascript", "application/javascript")


def loaded_urls(html: str) -> list[str]:
    """What a browser fetches for the page: scripts, stylesheets, icons and the spec."""
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    refs += re.findall(r"""url:\s*['"]([^'"]+)['"]""", html)  # Swagger UI's spec
    refs += re.findall(r'spec-url="([^"]+)"', html)  # ReDoc's
    return refs


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_a_docs_page_loads_nothing_from_elsewhere(page: str) -> None:
    client = TestClient(create_app())
    answer = client.get(page)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    urls = loaded_urls(answer.text)
    assert urls and "/openapi.json" in urls
    for url in urls:
        assert url.startswith("/"), f"{page} loads {url} from another host"
        fetched = client.get(url)
        assert fetched.status_code == 200 and len(fetched.content) > 100, url
    scripts = [u for u in urls if u.endswith(".js")]
    assert scripts
    for url in scripts:  # a browser refuses to run a script sent as another type
        assert client.get(url).headers["content-type"].split(";")[0] in JS_TYPES, url


def test_swagger_ui_is_a_version_that_reads_openapi_3_1() -> None:
    client = TestClient(create_app())
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    bundle = client.get("/docs/assets/swagger-ui-bundle.js").text
    assert re.search(r'"5\.\d+\.\d+"', bundle)  # Swagger UI 4 shows OpenAPI 3.1 as an error


def test_under_a_route_prefix_the_pages_point_below_it() -> None:
    client = TestClient(create_app(), root_path="/sentiment")
    urls = loaded_urls(client.get("/docs").text)
    assert all(u.startswith("/sentiment/") for u in urls), urls


def test_an_unknown_asset_is_a_404_in_the_error_shape() -> None:
    answer = TestClient(create_app()).get("/docs/assets/nothing.js")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


def test_every_request_example_is_a_body_the_service_accepts() -> None:
    app = create_app()

    @app.post("/v1/classify")
    async def classify() -> None: ...

    settings = Settings()
    limits = (settings.max_texts_per_request, settings.max_text_chars)
    document_request_body(app, "/v1/classify", request_model(*limits))
    body = app.openapi()["paths"]["/v1/classify"]["post"]["requestBody"]
    examples = body["content"]["application/json"]["examples"]
    assert {"text", "texts"} <= examples.keys()
    for example in examples.values():
        raw = json.dumps(example["value"]).encode()
        texts = parse_request(raw, request_model(*limits)).all_texts()
        assert texts and texts == plain_texts(raw, *limits)  # the lean path takes it as is


def test_the_response_example_is_a_valid_answer() -> None:
    assert ClassifyResponse.model_validate(RESPONSE_EXAMPLE).model_dump() == RESPONSE_EXAMPLE
