"""Targets taking turns (loadtest.paired): three real loopback servers as child processes,
loaded by the bench's own client, each turn's CPU read from /proc; and which processes' CPU
a turn counts as its target's."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loadtest import cpu, paired
from loadtest.httpload import RunResult, bodies, closed_loop
from loadtest.ports import free_port

# Answers every request with a small JSON body; its command line names its group (loadtest.cpu).
SERVER = """
import asyncio, sys

BODY = b'{"ok": true}'
ANSWER = b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n"
ANSWER += b"Content-Length: %d\\r\\n\\r\\n%s"


class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data):
        self.buffer += data
        while (end := self.buffer.find(b"\\r\\n\\r\\n")) >= 0:
            head = self.buffer[:end].lower()
            size = int(head.split(b"content-length:")[1].split(b"\\r\\n")[0])
            if len(self.buffer) < end + 4 + size:
                return
            self.buffer = self.buffer[end + 4 + size :]
            # Answered 10 ms late: four clients then send ~400 requests a second, not as
            # many as two cores allow, so the test stays light beside the rest of the suite.
            asyncio.get_running_loop().call_later(
                0.01, self.transport.write, ANSWER % (len(BODY), BODY)
            )


async def main(port):
    server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", port)
    await server.serve_forever()


asyncio.run(main(int(sys.argv[1])))
"""


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def _servers(script: Path, groups: list[str]) -> Iterator[list[str]]:
    """One server per group name; their URLs."""
    ports = [free_port() for _ in groups]
    cmds = [[sys.executable, str(script), str(p), g] for p, g in zip(ports, groups, strict=True)]
    children = [subprocess.Popen(cmd) for cmd in cmds]
    try:
        deadline = time.monotonic() + 30
        while not all(_listening(p) for p in ports):
            assert time.monotonic() < deadline, "the loopback servers did not start"
            time.sleep(0.05)
        yield [f"http://127.0.0.1:{p}/v1/classify" for p in ports]
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_turns_rotate_and_each_is_read_from_proc(tmp_path: Path) -> None:
    script = tmp_path / "answer.py"
    script.write_text(SERVER)
    measured: list[str] = []

    async def load(
        url: str, payloads: list[tuple[bytes, int]], c: int, seconds: float, most: int
    ) -> RunResult:
        measured.append(url)
        return await closed_loop(url, payloads, c, seconds, most)

    with _servers(script, ["SentimentIngress", "Floor", "mosec"]) as (service, floor, ref):
        targets = [
            paired.Target(paired.SERVICE, service, ("SentimentIngress",)),
            paired.Target(paired.FLOOR, floor, ("Floor",)),
            paired.Target(paired.REFERENCE, ref, ("mosec",), ray=False),
        ]
        payloads = bodies(["a short review"], 1)
        doc = asyncio.run(paired.alternate(targets, payloads, 4, 3, 1.0, 0.2, 100_000, load))

    # Each turn is a warm-up, then the measured run; the first target moves each round.
    turns = measured[1::2]
    assert turns == [service, floor, ref, floor, ref, service, ref, service, floor]
    assert doc["targets"] == ["service", "floor", "reference"] and len(doc["turns"]) == 3
    for row in doc["turns"]:
        assert all(t["errors"] == 0 and t["requests_per_s"] > 0 for t in row.values()), row
        # The servers are the test's children: /proc read each turn (no None).
        assert all(t["server_cpu_ms_per_request"] >= 0 for t in row.values()), row
    expected = [
        round(r["service"]["requests_per_s"] / r["reference"]["requests_per_s"], 3)
        for r in doc["turns"]
    ]
    assert doc["rate_over_reference"] == expected
    assert doc["rate_over_reference_median"] == sorted(expected)[1]
    added = [
        round(
            r["service"]["server_cpu_ms_per_request"] - r["floor"]["server_cpu_ms_per_request"], 3
        )
        for r in doc["turns"]
    ]
    assert doc["added_to_floor_cpu_ms"] == added

    found = paired.targets(doc, 0.8, 0.1)
    assert [t["goal"] for t in found] == [0.1, 0.8]
    assert found[1]["value"] == doc["rate_over_reference_median"]
    lines = paired.report_lines(doc)
    assert sum(line.startswith("| ") and line[2].isdigit() for line in lines) == 3
    assert paired.targets(None, 0.8, 0.1) == []


def test_a_turn_counts_shared_ray_processes_and_not_the_other_targets_own() -> None:
    service = paired.Target(paired.SERVICE, "", ("SentimentIngress", "SentimentModel"))
    floor = paired.Target(paired.FLOOR, "", ("Floor",))
    reference = paired.Target(paired.REFERENCE, "", ("loadtest.reference", "mosec"), ray=False)
    targets = [service, floor, reference]
    seconds = {
        "SentimentIngress": 1.0,
        "SentimentModel": 2.0,
        "Floor": 4.0,  # busy through every turn: counts in the floor's alone
        "haproxy": 0.25,
        "ServeController": 0.125,
        "loadtest.reference": 8.0,
        "mosec": 16.0,
    }
    used = cpu.Usage(by_group=seconds, forward_by_group={}, processes={})
    assert paired.turn_cpu_s(service, targets, used) == 3.375
    assert paired.turn_cpu_s(floor, targets, used) == 4.375
    assert paired.turn_cpu_s(reference, targets, used) == 24.0  # Ray's shared ones are not its


def test_medians_skip_rounds_with_errors_or_a_missing_target() -> None:
    def turn(rate: float, cpu: float | None, errors: int = 0) -> dict[str, float | int | None]:
        return {"requests_per_s": rate, "server_cpu_ms_per_request": cpu, "errors": errors}

    turns = [
        {"service": turn(800, 0.9), "floor": turn(2000, 0.5), "reference": turn(1000, 0.7)},
        {"service": turn(700, 1.0, errors=3), "floor": turn(2000, 0.5)},
        {"service": turn(900, 0.8), "floor": turn(2100, None), "reference": turn(1000, 0.7)},
    ]
    got = paired.medians(turns)
    assert got["rate_over_reference"] == [0.8, 0.9]
    assert got["rate_over_reference_median"] == 0.85
    assert got["added_to_floor_cpu_ms"] == [0.4]
    assert paired.medians([])["added_to_floor_cpu_ms_median"] is None
    # /proc counts in 10 ms ticks: a short turn may read 0.0 ms, a reading like any other.
    quiet = [{"service": turn(800, 0.0), "floor": turn(2000, 0.5), "reference": turn(0, 0.7)}]
    assert paired.medians(quiet)["added_to_floor_cpu_ms"] == [-0.5]
    assert paired.medians(quiet)["rate_over_reference"] == []


def test_without_the_reference_only_the_floor_target_is_held() -> None:
    turns = [
        {
            "service": {"requests_per_s": 900, "server_cpu_ms_per_request": 0.8, "errors": 0},
            "floor": {"requests_per_s": 2000, "server_cpu_ms_per_request": 0.5, "errors": 0},
        }
    ]
    doc = {
        "clients": 64,
        "rounds": 1,
        "seconds": 4.0,
        "warmup_s": 1.0,
        "targets": ["service", "floor"],
        "turns": turns,
        **paired.medians(turns),
    }
    found = paired.targets(doc, 0.8, 0.1)
    assert [(t["value"], t["goal"], t["met"]) for t in found] == [(0.3, 0.1, False)]
    assert "rate over the reference" not in " ".join(paired.report_lines(doc))
