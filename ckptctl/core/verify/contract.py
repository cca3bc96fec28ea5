"""The checkpoint contract (DESIGN.md) as pure functions over plain facts.

The ops layer gathers facts (a listing with sizes, the parsed ``.metadata``,
the manifest, deep-read findings); these functions decide. Every problem found
is reported, not just the first, and problems about many records are grouped
per file so a report stays readable on thousands of shards.

Severities: ``incomplete`` (something missing), ``corrupt`` (something there but
wrong), ``unsupported`` (not a format ckptctl can prove). Status is the worst:
corrupt > incomplete > unsupported > complete.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from math import prod
from operator import attrgetter
from typing import Literal, get_args

from ckptctl.core.verify.dcp import DTYPE_ITEMSIZE, RANK_METADATA_NAME, DcpIndex, shard_rank
from ckptctl.core.verify.manifest import Manifest

Severity = Literal["incomplete", "corrupt", "unsupported"]
Status = Literal["complete", "incomplete", "corrupt", "unsupported"]

COMPLETE: Status = "complete"
INCOMPLETE: Severity = "incomplete"
CORRUPT: Severity = "corrupt"
UNSUPPORTED: Severity = "unsupported"


# Problem codes: stable, for scripts, CI gates and decisions (never read a message's text).
# A closed set: every Problem ckptctl constructs carries one of these. A contract: add
# codes, never rename one (README and docs/architecture.md carry the table).
ProblemCode = Literal[
    "temp-dir",
    "quarantined",
    "empty-dir",
    "unsupported-format",
    "metadata-missing",
    "metadata-corrupt",
    "hostile-pickle",
    "read-failed",
    "manifest-corrupt",
    "uncommitted",
    "marker-mismatch",
    "index-invalid",
    "path-escape",
    "record-too-small",
    "shard-missing",
    "shard-truncated",
    "rank-missing",
    "rank-out-of-range",
    "world-size-unknown",
    "world-size-mismatch",
    "manifest-file-missing",
    "manifest-mismatch",
    "checksum-mismatch",
    "record-corrupt",
    "non-finite",
    # framework layouts (core/verify/layouts.py)
    "part-missing",
    "commit-missing",
    "file-corrupt",
    "tensors-lost",
    "required-missing",
    "not-checked",
    # (--deep) record damage, finer than record-corrupt
    "crc-mismatch",
    "record-truncated",
    # names and links are data (issue 27)
    "name-unsafe",
    "link-refused",
]
TEMP_DIR: ProblemCode = "temp-dir"
"""The directory name carries a temp marker: being written, or abandoned mid-save."""
QUARANTINED: ProblemCode = "quarantined"
"""Renamed aside by ``ckptctl rollback`` (``.quarantined-``); undo restores it."""
EMPTY_DIR: ProblemCode = "empty-dir"
"""The directory holds nothing."""
UNSUPPORTED_FORMAT: ProblemCode = "unsupported-format"
"""Not a format ckptctl can prove complete (DeepSpeed, HF without DCP, torch.save, unknown)."""
METADATA_MISSING: ProblemCode = "metadata-missing"
"""DCP shards but no ``.metadata``: the save never committed."""
METADATA_CORRUPT: ProblemCode = "metadata-corrupt"
"""``.metadata`` (or ``__r.metadata``) is empty or does not parse."""
HOSTILE_PICKLE: ProblemCode = "hostile-pickle"
"""A pickle (``.metadata`` or a record's ``data.pkl``) names a global outside the allow-list."""
READ_FAILED: ProblemCode = "read-failed"
"""A file the check needs could not be read (permission, I/O error, vanished)."""
MANIFEST_CORRUPT: ProblemCode = "manifest-corrupt"
"""ckptctl's manifest (``ckptctl.json``) does not parse."""
UNCOMMITTED: ProblemCode = "uncommitted"
"""A manifest without its commit marker: ckptctl's save never committed."""
MARKER_MISMATCH: ProblemCode = "marker-mismatch"
"""The commit marker does not match the manifest beside it."""
INDEX_INVALID: ProblemCode = "index-invalid"
"""The ``.metadata`` index is structurally unsound (chunks, sizes, entries, overlaps)."""
PATH_ESCAPE: ProblemCode = "path-escape"
"""A ``relative_path`` is not a plain file name inside the checkpoint directory."""
RECORD_TOO_SMALL: ProblemCode = "record-too-small"
"""A tensor record is shorter than the tensor's raw bytes."""
SHARD_MISSING: ProblemCode = "shard-missing"
"""A file the index needs does not exist."""
SHARD_TRUNCATED: ProblemCode = "shard-truncated"
"""A shard is shorter than the byte ranges its records need."""
RANK_MISSING: ProblemCode = "rank-missing"
"""A rank's shard file or rank-local metadata is missing."""
RANK_OUT_OF_RANGE: ProblemCode = "rank-out-of-range"
"""Shard files from ranks at or above the recorded world size."""
WORLD_SIZE_UNKNOWN: ProblemCode = "world-size-unknown"
"""``--world-size`` was asked for but the writer world size cannot be known."""
WORLD_SIZE_MISMATCH: ProblemCode = "world-size-mismatch"
"""Written by a world size other than ``--world-size``."""
MANIFEST_FILE_MISSING: ProblemCode = "manifest-file-missing"
"""A file the manifest lists does not exist."""
MANIFEST_MISMATCH: ProblemCode = "manifest-mismatch"
"""A file's size, or the step, differs from what the manifest recorded."""
CHECKSUM_MISMATCH: ProblemCode = "checksum-mismatch"
"""(--deep) A file's CRC-32 differs from the manifest's."""
RECORD_CORRUPT: ProblemCode = "record-corrupt"
"""(--deep) A record is damaged otherwise: a malformed zip or pickle, an undecodable tensor,
a writer extension that does not decode."""
NAME_UNSAFE: ProblemCode = "name-unsafe"
"""The entry's name holds control characters (a newline, ESC...): refused, shown escaped."""
LINK_REFUSED: ProblemCode = "link-refused"
"""A symbolic link out of the run root, or a loop: not followed, never read."""
CRC_MISMATCH: ProblemCode = "crc-mismatch"
"""(--deep) A record member's bytes do not match the CRC-32 its zip directory recorded."""
RECORD_TRUNCATED: ProblemCode = "record-truncated"
"""(--deep) A record is cut short: its zip end is missing (zeros or too few bytes), or a
member runs past the end of the record or of the file."""
NON_FINITE: ProblemCode = "non-finite"
"""(--check-finite) A tensor holds NaN or Inf."""

PART_MISSING: ProblemCode = "part-missing"
"""A file or folder the framework's resume reads is missing (core/verify/layouts.py), or a rank's."""
COMMIT_MISSING: ProblemCode = "commit-missing"
"""The part the framework writes last (trainer_state.json, meta.pt...) is missing: the save did not finish."""
FILE_CORRUPT: ProblemCode = "file-corrupt"
"""A framework file is damaged: a torch.save zip cut or malformed, JSON that does not parse,
a safetensors header that does not fit its file."""
TENSORS_LOST: ProblemCode = "tensors-lost"
"""A safetensors index lists tensors that are not in the file it names."""
REQUIRED_MISSING: ProblemCode = "required-missing"
"""(--require) The checkpoint does not hold a required part (optimizer, lr_scheduler...)."""
NOT_CHECKED: ProblemCode = "not-checked"
"""(--deep) Bytes the deep check could not look into (a decoder is not installed)."""

PROBLEM_CODES: frozenset[str] = frozenset(get_args(ProblemCode))


@dataclass(frozen=True, slots=True)
class Problem:
    severity: Severity
    message: str
    code: ProblemCode = field(kw_only=True)
    """Stable identifier of the kind of problem (one of ``PROBLEM_CODES``)."""

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "message": self.message}


@dataclass(frozen=True, slots=True)
class WorldSize:
    """The writer world size and where it came from."""

    value: int | None
    source: str
    """'manifest', 'rank-local metadata', 'shard names' (a lower bound) or 'unknown'."""


def status_of(problems: Iterable[Problem]) -> Status:
    severities = {p.severity for p in problems}
    if CORRUPT in severities:
        return "corrupt"
    if INCOMPLETE in severities:
        return "incomplete"
    if UNSUPPORTED in severities:
        return "unsupported"
    return COMPLETE


def _prefixed(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def is_plain_file_name(name: str) -> bool:
    """A ``relative_path`` must name a file directly inside the checkpoint directory."""
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..") and "\x00" not in name


@dataclass(slots=True)
class IndexCheck:
    """Result of checking one DCP index against the files beside it."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    referenced: set[str] = field(default_factory=set)
    """File names the index needs (its ``relative_path``s)."""
    ranks_referenced: set[int] = field(default_factory=set)
    num_records: int = 0
    bytes_needed: int = 0


_item_key = attrgetter("fqn", "chunk_offsets")


def check_index(
    index: DcpIndex, files: Mapping[str, int], *, prefix: str = "", rank_local: bool = False
) -> IndexCheck:
    """Check the index's structure and that every byte range lies inside an existing file.

    ``files`` maps the names of the files in the DCP directory to their sizes.
    ``prefix`` (the nested directory, if any) is only used in messages. For the
    union of rank-local indexes (``rank_local``), each rank stores its own copy of
    replicated values, so the same key appearing once per rank is expected.
    """
    out = IndexCheck(num_records=len(index.items))
    where = f"{prefix}: " if prefix else ""

    # -- structure: every chunk and every bytes entry has exactly one storage entry ----
    # (loops written out, not generators: an index holds 100,000s of chunks and records)
    keys: Counter[tuple[str, tuple[int, ...] | None]] = Counter(map(_item_key, index.items))
    missing_entries: list[str] = []
    uncovered: list[str] = []
    for t in index.tensors.values():
        shape = t.size
        if shape and min(shape) < 0:
            out.problems.append(Problem(CORRUPT, f"{where}tensor {t.fqn} has a negative size {t.size}", code=INDEX_INVALID))
            continue
        covered = 0
        rank = len(shape)
        for c in t.chunks:
            offsets, sizes = c.offsets, c.sizes
            if (t.fqn, offsets) not in keys:
                missing_entries.append(f"{t.fqn}{list(offsets)}")
            if len(offsets) != rank or len(sizes) != rank:
                out.problems.append(
                    Problem(CORRUPT, f"{where}tensor {t.fqn}: chunk rank does not match tensor rank {len(t.size)}", code=INDEX_INVALID)
                )
                break
            inside = True
            for o, s, d in zip(offsets, sizes, shape, strict=True):
                if o < 0 or s < 0 or o + s > d:
                    inside = False
                    break
            if not inside:
                out.problems.append(
                    Problem(CORRUPT, f"{where}tensor {t.fqn}: chunk at {list(c.offsets)} size {list(c.sizes)} lies outside {list(t.size)}", code=INDEX_INVALID)
                )
                break
            covered += prod(sizes)
        else:
            if covered != prod(shape):
                if rank_local and covered < t.numel:
                    # each rank lists only its own chunks: a rank's metadata is missing
                    uncovered.append(t.fqn)
                else:
                    out.problems.append(
                        Problem(CORRUPT, f"{where}tensor {t.fqn}: chunks cover {covered} of {t.numel} elements", code=INDEX_INVALID)
                    )
    if uncovered:
        out.problems.append(
            Problem(
                INCOMPLETE,
                f"{where}{len(uncovered)} tensor(s) only partly covered by the rank-local metadata present "
                f"(e.g. {uncovered[0]}): a rank's __r.metadata is missing",
                code=RANK_MISSING,
            )
        )
    for fqn in index.byte_fqns:
        if (fqn, None) not in keys:
            missing_entries.append(fqn)
    if missing_entries:
        shown = ", ".join(missing_entries[:5])
        more = f" and {len(missing_entries) - 5} more" if len(missing_entries) > 5 else ""
        out.problems.append(
            Problem(CORRUPT, f"{where}{len(missing_entries)} saved value(s) have no storage entry: {shown}{more}", code=INDEX_INVALID)
        )
    dups = [k for k, n in keys.items() if n > 1]
    if dups and not rank_local:
        out.problems.append(Problem(CORRUPT, f"{where}{len(dups)} storage entries are duplicated (e.g. {dups[0][0]})", code=INDEX_INVALID))

    # -- byte ranges against files -----------------------------------------------------
    per_file: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    bad_paths: set[str] = set()
    bad_ranges = 0
    too_small: list[str] = []
    tensors = index.tensors
    bytes_needed = 0
    for item in index.items:
        rel = item.relative_path
        if not is_plain_file_name(rel):
            bad_paths.add(rel)
            continue
        offset, length = item.offset, item.length
        if offset < 0 or length < 0:
            bad_ranges += 1
            continue
        per_file[rel].append((offset, length, item.fqn))
        bytes_needed += length
        co = item.chunk_offsets
        if co is not None and not item.transformed:
            entry = tensors.get(item.fqn)
            if entry is not None:
                itemsize = DTYPE_ITEMSIZE.get(entry.dtype, 0)
                if itemsize:
                    for c in entry.chunks:
                        if c.offsets == co:
                            if length < prod(c.sizes) * itemsize:
                                too_small.append(item.fqn)
                            break
    out.bytes_needed += bytes_needed
    for rel in sorted(bad_paths):
        out.problems.append(Problem(CORRUPT, f"{where}relative_path {rel!r} escapes the checkpoint directory", code=PATH_ESCAPE))
    if bad_ranges:
        out.problems.append(Problem(CORRUPT, f"{where}{bad_ranges} storage entries have a negative offset or length", code=INDEX_INVALID))
    if too_small:
        out.problems.append(
            Problem(CORRUPT, f"{where}{len(too_small)} tensor record(s) are smaller than their raw data (e.g. {too_small[0]})", code=RECORD_TOO_SMALL)
        )
    for rel in sorted(per_file):
        ranges = per_file[rel]
        if len(ranges) > 1:
            ranges.sort()
        out.referenced.add(rel)
        r = shard_rank(rel)
        if r is not None:
            out.ranks_referenced.add(r)
        end_needed = max([o + n for o, n, _ in ranges])
        size = files.get(rel)
        if size == end_needed and len(ranges) == 1:
            continue  # the common case: one record filling its file (nothing below applies)
        shown = _prefixed(prefix, rel)
        if size is None:
            out.problems.append(
                Problem(INCOMPLETE, f"shard missing: {shown} (holds {len(ranges)} record(s))", code=SHARD_MISSING)
            )
            continue
        if size < end_needed:
            cut = sum(1 for o, n, _ in ranges if o + n > size)
            out.problems.append(
                Problem(
                    CORRUPT,
                    f"shard truncated: {shown} is {size} bytes, its records need {end_needed} "
                    f"({cut} of {len(ranges)} record(s) cut)",
                    code=SHARD_TRUNCATED,
                )
            )
        elif size > end_needed:
            out.notes.append(f"{shown} has {size - end_needed} byte(s) after its last record")
        prev_end = 0
        for o, n, fqn in ranges:
            if o < prev_end:
                out.problems.append(Problem(CORRUPT, f"{shown}: records overlap at offset {o} ({fqn})", code=INDEX_INVALID))
                break
            prev_end = o + n
    return out


def infer_world_size(
    *,
    manifest: Manifest | None,
    shard_names: Iterable[str],
    ranks_referenced: set[int],
    num_rank_local_metadata: int = 0,
) -> WorldSize:
    """The writer world size: manifest > rank-local metadata count > shard names (lower bound)."""
    if manifest is not None:
        return WorldSize(manifest.world_size, "manifest")
    if num_rank_local_metadata:
        return WorldSize(num_rank_local_metadata, "rank-local metadata")
    ranks = {r for r in (shard_rank(n) for n in shard_names) if r is not None} | ranks_referenced
    if not ranks:
        return WorldSize(None, "unknown")
    return WorldSize(max(ranks) + 1, "shard names")


def check_world_size(
    ws: WorldSize,
    *,
    shard_names: Iterable[str],
    ranks_referenced: set[int],
    expected: int | None,
) -> tuple[list[Problem], list[str]]:
    """Is the writer world size consistent with the files, and the expected one?"""
    problems: list[Problem] = []
    notes: list[str] = []
    on_disk = {r for r in (shard_rank(n) for n in shard_names) if r is not None}
    if ws.value is not None:
        beyond = sorted(r for r in (on_disk | ranks_referenced) if r >= ws.value)
        if beyond and ws.source != "shard names":
            problems.append(
                Problem(CORRUPT, f"shard files from rank(s) {beyond} but the {ws.source} says world size {ws.value}", code=RANK_OUT_OF_RANGE)
            )
        absent = sorted(set(range(ws.value)) - on_disk)
        if absent and on_disk:
            if ws.source == "manifest":
                problems.append(Problem(INCOMPLETE, f"no shard file from rank(s) {absent} of {ws.value}", code=RANK_MISSING))
            else:
                notes.append(
                    f"no shard file from rank(s) {absent}: DCP leaves a file even for a rank with "
                    "nothing to write, so one was removed (the checkpoint does not need it)"
                )
    if expected is not None:
        if ws.value is None:
            problems.append(Problem(INCOMPLETE, f"world size unknown, expected {expected}", code=WORLD_SIZE_UNKNOWN))
        elif ws.value != expected:
            how = "at least " if ws.source == "shard names" and ws.value < expected else ""
            problems.append(
                Problem(
                    INCOMPLETE,
                    f"written by world size {ws.value} ({ws.source}), expected {how}{expected}"
                    if not how
                    else f"shard names show only {ws.value} rank(s), expected {expected}",
                    code=WORLD_SIZE_MISMATCH,
                )
            )
    return problems, notes


def check_rank_local_names(names: Iterable[str]) -> tuple[int, list[Problem]]:
    """Rank-local metadata files must be ``__0.metadata`` .. ``__{W-1}.metadata``."""
    ranks = sorted(int(m.group("rank")) for m in (RANK_METADATA_NAME.match(n) for n in names) if m)
    if not ranks:
        return 0, []
    w = max(ranks) + 1
    missing = sorted(set(range(w)) - set(ranks))
    problems = [Problem(INCOMPLETE, f"rank-local metadata missing for rank(s) {missing}", code=RANK_MISSING)] if missing else []
    return w, problems


def check_manifest_files(manifest: Manifest, files: Mapping[str, int], *, step_from_name: int | None) -> list[Problem]:
    """Every file the manifest lists exists with its recorded size; the step agrees with the name."""
    problems: list[Problem] = []
    missing = [f.path for f in manifest.files if f.path not in files]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        problems.append(Problem(INCOMPLETE, f"{len(missing)} file(s) in the manifest are missing: {shown}", code=MANIFEST_FILE_MISSING))
    for f in manifest.files:
        size = files.get(f.path)
        if size is not None and size != f.size_bytes:
            problems.append(
                Problem(CORRUPT, f"{f.path} is {size} bytes, the manifest recorded {f.size_bytes}", code=MANIFEST_MISMATCH)
            )
    if step_from_name is not None and manifest.step != step_from_name:
        problems.append(
            Problem(CORRUPT, f"manifest says step {manifest.step} but the directory name says step {step_from_name}", code=MANIFEST_MISMATCH)
        )
    return problems


def check_manifest_checksums(manifest: Manifest, computed: Mapping[str, str]) -> list[Problem]:
    """Compare recorded checksums with those computed by a deep read (missing keys are skipped)."""
    problems = []
    for f in manifest.files:
        got = computed.get(f.path)
        if f.checksum is not None and got is not None and got != f.checksum:
            problems.append(
                Problem(CORRUPT, f"checksum mismatch: {f.path} has crc32 {got}, the manifest recorded {f.checksum}", code=CHECKSUM_MISMATCH)
            )
    return problems
