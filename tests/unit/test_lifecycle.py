"""Finding and ending what still listens on the service's port, on real sockets and processes."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.lifecycle import (
    HAPROXY_ENV,
    LEAN_ENV,
    listeners,
    stop_listeners,
    trim_background,
    use_haproxy,
)
from tests.net import free_port

SERVER = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
print("listening", flush=True)
time.sleep(120)
"""


def test_a_listening_socket_is_found_and_forgotten_once_closed() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        assert os.getpid() in listeners(port)
    assert listeners(port) == {}


def test_stop_listeners_ends_only_the_named_process_on_that_port(tmp_path: Path) -> None:
    port, other = free_port(), free_port()
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    procs = [
        subprocess.Popen([sys.executable, str(script), str(p)], stdout=subprocess.PIPE, text=True)
        for p in (port, other)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
        name = Path(f"/proc/{procs[0].pid}/comm").read_text().strip()
        assert stop_listeners(port, name="not-" + name) == []  # another name: left alone
        assert stop_listeners(port, name=name) == [procs[0].pid]
        assert procs[0].wait(timeout=10) != 0
        assert listeners(port) == {}
        time.sleep(0.2)
        assert procs[1].poll() is None, "a process on another port was ended"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_use_haproxy_keeps_values_already_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in HAPROXY_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "7")
    use_haproxy()
    assert all(os.environ[key] == value for key, value in HAPROXY_ENV.items())
    assert os.environ["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"] == "7"


def test_background_trimmed_apart_from_the_ingress(monkeypatch: pytest.MonkeyPatch) -> None:
    # Behind Ray's Python proxy (SENTIMENT_HAPROXY=false) Ray's background is trimmed too,
    # without switching HAProxy on; a value already set wins.
    for key in {**HAPROXY_ENV, **LEAN_ENV}:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RAY_SERVE_METRICS_EXPORT_INTERVAL_MS", "250")
    trim_background()
    assert not set(HAPROXY_ENV) & set(os.environ)
    assert os.environ["RAY_SERVE_METRICS_EXPORT_INTERVAL_MS"] == "250"
    others = {k: v for k, v in LEAN_ENV.items() if k != "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS"}
    assert others and all(os.environ[key] == value for key, value in others.items())


WAITER = """
import sys
from service.lifecycle import StopSignals
stop = StopSignals()
print("waiting", flush=True)
print("stopped by", stop.wait(), flush=True)
sys.stdin.read()  # up, as a draining server is, until every signal has been sent
"""


def test_a_burst_of_stop_signals_stops_the_server_once() -> None:
    """Ctrl-C twice, or a wrapper relaying the same signal: a handler that took a lock (the
    server's did) could be entered again inside itself and wait forever for that lock."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path.cwd(),
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "waiting\n"
        for i in range(2000):  # some land while an earlier handler is running
            proc.send_signal(signal.SIGINT if i % 2 else signal.SIGTERM)
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "no signal of the burst ended the wait"
        stopped = {f"stopped by {int(s)}\n" for s in (signal.SIGINT, signal.SIGTERM)}
        assert proc.stdout.readline() in stopped
        proc.stdin.close()
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
