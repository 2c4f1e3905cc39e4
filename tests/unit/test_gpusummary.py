"""The GPU summary: its profile rows (top functions, a replica with no samples, an error), the
parity verdicts, and which parts' statuses make the run's all_ok."""

from __future__ import annotations

from loadtest.gpusummary import markdown, summarize


def test_each_profiled_replica_gets_a_row_whatever_its_profile_holds() -> None:
    sampled = {"pid": 1, "samples": 3, "own": [["forward (model.py)", 1.0]], "inclusive": []}
    idle = {"pid": 2, "samples": 0, "own": [], "inclusive": []}
    replicas = {"SentimentModel": sampled, "SentimentIngress": idle, "Other": {"error": "a | b"}}
    parts = {"bench": {"status": "ok", "result": {"profile": {"replicas": replicas}}}}
    doc = summarize(parts, "cpu-smoke")
    assert doc["figures"]["bench"]["profile"] == {
        "SentimentModel": [["forward (model.py)", 1.0]],
        "SentimentIngress": [],
        "Other": "a | b",
    }
    table = markdown(doc)
    row = "| profile, {}: top functions by own share | {} |"
    assert row.format("SentimentModel", "forward (model.py) 100%") in table
    assert row.format("SentimentIngress", "no samples") in table
    assert row.format("Other", "a / b") in table  # a pipe would split the table's cell


def test_a_part_left_out_on_purpose_is_no_failure_and_a_cut_one_is() -> None:
    parts = {"training": {"status": "ok"}, "convoy": {"status": "skipped: budget 0"}}
    assert summarize(parts, "gpu")["all_ok"] is True
    for failed in ("timeout", "skipped: no time left", "failed: rc 1"):
        cut = {**parts, "bench": {"status": failed}}
        assert summarize(cut, "gpu")["all_ok"] is False, failed


def test_parity_verdicts_reach_the_summary() -> None:
    half = {
        "holds_parity": True,
        "parity_reference": "fp32_cpu_original",
        "max_abs_diff": 0.0016,
        "max_abs_diff_vs_fp16_weights_cpu": 0.0014,
        "label_agreement": 0.9997,
        "texts_per_s": 26650.0,
        "accuracy": 0.89,
    }
    bf16 = {**half, "holds_parity": False, "max_abs_diff": 0.0138}
    rows = {"torch float16 on cuda": half, "torch bfloat16 on cuda": bf16}
    doc = summarize({"parity": {"status": "ok", "result": {"rows": rows}}}, "gpu")
    assert doc["figures"]["parity"]["torch float16 on cuda"]["holds_parity"] is True
    assert "accuracy" not in doc["figures"]["parity"]["torch float16 on cuda"]
    table = markdown(doc)
    head = "| parity, torch {} on cuda (judged against fp32_cpu_original): max abs diff vs original"
    assert (
        head.format("float16") + " / FP16-rounded weights, same label, texts/s | holds: 0.0016 / "
        "0.0014, 0.9997, 26,650.0 |" in table
    )
    assert (
        head.format("bfloat16") + " / FP16-rounded weights, same label, texts/s | DOES NOT" in table
    )
    assert summarize({}, "gpu")["figures"]["parity"] == {}
