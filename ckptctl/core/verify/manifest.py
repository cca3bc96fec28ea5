"""ckptctl's checkpoint manifest (``ckptctl.json``) and commit marker: schema and parsing.

DCP records no world size, no file sizes and no checksums. The training library
(``ckptctl.training``) writes this manifest after every rank's shards and the
DCP ``.metadata``, then the commit marker, and only then makes the checkpoint
visible under its final name (atomic directory rename on POSIX). On object
stores, where rename is a copy, the commit marker written last is the commit:
a directory with a manifest but no marker is uncommitted and never complete.

Manifest, format version 1::

    {
      "format": "ckptctl.manifest",
      "format_version": 1,
      "step": 120,                       # optimizer steps completed
      "world_size": 2,                   # ranks that took part in the save
      "checksum_algorithm": "crc32",     # zlib CRC-32 of the whole file, 8 lower-case hex
      "files": [{"path": "__0_0.distcp", "size_bytes": 83466, "checksum": "1a2b3c4d", "rank": 0},
                {"path": ".metadata", "size_bytes": 20896, "checksum": "...", "rank": 0}],
      "tokens_seen": 491520, "samples_seen": 960,   # may be null
      "created_unix_s": 1763712000.0, "save_duration_s": 0.8,
      "torch_version": "2.13.0+cpu", "ckptctl_version": "0.1.0", "python_version": "3.11.7",
      "extra": {}                       # free-form, ignored by verification
    }

Commit marker ``.ckptctl-committed``: ``{"step": 120, "manifest_crc32": "..."}``,
the CRC-32 of the manifest's exact bytes, so a manifest replaced after the
commit is detected.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

MANIFEST_NAME = "ckptctl.json"
COMMIT_MARKER_NAME = ".ckptctl-committed"
MANIFEST_FORMAT = "ckptctl.manifest"
MANIFEST_FORMAT_VERSION = 1
CHECKSUM_ALGORITHM = "crc32"


@dataclass(frozen=True, kw_only=True, slots=True)
class ManifestFile:
    """One file of a checkpoint as recorded by the rank that wrote it."""

    path: str
    """Relative to the checkpoint directory, '/'-separated, never escaping it."""
    size_bytes: int
    checksum: str | None
    """CRC-32 of the whole file as 8 lower-case hex digits, or None if not recorded."""
    rank: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Manifest:
    """What the training library recorded about one checkpoint."""

    step: int
    world_size: int
    files: tuple[ManifestFile, ...]
    checksum_algorithm: str = CHECKSUM_ALGORITHM
    tokens_seen: int | None = None
    samples_seen: int | None = None
    created_unix_s: float | None = None
    save_duration_s: float | None = None
    torch_version: str | None = None
    ckptctl_version: str | None = None
    python_version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json_bytes(self) -> bytes:
        doc = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_FORMAT_VERSION,
            "step": self.step,
            "world_size": self.world_size,
            "checksum_algorithm": self.checksum_algorithm,
            "files": [
                {"path": f.path, "size_bytes": f.size_bytes, "checksum": f.checksum, "rank": f.rank}
                for f in self.files
            ],
            "tokens_seen": self.tokens_seen,
            "samples_seen": self.samples_seen,
            "created_unix_s": self.created_unix_s,
            "save_duration_s": self.save_duration_s,
            "torch_version": self.torch_version,
            "ckptctl_version": self.ckptctl_version,
            "python_version": self.python_version,
            "extra": self.extra,
        }
        return (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode()


class ManifestError(ValueError):
    """The manifest is not a valid ckptctl manifest; the message says why."""


def is_safe_relative_path(path: str) -> bool:
    """True for 'a', 'a/b'; False for '', absolute paths, '..' parts, backslashes, NUL."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return False
    parts = path.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def _int(doc: dict[str, Any], key: str, *, optional: bool = False) -> int | None:
    value = doc.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ManifestError(f"field {key!r} must be a non-negative integer, got {value!r}")
    return value


def parse_manifest(data: bytes) -> Manifest:
    """Parse and validate manifest bytes (raises ``ManifestError`` naming the field)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ManifestError(f"not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ManifestError("not a JSON object")
    if doc.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"field 'format' must be {MANIFEST_FORMAT!r}, got {doc.get('format')!r}")
    version = doc.get("format_version")
    if version != MANIFEST_FORMAT_VERSION:
        raise ManifestError(f"unsupported format_version {version!r} (this ckptctl reads 1)")
    algorithm = doc.get("checksum_algorithm", CHECKSUM_ALGORITHM)
    if algorithm != CHECKSUM_ALGORITHM:
        raise ManifestError(f"unsupported checksum_algorithm {algorithm!r}")
    raw_files = doc.get("files")
    if not isinstance(raw_files, list):
        raise ManifestError("field 'files' must be a list")
    files = []
    seen: set[str] = set()
    for i, item in enumerate(raw_files):
        if not isinstance(item, dict):
            raise ManifestError(f"files[{i}] must be an object")
        path = item.get("path")
        if not isinstance(path, str) or not is_safe_relative_path(path):
            raise ManifestError(f"files[{i}].path {path!r} is not a relative path inside the checkpoint")
        if path in seen:
            raise ManifestError(f"files[{i}].path {path!r} is listed twice")
        seen.add(path)
        size = item.get("size_bytes")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ManifestError(f"files[{i}].size_bytes must be a non-negative integer")
        checksum = item.get("checksum")
        if checksum is not None and (
            not isinstance(checksum, str) or len(checksum) != 8 or not _is_hex(checksum)
        ):
            raise ManifestError(f"files[{i}].checksum must be 8 hex digits or null")
        rank = item.get("rank")
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 0):
            raise ManifestError(f"files[{i}].rank must be a non-negative integer or null")
        files.append(ManifestFile(path=path, size_bytes=size, checksum=checksum, rank=rank))
    world_size = _int(doc, "world_size")
    assert world_size is not None
    if world_size < 1:
        raise ManifestError("field 'world_size' must be at least 1")
    step = _int(doc, "step")
    assert step is not None
    extra = doc.get("extra") or {}
    if not isinstance(extra, dict):
        raise ManifestError("field 'extra' must be an object")
    return Manifest(
        step=step,
        world_size=world_size,
        files=tuple(files),
        checksum_algorithm=algorithm,
        tokens_seen=_int(doc, "tokens_seen", optional=True),
        samples_seen=_int(doc, "samples_seen", optional=True),
        created_unix_s=_float_or_none(doc.get("created_unix_s")),
        save_duration_s=_float_or_none(doc.get("save_duration_s")),
        torch_version=_str_or_none(doc.get("torch_version")),
        ckptctl_version=_str_or_none(doc.get("ckptctl_version")),
        python_version=_str_or_none(doc.get("python_version")),
        extra=extra,
    )


def _is_hex(s: str) -> bool:
    return all(c in "0123456789abcdef" for c in s)


def _float_or_none(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def format_crc32(value: int) -> str:
    return f"{value & 0xFFFFFFFF:08x}"


def commit_marker_bytes(step: int, manifest_bytes: bytes) -> bytes:
    """The commit marker's content for a manifest with these exact bytes."""
    doc = {"step": step, "manifest_crc32": format_crc32(zlib.crc32(manifest_bytes))}
    return (json.dumps(doc) + "\n").encode()


def check_commit_marker(marker: bytes, manifest_bytes: bytes) -> str | None:
    """None if the marker commits exactly these manifest bytes, else the reason it does not."""
    try:
        doc = json.loads(marker.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "commit marker is not valid JSON"
    if not isinstance(doc, dict):
        return "commit marker is not a JSON object"
    expected = format_crc32(zlib.crc32(manifest_bytes))
    if doc.get("manifest_crc32") != expected:
        return (
            f"commit marker names manifest crc32 {doc.get('manifest_crc32')!r}, "
            f"the manifest's is {expected!r} (manifest changed after commit)"
        )
    return None
