"""Ways to damage a real checkpoint copy, as storage faults and crashes do."""

from __future__ import annotations

import os
import pickle
import zlib
from pathlib import Path

from ckptctl.adapters.dcp_metadata import read_index
from ckptctl.core.verify.manifest import Manifest, ManifestFile, commit_marker_bytes, format_crc32
from ckptctl.core.verify.records import data_offset, parse_directory


def tensor_data_offset(ckpt: Path, shard: str | None = None) -> tuple[str, int]:
    """(shard name, absolute offset) of a byte in the middle of some tensor's raw data."""
    idx = read_index((ckpt / ".metadata").read_bytes())
    for item in sorted(idx.items, key=lambda i: -i.length):
        if item.chunk_offsets is None or (shard and item.relative_path != shard):
            continue
        data = (ckpt / item.relative_path).read_bytes()[item.offset : item.offset + item.length]
        for m in parse_directory(data[-65536:], len(data)):
            if m.name.endswith("/data/0") and m.size >= 8:
                start = data_offset(data[m.local_header_offset : m.local_header_offset + 30], m)
                return item.relative_path, item.offset + start + m.size // 2
    raise AssertionError("no tensor record found")


def flip_bit(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def truncate(path: Path, fraction: float = 0.5) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(int(size * fraction))


def write_manifest(ckpt: Path, *, step: int, world_size: int) -> Manifest:
    """A ckptctl manifest + commit marker for an existing DCP directory (real CRCs)."""
    files = []
    for p in sorted(ckpt.iterdir()):
        if p.is_file() and p.name not in ("ckptctl.json", ".ckptctl-committed"):
            data = p.read_bytes()
            files.append(ManifestFile(path=p.name, size_bytes=len(data), checksum=format_crc32(zlib.crc32(data))))
    m = Manifest(step=step, world_size=world_size, files=tuple(files))
    raw = m.to_json_bytes()
    (ckpt / "ckptctl.json").write_bytes(raw)
    (ckpt / ".ckptctl-committed").write_bytes(commit_marker_bytes(step, raw))
    return m


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def hostile_metadata(ckpt: Path, marker: Path) -> None:
    """Replace .metadata with a pickle that would create ``marker`` when unpickled."""
    (ckpt / ".metadata").write_bytes(pickle.dumps(_Payload(str(marker)), protocol=4))


def stealth_metadata(ckpt: Path, marker: Path) -> None:
    """A payload pickled in front of the genuine Metadata (dcp.load would run it, then succeed)."""
    genuine = (ckpt / ".metadata").read_bytes()
    # GLOBAL, MARK, UNICODE, TUPLE, REDUCE, POP: no memo use, so the genuine pickle's
    # memo indices that follow stay valid. Then the genuine pickle minus its PROTO.
    payload = b"\x80\x04cos\nsystem\n(V" + f"touch {marker}".encode() + b"\ntR0"
    (ckpt / ".metadata").write_bytes(payload + genuine[2:])
