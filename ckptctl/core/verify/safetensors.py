"""safetensors files: the header against the file, and an index against the headers.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
(``{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}``),
then the data area. The safetensors library refuses a file whose tensors do not
tile the data area exactly (each begins where the previous ended, the last ends
at the end of the file) or whose byte count disagrees with shape x dtype, so the
same rules here mean "the library will load it". Pure: bytes in, findings out.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Headers larger than this are refused (the library's own limit is 100 MB).
MAX_HEADER_BYTES = 100_000_000

#: Bytes per element by safetensors dtype name.
DTYPE_BYTES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "F4": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8, "C128": 16,
}  # fmt: skip


class SafetensorsError(ValueError):
    """The bytes are not a well-formed safetensors header; the message says why."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    """Offset of the first byte in the data area."""
    end: int


@dataclass(slots=True)
class Header:
    header_bytes: int
    """N: the JSON header's length (the data area starts at 8 + N)."""
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def data_start(self) -> int:
        return 8 + self.header_bytes


def header_length(first8: bytes) -> int:
    """N from the file's first 8 bytes."""
    if len(first8) < 8:
        raise SafetensorsError("shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", first8[:8])
    if n > MAX_HEADER_BYTES:
        raise SafetensorsError(f"header length {n} is over {MAX_HEADER_BYTES} bytes (not a safetensors file)")
    return n


def looks_like_safetensors(first9: bytes) -> bool:
    """Do these first bytes start a safetensors file (a plausible length, then a JSON object)?"""
    if len(first9) < 9 or first9[8:9] != b"{":
        return False
    return struct.unpack("<Q", first9[:8])[0] <= MAX_HEADER_BYTES


def parse_header(raw: bytes, header_bytes: int) -> Header:
    """Parse the N bytes after the length; ``SafetensorsError`` if malformed."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError(f"header is not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise SafetensorsError("header is not a JSON object")
    out = Header(header_bytes=header_bytes)
    for name, info in obj.items():
        if name == "__metadata__":
            if isinstance(info, dict):
                out.metadata = {str(k): str(v) for k, v in info.items()}
            continue
        if not isinstance(info, dict):
            raise SafetensorsError(f"tensor {name!r}: entry is not an object")
        dtype, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str):
            raise SafetensorsError(f"tensor {name!r}: no dtype")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise SafetensorsError(f"tensor {name!r}: shape {shape!r} is not a list of counts")
        if not (isinstance(offs, list) and len(offs) == 2 and all(_is_count(o) for o in offs)):
            raise SafetensorsError(f"tensor {name!r}: data_offsets {offs!r} is not [begin, end]")
        out.tensors[name] = TensorInfo(name, dtype, tuple(shape), offs[0], offs[1])
    return out


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def check_header(h: Header, file_size: int, *, exact_end: bool = True) -> list[tuple[bool, str]]:
    """Problems that make the safetensors library refuse the file (empty: it loads), each as
    (is the file cut short, message).

    ``exact_end=False`` for a safetensors blob inside a bigger file (DCP's SAFETENSORS
    records): bytes after its last tensor belong to something else.
    """
    problems: list[tuple[bool, str]] = []
    data_size = file_size - h.data_start
    if data_size < 0:
        return [(True, f"file is {file_size} bytes, its header alone needs {h.data_start}")]
    pos = 0
    for t in sorted(h.tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.end < t.begin:
            problems.append((False, f"tensor {t.name}: data_offsets [{t.begin}, {t.end}] run backwards"))
            continue
        if t.begin != pos:
            what = "overlaps the previous tensor" if t.begin < pos else f"leaves a gap of {t.begin - pos} byte(s)"
            problems.append((False, f"tensor {t.name} at data offset {t.begin} {what}"))
        pos = max(pos, t.end)
        itemsize = DTYPE_BYTES.get(t.dtype)
        numel = 1
        for d in t.shape:
            numel *= d
        if itemsize is not None and t.end - t.begin != numel * itemsize:
            problems.append(
                (False, f"tensor {t.name}: {t.end - t.begin} bytes for shape {list(t.shape)} {t.dtype} "
                        f"(needs {numel * itemsize})")
            )
    if pos > data_size:
        problems.append((True, f"truncated: tensors need {pos} bytes of data, the file has {data_size}"))
    elif pos < data_size and exact_end:
        problems.append((False, f"{data_size - pos} byte(s) after the last tensor"))
    return problems


@dataclass(frozen=True, slots=True)
class Index:
    """``model.safetensors.index.json``: which file holds each tensor."""

    weight_map: dict[str, str]
    total_size: int | None


def parse_index(data: bytes) -> Index:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError(f"not JSON: {e}") from e
    wm = obj.get("weight_map") if isinstance(obj, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(f, str) for k, f in wm.items()):
        raise SafetensorsError("no weight_map of tensor name -> file name")
    meta = obj.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    return Index(weight_map=dict(wm), total_size=total if _is_count(total) else None)


def check_index(index: Index, headers: Mapping[str, Header | None]) -> list[tuple[str, str]]:
    """(kind, message) for every tensor the index lists that is not in the file it names.

    ``headers`` maps each file the index names to its parsed header, or None when the
    file is missing or unreadable (reported by the caller). kind is ``missing`` or ``lost``.
    """
    lost: dict[str, list[str]] = {}
    for name, fname in index.weight_map.items():
        h = headers.get(fname)
        if h is not None and name not in h.tensors:
            lost.setdefault(fname, []).append(name)
    out: list[tuple[str, str]] = []
    for fname, names in sorted(lost.items()):
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        out.append(
            (
                "lost",
                f"{len(names)} tensor(s) the index places in {fname} are not in it: {shown} "
                "(another rank overwrote the file?)",
            )
        )
    return out
