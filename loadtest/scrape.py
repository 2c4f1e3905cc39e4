"""Server-side figures for a load run, from the service's Prometheus endpoint(s), and whether
the service is ready to be loaded at all.

Scraped at the start, during and at the end of the run; counters and histograms are read as
what they grew by from scrape to scrape, as Prometheus's increase() reads them: a series that
went down was reset (its replica restarted) and counted from zero, one that appeared started
at zero (a replica added), and one that vanished (a replica removed) keeps what it grew while
it was there. Gauges are read as the maximum seen.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, list[tuple[dict[str, str], float]]]
Series = tuple[int, str, tuple[tuple[str, str], ...]]  # endpoint, sample name, labels
P = "ray_sentiment_"


def scrape(url: str, timeout: float = 5.0) -> Samples:
    """Every sample of one endpoint, by sample name, parsed by prometheus_client."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((dict(s.labels), s.value))
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over the series of `name` whose labels include `labels`."""
    return sum(
        v for got, v in samples.get(name, []) if all(got.get(k) == w for k, w in labels.items())
    )


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """Sum of `name` per value of `label`."""
    out: dict[str, float] = {}
    for got, v in samples.get(name, []):
        key = got.get(label, "")
        out[key] = out.get(key, 0.0) + v
    return out


def bucket_quantile(grown: Samples, name: str, q: float) -> float | None:
    """Quantile `q` of histogram `name` from its buckets' increases over the window, like
    PromQL's histogram_quantile."""
    cumulative = sorted((float(le), n) for le, n in by_label(grown, f"{name}_bucket", "le").items())
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in cumulative:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            share = (rank - lower_count) / (count - lower_count) if count > lower_count else 1.0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return None


class ServerWatch:
    """Scrapes the given endpoints and summarises what the service did meanwhile."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.scrapes = 0
        self.last: Samples = {}
        self._previous: dict[Series, float] = {}
        self._grown: dict[Series, float] = {}
        self.peaks: dict[str, float] = {}
        self.errors: list[str] = []

    def sample(self) -> None:
        """One scrape of every endpoint, merged; failures are noted, never raised."""
        merged: Samples = {}
        current: dict[Series, float] = {}
        for index, url in enumerate(self.urls):
            try:
                for name, rows in scrape(url).items():
                    merged.setdefault(name, []).extend(rows)
                    for labels, value in rows:
                        current[index, name, tuple(sorted(labels.items()))] = value
            except (OSError, ValueError) as exc:
                self.errors.append(f"{url}: {exc}")
                return
        if self.scrapes:
            for key, value in current.items():
                before = self._previous.get(key, 0.0)
                grew = value - before if value >= before else value  # down: reset, from 0
                self._grown[key] = self._grown.get(key, 0.0) + grew
        self._previous = current
        self.scrapes += 1
        self.last = merged
        for gauge in ("pending_texts", "gpu_memory_peak_bytes", "gpu_memory_reserved_bytes"):
            values = [v for _, v in merged.get(P + gauge, [])]
            self.peaks[gauge] = max([self.peaks.get(gauge, 0.0), *values])

    def summary(self) -> dict[str, Any]:
        """Server-side figures over the scrape window (empty with a reason if none)."""
        if self.scrapes < 2:
            reason = self.errors[-1] if self.errors else "fewer than two scrapes"
            return {"available": False, "reason": reason}
        grown: Samples = {}
        for (_, name, labels), value in self._grown.items():
            grown.setdefault(name, []).append((dict(labels), value))
        b = self.last

        def delta(name: str) -> float:
            return total(grown, name)

        forwards = delta(P + "forward_seconds_count")
        batches = delta(P + "batch_texts_count")
        texts = delta(P + "texts_total")
        # Rows the model computed (a long text's every window), as the dashboard divides:
        # answered texts count a long text once and would read low on long reviews.
        rows = delta(P + "forward_texts_total")
        padded = delta(P + "forward_padded_tokens_total")
        replicas = {got.get("replica", "") for got, _ in b.get(P + "model_info", [])}

        def diff_by(name: str, label: str) -> dict[str, float]:
            return by_label(grown, name, label)

        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1000, 1)

        return {
            "available": True,
            "replicas": len(replicas),
            "texts_answered": texts,
            "texts_per_forward": round(rows / forwards, 2) if forwards else None,
            "texts_per_batch": round(rows / batches, 2) if batches else None,
            # Of all tokens the forwards computed, the share that was padding.
            "padding_ratio_mean": round(1 - delta(P + "forward_tokens_total") / padded, 3)
            if padded
            else None,
            "queue_wait_p50_ms": ms(bucket_quantile(grown, P + "queue_wait_seconds", 0.5)),
            "queue_wait_p99_ms": ms(bucket_quantile(grown, P + "queue_wait_seconds", 0.99)),
            "forward_p99_ms": ms(bucket_quantile(grown, P + "forward_seconds", 0.99)),
            # Forwards on the event loop or the forward thread (service.placement).
            "forwards_by_place": diff_by(P + "forward_seconds_count", "on"),
            "requests_by_status": diff_by(P + "requests_total", "status"),
            "rejections_by_reason": diff_by(P + "rejections_total", "reason"),
            "pending_texts_max": self.peaks.get("pending_texts", 0.0),
            "gpu_memory_peak_bytes_max": self.peaks.get("gpu_memory_peak_bytes", 0.0),
            "gpu_memory_reserved_bytes_max": self.peaks.get("gpu_memory_reserved_bytes", 0.0),
        }


def not_ready(base_url: str) -> str | None:
    """None when the service at `base_url` answers /readyz with 200, else why not: a run
    against no service would only count connection errors."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/readyz", timeout=10):
            return None
    except urllib.error.HTTPError as exc:  # any status but 2xx
        return f"/readyz answered {exc.code}"
    except OSError as exc:
        return str(getattr(exc, "reason", exc))
