"""Which loadtest modules the Locust Jobs need: what they run, and everything that imports.

Read from the source with `ast` (nothing is imported), so the loadtest ConfigMap follows the
code as it changes rather than a list kept by hand.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from k8s.checks.common import Doc, containers, find, load_yaml_docs, name_of

PACKAGE = "loadtest"
INIT = "__init__.py"


def _imports(source: str) -> tuple[set[str], set[str]]:
    """(modules of the package, other top-level packages) that `source` imports anywhere,
    also inside functions. `from loadtest import x` counts `x` whether it is a module or a
    name; the caller keeps the ones that are files."""
    own: set[str] = set()
    others: set[str] = set()

    def absolute(dotted: str, names: Iterable[str]) -> None:
        top, _, rest = dotted.partition(".")
        if top != PACKAGE:
            others.add(top)
            return
        own.add(rest.split(".")[0] if rest else "__init__")
        if not rest:
            own.update(names)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                absolute(alias.name, ())
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level == 0 and node.module is not None:
                absolute(node.module, names)
            elif node.module is None:  # from . import x
                own.update(names)
            else:  # from .x import y
                own.add(node.module.split(".")[0])
    return own, others


def import_closure(package_dir: Path, entries: Iterable[str]) -> list[str]:
    """File names in `package_dir` that `entries` (file names) need: the package's
    `__init__.py`, the entries and whatever they import from the package, transitively."""
    wanted = [INIT, *entries]
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        path = package_dir / name
        if name in seen or not path.is_file():
            continue
        seen.add(name)
        own, _ = _imports(path.read_text(encoding="utf-8"))
        wanted.extend(f"{module}.py" for module in own)
    return sorted(seen)


def foreign_imports(
    package_dir: Path, names: Iterable[str], packages: set[str]
) -> dict[str, set[str]]:
    """File name -> which of `packages` (the project's others, e.g. service) it imports."""
    found: dict[str, set[str]] = {}
    for name in names:
        _, others = _imports((package_dir / name).read_text(encoding="utf-8"))
        if others & packages:
            found[name] = others & packages
    return found


def job_modules(jobs_file: Path, configmap: str) -> dict[str, set[str]]:
    """Job name -> the package's file names its containers run from where `configmap` is
    mounted (`locust -f <mount>/x.py`, `python <mount>/x.py`) or as `-m loadtest.x`."""
    found: dict[str, set[str]] = {}
    docs: list[Doc] = load_yaml_docs(jobs_file) if jobs_file.is_file() else []
    for job in find(docs, "Job"):
        spec = job["spec"]["template"].get("spec", {})
        volumes = {
            v["name"]
            for v in spec.get("volumes", [])
            if v.get("configMap", {}).get("name") == configmap
        }
        for container in containers(job["spec"]["template"]):
            mounts = [
                m["mountPath"].rstrip("/")
                for m in container.get("volumeMounts", [])
                if m.get("name") in volumes
            ]
            line = " ".join([*container.get("command", []), *container.get("args", [])])
            names = {f"{m}.py" for m in re.findall(rf"-m\s+{PACKAGE}\.(\w+)", line)}
            for mount in mounts:
                names |= set(re.findall(rf"{re.escape(mount)}/(\w+\.py)\b", line))
            if names:
                found.setdefault(name_of(job), set()).update(names)
    return found
