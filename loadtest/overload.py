"""Long reviews arriving faster than the service computes them: what the clients get back.

    python -m loadtest.overload --url http://127.0.0.1:8000 --rate 1.5 --seconds 40

Sends requests of `--texts` reviews of about `--words` words each (a few windows each: many
model rows a request) as Poisson arrivals at `--rate` requests a second, which do not slow
down when the service does, as a flash sale's would not. Prints (and with `--out` saves) the
answers by status, the texts answered a second and the latency of the answers by status. A
service that sheds what it cannot answer in time returns 429 at once and keeps answering the
rest; one that admits everything answers little but 504s (docs/serving.md, "Faults").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from loadtest.httpload import open_loop
from loadtest.scrape import not_ready

REVIEW = (
    "The battery lasted two days, the screen is bright and sharp, but the charger broke "
    "after a week and support never answered my emails about the refund. "
)


def body(n: int, texts: int, words: int) -> bytes:
    """Request `n`'s JSON: `texts` distinct reviews of about `words` words each."""
    review = REVIEW * max(1, round(words / len(REVIEW.split())))
    return json.dumps({"texts": [f"Order {n}-{i}. {review}" for i in range(texts)]}).encode()


async def run(url: str, texts: int, words: int, rate: float, seconds: float) -> dict[str, Any]:
    """Poisson arrivals for `seconds` (httpload's open loop); every request is waited for
    (bounded by the client timeout, 60 s), so each counts under its final status (0: no
    answer)."""
    # Distinct bodies for about twice the arrivals expected; past them, they repeat.
    payloads = [(body(n, texts, words), texts) for n in range(round(rate * seconds * 2) + 16)]
    result = await open_loop(f"{url}/v1/classify", payloads, rate, seconds, timeout_s=60.0)
    latencies = {200: result.latencies, **result.refused} if result.latencies else result.refused
    return {
        "requests": sum(result.statuses.values()),
        "texts_per_request": texts,
        "words_per_text": words,
        "rate_per_s": rate,
        "seconds": round(result.seconds, 1),
        "statuses": {str(s): len(v) for s, v in sorted(latencies.items())},
        "texts_answered_per_s": round(result.texts / result.seconds, 2),
        "p50_s": {str(s): round(sorted(v)[len(v) // 2], 3) for s, v in sorted(latencies.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--texts", type=int, default=16, help="reviews a request")
    parser.add_argument("--words", type=int, default=600, help="words a review (about)")
    parser.add_argument("--rate", type=float, default=1.5, help="requests a second")
    parser.add_argument("--seconds", type=float, default=40.0, help="how long arrivals last")
    parser.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    args = parser.parse_args(argv)
    problem = not_ready(args.url)
    if problem:
        print(
            f"error: no ready service at {args.url} ({problem}); start one with `make serve`, "
            "or pass --url",
            file=sys.stderr,
        )
        return 2
    result = asyncio.run(run(args.url, args.texts, args.words, args.rate, args.seconds))
    print(json.dumps(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
