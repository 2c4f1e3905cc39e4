"""The call-size run's accounting and fit (loadtest.callsize): the model replica's own CPU
leaves out its forwards wherever they ran, and the fitted line says what call size meets a
target per text."""

from __future__ import annotations

import pytest

from loadtest import callsize, cpu, floor, tally
from service.deployment import ingress_deployment, model_deployment
from service.settings import Settings


def _used(model_s: float, forward_thread_s: float) -> cpu.Usage:
    return cpu.Usage(
        by_group={"SentimentModel": model_s, "haproxy": 5.0},  # other groups are not its own
        forward_by_group={"SentimentModel": forward_thread_s},
        processes={"SentimentModel": 1, "haproxy": 1},
    )


def test_own_cpu_leaves_out_thread_and_loop_forwards() -> None:
    # 100 calls of 32 texts: 1.0 s in the replica, 0.3 s on its forward thread, 0.2 s in
    # forwards on its event loop.
    counted = {"batches": 0.0, "batched_texts": 0.0, "forwards": 0.0, "loop_forward_cpu_s": 1.0}
    later = {
        "batches": 100.0,
        "batched_texts": 3200.0,
        "forwards": 400.0,
        "loop_forward_cpu_s": 1.2,
    }
    row = callsize.size_row(32, 100, 2.0, _used(1.0, 0.3), tally.between(counted, later))
    assert row["own_cpu_ms_per_call"] == pytest.approx(5.0)
    assert row["own_cpu_ms_per_text"] == pytest.approx(5.0 / 32, abs=1e-4)
    assert row["forward_cpu_ms_per_text"] == pytest.approx(500 / 3200, abs=1e-4)
    assert (row["calls_per_s"], row["texts_per_forward"]) == (50.0, 8.0)


def _sized(texts: int, ms_per_call: float) -> dict[str, object]:
    return {"texts_per_call": texts, "own_cpu_ms_per_call": ms_per_call}


def test_the_fit_gives_the_call_size_that_meets_the_target() -> None:
    # 2 ms a call + 0.02 ms a text: a text costs 2/n + 0.02, at most 0.1 from n = 25.
    rows = [_sized(n, 2.0 + 0.02 * n) for n in (1, 8, 32, 128)]
    line = callsize.fitted(rows, 0.1)
    assert (line["per_call_ms"], line["per_text_ms"]) == (pytest.approx(2.0), pytest.approx(0.02))
    assert line["texts_per_call_for_target"] == 25
    assert callsize.report_lines([], line, 0.1)[-1].endswith(
        "at most 0.1 ms from 25 texts per call."
    )


def test_no_call_size_meets_a_target_below_the_cost_of_a_text() -> None:
    rows = [_sized(n, 1.0 + 0.2 * n) for n in (1, 32)]
    line = callsize.fitted(rows, 0.1)
    assert line["texts_per_call_for_target"] is None
    assert "no call size brings a text under 0.1 ms" in callsize.report_lines([], line, 0.1)[-1]


def test_one_size_fits_no_line() -> None:
    assert callsize.fitted([_sized(32, 3.0)], 0.1)["per_call_ms"] is None


@pytest.mark.parametrize("access_log", [False, True])
def test_the_floors_log_as_the_service_does(access_log: bool) -> None:
    """Ray's access log line costs CPU on every request: a floor that paid it where the
    service does not would make the service's own addition look smaller."""
    settings = Settings.model_validate({"model_path": "models/default", "access_log": access_log})
    service = ingress_deployment(settings).logging_config
    assert service is not None and service["enable_access_log"] is access_log
    assert model_deployment(settings).logging_config == service
    assert floor.logged_as_service(floor.Floor, access_log).logging_config == service
    assert floor.logged_as_service(callsize.EmptyInfer, access_log).logging_config == service
