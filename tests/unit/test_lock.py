"""The lock (constraints/pyX.Y.txt) pins every package the project installs, within the ranges
that ask for it, and is what this venv holds: a dependency added to pyproject.toml without
`make lock` would install unpinned, and pass here only by the luck of the day's releases."""

import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from tests.requirements import requirements_closure

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "constraints" / f"py{sys.version_info.major}.{sys.version_info.minor}.txt"
# TORCH_SPEC (Makefile) and TORCH_VERSION (Dockerfile) pick torch's build; pip freeze, which
# writes the lock, leaves out the installer's own packages.
UNPINNED = {"torch", "pip", "setuptools", "wheel"}

pytestmark = pytest.mark.skipif(
    not LOCK.exists(), reason="no lock for this Python: make install took the newest versions"
)


def read_lock(path: Path) -> dict[NormalizedName, str]:
    """Name -> pinned version."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


@pytest.fixture(scope="module")
def needed() -> dict[NormalizedName, list[Requirement]]:
    # `make install` installs the dev extra; the image, the loadtest one (a subset).
    return requirements_closure("sentiment-service", {"dev", "loadtest"})


def test_the_lock_pins_every_package_the_project_needs(
    needed: dict[NormalizedName, list[Requirement]],
) -> None:
    unpinned = sorted(set(needed) - set(read_lock(LOCK)) - UNPINNED)
    assert not unpinned, f"{LOCK.name} lacks {unpinned}: run make lock, then make test"


def test_each_pin_is_within_every_range_that_asks_for_it(
    needed: dict[NormalizedName, list[Requirement]],
) -> None:
    pins = read_lock(LOCK)
    outside = [
        f"{name}=={pins[name]} vs {req}"
        for name, reqs in needed.items()
        if name in pins
        for req in reqs
        if not req.specifier.contains(pins[name], prereleases=True)
    ]
    assert not outside, f"{LOCK.name} pins versions outside their ranges: {outside}"


def installed(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def test_this_venv_holds_the_locked_versions() -> None:
    differ = {
        name: (pinned, found)
        for name, pinned in read_lock(LOCK).items()
        if (found := installed(name)) != pinned
    }
    assert not differ, f"installed versions differ from {LOCK.name} (pinned, installed): {differ}"


def test_the_walk_follows_extras_and_markers() -> None:
    needed = requirements_closure("sentiment-service", {"dev"})
    assert "starlette" in needed  # through ray[serve] -> fastapi: extras are followed
    assert "pytest" in needed  # the dev extra's own
    bare = requirements_closure("sentiment-service", set())
    assert "pytest" not in bare and "locust" not in bare  # an extra not asked for is not
