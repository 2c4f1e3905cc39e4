"""Why serve cannot start: an address nothing answers at, found in seconds; a failed
deployment's status message, cut to the exception line an operator needs."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from service.__main__ import main
from service.startfail import cannot_listen, exception_line, failed_deployments, unreachable
from tests.net import free_port

RAY_MESSAGE = (
    "The deployment failed to start 3 times in a row. See controller logs for details. Error:\n"
    "\x1b[36mray::ServeReplica:sentiment:SentimentModel.initialize_and_get_metadata()\x1b[39m\n"
    '  File "replica.py", line 1928, in initialize\n'
    "RuntimeError: Traceback (most recent call last):\n"
    '  File "placement.py", line 96, in load_model\n'
    "    return SentimentModel.load(**load, threads=threads)\n"
    "service.modeldir.ModelLoadError: device 'cuda' was asked for but no CUDA GPU is visible\n"
)


def test_the_exception_line_without_module_path_or_colours() -> None:
    assert exception_line(RAY_MESSAGE) == (
        "ModelLoadError: device 'cuda' was asked for but no CUDA GPU is visible"
    )
    assert exception_line("\x1b[31mValueError: bad value: a.b.c\x1b[0m\n\n") == (
        "ValueError: bad value: a.b.c"
    )
    assert exception_line("MemoryError") == "MemoryError"
    assert exception_line("") == ""


def test_only_failed_deployments_are_named() -> None:
    def deployment(status: str, message: str) -> SimpleNamespace:
        return SimpleNamespace(status=status, message=message)

    status = SimpleNamespace(
        applications={
            "sentiment-model": SimpleNamespace(
                deployments={"SentimentModel": deployment("DEPLOY_FAILED", RAY_MESSAGE)}
            ),
            "sentiment": SimpleNamespace(
                deployments={"SentimentIngress": deployment("UPDATING", "waiting")}
            ),
        }
    )
    assert failed_deployments(status) == [
        "SentimentModel: ModelLoadError: device 'cuda' was asked for but no CUDA GPU is visible"
    ]


def test_an_address_nothing_answers_at_stops_serve_at_once(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ray would retry it for minutes; nothing of Ray starts."""
    address = f"127.0.0.1:{free_port()}"
    assert unreachable(address) == f"no Ray cluster answers at {address} (Connection refused)"
    assert main(["serve", "--model-path", str(tiny_model_dir), "--address", address]) == 2
    assert f"error: no Ray cluster answers at {address}" in capsys.readouterr().err
    assert unreachable("auto") is None and unreachable("ray://head:10001") is None


def test_a_port_in_use_stops_serve_naming_who_holds_it(
    tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not HAProxy's bind alert under Ray's traceback once Ray has started."""
    free = free_port()
    assert cannot_listen("127.0.0.1", free, "--port") is None
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        comm = Path("/proc/self/comm").read_text().strip()
        assert cannot_listen("127.0.0.1", port, "--port") == (
            f"port {port} is in use, held by pid {os.getpid()} ({comm}); stop it, or choose "
            "another with --port"
        )
        argv = ["serve", "--model-path", str(tiny_model_dir), "--port", str(port)]
        assert main([*argv, "--metrics-port", str(free)]) == 2
    assert f"error: port {port} is in use" in capsys.readouterr().err
    # An address this machine lacks is not a port in use.
    assert cannot_listen("198.51.100.7", free, "--port") == (
        f"cannot listen on 198.51.100.7:{free} (Cannot assign requested address); check --host"
    )


def test_an_ipv6_host_is_checked_as_ipv6() -> None:
    with socket.socket(socket.AF_INET6) as holder:
        holder.bind(("::1", 0))  # this machine has IPv6 loopback, as the service's hosts do
        holder.listen()
        port = holder.getsockname()[1]
        # In use, not "Address family for hostname not supported; check --host".
        assert f"port {port} is in use" in str(cannot_listen("::1", port, "--port"))
    assert cannot_listen("::", free_port(), "--port") is None
