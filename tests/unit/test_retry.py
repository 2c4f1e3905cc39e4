"""A failing forward fails only what it must: halves are retried down to single texts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from service import faults
from service.encoding import EXPIRED, FAILED, OK, status_error
from service.errors import DeadlineExceeded, InternalError
from service.faults import InjectedFault, with_faults
from service.forwardproc import ForwardProcessCrashed
from service.retry import Rows, SplittingForward, failure_reason, fatal_device_error


def rows(*values: int) -> Rows:
    """One row per value; the fake forward answers [value, -value]."""
    return [np.array([v], dtype=np.int32) for v in values]


class FakeForward:
    """Raises for any forward holding a poisoned value or more than `max_rows` rows."""

    def __init__(self, poisoned: frozenset[int] = frozenset(), max_rows: int = 1000) -> None:
        self.poisoned = poisoned
        self.max_rows = max_rows
        self.calls: list[int] = []

    def __call__(self, batch: Rows) -> tuple[np.ndarray, float]:
        self.calls.append(len(batch))
        values = [int(r[0]) for r in batch]
        if len(batch) > self.max_rows:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        if self.poisoned & set(values):
            raise RuntimeError("kernel failed")
        return np.array([[v, -v] for v in values], dtype=np.float32), 0.5


def test_a_clean_forward_runs_once() -> None:
    forward = FakeForward()
    probs, status, seconds = SplittingForward(forward, 2, lambda r: None)(rows(1, 2, 3))
    assert forward.calls == [3] and seconds == 0.5
    assert probs[:, 0].tolist() == [1, 2, 3] and status.tolist() == [OK] * 3


def test_only_the_text_that_fails_alone_is_failed() -> None:
    failures: list[str] = []
    forward = FakeForward(poisoned=frozenset({5}))
    probs, status, _ = SplittingForward(forward, 2, failures.append)(rows(*range(8)))
    assert status.tolist() == [OK] * 5 + [FAILED] + [OK] * 2
    assert probs[:, 0].tolist() == [0, 1, 2, 3, 4, 0, 6, 7]  # every other row in its place
    assert failures == ["error"] * 4  # 8 rows, then 4, then 2, then the poisoned one alone


def test_an_oom_above_a_size_is_survived_by_smaller_forwards() -> None:
    failures: list[str] = []
    forward = FakeForward(max_rows=2)
    probs, status, _ = SplittingForward(forward, 2, failures.append)(rows(*range(7)))
    assert status.tolist() == [OK] * 7
    assert probs[:, 0].tolist() == list(range(7))
    assert max(n for n in forward.calls if n not in (7, 3, 4)) <= 2
    assert failures and set(failures) == {"oom"}


def test_failure_reasons_are_few() -> None:
    assert failure_reason(torch.cuda.OutOfMemoryError("x")) == "oom"
    assert failure_reason(RuntimeError("DefaultCPUAllocator: can't allocate memory")) == "oom"
    assert failure_reason(ValueError("some secret detail")) == "error"
    assert failure_reason(ForwardProcessCrashed("predict: exited (code -11)")) == "crash"


def test_only_errors_that_leave_the_cuda_context_broken_are_fatal() -> None:
    illegal = "CUDA error: an illegal memory access was encountered"
    assert fatal_device_error(torch.AcceleratorError(illegal))
    assert fatal_device_error(
        RuntimeError(f"[ONNXRuntimeError] : 1 : FAIL : CUDA failure 700: {illegal}")
    )
    assert not fatal_device_error(
        torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate")
    )
    assert not fatal_device_error(ValueError("shapes do not match"))


def test_a_torch_without_accelerator_error_reads_the_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A GPU machine's own torch may predate torch.AcceleratorError (2.8).
    monkeypatch.delattr(torch, "AcceleratorError")
    assert fatal_device_error(RuntimeError("CUDA error: an illegal memory access"))
    assert not fatal_device_error(ValueError("shapes do not match"))


def test_status_errors_map_failed_to_500_and_expired_to_504() -> None:
    assert isinstance(status_error(np.array([OK, FAILED, EXPIRED], np.uint8)), InternalError)
    assert isinstance(status_error(np.array([OK, EXPIRED], np.uint8)), DeadlineExceeded)


def test_injected_faults_are_off_by_default_and_trigger_at_their_size() -> None:
    forward = FakeForward()
    assert with_faults(forward, None, None) is forward
    faulty = with_faults(forward, 3, None)
    assert faulty(rows(1, 2))[0].shape == (2, 2)
    with pytest.raises(InjectedFault):
        faulty(rows(1, 2, 3))
    probs, status, _ = SplittingForward(faulty, 2, lambda r: None)(rows(*range(6)))
    assert status.tolist() == [OK] * 6 and probs[:, 0].tolist() == list(range(6))


def test_the_hang_fault_waits_on_long_texts_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "HANG_S", 0.01)
    faulty = with_faults(FakeForward(), None, 4)
    assert faulty(rows(1, 2, 3))[0].shape == (3, 2)  # one token each: runs
    with pytest.raises(InjectedFault, match="hang"):
        faulty([np.zeros(4, np.int32)])
