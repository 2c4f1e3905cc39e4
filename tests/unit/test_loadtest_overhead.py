"""The overhead run's accounting (loadtest.overhead, loadtest.overheadreport): forwards run on a
model core's event loop are the model's CPU, not the replica's own, in either layout."""

from __future__ import annotations

from typing import Any

import pytest

from loadtest import cpu, overheadreport, tally
from loadtest.httpload import RunResult
from loadtest.levels import level_row

TEXTS = 1000
MODEL_TIERS = ("SentimentIngress", "SentimentModel")


def _result() -> RunResult:
    return RunResult(requests=TEXTS, texts=TEXTS, seconds=1.0, latencies=[0.01] * TEXTS)


def test_loop_forwards_leave_the_model_replicas_own_cpu() -> None:
    # Two tiers: 0.5 s in the model replica, 0.1 s of it on its forward thread, 0.2 s of it
    # in forwards on its event loop (which /proc cannot tell from the loop's own work).
    used = cpu.Usage(
        by_group={"SentimentIngress": 0.4, "SentimentModel": 0.5},
        forward_by_group={"SentimentModel": 0.1},
        processes={"SentimentIngress": 1, "SentimentModel": 1},
    )
    counted = {"batches": 10.0, "batched_texts": 300.0, "forwards": 30.0, "loop_forward_cpu_s": 1.0}
    later = {"batches": 40.0, "batched_texts": 1300.0, "forwards": 155.0, "loop_forward_cpu_s": 1.2}
    row = level_row(64, _result(), used, tally.between(counted, later))
    assert row["model_replica_cpu_ms_per_text"] == pytest.approx(0.2)  # 0.5 - 0.1 - 0.2
    assert row["forward_cpu_ms_per_text"] == pytest.approx(0.3)
    assert row["server_cpu_ms_per_request"] == pytest.approx(0.9)
    # 1,000 texts in 30 batches and 125 forwards over the window.
    assert (row["texts_per_batch"], row["texts_per_forward"]) == (33.3, 8.0)


def test_colocated_loop_forwards_count_as_forwards_only() -> None:
    used = cpu.Usage(
        by_group={"SentimentIngress": 0.6},
        forward_by_group={"SentimentIngress": 0.1},
        processes={"SentimentIngress": 1},
    )
    row = level_row(64, _result(), used, {"loop_forward_s": 0.25})
    assert row["model_replica_cpu_ms_per_text"] is None  # no model replica process
    assert row["forward_cpu_ms_per_text"] == pytest.approx(0.35)


def _section(levels: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"levels": levels, "forward_limit_texts_per_s": 5000.0, "torch_threads": 1, **extra}


def _row(own: float | None, groups: list[str], forward: float = 0.1) -> dict[str, Any]:
    return {
        "concurrency": 64,
        "errors": 0,
        "server_cpu_ms_per_request": 0.8,
        "model_replica_cpu_ms_per_text": own,
        "forward_cpu_ms_per_text": forward,
        "added_to_floor_cpu_ms_per_request": 0.5,
        "groups": {g: {"processes": 1, "cpu_ms_per_request": 0.4} for g in groups},
    }


def test_the_model_replica_target_is_read_in_two_tiers() -> None:
    colocated = _row(None, ["SentimentIngress"])
    two_tier = _row(0.08, ["SentimentIngress", "SentimentModel"])
    found = overheadreport.targets(_section([colocated], two_tier_levels=[two_tier]))
    assert found[1]["value"] == 0.08 and found[1]["met"]
    # Co-located with no two-tier level, the figure does not exist.
    missing = overheadreport.targets(_section([colocated]))[1]
    assert missing["value"] is None and not missing["met"]


def test_what_the_service_adds_is_split_by_the_measured_forwards() -> None:
    section = _section([_row(0.08, ["SentimentModel"], forward=0.3)], floor_levels=[])
    line = overheadreport._split_line(section)
    assert "forwards took 0.300 ms per text (0.200 at its in-process limit)" in line
    assert "the request path itself 0.200 ms" in line


def test_counts_from_a_service_without_them_give_no_figures() -> None:
    assert tally.between({}, {}) == {
        "texts_per_batch": None,
        "texts_per_forward": None,
        "loop_forward_s": 0.0,
    }
    assert tally.read(None) == {}


def test_the_load_generators_own_cores_come_with_each_level() -> None:
    result = RunResult(requests=10, texts=10, seconds=2.0, client_cpu_s=1.5)
    assert result.client_busy_cores == 0.75  # 1.5 s of CPU over 2 s: the client nearly bounds it
    assert RunResult().client_busy_cores == 0.0
    row = level_row(1, result, cpu.Usage(by_group={}, forward_by_group={}, processes={}))
    assert row["client_busy_cores"] == 0.75


def _level(concurrency: int, rate: float, errors: int = 0) -> dict[str, Any]:
    return {
        **_row(None, ["SentimentIngress"]),
        "concurrency": concurrency,
        "requests_per_s": rate,
        "errors": errors,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
    }


def test_the_rate_is_held_against_the_reference_where_it_ran() -> None:
    levels = [_level(1, 500.0), _level(64, 1500.0), _level(256, 1600.0)]
    reference = [_level(1, 300.0), _level(64, 2000.0), _level(256, 2100.0)]
    about = {"server": "mosec 0.9.8", "max_batch": 64, "wait_ms": 10}
    section = _section(levels, reference=about, reference_levels=reference)
    rate = overheadreport.targets(section)[-1]
    assert (rate["value"], rate["goal"], rate["met"]) == (0.75, 0.8, False)  # 1500 / 2000
    section["levels"][1]["requests_per_s"] = 1700.0
    assert overheadreport.targets(section)[-1]["met"]  # 0.85
    lines = "\n".join(overheadreport.report_lines({**section, **_report_extras()}))
    assert "Rust-fronted reference in the same run: mosec 0.9.8" in lines
    assert "| 64 | 2000.0 | 1.0 | 2.0 | 0.800 | 0.850 |" in lines
    # Not measured (mosec not installed), or failing: no rate target at all.
    assert len(overheadreport.targets(_section(levels))) == 3
    reference[1]["errors"] = 3
    assert len(overheadreport.targets(section)) == 3


def _report_extras() -> dict[str, Any]:
    model = {"layers": 2, "hidden": 64, "heads": 2, "intermediate": 128, "tokenizer": "tiny"}
    plan = {"seconds": 8.0, "warmup_s": 2.0}
    return {"model": model, "plan": plan, "targets": []}


def test_a_lone_requests_hop_is_held_to_the_idle_penalty_in_two_tiers() -> None:
    # Co-located service, with the extra two-tier levels at one client and 64.
    colocated = [{**_level(1, 600.0), "p50_ms": 1.5}, _level(64, 1500.0)]
    two_tier = [{**_level(n, rate), "model_replica_cpu_ms_per_text": own} for n, rate, own in
                [(1, 300.0, 0.2), (64, 1200.0, 0.08)]]  # fmt: skip
    two_tier[0]["p50_ms"] = 3.4
    for row in two_tier:
        row["groups"] = {g: {"processes": 1, "cpu_ms_per_request": 0.4} for g in MODEL_TIERS}
    section = _section(colocated, two_tier_levels=two_tier, layout="colocated")
    section["forward_alone_ms"] = 0.3
    lone = overheadreport.lone_rows(section)
    assert (lone["colocated"]["p50_ms"], lone["two-tier"]["p50_ms"]) == (1.5, 3.4)
    found = overheadreport.targets(section)
    assert found[1]["value"] == 0.08  # the model replica's own CPU: read at 64 clients
    penalty = found[-1]
    assert (penalty["value"], penalty["goal"], penalty["met"]) == (3.1, 3.0, False)
    assert "(0.3 ms)" in penalty["name"]
    lines = "\n".join(overheadreport._two_tier_lines(section))
    assert "1.50 ms co-located, 3.40 ms in two tiers, against 0.30 ms" in lines
    assert "adds 1.90 ms" in lines
    # A service in two tiers has its own one-client level; without the baseline, no target.
    own = _section(two_tier, layout="two-tier", forward_alone_ms=0.3)
    assert overheadreport.lone_rows(own) == {"two-tier": two_tier[0]}
    assert overheadreport.targets(own)[-1]["value"] == 3.1
    del own["forward_alone_ms"]
    assert len(overheadreport.targets(own)) == 3
