"""`make chaos`'s clients against a local server that drops every fourth request unanswered."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadtest.clientload import AsyncClients, Load, ThreadClients
from loadtest.outage import Request

LIMIT = 40


class Flaky(BaseHTTPRequestHandler):
    """Answers 200, except every fourth request: its connection closes with no answer."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the service's HAProxy front is
    seen = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with Flaky.lock:
            Flaky.seen += 1
            drop = Flaky.seen % 4 == 0
        if drop:
            self.close_connection = True
            return
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    Flaky.seen = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/classify"
    server.shutdown()
    server.server_close()


async def _run(kind: type[AsyncClients] | type[ThreadClients], url: str) -> list[Request]:
    records: list[Request] = []
    clients = kind(Load(url, [b'{"text": "ok"}'], 3, records.append, lambda: len(records) < LIMIT))
    clients.start(time.perf_counter())
    deadline = time.monotonic() + 20
    while len(records) < LIMIT and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await clients.stop()
    return records


@pytest.mark.parametrize("kind", [AsyncClients, ThreadClients])
def test_unanswered_requests_are_recorded_lost_and_the_load_goes_on(
    kind: type[AsyncClients] | type[ThreadClients], url: str
) -> None:
    records = asyncio.run(_run(kind, url))
    statuses = [r.status for r in records]
    # Each client stops once LIMIT are recorded: the ones in flight then may add one each.
    assert LIMIT <= len(records) <= LIMIT + 3
    assert statuses.count(0) >= 5, "dropped requests must count as lost"
    assert statuses.count(200) >= 25, "a client goes on after a dropped connection"
    assert set(statuses) == {0, 200}
    assert all(0 <= r.start <= r.end for r in records)
