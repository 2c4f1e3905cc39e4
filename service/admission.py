"""Admission: the work one ingress replica holds, counted in model rows.

A row is a text, or one window of a long text: what the model computes and what queues in
front of it. Counting rows, not requests or texts, keeps a burst of long reviews from
holding many times the work the bound was sized for.
"""

from __future__ import annotations

from collections.abc import Callable

from service.errors import Overloaded, PayloadTooLarge


class Admission:
    """Rows admitted and not yet answered; past `limit`, refused early."""

    def __init__(self, limit: int, retry_after_s: int) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.pending = 0

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

    def hold(self, rows: int) -> Hold:
        """Admit `rows` (or raise as `check` does) until the `with` block ends. The block gets
        a function that changes the count once the request's real row count is known (a text
        is one row until tokenized), checked the same way."""
        return Hold(self, rows)


class Hold:
    """Rows one request holds in an `Admission` (a class, not a generator: it is entered on
    every request, and contextlib's generator machinery costs several times as much)."""

    def __init__(self, admission: Admission, rows: int) -> None:
        self.admission = admission
        self.held = rows

    def __enter__(self) -> Callable[[int], None]:
        self.admission.check(self.held)
        self.admission.pending += self.held
        return self.resize

    def __exit__(self, *_: object) -> None:
        self.admission.pending -= self.held

    def resize(self, total: int) -> None:
        """Hold `total` rows instead (429 or 413, as `check`, when they do not fit)."""
        self.admission.check(total, self.held)
        self.admission.pending += total - self.held
        self.held = total
