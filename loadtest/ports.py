"""Pick a free loopback port for a server that binds it a moment later.

A port found by binding port 0 comes from the kernel's ephemeral range, where every later
`bind(0)` and outgoing connection draws too: Ray's daemons bind their own ports that way while
they start, and once took the metrics port picked for them (the dashboard agent died with
"address already in use", and with it the whole cluster). Ports are drawn here from below the
ephemeral range and above Ray's worker ports (10002-19999), where only explicit binds land,
and never from the range where Serve's high-throughput mode gives each ingress replica its own
HTTP port (30000-31000 by default, from the lowest up): a port picked for HAProxy there could
be taken by a replica that starts before HAProxy binds it.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

LOWEST, HIGHEST = 20000, 32767  # above Ray's default worker ports
DEFAULT_EPHEMERAL = (32768, 60999)
# Ray Serve's defaults for its direct-ingress replicas' HTTP ports (ray.serve._private.constants).
DIRECT_INGRESS_HTTP = (30000, 31000)


def _ephemeral() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def _direct_ingress() -> tuple[int, int]:
    """The HTTP ports Serve hands its direct-ingress replicas, as the environment sets them."""
    low, high = DIRECT_INGRESS_HTTP
    try:
        low = int(os.environ.get("RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT", low))
        high = int(os.environ.get("RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT", high))
    except ValueError:  # Ray refuses such a value itself, more clearly
        pass
    return low, high


def candidates() -> list[int]:
    """Ports `free_port` may pick: outside the ephemeral range and Serve's replica ports."""
    taken = (_ephemeral(), _direct_ingress())
    return [
        port
        for port in range(LOWEST, HIGHEST + 1)
        if not any(low <= port <= high for low, high in taken)
    ]


def free_port(attempts: int = 200) -> int:
    """A loopback port nobody listens on now, outside the kernel's ephemeral range and the
    ports Serve gives its replicas."""
    pool = candidates()
    for port in random.sample(pool, min(attempts, len(pool))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(
        f"no free port in {LOWEST}-{HIGHEST} outside {_ephemeral()} and Serve's "
        f"replica ports {_direct_ingress()}"
    )
