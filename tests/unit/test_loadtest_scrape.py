"""Server-side summaries from real Prometheus text, parsed by prometheus_client."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from loadtest.scrape import ServerWatch, bucket_quantile, scrape
from loadtest.summary import markdown, slo_verdict

R = 'application="a",deployment="d",replica="r1"'


def exposition(texts: int, forwards: int, waits: tuple[int, int, int], rejected: int) -> str:
    """A slice of what Ray exports for one replica."""
    le1, le2, inf = waits
    return f"""# HELP ray_sentiment_texts_total texts
# TYPE ray_sentiment_texts_total counter
ray_sentiment_texts_total{{{R}}} {texts}
# HELP ray_sentiment_forward_texts_total rows computed: one in four texts took two windows
# TYPE ray_sentiment_forward_texts_total counter
ray_sentiment_forward_texts_total{{{R}}} {texts + texts // 4}
# HELP ray_sentiment_forward_tokens_total tokens
# TYPE ray_sentiment_forward_tokens_total counter
ray_sentiment_forward_tokens_total{{{R}}} {texts * 6}
# HELP ray_sentiment_forward_padded_tokens_total padded tokens
# TYPE ray_sentiment_forward_padded_tokens_total counter
ray_sentiment_forward_padded_tokens_total{{{R}}} {texts * 8}
# HELP ray_sentiment_forward_seconds forward time, by where it ran
# TYPE ray_sentiment_forward_seconds histogram
ray_sentiment_forward_seconds_bucket{{{R},on="event_loop",le="+Inf"}} {forwards - forwards // 5}
ray_sentiment_forward_seconds_count{{{R},on="event_loop"}} {forwards - forwards // 5}
ray_sentiment_forward_seconds_sum{{{R},on="event_loop"}} 0.5
ray_sentiment_forward_seconds_bucket{{{R},on="thread",le="+Inf"}} {forwards // 5}
ray_sentiment_forward_seconds_count{{{R},on="thread"}} {forwards // 5}
ray_sentiment_forward_seconds_sum{{{R},on="thread"}} 0.5
# HELP ray_sentiment_batch_texts texts per batch
# TYPE ray_sentiment_batch_texts histogram
ray_sentiment_batch_texts_bucket{{{R},le="+Inf"}} {forwards}
ray_sentiment_batch_texts_count{{{R}}} {forwards}
ray_sentiment_batch_texts_sum{{{R}}} {texts}
# HELP ray_sentiment_queue_wait_seconds wait
# TYPE ray_sentiment_queue_wait_seconds histogram
ray_sentiment_queue_wait_seconds_bucket{{{R},le="0.01"}} {le1}
ray_sentiment_queue_wait_seconds_bucket{{{R},le="0.1"}} {le2}
ray_sentiment_queue_wait_seconds_bucket{{{R},le="+Inf"}} {inf}
ray_sentiment_queue_wait_seconds_count{{{R}}} {inf}
ray_sentiment_queue_wait_seconds_sum{{{R}}} 1.0
# HELP ray_sentiment_rejections_total rejections
# TYPE ray_sentiment_rejections_total counter
ray_sentiment_rejections_total{{{R},reason="overloaded"}} {rejected}
# HELP ray_sentiment_pending_texts pending
# TYPE ray_sentiment_pending_texts gauge
ray_sentiment_pending_texts{{{R}}} {texts % 7}
# HELP ray_sentiment_model_info info
# TYPE ray_sentiment_model_info gauge
ray_sentiment_model_info{{{R},model="m",dtype="float32",device="cpu"}} 1
"""


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server answering whatever text is last in the list."""
    pages = [exposition(0, 0, (0, 0, 0), 0)]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's spelling
            body = pages[-1].encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/metrics", pages
    server.shutdown()
    server.server_close()


def test_watch_reports_differences_over_the_window(endpoint: tuple[str, list[str]]) -> None:
    url, pages = endpoint
    pages.append(exposition(100, 10, (5, 5, 5), 1))  # before the run
    watch = ServerWatch([url])
    watch.sample()
    pages.append(exposition(400, 20, (55, 100, 105), 4))  # after it
    watch.sample()
    s = watch.summary()
    assert s["available"] is True
    assert s["replicas"] == 1
    assert s["texts_answered"] == 300
    # Rows, not answered texts: 375 rows (300 texts, 75 of them in two windows) over 10
    # forwards, as the dashboard divides forward_texts_total.
    assert s["texts_per_forward"] == 37.5
    assert s["texts_per_batch"] == 37.5  # one batch per forward here
    assert s["padding_ratio_mean"] == 0.25  # 6 of every 8 tokens computed were the texts'
    assert s["rejections_by_reason"] == {"overloaded": 3.0}
    assert s["forwards_by_place"] == {"event_loop": 8.0, "thread": 2.0}  # 10 more forwards
    assert s["queue_wait_p50_ms"] is not None and s["queue_wait_p50_ms"] <= 10.0
    assert 10.0 < s["queue_wait_p99_ms"] <= 100.0
    assert s["pending_texts_max"] == max(100 % 7, 400 % 7)  # a gauge: the highest seen


def test_watch_without_a_server_says_why() -> None:
    watch = ServerWatch(["http://127.0.0.1:9/metrics"])
    watch.sample()
    summary = watch.summary()
    assert summary["available"] is False
    assert "127.0.0.1:9" in summary["reason"]


def test_bucket_quantile_interpolates_like_promql(endpoint: tuple[str, list[str]]) -> None:
    url, pages = endpoint
    nothing = scrape(url)
    pages.append(exposition(0, 0, (50, 100, 100), 0))
    grown = scrape(url)  # what the buckets grew by, from zero
    # Half the observations are under 10 ms, the rest between 10 and 100 ms.
    assert bucket_quantile(grown, "ray_sentiment_queue_wait_seconds", 0.5) == 0.01
    q75 = bucket_quantile(grown, "ray_sentiment_queue_wait_seconds", 0.75)
    assert q75 == pytest.approx(0.055)
    assert bucket_quantile(nothing, "ray_sentiment_queue_wait_seconds", 0.5) is None


def answered(**replicas: int) -> str:
    rows = [f'ray_sentiment_texts_total{{replica="{r}"}} {n}' for r, n in replicas.items()]
    return "# TYPE ray_sentiment_texts_total counter\n" + "\n".join(rows) + "\n"


def test_watch_counts_across_replica_restarts_and_rescaling(
    endpoint: tuple[str, list[str]],
) -> None:
    url, pages = endpoint
    watch = ServerWatch([url])
    for page in (
        answered(r1=100, r2=50),  # before the run
        answered(r1=160, r2=80),  # +60, +30
        answered(r1=20, r2=90),  # r1 restarted: counted 20 from zero; +10
        answered(r1=25, r3=40),  # +5; r2 scaled away (keeps its 40); r3 added, from zero
    ):
        pages.append(page)
        watch.sample()
    # Last minus first would read 25 + 40 - 150 = -85.
    assert watch.summary()["texts_answered"] == 60 + 30 + 20 + 10 + 5 + 40


def test_slo_verdict_names_each_miss() -> None:
    assert slo_verdict(100, 0.0, 250, 0.01) == []
    misses = slo_verdict(300, 0.02, 250, 0.01)
    assert len(misses) == 2
    assert "p99 latency 300 ms" in misses[0]
    assert "error ratio 0.0200" in misses[1]


def test_markdown_summary_states_the_verdict() -> None:
    doc = {
        "shape": "spike",
        "host": "http://127.0.0.1:8000",
        "client": {
            "requests": 10, "texts": 40, "texts_per_s": 4.0, "p50_ms": 5.0, "p95_ms": 9.0,
            "p99_ms": 12.0, "failures": 0, "error_ratio": 0.0, "rejected": 0,
        },
        "server": {"available": False, "reason": "no --metrics-url"},
        "slo": {"p99_ms": 10.0, "error_ratio": 0.01, "misses": ["p99 latency 12 ms is over"]},
    }  # fmt: skip
    text = markdown(doc)
    assert "MISSED: p99 latency 12 ms" in text
    assert "Server metrics unavailable: no --metrics-url" in text
