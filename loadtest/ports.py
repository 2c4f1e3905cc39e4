"""Pick a free loopback port for a server that binds it a moment later.

A port found by binding port 0 comes from the kernel's ephemeral range, where every later
`bind(0)` and outgoing connection draws too: Ray's daemons bind their own ports that way while
they start, and once took the metrics port picked for them (the dashboard agent died with
"address already in use", and with it the whole cluster). Ports are drawn here from below the
ephemeral range and above Ray's worker ports (10002-19999), where only explicit binds land.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST, HIGHEST = 20000, 32767  # above Ray's default worker ports
DEFAULT_EPHEMERAL = (32768, 60999)


def _ephemeral() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def free_port(attempts: int = 200) -> int:
    """A loopback port nobody listens on now, outside the kernel's ephemeral range."""
    low, high = _ephemeral()
    candidates = [p for p in range(LOWEST, HIGHEST + 1) if not low <= p <= high]
    for port in random.sample(candidates, min(attempts, len(candidates))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {LOWEST}-{HIGHEST} outside the ephemeral range {low}-{high}")
