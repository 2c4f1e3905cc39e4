"""`make test`'s two tiers: the commands beside the Ray tests, and the run's exit status."""

from __future__ import annotations

import sys
import tempfile

from tests.tiers import NO_TESTS, NOT_STARTED, Beside, verdict


def _say(text: str, code: int = 0) -> list[str]:
    return [sys.executable, "-c", f"import sys; print({text!r}); sys.exit({code})"]


def test_commands_run_in_order_at_nice_19_and_each_status_is_kept() -> None:
    nice = [sys.executable, "-c", "import os; print('nice', os.nice(0))"]
    with tempfile.TemporaryFile() as log:
        beside = Beside([_say("mypy", 1), nice, ["no-such-program-here"], _say("tests")], log)
        codes = beside.wait()
        log.seek(0)
        out = log.read().decode()
    assert codes == [1, 0, NOT_STARTED, 0]
    assert out.splitlines() == ["mypy", "nice 19", "tests"]  # a failure stops nothing


def test_a_stopped_chain_starts_nothing_more() -> None:
    with tempfile.TemporaryFile() as log:
        sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
        beside = Beside([sleeper, _say("never")], log)
        beside.stop()
        log.seek(0)
        assert b"never" not in log.read()
    assert beside.codes in ([], [-15])  # stopped before it started, or terminated


def test_the_first_failure_decides_and_a_check_may_not_collect_nothing() -> None:
    assert verdict([0], [0, 0]) == 0
    assert verdict([1], [0, 0]) == 1  # mypy failed, every test passed: the run fails
    assert verdict([0], [0, 2]) == 2
    assert verdict([], [NO_TESTS, 0]) == 0  # `-k` matched only one tier's tests
    assert verdict([], [NO_TESTS, NO_TESTS]) == NO_TESTS
    assert verdict([NO_TESTS], [0, 0]) == NO_TESTS  # 5 from a check is its failure
