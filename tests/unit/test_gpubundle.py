"""The GPU bundle's unpacking: only what the machine lacks or has older, plus the pins."""

from __future__ import annotations

import json
import sys
import tarfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from loadtest.gpubundle import PINNED, _dist_files, _prune, choose, unpack
from tests.requirements import direct_requirements

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


def _bundle(root: Path, dists: dict[str, str], pinned: list[str], python: str = HERE) -> Path:
    """A bundle of one file per distribution (`name` -> version), as `build` writes it."""
    bundle, site = root / "bundle", root / "site"
    bundle.mkdir()
    manifest: dict[str, Any] = {"python": python, "pinned": pinned, "dists": {}}
    with tarfile.open(bundle / "site.tar.xz", "w:xz") as tar:
        for name, version in dists.items():
            file = site / name / "__init__.py"
            file.parent.mkdir(parents=True)
            file.write_text(f"VERSION = {version!r}\n")
            tar.add(file, arcname=f"{name}/__init__.py")
            manifest["dists"][name] = {"version": version, "files": [f"{name}/__init__.py"]}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle


def test_taken_are_the_missing_the_newer_and_the_pinned(tmp_path: Path) -> None:
    older = "0.0.1"  # than this environment's own pytest, numpy and pluggy
    dists = {"zz-not-here": "1.0", "pytest": "9999.0", "numpy": older, "pluggy": older}
    bundle = _bundle(tmp_path, dists, pinned=["pluggy"])
    chosen = choose(json.loads((bundle / "manifest.json").read_text()))
    assert chosen == {
        "zz-not-here": "missing here",
        "pytest": f"newer than {metadata.version('pytest')}",
        "pluggy": f"pinned (here {metadata.version('pluggy')})",
    }  # numpy: the machine's own is newer
    site, again = unpack(bundle, tmp_path / "dest")
    assert again == chosen
    assert sorted(p.name for p in site.iterdir() if p.is_dir()) == sorted(chosen)
    assert (site / "pytest" / "__init__.py").read_text() == "VERSION = '9999.0'\n"
    (site / "pluggy" / "__init__.py").unlink()  # extracted once per bundle and machine
    assert unpack(bundle, tmp_path / "dest")[0] == site
    assert not (site / "pluggy" / "__init__.py").exists()


def test_a_bundle_for_another_python_is_refused(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, {"zz-not-here": "1.0"}, pinned=[], python="2.7")
    with pytest.raises(RuntimeError, match=r"the bundle is for Python 2\.7"):
        unpack(bundle, tmp_path / "dest")


def test_the_install_s_programs_are_dropped_but_py_spy(tmp_path: Path) -> None:
    """pip --target puts a wheel's scripts in site/bin, and its RECORD names them from the
    folder pip installed into; only py-spy (the bench's profiler) travels."""
    site = tmp_path / "site"
    (site / "bin").mkdir(parents=True)
    for name in ("py-spy", "ray"):
        (site / "bin" / name).write_text("#!/bin/sh\n")
    for dist, program in (("py_spy-0.4.3", "py-spy"), ("ray-2.60.0", "ray")):
        info = site / f"{dist}.dist-info"
        info.mkdir()
        name, version = dist.split("-")
        (info / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"../../bin/{program},,\n{dist}.dist-info/METADATA,,\n")
    dists = _dist_files(site)
    assert dists["py-spy"]["files"] == ["py_spy-0.4.3.dist-info/METADATA", "bin/py-spy"]
    assert dists["ray"]["files"] == ["ray-2.60.0.dist-info/METADATA"]
    _prune(site)
    assert [p.name for p in (site / "bin").iterdir()] == ["py-spy"]


def _names(requirements: list[Requirement]) -> set[str]:
    return {canonicalize_name(r.name) for r in requirements}


def test_every_service_dependency_reaches_the_gpu_machine() -> None:
    """Each runtime dependency is pinned in the bundle, brought by ray[serve], or one the GPU
    machine has (torch, transformers and what transformers needs): a new dependency that is
    none of these would stop the service there at import."""
    declared = _names(direct_requirements("sentiment-service"))  # pyproject's, installed
    serve = direct_requirements("ray", frozenset({"serve"}))
    carried = {canonicalize_name(name) for name in PINNED} | _names(serve)
    on_machine = {"torch", "transformers"} | _names(direct_requirements("transformers"))
    assert declared - carried - on_machine - {"ray"} == set()
