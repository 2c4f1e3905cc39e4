"""`make test`'s pytest: the tests without Ray (and the type check) run beside the others, at
the lowest priority.

The Ray tests (integration, most of e2e) spend most of their wall time waiting: replicas
starting and stopping, requests in flight, metrics exported once a second. The unit and k8s
tiers, the torchrun training runs, the GPU sizing run's CPU smoke mode and mypy only compute, a
few minutes in all. At nice 19 they fill the cores the Ray tests leave idle: where both want a
core, a process at nice 0 gets ~68 times their share and Ray's workers (nice 15) ~2.4 times.
Not SCHED_IDLE: that would leave them no CPU for seconds under a busy load, and a few of them
bound wall time (a 408 within 2 s, a subprocess within 60 s). Each run's output is printed
whole, the Ray tests' first.

    python -m tests.tiers [--first "COMMAND"] [pytest options]

Options go to both pytest runs (no paths); `--first` runs COMMAND (shell words) at nice 19
before the tests without Ray, and its failure fails the run.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import threading
from typing import IO

# No Ray, no fixed ports, nothing shared with the other tiers but the tiny model's builder.
# The e2e runs (torchrun, two CPU processes each; the GPU sizing run's parts, its Ray Serve
# part skipped) are heavy CPU work, last so that the short unit tests are done by the time
# they compete for the cores.
WITHOUT_RAY = (
    "tests/unit",
    "tests/k8s",
    "tests/e2e/test_training_ddp.py",
    "tests/e2e/test_training_fsdp.py",
    "tests/e2e/test_gpubench.py",
)
NO_TESTS = 5  # pytest's exit status when a run collected nothing (e.g. `-k` matched none)
NOT_STARTED = 127  # a shell's status for a command it could not find


def lowest_priority() -> None:
    """Lower the calling process (and what it starts) to nice 19."""
    os.nice(19)


class Beside:
    """Commands run one after another at nice 19 on a thread of their own, output to `log`."""

    def __init__(self, commands: list[list[str]], log: IO[bytes]) -> None:
        self.codes: list[int] = []  # exit status of each command that ran, in order
        self._lock = threading.Lock()
        self._current: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, args=(commands, log), daemon=True)
        self._thread.start()

    def _run(self, commands: list[list[str]], log: IO[bytes]) -> None:
        for command in commands:
            with self._lock:
                if self._stopped:
                    return
                try:
                    self._current = subprocess.Popen(
                        command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=lowest_priority
                    )
                except OSError as exc:  # no such program: said at once, and a failure
                    print(f"{shlex.join(command)}: {exc}", file=sys.stderr, flush=True)
                    self.codes.append(NOT_STARTED)
                    continue
            self.codes.append(self._current.wait())

    def wait(self) -> list[int]:
        """Wait for every command; their exit statuses."""
        self._thread.join()
        return self.codes

    def stop(self) -> None:
        """Stop the command running and start no other."""
        with self._lock:
            self._stopped = True
            if self._current is not None:
                self._current.terminate()
        self._thread.join()


def main(argv: list[str]) -> int:
    """Run both pytest sessions at once and return the first failure's exit status."""
    first: list[list[str]] = []
    if argv[:1] == ["--first"]:
        first, argv = [shlex.split(argv[1])], argv[2:]
    pytest = [sys.executable, "-m", "pytest"]
    # A cache of its own: both sessions rewrite the last-failed list when they end. (Without
    # the cache plugin the option does not exist, and naming it fails the run.)
    no_cache = any("no:cacheprovider" in arg for arg in argv)
    cache = [] if no_cache else ["-o", "cache_dir=.pytest_cache/without-ray"]
    with tempfile.TemporaryFile() as log:
        background = Beside([*first, [*pytest, *WITHOUT_RAY, *cache, *argv]], log)
        try:
            ignored = [f"--ignore={path}" for path in WITHOUT_RAY]
            foreground = subprocess.run([*pytest, *ignored, *argv]).returncode
        except BaseException:  # interrupted: do not leave it running
            background.stop()
            raise
        codes = background.wait()
        names = ([shlex.join(first[0])] if first else []) + list(WITHOUT_RAY)
        print(f"\n{', '.join(names)}, run beside the above at nice 19:", flush=True)
        log.seek(0)
        sys.stdout.buffer.write(log.read())
        sys.stdout.flush()
    return verdict(codes[:-1], [foreground, codes[-1]])


def verdict(checks: list[int], sessions: list[int]) -> int:
    """The run's exit status: the first failure of the `--first` command (`checks`) or of a
    pytest session; NO_TESTS when neither session collected a test. Only a pytest session may
    collect nothing."""
    failed = [c for c in checks if c != 0] + [c for c in sessions if c not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if all(c == NO_TESTS for c in sessions) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
