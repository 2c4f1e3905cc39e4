"""`make test`'s pytest: the tests without Ray run beside the others, at the lowest priority.

The Ray tests (integration, most of e2e) spend most of their wall time waiting: replicas
starting and stopping, requests in flight, metrics exported once a second. The unit and k8s
tiers and the torchrun training runs only compute, a few minutes in all. At nice 19 they fill
the cores the Ray tests leave idle: where both want a core, a process at nice 0 gets ~68
times their share and Ray's workers (nice 15) ~2.4 times. Not SCHED_IDLE: that would leave
them no CPU for seconds under a busy load, and a few of them bound wall time (a 408 within
2 s, a subprocess within 60 s). Each run's output is printed whole, the Ray tests' first.

    python -m tests.tiers [pytest options]    # options go to both runs; no paths
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

# No Ray, no fixed ports, nothing shared with the other tiers but the tiny model's builder.
# The e2e training runs (torchrun, two CPU processes each) and the GPU sizing run's CPU smoke
# (its parts without Ray Serve: training, probe, convoy) are heavy CPU work, last so that the
# short unit tests are done by the time they compete for the cores.
WITHOUT_RAY = (
    "tests/unit",
    "tests/k8s",
    "tests/e2e/test_training_ddp.py",
    "tests/e2e/test_training_fsdp.py",
    "tests/e2e/test_gpubench.py",
)
NO_TESTS = 5  # pytest's exit status when a run collected nothing (e.g. `-k` matched none)


def lowest_priority() -> None:
    """Lower the calling process (and what it starts) to nice 19."""
    os.nice(19)


def main(argv: list[str]) -> int:
    """Run both pytest sessions at once and return the first failure's exit status."""
    pytest = [sys.executable, "-m", "pytest"]
    # A cache of its own: both sessions rewrite the last-failed list when they end. (Without
    # the cache plugin the option does not exist, and naming it fails the run.)
    no_cache = any("no:cacheprovider" in arg for arg in argv)
    cache = [] if no_cache else ["-o", "cache_dir=.pytest_cache/without-ray"]
    with tempfile.TemporaryFile() as log:
        background = subprocess.Popen(
            [*pytest, *WITHOUT_RAY, *cache, *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lowest_priority,
        )
        try:
            ignored = [f"--ignore={path}" for path in WITHOUT_RAY]
            foreground = subprocess.run([*pytest, *ignored, *argv]).returncode
        except BaseException:  # interrupted: do not leave it running
            background.terminate()
            background.wait()
            raise
        waited = background.wait()
        print(f"\n{', '.join(WITHOUT_RAY)}, run beside the above at nice 19:", flush=True)
        log.seek(0)
        sys.stdout.buffer.write(log.read())
        sys.stdout.flush()
    codes = [foreground, waited]
    failed = [c for c in codes if c not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if codes == [NO_TESTS, NO_TESTS] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
