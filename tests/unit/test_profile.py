"""The bench's profile of a replica: py-spy's collapsed stacks read into shares, and py-spy
run for real on a busy Python process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from loadtest.profile import lines, record, summarize

RAW = """\
<module> (run.py:9);serve (run.py:5);forward (model.py:12) 6
<module> (run.py:9);serve (run.py:5);forward (model.py:14) 2
<module> (run.py:9);serve (run.py:6);reply (http.py:3) 2
not a stack line
"""


def test_shares_merge_a_function_s_lines_and_count_a_frame_once_per_stack() -> None:
    doc = summarize(RAW, top=2)
    assert doc["samples"] == 10
    assert doc["own"] == [["forward (model.py)", 0.8], ["reply (http.py)", 0.2]]
    assert doc["inclusive"] == [["<module> (run.py)", 1.0], ["serve (run.py)", 1.0]]
    assert summarize("") == {"samples": 0, "own": [], "inclusive": []}


BUSY = """
import time
def spin():
    return sum(range(2000))
def main():
    end = time.monotonic() + 20
    while time.monotonic() < end:
        spin()
print("ready", flush=True)
main()
"""


def test_py_spy_samples_a_running_python_process(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(0.2)
        doc = asyncio.run(record(child.pid, 1, tmp_path / "profile-busy.txt"))
    finally:
        child.kill()
        child.wait()
    assert "error" not in doc, doc
    assert doc["pid"] == child.pid and doc["file"] == "profile-busy.txt" and doc["samples"] > 20
    functions = [frame for frame, _ in doc["inclusive"]]
    assert "main (<string>)" in functions and "spin (<string>)" in functions
    assert (tmp_path / "profile-busy.txt").read_text().count(";") > 0


def test_printed_lines_name_each_replica_or_why_it_has_no_profile() -> None:
    doc = {
        "clients": 8,
        "seconds": 3.0,
        "requests": 40,
        "replicas": {
            "SentimentModel": {"samples": 10, **summarize(RAW)},
            "SentimentIngress": {"error": "Permission denied"},
        },
    }
    said = lines(doc, top=1)
    assert said[0] == "profile: 8 clients, 3.0 s, 40 requests"
    assert said[1] == "  SentimentModel (10 samples): forward (model.py) 80%"
    assert said[2] == "  SentimentIngress: Permission denied"
    assert lines({"error": "no replicas"}) == ["profile: no replicas"]
