"""The Rust-fronted reference (loadtest.reference): real mosec on loopback serving the tiny
model. It answers as the model does in-process, batches concurrent requests, refuses a bad
body, and leaves nothing running or listening once it ends."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadtest import reference
from loadtest.ports import free_port
from service.model import SentimentModel
from tests.tiny_bert import SAMPLE_TEXT


def _post(url: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _group_alive(pgid: int, wait_s: float = 10.0) -> bool:
    """Whether any process of the group is left once init had time to reap those that
    ended (a killed process exists, as a zombie, until its parent waits for it)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    return True


def test_the_reference_answers_as_the_model_and_ends_cleanly(tiny_model_dir: Path) -> None:
    assert reference.available(), "mosec is a dev dependency"
    port = free_port()
    texts = SAMPLE_TEXT[:6]
    with reference.serve(tiny_model_dir, port, "torch") as running:
        url, pgid = running.url, os.getpgid(running.pid)
        # Sent at once, so that mosec may batch them: each still gets its own answer.
        with ThreadPoolExecutor(len(texts)) as pool:
            answers = list(pool.map(lambda t: _post(url, json.dumps({"text": t}).encode()), texts))
        status, refused = _post(url, b'{"texts": ["a list is not this API"]}')
    assert [s for s, _ in answers] == [200] * len(texts)
    local = SentimentModel.load(tiny_model_dir, device="cpu", backend="torch")
    expected = local.predict([e.ids for e in local.encode(texts)]).numpy()
    got = np.array([[a["probs"][label] for label in local.labels] for _, a in answers])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [a["label"] for _, a in answers] == [local.labels[i] for i in expected.argmax(1)]
    assert status == 400 and "text" in refused
    assert not _listening(port)
    assert not _group_alive(pgid)


def test_without_mosec_the_reference_is_skipped_with_a_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tiny_model_dir: Path
) -> None:
    monkeypatch.setattr(reference, "available", lambda: False)
    assert reference.measure(tiny_model_dir, "torch", lambda url: pytest.fail(url)) is None
    assert "mosec is not installed" in capsys.readouterr().out
