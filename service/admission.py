"""Admission: the work one ingress replica holds, counted in model rows and in tokens.

A row is a text, or one window of a long text: what the model computes and what queues in
front of it. Counting rows, not requests or texts, keeps a burst of long reviews from
holding many times the work the bound was sized for.

Rows alone do not say how long the queue takes: 2,048 rows of 256 tokens are a minute of
work on a small CPU and a second on a GPU. So admission also counts tokens and learns the
pace at which this replica's tokens are answered (`Pace`); a request that would only wait out
its deadline behind the work already admitted is refused at once with 429, instead of
holding a place in the queue for a 504 ten seconds later while its rows take compute from
requests that can still make it (docs/serving.md, "Faults": "Refused when it would be late").
"""

from __future__ import annotations

import math

from service.errors import Behind, Overloaded, PayloadTooLarge

# Of a request's time left, the share the work queued ahead of it (and its own) may take:
# the pace is an estimate, and a request admitted to time out costs more (the client waits
# out the deadline, the model computes rows nobody reads) than one refused with 429 a
# little early.
TIME_SHARE = 0.8


class Pace:
    """Tokens a second at which this replica's model calls are answered while work waits
    behind them, seeded with the model's own estimate until a call is timed.

    A running ratio of sums (recent calls' tokens over their seconds, each sum a running
    mean), not a running mean of each call's rate: the model replica batches calls from
    every ingress together, so a call of a few tokens answered with a big one takes the big
    one's time. Its rate alone reads a small fraction of the pace, and a mean of rates swings
    with each such call; weighted by their seconds, calls sum to the pace they share (within
    a few percent of the tokens answered a second, measured, where a mean of rates read up to
    1.4x that). A call's seconds leave out its wait for company in an idle model replica
    (service.coalescer): a wait is not work."""

    def __init__(self, weight: float = 0.3) -> None:
        self.weight = weight  # of the newest call in each running mean
        self.tokens_per_s: float | None = None
        # Running means of the timed calls' tokens and seconds; seconds stay 0 until a call
        # is timed, and from then on the model's estimate no longer counts.
        self._tokens = 0.0
        self._seconds = 0.0

    def seed(self, tokens_per_s: float | None) -> None:
        """The model's estimate (from its warm-up), used until a call is timed."""
        if not self._seconds and tokens_per_s and tokens_per_s > 0:
            self.tokens_per_s = tokens_per_s

    def observe(self, tokens: int, seconds: float) -> None:
        """A call of `tokens` answered `seconds` after it was sent or the one before it
        was answered, whichever came later, with more work queued behind it."""
        if tokens <= 0 or seconds <= 0:
            return
        if not self._seconds:
            self._tokens, self._seconds = float(tokens), seconds
        else:
            self._tokens += self.weight * (tokens - self._tokens)
            self._seconds += self.weight * (seconds - self._seconds)
        self.tokens_per_s = self._tokens / self._seconds

    def seconds(self, tokens: int) -> float | None:
        """How long `tokens` take at this pace; None while nothing is known."""
        return tokens / self.tokens_per_s if self.tokens_per_s else None


class Admission:
    """Rows (and their tokens) admitted and not yet answered; past `limit` rows, or when
    the work ahead would outlast a request's time left, refused early."""

    def __init__(self, limit: int, retry_after_s: int) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.pending = 0
        self.pending_tokens = 0
        self.pace = Pace()

    def check(self, rows: int, held: int = 0) -> None:
        """413 when `rows` alone exceed the limit (waiting would never help), 429 with
        Retry-After when they do not fit beside what is pending now (`held` of which are
        already this request's)."""
        if rows > self.limit:
            raise PayloadTooLarge(
                f"the texts need {rows} model rows (a long text takes one per window); at most "
                f"{self.limit} are admitted at once: send fewer or shorter texts"
            )
        if self.pending - held + rows > self.limit:
            raise Overloaded(
                f"{self.pending} texts are waiting (a long text counts once per window); the "
                f"limit is {self.limit}",
                self.retry_after_s,
            )

    def check_time(self, tokens: int, held_tokens: int, time_left_s: float) -> None:
        """429 when the tokens admitted before this request, and its own, would take longer
        than TIME_SHARE of its time left at the measured pace; its Retry-After is at least
        the configured one, more when the work ahead needs longer to shrink enough. A
        request with nothing ahead of it is always admitted: alone, it has the best chance
        it will ever get."""
        ahead = self.pending_tokens - held_tokens
        if ahead <= 0:
            return
        needed = self.pace.seconds(ahead + tokens)
        allowed = TIME_SHARE * time_left_s
        if needed is not None and needed > allowed:
            # Retry-After: when the work ahead would have shrunk enough, were nothing added.
            raise Behind(
                f"the texts already waiting here, and these, would take about {needed:.1f}s "
                f"to answer; this request has {time_left_s:.1f}s left before its deadline",
                max(self.retry_after_s, math.ceil(needed - allowed)),
            )

    def hold(self, rows: int, time_left_s: float = float("inf")) -> Hold:
        """Admit `rows` (or raise as `check` does, or as `check_time` does for the work
        ahead alone, before any CPU goes into tokenizing) until the `with` block ends. The
        block gets the hold, whose `resize` sets the request's real rows and tokens once they
        are known (a text is one row until tokenized), checked as `check` and `check_time`
        do."""
        return Hold(self, rows, time_left_s)


class Hold:
    """Rows and tokens one request holds in an `Admission` (a class, not a generator: it is
    entered on every request, and contextlib's generator machinery costs several times as
    much)."""

    def __init__(self, admission: Admission, rows: int, time_left_s: float) -> None:
        self.admission = admission
        self.held = rows
        self.tokens = 0
        self.time_left_s = time_left_s

    def __enter__(self) -> Hold:
        self.admission.check(self.held)
        self.admission.check_time(0, 0, self.time_left_s)
        self.admission.pending += self.held
        return self

    def __exit__(self, *_: object) -> None:
        self.admission.pending -= self.held
        self.admission.pending_tokens -= self.tokens

    def resize(self, rows: int, tokens: int = 0, time_left_s: float = float("inf")) -> None:
        """Hold `rows` rows of `tokens` tokens instead (429 or 413, as `check` and
        `check_time`, when they do not fit)."""
        admission = self.admission
        admission.check(rows, self.held)
        admission.check_time(tokens, self.tokens, time_left_s)
        admission.pending += rows - self.held
        admission.pending_tokens += tokens - self.tokens
        self.held, self.tokens = rows, tokens
