"""Forwards in a child process (service.forwardproc), on a real tiny BERT loaded from disk."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from service.encoding import FAILED, OK
from service.forwardproc import ForwardProcess, ForwardProcessError
from service.model import ModelLoadError, SentimentModel
from service.retry import SplittingForward
from tests.tiny_bert import SAMPLE_TEXT


@pytest.fixture(scope="module")
def child(tiny_model_dir: Path) -> Iterator[ForwardProcess]:
    process = ForwardProcess({"path": tiny_model_dir, "device": "cpu"}, threads=1)
    yield process
    process.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent has not collected it yet.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_the_child_answers_what_the_model_answers_here(
    child: ForwardProcess, tiny_model_dir: Path
) -> None:
    here = SentimentModel.load(tiny_model_dir, device="cpu")
    rows = [e.ids for e in here.encode(SAMPLE_TEXT)]
    assert [e.ids for e in child.encode(SAMPLE_TEXT)] == rows
    assert torch.allclose(child.predict(rows), here.predict(rows), atol=1e-6)
    assert (child.labels, child.name, child.backend_name) == (here.labels, here.name, "torch")
    assert (child.device, child.dtype, child.max_length) == (
        here.device,
        here.dtype,
        here.max_length,
    )
    assert child.gpu_memory() == (0, 0, 0)
    assert child.pid != os.getpid() and _alive(child.pid)


def test_a_failed_forward_is_an_error_here_and_the_child_serves_on(
    child: ForwardProcess,
) -> None:
    with pytest.raises(ForwardProcessError, match="ValueError"):
        child.predict([])  # no rows: the model refuses
    assert child.predict([[2, 5, 3]]).shape == (1, 2)


def test_a_model_the_child_cannot_load_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"config\.json"):
        ForwardProcess({"path": tmp_path, "device": "cpu"})


def test_a_child_that_cannot_load_again_fails_the_request(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    process = ForwardProcess({"path": model, "device": "cpu"})
    shutil.rmtree(model)  # the weights are gone: a new child cannot load them
    process.process.kill()
    _wait_for(lambda: process.restarts == 1 and not process.healthy)  # the watcher tried once
    with pytest.raises(ForwardProcessError, match="could not load the model"):
        process.predict([[2, 5, 3]])
    assert process.restarts == 2  # the request tried again; the watcher did not loop
    shutil.copytree(tiny_model_dir, model)  # back: the next request starts one that loads
    assert process.predict([[2, 5, 3]]).shape == (1, 2) and process.restarts == 3
    process.close()


def test_a_child_killed_between_requests_is_replaced_before_any_request_comes(
    tiny_model_dir: Path,
) -> None:
    process = ForwardProcess({"path": tiny_model_dir, "device": "cpu"})
    first = process.pid
    before = process.predict([[2, 5, 3]])
    process.process.kill()
    _wait_for(lambda: process.pid != first and process.healthy)
    assert process.restarts == 1 and process.process.poll() is None and not _alive(first)
    assert torch.equal(process.predict([[2, 5, 3]]), before)
    assert process.restarts == 1  # the request found a loaded child: no load on its path
    process.close()  # asks the child to exit, and collects it
    assert process.process.returncode == 0
    time.sleep(0.5)  # a closed process is not replaced
    assert process.restarts == 1 and not _alive(process.pid)


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_child_does_not_outlive_its_parent(tiny_model_dir: Path) -> None:
    """A replica killed without notice (SIGKILL) must not leave its forward process behind."""
    script = (
        "import os, sys\n"
        "from service.forwardproc import ForwardProcess\n"
        f"p = ForwardProcess({{'path': {str(tiny_model_dir)!r}, 'device': 'cpu'}})\n"
        "print(p.pid, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    parent = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert parent.returncode == -9, parent.stderr
    pid = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pid)


def test_a_text_that_kills_the_child_fails_alone_and_costs_few_loads(
    tiny_model_dir: Path,
) -> None:
    """A batch whose forward kills the process (a fatal CUDA error, a segfault on one odd
    input) is retried text by text: the culprit alone fails; the others are answered."""
    here = SentimentModel.load(tiny_model_dir, device="cpu")
    rows = [e.ids for e in here.encode(SAMPLE_TEXT)]
    poison = max(range(len(rows)), key=lambda i: len(rows[i]))
    assert sum(len(r) >= len(rows[poison]) for r in rows) == 1  # one text is the longest
    process = ForwardProcess({"path": tiny_model_dir, "device": "cpu"}, threads=1)
    process.inject_crash(len(rows[poison]))
    failures: list[str] = []
    split = SplittingForward(
        lambda batch: (process.predict(batch).numpy(), 0.0), len(here.labels), failures.append
    )
    probs, status, _ = split([np.asarray(r, dtype=np.int32) for r in rows])
    expected = [FAILED if i == poison else OK for i in range(len(rows))]
    assert status.tolist() == expected
    good = [i for i in range(len(rows)) if i != poison]
    want = here.predict([rows[i] for i in good]).numpy()
    assert np.allclose(probs[good], want, atol=1e-6)
    # The batch, then the culprit alone: two deaths and two new processes whatever the batch
    # size, where halving (and resending) would pay at every level down to the culprit.
    assert failures == ["crash", "crash"] and process.restarts == 2
    assert process.predict([rows[good[0]]]).shape == (1, 2)  # the new child serves on
    process.close()
