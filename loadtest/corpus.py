"""Review texts for load: a seeded generator with a realistic length mix, or a file of texts.

Product reviews are short-tailed in the middle and long-tailed at the end: many one-liners and
titles, a body of a few sentences, and a few essays. Padding waste (and so the value of
length-aware batching) depends on that spread, so the generator draws word counts from a
log-normal distribution fitted by eye to real review sites (median ~30 words, 95th percentile
~120 words) and mixes in titles of a few words.
"""

from __future__ import annotations

import random
from pathlib import Path

TITLE_SHARE = 0.2  # product titles and one-line ratings
MEDIAN_WORDS = 30
SPREAD = 0.85  # sigma of log(words): p95 about 4x the median
MAX_WORDS = 400

_PRODUCTS = (
    "phone", "charger", "blender", "jacket", "headphones", "backpack", "lamp", "kettle",
    "keyboard", "mattress", "sneakers", "watch", "vacuum", "tent", "camera", "coffee maker",
)  # fmt: skip
_GOOD = (
    "works exactly as described",
    "arrived two days early and well packed",
    "the battery easily lasts all day",
    "feels solid and looks even better in person",
    "great value for the price",
    "setup took five minutes and it just works",
    "my kids love it and use it every day",
    "customer service answered within an hour and sorted it out",
    "the fabric is soft and the stitching is neat",
    "quiet, fast and easy to clean",
)
_BAD = (
    "stopped working after a week",
    "the box was crushed and a part was missing",
    "the battery drains overnight even when it is off",
    "cheap plastic that cracked the first time I used it",
    "nothing like the photos on the listing",
    "support never replied to three emails",
    "far too loud to use in the evening",
    "the size chart is wrong, order two sizes up",
    "it smells of chemicals and the smell will not go away",
    "returned it, and the refund took a month",
)
_NEUTRAL = (
    "I bought it as a gift for my brother",
    "I have been using it for about three months now",
    "compared it with two other brands before ordering",
    "delivery was on the date promised",
    "the manual is short but covers the basics",
    "it comes in four colours and I picked the grey one",
)
_OPENERS = ("Honestly,", "Overall", "To be fair,", "Update:", "In short,", "")
_CLOSERS = ("Would buy again.", "Not recommended.", "Five stars.", "One star.", "Meh.", "")


def _sentence(rng: random.Random, positive: bool) -> str:
    pool = _GOOD if positive else _BAD
    clause = rng.choice(pool) if rng.random() < 0.75 else rng.choice(_NEUTRAL)
    opener = rng.choice(_OPENERS)
    text = f"{opener} {clause}" if opener else clause
    return text[0].upper() + text[1:] + "."


def review(rng: random.Random) -> str:
    """One review or title, its length drawn from the mix above."""
    positive = rng.random() < 0.6
    product = rng.choice(_PRODUCTS)
    if rng.random() < TITLE_SHARE:
        adjective = rng.choice(("Great", "Solid", "Terrible", "Decent", "Awful", "Lovely"))
        tail = "" if rng.random() < 0.5 else f", {rng.choice(_CLOSERS)}"
        return f"{adjective} {product}{tail}"
    words = min(MAX_WORDS, max(4, round(rng.lognormvariate(0.0, SPREAD) * MEDIAN_WORDS)))
    parts = [f"The {product}:"]
    count = 2
    while count < words:
        sentence = _sentence(rng, positive if rng.random() < 0.85 else not positive)
        parts.append(sentence)
        count += len(sentence.split())
    closer = rng.choice(_CLOSERS)
    if closer:
        parts.append(closer)
    return " ".join(parts)


def generate(n: int, seed: int = 7) -> list[str]:
    """`n` reviews, the same for the same seed."""
    rng = random.Random(seed)
    return [review(rng) for _ in range(n)]


def load(path: Path | str | None, n: int, seed: int = 7) -> list[str]:
    """Texts from `path` (one per line, blank lines skipped), else `n` generated reviews."""
    if not path:
        return generate(n, seed)
    # Not service.textfile: the rehearsal's ConfigMap holds loadtest/ alone, and may be newer
    # than the image it runs in.
    try:
        lines = Path(path).read_bytes().decode("utf-8-sig").splitlines()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    texts = [text for line in lines if (text := line.strip())]
    if not texts:
        raise ValueError(f"{path}: no texts (expected one text per line)")
    return texts
