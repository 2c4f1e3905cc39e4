"""Installed packages' requirements, read from their metadata as pip reads them."""

from __future__ import annotations

from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name


def direct_requirements(name: str, extras: frozenset[str] = frozenset()) -> list[Requirement]:
    """What `name[extras]` itself requires, markers evaluated for this interpreter."""
    reqs = [Requirement(line) for line in metadata.requires(name) or []]
    wanted = extras | {""}
    return [r for r in reqs if not r.marker or any(r.marker.evaluate({"extra": e}) for e in wanted)]


def requirements_closure(root: str, extras: set[str]) -> dict[NormalizedName, list[Requirement]]:
    """Every requirement reached from `root[extras]` in the installed metadata, by name, with
    markers evaluated for this interpreter (so the closure is this Python's)."""
    found: dict[NormalizedName, list[Requirement]] = {}
    todo = [(root, frozenset(extras))]
    walked: set[tuple[NormalizedName, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        key = (canonicalize_name(name), wanted)
        if key in walked:
            continue
        walked.add(key)
        for req in direct_requirements(name, wanted):
            found.setdefault(canonicalize_name(req.name), []).append(req)
            todo.append((req.name, frozenset(req.extras)))
    return found
