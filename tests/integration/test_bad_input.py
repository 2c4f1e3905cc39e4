"""Bad input over real HTTP: every malformed request is a 4xx in the one error shape.

Beside the hand-picked cases, schemathesis fuzzes the service from its own /openapi.json and
requires no 5xx and no answer outside the documented statuses and schemas.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import Deployed

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("text", ["\u200b", "\u0000", "\u200b\u200d ", "\ufeff", "\u00a0\x07"])
def test_invisible_texts_are_422_with_field(main_app: Deployed, text: str) -> None:
    response = main_app.classify({"texts": ["fine", text]})
    assert response.status_code == 422
    [detail] = response.json()["error"]["details"]
    assert detail["field"] == "texts[1]" and "zero-width" in detail["reason"]


def test_half_a_surrogate_pair_is_422_with_field(main_app: Deployed) -> None:
    # requests writes the lone surrogate as the JSON escape "\\ud83d", as a client that cut an
    # emoji in two would; the tokenizer cannot read it, so it must not get that far.
    response = main_app.classify({"texts": ["fine", "great \ud83d"]})
    assert response.status_code == 422
    [detail] = response.json()["error"]["details"]
    assert detail["field"] == "texts[1]" and "surrogate pair" in detail["reason"]
    assert main_app.classify({"text": "great \U0001f600"}).status_code == 200


@pytest.mark.parametrize(
    ("content_type", "data"),
    [("text/plain", '{"text": "great phone"}'), ("application/x-www-form-urlencoded", "text=x"),
     ("multipart/form-data; boundary=b", "--b--")],
)  # fmt: skip
def test_non_json_content_types_are_415(main_app: Deployed, content_type: str, data: str) -> None:
    response = requests.post(
        f"{main_app.url}/v1/classify", data=data, headers={"content-type": content_type}, timeout=30
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


def test_a_gzipped_body_is_415_naming_the_coding(main_app: Deployed) -> None:
    response = requests.post(
        f"{main_app.url}/v1/classify",
        data=gzip.compress(b'{"text": "great phone"}'),
        headers={"content-type": "application/json", "content-encoding": "gzip"},
        timeout=30,
    )
    assert response.status_code == 415 and response.headers["Accept-Encoding"] == "identity"
    assert "Content-Encoding gzip" in response.json()["error"]["message"]


def test_deeply_nested_json_is_400_not_500(main_app: Deployed) -> None:
    raw = b"[" * 2000 + b"]" * 2000  # under the test app's 4096-byte body limit
    response = requests.post(f"{main_app.url}/v1/classify", data=raw, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_request"


def test_fuzzing_the_openapi_schema_finds_no_5xx(main_app: Deployed, tmp_path: Path) -> None:
    """Schemathesis: schema examples, boundary values and random (also invalid) bodies."""
    report = tmp_path / "report.json"
    config = tmp_path / "schemathesis.toml"
    # Invalid bodies are refused with these (413 when a generated body is over the size limit;
    # schemathesis does not count 413 as a refusal by itself).
    config.write_text(
        '[checks.negative_data_rejection]\nexpected-statuses = ["400", "413", "415", "422"]\n'
    )
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config),
        "run", f"{main_app.url}/openapi.json",
        "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
        "response_schema_conformance,negative_data_rejection",
        "--phases", "examples,coverage,fuzzing", "--max-examples", "100", "--seed", "11",
        "--workers", "2", "--request-timeout", "20", "--report", "json",
        "--report-json-path", str(report),
    ]  # fmt: skip
    # In tmp_path: schemathesis keeps a cache folder in its working directory.
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    cases = json.loads(report.read_text())["test_cases"]
    assert cases["generated"] >= 100 and not cases["with_failures"] and not cases["errored"], cases
