"""Network helpers shared by tests that start servers on loopback."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nobody listens on now (Ray, torchrun rendezvous, HTTP servers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
