"""The exported copies of a model directory's weights, and the manifest that vouches for them.

`python -m service export` writes them into `DIR/onnx/`, beside the Hugging Face files (which it
never touches, so the directory still serves with torch). `manifest.json` records what each file
was made from: the SHA-256 of the weights, the library versions, the export options, and later
the speed each backend measured on each device type (`make parity`), which `auto` reads.
Only the standard library here: the service imports it with or without ONNX Runtime.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

EXPORT_DIR = "onnx"
MANIFEST = "manifest.json"
# Training texts a model build leaves in its directory (one per line) for INT8 calibration.
CALIBRATION_FILE = "calibration.txt"
# Backend name -> the files in EXPORT_DIR it can run, preferred first: `onnx` runs the fused
# graph when the architecture has ONNX Runtime fusions, else the plain one; `tensorrt` reads
# the plain graph (TensorRT fuses by itself and cannot run ONNX Runtime's contrib operators).
FILES = {
    "onnx": ("model-opt.onnx", "model.onnx"),
    "onnx-int8": ("model-int8.onnx",),
    "tensorrt": ("model.onnx",),
}
VERSIONED = ("torch", "transformers", "onnx", "onnxruntime", "onnxscript")
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt")


class ExportMismatch(RuntimeError):
    """An export that is missing, damaged, or made from other weights than the directory's."""


def export_dir(model_dir: Path) -> Path:
    """Where a model directory's exports live."""
    return Path(model_dir) / EXPORT_DIR


def file_sha256(path: Path) -> str:
    """SHA-256 of one file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def weight_files(model_dir: Path) -> list[Path]:
    """The weight files torch would load: safetensors when there are any, else pickles."""
    for pattern in WEIGHT_PATTERNS:
        found = sorted(Path(model_dir).glob(pattern))
        if found:
            return found if pattern == "*.safetensors" else _pickles(model_dir)
    return []


def _pickles(model_dir: Path) -> list[Path]:
    return sorted(p for pattern in WEIGHT_PATTERNS[1:] for p in Path(model_dir).glob(pattern))


def weights_sha256(model_dir: Path) -> str:
    """One SHA-256 over every weight file (name and content), so a changed shard shows."""
    files = weight_files(model_dir)
    if not files:
        raise ExportMismatch(f"{model_dir} has no weight files to compare an export against")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + file_sha256(path).encode() + b"\n")
    return digest.hexdigest()


def versions() -> dict[str, str]:
    """Installed versions of the libraries an export depends on (absent ones are left out)."""
    found = {}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def read_manifest(model_dir: Path) -> dict[str, Any]:
    """The manifest, or an empty one when nothing was exported yet."""
    path = export_dir(model_dir) / MANIFEST
    if not path.is_file():
        return {}
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ExportMismatch(f"{path} is not valid JSON ({exc}); export again") from exc
    return manifest


def write_manifest(model_dir: Path, manifest: dict[str, Any]) -> Path:
    """Write the manifest atomically (a reader never sees half of it)."""
    folder = export_dir(model_dir)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".manifest-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    target = folder / MANIFEST
    os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; the model files beside it are not
    os.replace(tmp, target)
    return target


def checked_export(model_dir: Path, backend: str, check_file: bool = True) -> Path:
    """The file a backend runs, after proving it was exported from this directory's weights.

    Raises ExportMismatch with what to do when the export is missing, damaged or stale.
    """
    model_dir = Path(model_dir)
    redo = f"python -m service export --model-path {model_dir} --format onnx"
    if backend == "onnx-int8":
        redo += " --quantize int8"
    exports = read_manifest(model_dir).get("exports", {})
    name = next((f for f in FILES[backend] if f in exports), FILES[backend][0])
    entry, path = exports.get(name), export_dir(model_dir) / name
    if not entry or not path.is_file():
        raise ExportMismatch(f"backend {backend!r} needs {path}, which is missing; run `{redo}`")
    if entry.get("weights_sha256") != weights_sha256(model_dir):
        raise ExportMismatch(
            f"{path} was exported from other weights than those in {model_dir} (SHA-256 "
            f"differs); serving it would answer with a different model. Run `{redo}`"
        )
    if check_file and entry.get("sha256") != file_sha256(path):
        raise ExportMismatch(f"{path} changed since it was exported; run `{redo} --force`")
    return path


def current_measurement(model_dir: Path, device_type: str) -> dict[str, Any] | None:
    """What `make parity` recorded for this device type and these weights, if anything (an
    export drops the measurements of the files it replaces)."""
    found = read_manifest(model_dir).get("measurements", {}).get(device_type)
    if not found or found.get("weights_sha256") != weights_sha256(model_dir):
        return None
    result: dict[str, Any] = found
    return result


def fastest_backend(model_dir: Path, device_type: str) -> tuple[str, str]:
    """The backend `make parity` measured fastest here among those that held accuracy, and
    why; ("torch", reason) when nothing was measured for this device type."""
    measured = current_measurement(model_dir, device_type)
    if measured is None:
        where = export_dir(model_dir) / MANIFEST
        return "torch", (
            f"no measurement for {device_type} and these weights in {where}; "
            f"`make parity MODEL_DIR={model_dir}` measures it"
        )
    speeds = {k: v for k, v in measured.get("texts_per_s", {}).items()}
    eligible = [b for b in measured.get("eligible", []) if b in speeds]
    if not eligible:
        return "torch", "nothing in the recorded measurement held accuracy"
    best = max(eligible, key=speeds.__getitem__)
    return best, f"measured fastest on {device_type} ({speeds[best]:.1f} texts/s) by parity"
