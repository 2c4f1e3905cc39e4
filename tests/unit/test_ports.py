"""The port picker stays out of the ranges Ray and the kernel hand out on their own."""

from __future__ import annotations

import socket

import pytest

from loadtest.ports import _ephemeral, candidates, free_port


def test_never_picks_a_port_serve_gives_its_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT", raising=False)
    monkeypatch.delenv("RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT", raising=False)
    pool = set(candidates())
    assert pool and not pool & set(range(30000, 31001))
    monkeypatch.setenv("RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT", "21000")
    monkeypatch.setenv("RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT", "21999")
    moved = set(candidates())
    assert not moved & set(range(21000, 22000))
    low, high = _ephemeral()
    assert 30500 in moved or low <= 30500 <= high


def test_picks_a_port_that_can_be_bound() -> None:
    port = free_port()
    assert port in candidates()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
