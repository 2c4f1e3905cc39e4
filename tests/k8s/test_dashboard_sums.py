"""Dashboard means come from counters: Ray rebuilds a histogram's `_sum` from bucket midpoints
(README "Metrics"), so a `_sum` is only used where no counter exists, and says so."""

from __future__ import annotations

import json
import re

from tests.k8s.conftest import REPO

DASHBOARD = json.loads((REPO / "k8s" / "grafana-dashboard.json").read_text())
HISTOGRAM_SUM = re.compile(r"ray_sentiment_\w+_sum\b")


def test_histogram_sums_only_where_no_counter_exists() -> None:
    # No counter of tokenize seconds exists; every other mean has one.
    using = {
        p["title"]
        for p in DASHBOARD["panels"]
        for t in p.get("targets", [])
        if HISTOGRAM_SUM.search(t["expr"])
    }
    assert using == {"Tokenize time per model call (ingress)"}
    for panel in DASHBOARD["panels"]:
        if panel["title"] in using:
            assert "approximate" in panel["description"]


def test_mean_texts_per_call_counts_rows_computed() -> None:
    (panel,) = [p for p in DASHBOARD["panels"] if p["title"].startswith("Texts per handle call")]
    (mean,) = [t for t in panel["targets"] if t["legendFormat"] == "mean texts per call"]
    assert "ray_sentiment_forward_texts_total" in mean["expr"]
    assert "ray_sentiment_call_texts_count" in mean["expr"]
