"""Every metric the service exports, defined once.

They are Ray metrics, so they leave through Ray's metrics export port together with
`ray_serve_*`; Ray prefixes each name with `ray_` (`sentiment_batch_texts` is scraped as
`ray_sentiment_batch_texts_bucket`, ...), and adds deployment/replica/application tags.
Build them inside a replica: Ray metrics need a connected Ray worker.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from ray.serve.metrics import Counter, Gauge, Histogram

PREFIX = "sentiment_"
EXPORTED_PREFIX = "ray_" + PREFIX

LATENCY_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
TEXTS_BUCKETS = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0]
# A text past this share of unknown tokens is counted as one the model cannot read.
UNREADABLE_SHARE = 0.5
# Windows per long text; max_windows is at most 64.
WINDOW_BUCKETS = [2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0]


def _hist(name: str, doc: str, buckets: list[float], tags: tuple[str, ...] = ()) -> Histogram:
    # Ray annotates tag_keys as a 1-tuple; any tuple of names works.
    return Histogram(PREFIX + name, description=doc, boundaries=buckets, tag_keys=tags)  # type: ignore[arg-type]


@functools.cache
def user_config_refused() -> Gauge:
    """One per process: a co-located replica's ingress and model core set the same series."""
    return Gauge(
        PREFIX + "user_config_refused",
        description="1 while a replica serves with its previous settings because it refused the "
        "latest user_config (its /readyz and log say why), else 0.",
    )


class IngressMetrics:
    """Handles for the `sentiment_*` metrics of one ingress replica (per-request side)."""

    def __init__(self) -> None:
        self.request_latency = _hist(
            "request_latency_seconds",
            "Time from request arrival in the ingress to its answer, by HTTP status.",
            LATENCY_BUCKETS_S,
            ("status",),
        )
        self.tokenize = _hist(
            "tokenize_seconds", "Time to tokenize one model call's texts.", LATENCY_BUCKETS_S
        )
        self.call_texts = _hist(
            "call_texts",
            "Rows in one call from an ingress to the model (coalesced across requests): a text, "
            "or one window of a long text.",
            TEXTS_BUCKETS,
        )
        # Long texts only: a histogram observation costs CPU in this replica and again in
        # Ray's metrics agent, and nearly every text fits one window (texts_total counts them).
        self.long_text_windows = _hist(
            "long_text_windows",
            "Windows one answered text longer than max_seq_len tokens used (2 or more).",
            WINDOW_BUCKETS,
        )
        self.requests = Counter(
            PREFIX + "requests",
            description="Classify requests by HTTP status.",
            tag_keys=("status",),
        )
        self.texts = Counter(PREFIX + "texts", description="Texts answered.")
        self.truncated = Counter(
            PREFIX + "truncated_texts",
            description="Texts partly unread: cut to max_seq_len tokens, or past max_windows.",
        )
        self.unreadable = Counter(
            PREFIX + "unreadable_texts",
            description="Texts answered with more than half their tokens unknown to the "
            f"model's vocabulary (unknown_share > {UNREADABLE_SHARE}): e.g. another language.",
        )
        self.rejections = Counter(
            PREFIX + "rejections",
            description="Requests refused, by reason (validation, too_large, overloaded, ...).",
            tag_keys=("reason",),
        )
        self.resent_calls = Counter(
            PREFIX + "resent_model_calls",
            description="Model calls sent once more because their model replica died.",
        )
        self.pending_texts = Gauge(
            PREFIX + "pending_texts",
            description="Texts an ingress replica admitted and has not answered yet.",
        )
        self.pace = Gauge(
            PREFIX + "ingress_pace_tokens_per_second",
            description="Tokens a second at which an ingress replica's model calls are answered "
            "under load, as its admission predicts waits with.",
        )

    def publish(
        self,
        counts: Mapping[tuple[str, str], int],
        windows: Mapping[int, int],
        pending: int,
        pace: float | None,
        refused: str | None,
    ) -> None:
        """Add up what the ingress counted since the last call (kept in plain counters on the
        request path, which is cheaper than a Ray metric call per request), and re-set the
        gauges. `counts` maps (kind, tag) to a count; `windows` maps windows per long text
        (2 or more) to texts; `pace` is None while the ingress knows none; `refused` says why
        the latest user_config was refused (None: taken)."""
        untagged = {
            "resent": self.resent_calls,
            "texts": self.texts,
            "truncated": self.truncated,
            "unreadable": self.unreadable,
        }
        for (kind, tag), value in counts.items():
            if not value:
                continue
            if kind == "status":
                self.requests.inc(value, tags={"status": tag})
            elif kind == "rejected":
                self.rejections.inc(value, tags={"reason": tag})
            else:
                untagged[kind].inc(value)
        # A histogram takes one value a call: one per long text, here rather than per request.
        for count, texts in windows.items():
            for _ in range(texts):
                self.long_text_windows.observe(count)
        self.pending_texts.set(pending)
        user_config_refused().set(0 if refused is None else 1)
        if pace:
            self.pace.set(pace)


class ModelMetrics:
    """Handles for the `sentiment_*` metrics of one model replica (batching and the GPU)."""

    def __init__(self) -> None:
        self.queue_wait = _hist(
            "queue_wait_seconds",
            "Time a model call waited between arriving at the model replica and its batch.",
            LATENCY_BUCKETS_S,
        )
        self.forward = _hist(
            "forward_seconds",
            "Time of one forward pass (one micro-batch), by where it ran (on: thread, event_loop).",
            LATENCY_BUCKETS_S,
            ("on",),
        )
        self.batch_texts = _hist(
            "batch_texts", "Texts in one dynamic batch (across calls and ingresses).", TEXTS_BUCKETS
        )
        # Counters, not per-forward histograms: the loop adds them up in plain ints and the
        # gauges thread publishes them (see ModelCore). Texts per forward: forward_texts over
        # forward_seconds' count; padding share: 1 - forward_tokens / forward_padded_tokens.
        self.forward_texts = Counter(
            PREFIX + "forward_texts", description="Texts (rows) computed by forward passes."
        )
        self.forward_tokens = Counter(
            PREFIX + "forward_tokens", description="Tokens of those texts, padding excluded."
        )
        self.forward_padded_tokens = Counter(
            PREFIX + "forward_padded_tokens",
            description="Tokens forward passes computed, padding included: per forward, its "
            "longest length (rounded up) x its texts; onnx-int8: each run's own width x its "
            "texts.",
        )
        self.forward_failures = Counter(
            PREFIX + "forward_failures",
            description="Forward attempts that raised, by reason (oom, error, crash: the "
            "forward process died); each is retried in halves (a crash: text by text).",
            tag_keys=("reason",),
        )
        self.int8_rechecked = Counter(
            PREFIX + "int8_rechecked_texts",
            description="Texts whose INT8 answer was too close to call and was recomputed on "
            "the FP32 graph (backend onnx-int8 only).",
        )
        self.queued_texts = Gauge(
            PREFIX + "model_queued_texts",
            description="Texts waiting in the model replica for a batch.",
        )
        self.gpu_allocated = Gauge(
            PREFIX + "gpu_memory_allocated_bytes",
            description="torch.cuda.memory_allocated of the replica's GPU (0 on CPU).",
        )
        self.gpu_reserved = Gauge(
            PREFIX + "gpu_memory_reserved_bytes",
            description="torch.cuda.memory_reserved of the replica's GPU (0 on CPU).",
        )
        self.gpu_peak = Gauge(
            PREFIX + "gpu_memory_peak_bytes",
            description="torch.cuda.max_memory_allocated since start (0 on CPU).",
        )
        self.model_info = Gauge(
            PREFIX + "model_info",
            description="Always 1; the tags say which model, dtype, device and backend serve.",
            tag_keys=("model", "dtype", "device", "backend"),  # type: ignore[arg-type]  # stub says 1-tuple
        )

    def publish(
        self,
        info: dict[str, str],
        queued: int,
        gpu: tuple[int, int, int],
        added: Mapping[str, int],
        refused: str | None,
    ) -> None:
        """Set every gauge again (Ray forgets one not set within two export intervals):
        the model's tags, the texts waiting, and GPU bytes allocated, reserved and at peak;
        and add what was counted since the last call (`added`: a counter's attribute name here,
        such as "forward_texts", to its increase); and whether it refused its latest
        user_config (`refused`: why, or None)."""
        self.model_info.set(1, tags=info)
        user_config_refused().set(0 if refused is None else 1)
        self.queued_texts.set(queued)
        self.gpu_allocated.set(gpu[0])
        self.gpu_reserved.set(gpu[1])
        self.gpu_peak.set(gpu[2])
        for name, value in added.items():
            if value > 0:
                getattr(self, name).inc(value)
