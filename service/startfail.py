"""Why the service cannot start or did not: a port something else holds, a Ray address
nothing answers at, and a line per deployment that failed.

A port in use surfaced as HAProxy's "cannot bind socket" alert under a hundred lines of
Ray traceback, after Ray had started.

Ray retries an address it cannot reach for minutes before it raises. A replica whose
constructor raises (a backend this machine cannot run, a device it lacks) fails
the deploy with Ray's "Failed to update the deployments [...]", while the reason sits at the
end of a long traceback in the deployment's status; in the high-throughput mode replicas do
not log to the terminal at all. The exception line is what an operator needs to read.
"""

from __future__ import annotations

import errno
import re
import socket
from typing import Any

_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
# "service.modeldir.ModelLoadError: ..." -> "ModelLoadError: ..."
_QUALIFIED = re.compile(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*(?::|$))")


def exception_line(message: str) -> str:
    """The last line of a status message (the exception and its words), or the message."""
    lines = [line.strip() for line in _COLOUR.sub("", message).splitlines() if line.strip()]
    return _QUALIFIED.sub("", lines[-1]) if lines else message


def failed_deployments(status: Any) -> list[str]:
    """`deployment: reason` for each deployment that failed to start, from `serve.status()`."""
    return [
        f"{name}: {exception_line(deployment.message)}"
        for app in status.applications.values()
        for name, deployment in app.deployments.items()
        if deployment.status == "DEPLOY_FAILED"
    ]


def unreachable(address: str) -> str | None:
    """Why nothing can be joined at a `host:port` address, found in seconds; None when it
    answers, or for addresses Ray resolves itself ("auto", "ray://...")."""
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit():
        return None
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return None
    except OSError as exc:
        return f"no Ray cluster answers at {address} ({exc.strerror or exc})"


def cannot_listen(host: str, port: int, flag: str) -> str | None:
    """Why this server cannot listen on `host:port` (for a port in use, who holds it, where
    /proc says), or None. Closed connections in TIME_WAIT do not count, as for any server."""
    from service.lifecycle import listeners

    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # `::`, `::1`: IPv6
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            return None
        except OSError as exc:
            in_use, reason = exc.errno == errno.EADDRINUSE, exc.strerror or str(exc)
    if not in_use:  # an address this machine does not have, or a name nobody resolves
        return f"cannot listen on {host or '*'}:{port} ({reason}); check --host"
    holders = ", ".join(f"pid {pid} ({name})" for pid, name in sorted(listeners(port).items()))
    held = f", held by {holders}" if holders else ""
    return f"port {port} is in use{held}; stop it, or choose another with {flag}"
