"""Starting Ray Serve with its background work trimmed, in its high-throughput mode by default,
and making sure stopping it frees the port.

Ray reads these switches from the environment when its modules are imported, in the
driver and in every worker it starts, so they are set before `import ray`. The HAProxy
process Ray starts can outlive `ray.shutdown()` (a reloaded one is re-parented and keeps the
listening socket), so `stop_listeners` ends whatever HAProxy still holds the service's port.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

HAPROXY_ENV = {
    "RAY_SERVE_ENABLE_HA_PROXY": "1",  # HAProxy on the HTTP port, in front of the ingress
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",  # direct ingress, user code on the replica's loop
    # A request whose ingress replica died under it (its connection closed with no answer,
    # or half of one) is sent again to another replica, as a client would retry it: with one
    # of two ingress replicas SIGKILLed under 32 clients, the 16 requests in flight on it got
    # no answer before, none after (`make chaos CHAOS_ARGS="--kill ingress --replicas 2"`,
    # docs/benchmarks.md). Ray retries only connection failures by default, since replaying
    # a request that reached a replica could repeat its side effect; classifying has none.
    # HAProxy's default of 3 retries, written out: leastconn sends the first retries to the
    # dead replica (it holds no connections) until HAProxy marks it down, after 3 errors.
    "RAY_SERVE_HAPROXY_RETRY_ON": "conn-failure empty-response junk-response",
    "RAY_SERVE_HAPROXY_RETRIES": "3",
    # The high-throughput mode holds each replica's log lines back until 1,000 have come (or
    # an ERROR): it spares the access log's writes. With the access log off, the lines left
    # are the service's own few (warm-up, batch config, API keys file changes, a forward
    # that failed): they never reached the replica's log file while it ran. Written at once;
    # with SENTIMENT_ACCESS_LOG=true that is a write per request, as without this mode.
    "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1",
}
# Whatever the ingress: Ray's background work, trimmed where nothing needs it faster.
LEAN_ENV = {
    # Serve's controller wakes 10 times a second by default; twice is enough for deploys,
    # health checks and autoscaling, and halves the CPU Ray spends while idle (measured).
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
    # Ray's background work, trimmed where nothing reads it faster (measured idle, two cores:
    # ~89-110 ms of CPU a second in all before, with the drain poll ~75-78 after). Serve's
    # replicas and routers flush their cached request metrics every 100 ms by default; a
    # second is still finer than any scrape.
    "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000",
    # The log monitor lists every log file twice a second; new files (a new replica's) are
    # picked up within 2 s instead.
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
    "LOG_NAME_UPDATE_INTERVAL_S": "2",
}
# Local runs: a stopping ingress replica waits this long for HAProxy to stop sending it
# requests (Ray's default, 30 s, suits a cluster's load balancers, not one machine).
LOCAL_ENV = {"RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2"}


def _set_unless_set(values: dict[str, str]) -> None:
    for key, value in values.items():
        os.environ.setdefault(key, value)


def use_haproxy(local: bool = True) -> None:
    """Switch the Ray about to start to HAProxy ingress (values already set are kept)."""
    _set_unless_set({**HAPROXY_ENV, **(LOCAL_ENV if local else {})})


def trim_background() -> None:
    """Trim the background work of the Ray about to start, whatever its ingress (values
    already set are kept)."""
    _set_unless_set(LEAN_ENV)


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(inode)
    return inodes


def listeners(port: int) -> dict[int, str]:
    """Processes holding a listening socket on `port`: pid -> command name."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    found: dict[int, str] = {}
    if not inodes:
        return found
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                found[int(pid)] = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:  # gone, or not ours to read
            continue
    return found


def stop_listeners(
    port: int,
    name: str = "haproxy",
    timeout_s: float = 10.0,
    first: signal.Signals = signal.SIGTERM,
) -> list[int]:
    """End the `name` processes still listening on `port` (`first`, then KILL); their pids.
    HAProxy takes SIGUSR1 as a soft stop: it closes its listeners and finishes what it holds."""
    stopped: list[int] = []
    deadline = time.monotonic() + timeout_s
    sig = first
    while True:
        pids = [pid for pid, comm in listeners(port).items() if comm == name]
        if not pids or time.monotonic() > deadline:
            return stopped
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
            if pid not in stopped:
                stopped.append(pid)
        time.sleep(0.2)
        if time.monotonic() > deadline - timeout_s / 2:
            sig = signal.SIGKILL  # half the time gone: it ignores TERM while draining


class StopSignals:
    """Catches the stop signals from its creation on; `wait` blocks until one has come.

    The handler only appends to a list. A signal handler runs between two bytecodes of
    whatever the main thread is doing, which may be the handler itself: with
    `threading.Event.set` as the handler, a second signal arriving inside the first one's
    `set` (a wrapper such as `timeout` relaying the same Ctrl-C) waited forever for the lock
    the first held, and the server never stopped.
    """

    def __init__(self, signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)):
        self.received: list[int] = []
        for sig in signals:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.received.append(signum)

    def wait(self, poll_s: float = 0.2) -> int:
        """The first signal that came, once one has."""
        while not self.received:
            time.sleep(poll_s)  # a signal cuts it short only by running the handler
        return self.received[0]
