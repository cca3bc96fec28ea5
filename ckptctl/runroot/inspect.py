"""Scan a run root and inspect one checkpoint directory against the contract (DESIGN.md).

I/O happens here (through ``Storage``); every decision is a pure function in
``ckptctl.core.verify.contract``. Cost model, for object stores: the run root is listed
once; each probed checkpoint costs one listing plus one read of ``.metadata``
(and of the manifest and commit marker when present). The deep check (every
byte) is ``ckptctl.runroot.deep``. Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ckptctl.adapters.dcp_metadata import (
    MAX_METADATA_BYTES,
    MetadataError,
    merge_indexes,
    read_index,
)
from ckptctl.adapters.localfile import SpecialFileError
from ckptctl.adapters.storage import Entry, FileTooLargeError, Storage
from ckptctl.core.names import CheckpointName, newest_first_key, parse_checkpoint_name
from ckptctl.core.verify import contract as v
from ckptctl.core.verify import layouts
from ckptctl.core.verify.dcp import (
    METADATA_NAME,
    RANK_METADATA_NAME,
    SHARD_SUFFIX,
    DcpIndex,
    DcpUnit,
)
from ckptctl.core.verify.manifest import (
    COMMIT_MARKER_NAME,
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    check_commit_marker,
    parse_manifest,
)
from ckptctl.errors import StorageError, StorageUnreachableError
from ckptctl.runroot import frameworks
from ckptctl.runroot.deep import deep_check
from ckptctl.runroot.reports import (
    DEFAULT_OPTIONS,
    CheckOptions,
    CheckpointReport,
    PointerHint,
    ProgressFn,
    noop,
)

#: Framework "latest" pointer files, read as hints only.
POINTER_FILES = ("latest", "latest_checkpointed_iteration.txt", "latest_checkpoint", "LATEST")

# ---------------------------------------------------------------------------------------
# Run root
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class RootScan:
    storage: Storage
    root: str
    candidates: list[tuple[CheckpointName, Entry]]
    """Every directory with a checkpoint name, newest first (temp/quarantined included)."""
    pointers: list[PointerHint]
    entries: list[Entry] = field(default_factory=list)
    """The whole listing (checkpoint directories, files, other folders)."""


def looks_like_checkpoint(entries: list[Entry]) -> bool:
    for e in entries:
        n = e.name
        if e.is_dir:
            continue
        if (
            n in (METADATA_NAME, MANIFEST_NAME, COMMIT_MARKER_NAME, ".metadata.tmp")
            or n.endswith(SHARD_SUFFIX)
            or RANK_METADATA_NAME.match(n)
            or n.endswith("_states.pt")
            or n in ("trainer_state.json", "model.safetensors", "pytorch_model.bin", "common.pt")
        ):
            return True
    return False


def scan_root(storage: Storage, root: str, entries: list[Entry] | None = None) -> RootScan:
    """List the run root once and sort its checkpoint directories newest first."""
    if entries is None:
        entries = storage.list_dir(root)
    cands: list[tuple[CheckpointName, Entry]] = []
    pointers: list[PointerHint] = []
    for e in entries:
        if e.is_dir:
            cn = parse_checkpoint_name(e.name) or frameworks.dir_candidate(e)
            if cn is not None:
                cands.append((cn, e))
        elif (fcn := frameworks.file_candidate(e)) is not None:
            cands.append((fcn, e))  # a single-file checkpoint (Lightning .ckpt, .pt/.pth/.pth.tar)
        elif e.name in POINTER_FILES and e.size_bytes < 4096:
            try:
                text = storage.read_bytes(e.path).decode("utf-8", "replace").strip()
            except StorageUnreachableError:
                raise
            except StorageError:
                continue
            pointers.append(PointerHint(file=e.name, names=text.splitlines()[0] if text else ""))
    cands.sort(key=lambda ce: newest_first_key(ce[0]))
    return RootScan(storage=storage, root=root, candidates=cands, pointers=pointers, entries=entries)


# ---------------------------------------------------------------------------------------
# One checkpoint
# ---------------------------------------------------------------------------------------


def _kind_without_dcp(files: dict[str, int], subdirs: list[str]) -> tuple[str, v.Problem]:
    names = set(files)
    if any(n.endswith(SHARD_SUFFIX) for n in names) or ".metadata.tmp" in names or any(
        n.endswith(".metadata.tmp") for n in names
    ):
        num = sum(1 for n in names if n.endswith(SHARD_SUFFIX))
        return "dcp", v.Problem(
            v.INCOMPLETE,
            f"no .metadata: the save never committed ({num} shard file(s) present)",
            code=v.METADATA_MISSING,
        )
    if any(n.endswith("_states.pt") for n in names) or any(n.startswith("zero_pp_rank_") for n in names):
        return "deepspeed", v.Problem(
            v.UNSUPPORTED, "DeepSpeed checkpoint (*_states.pt), not DCP: ckptctl cannot prove it complete",
            code=v.UNSUPPORTED_FORMAT,
        )
    if names & {"model.safetensors", "pytorch_model.bin", "trainer_state.json", "model.safetensors.index.json"}:
        return "hf", v.Problem(
            v.UNSUPPORTED,
            "HF Trainer checkpoint without DCP shards: ckptctl cannot prove it complete",
            code=v.UNSUPPORTED_FORMAT,
        )
    if any(n.endswith((".pt", ".pth", ".bin", ".safetensors")) for n in names):
        return "torch-save", v.Problem(
            v.UNSUPPORTED, "torch.save/safetensors files, not DCP: ckptctl cannot prove them complete",
            code=v.UNSUPPORTED_FORMAT,
        )
    if not names and not subdirs:
        return "empty", v.Problem(v.INCOMPLETE, "empty directory", code=v.EMPTY_DIR)
    return "unknown", v.Problem(v.UNSUPPORTED, "no DCP .metadata and no recognised checkpoint files", code=v.UNSUPPORTED_FORMAT)


def inspect_checkpoint(
    storage: Storage,
    path: str,
    *,
    options: CheckOptions = DEFAULT_OPTIONS,
    entries: list[Entry] | None = None,
    progress: ProgressFn = noop,
) -> CheckpointReport:
    """Verify one checkpoint directory against the contract in DESIGN.md."""
    base = Storage.basename(path)
    cn = parse_checkpoint_name(base)
    if entries is None:
        entries = storage.list_dir(path)
    files = {e.name: e.size_bytes for e in entries if not e.is_dir}
    subdirs = [e for e in entries if e.is_dir and not e.name.startswith(".")]
    mtimes = [e.mtime_s for e in entries if e.mtime_s is not None]
    problems: list[v.Problem] = []
    notes: list[str] = []
    report = CheckpointReport(
        path=storage.url(path),
        name=base,
        step=cn.step if cn else None,
        framework=cn.framework if cn else None,
        kind="unknown",
        status=v.COMPLETE,
        is_temp=bool(cn and cn.is_temp),
        is_quarantined=bool(cn and cn.is_quarantined),
        deep=options.deep or options.check_finite,
    )
    if report.is_temp:
        problems.append(v.Problem(v.INCOMPLETE, "temporary directory name: still being written or abandoned mid-save", code=v.TEMP_DIR))
    if report.is_quarantined:
        problems.append(v.Problem(v.INCOMPLETE, "quarantined by `ckptctl rollback` (undo with `ckptctl rollback --undo`)", code=v.QUARANTINED))

    # -- the DCP directories inside ------------------------------------------------------
    units: list[DcpUnit] = []
    uncommitted_subdirs: set[str] = set()
    all_files: dict[str, int] = dict(files)
    if METADATA_NAME in files or any(RANK_METADATA_NAME.match(n) for n in files):
        units.append(DcpUnit("", files))
    elif subdirs:
        for sd in subdirs:
            sub_entries = storage.list_dir(sd.path)
            sub_files = {e.name: e.size_bytes for e in sub_entries if not e.is_dir}
            mtimes.extend(e.mtime_s for e in sub_entries if e.mtime_s is not None)
            for n, s in sub_files.items():
                all_files[f"{sd.name}/{n}"] = s
            if METADATA_NAME in sub_files or any(RANK_METADATA_NAME.match(n) for n in sub_files):
                units.append(DcpUnit(sd.name, sub_files))
            elif any(n.endswith(SHARD_SUFFIX) for n in sub_files):
                uncommitted_subdirs.add(sd.name)
                problems.append(
                    v.Problem(v.INCOMPLETE, f"{sd.name}/: no .metadata: the save never committed", code=v.METADATA_MISSING)
                )
    report.num_files = len(all_files)
    report.size_bytes = sum(all_files.values())
    report.mtime_s = max(mtimes) if mtimes else None

    # -- manifest and commit marker -------------------------------------------------------
    manifest: Manifest | None = None
    manifest_bytes: bytes | None = None
    if MANIFEST_NAME in files:
        report.has_manifest = True
        try:
            manifest_bytes = storage.read_bytes(storage.join(path, MANIFEST_NAME))
            manifest = parse_manifest(manifest_bytes)
            report.tokens_seen = manifest.tokens_seen
        except ManifestError as e:
            problems.append(v.Problem(v.CORRUPT, f"{MANIFEST_NAME}: {e}", code=v.MANIFEST_CORRUPT))
        except StorageUnreachableError:
            raise
        except (SpecialFileError, FileTooLargeError) as e:
            problems.append(v.Problem(v.CORRUPT, f"{MANIFEST_NAME} refused: {e.message}", code=v.MANIFEST_CORRUPT))
        except StorageError as e:
            problems.append(v.Problem(v.INCOMPLETE, f"cannot read {MANIFEST_NAME}: {e.message}", code=v.READ_FAILED))
        if COMMIT_MARKER_NAME in files and manifest_bytes is not None:
            try:
                marker = storage.read_bytes(storage.join(path, COMMIT_MARKER_NAME))
                reason = check_commit_marker(marker, manifest_bytes)
                report.committed = reason is None
                if reason:
                    problems.append(v.Problem(v.CORRUPT, reason, code=v.MARKER_MISMATCH))
            except StorageUnreachableError:
                raise
            except StorageError as e:
                problems.append(v.Problem(v.INCOMPLETE, f"cannot read {COMMIT_MARKER_NAME}: {e.message}", code=v.READ_FAILED))
        elif COMMIT_MARKER_NAME not in files:
            report.committed = False
            problems.append(
                v.Problem(
                    v.INCOMPLETE,
                    f"uncommitted: {MANIFEST_NAME} present but no {COMMIT_MARKER_NAME}",
                    code=v.UNCOMMITTED,
                )
            )

    found = frameworks.detect(base, cn, files, [s.name for s in subdirs])
    if found is not None and found.layout.key in ("ckptctl", "dcp"):
        found = None  # plain DCP: the rules above and below are the whole contract
    if found is not None:
        report.framework = found.layout.key
    if not units and uncommitted_subdirs:
        report.kind = "dcp-nested"  # nested DCP dirs, none committed: already reported above
    elif not units and found is not None:
        report.kind = found.layout.key
    elif not units:
        report.kind, problem = _kind_without_dcp(files, [s.name for s in subdirs])
        problems.append(problem)
    else:
        report.kind = "dcp-nested" if units[0].subdir else "dcp"

    # -- each DCP unit: parse metadata, check structure and byte ranges --------------------
    referenced_ranks: set[int] = set()
    shard_names: list[str] = []
    rank_local_total = 0
    for unit in units:
        upath = storage.join(path, unit.subdir) if unit.subdir else path
        where = f"{unit.subdir}/" if unit.subdir else ""
        shard_names.extend(n for n in unit.files if n.endswith(SHARD_SUFFIX))
        idx: DcpIndex | None = None
        if METADATA_NAME in unit.files:
            idx = _read_metadata(storage, upath, where + METADATA_NAME, unit.files[METADATA_NAME], problems)
        else:
            rl_names = [n for n in unit.files if RANK_METADATA_NAME.match(n)]
            w, rl_problems = v.check_rank_local_names(rl_names)
            problems.extend(rl_problems)
            rank_local_total = max(rank_local_total, w)
            unit.rank_local = w
            report.kind = "dcp-rank-local"
            parts = []
            for n in sorted(rl_names):
                part = _read_metadata(storage, upath, where + n, unit.files[n], problems)
                if part is not None:
                    parts.append(part)
            if parts and len(parts) == len(rl_names):
                idx = merge_indexes(parts)
            notes.append(
                f"rank-local metadata ({w} x __r.metadata): loadable only at world size {w}; "
                "DCP silently returns uninitialised memory at any other world size"
            )
        deep_idx = None
        if idx is not None:
            resolved = frameworks.resolve_safetensors_records(
                storage, upath, idx, unit.files, where, problems, deep=options.deep or options.check_finite
            )
            if resolved is not None:
                idx, deep_idx = resolved
                notes.append(f"{where or './'}: DCP tensor records in safetensors format (headers and sizes "
                             "checked; safetensors carries no checksums)")
        unit.index = idx
        if idx is None:
            continue
        chk = v.check_index(idx, unit.files, prefix=unit.subdir, rank_local=unit.rank_local > 0)
        problems.extend(chk.problems)
        notes.extend(chk.notes)
        referenced_ranks |= chk.ranks_referenced
        if deep_idx is not None:
            unit.index = deep_idx  # the deep check reads the torch.save records only

    # -- world size ----------------------------------------------------------------------------
    ws = v.infer_world_size(
        manifest=manifest,
        shard_names=shard_names,
        ranks_referenced=referenced_ranks,
        num_rank_local_metadata=rank_local_total,
    )
    report.world_size, report.world_size_source = ws.value, ws.source
    if units:
        ws_problems, ws_notes = v.check_world_size(
            ws, shard_names=shard_names, ranks_referenced=referenced_ranks, expected=options.world_size
        )
        problems.extend(ws_problems)
        notes.extend(ws_notes)
    elif options.world_size is not None and report.kind not in ("deepspeed", "hf", "torch-save", "unknown"):
        problems.append(v.Problem(v.INCOMPLETE, f"world size unknown, expected {options.world_size}", code=v.WORLD_SIZE_UNKNOWN))

    if manifest is not None:
        problems.extend(v.check_manifest_files(manifest, all_files, step_from_name=report.step))

    # -- deep: read every byte -------------------------------------------------------------------
    if report.deep and units and not any(p.code == v.SHARD_MISSING for p in problems):
        deep_check(storage, path, units, manifest, all_files, options, report, problems, progress)
    elif report.deep and units:
        notes.append("deep check skipped: shards are missing")

    # -- the framework's own parts: required set, side files, contents ---------------------------
    indexes = [u.index for u in units if u.index is not None]
    contents: list[str] | None = None
    if found is not None:
        fw = frameworks.check_dir(
            storage, path, found, files, {u.subdir for u in units if u.subdir} | uncommitted_subdirs, indexes, options
        )
        problems.extend(fw.problems)
        notes.extend(fw.notes)
        report.bytes_read += fw.bytes_read
        report.members_crc_checked += fw.members_checked
        if fw.world_size is not None and report.world_size is None:
            report.world_size, report.world_size_source = fw.world_size, "model states"
        contents = fw.contents
    elif indexes:
        contents = layouts.contents_of(None, layouts.state_key_roots(
            k for idx in indexes for k in (*idx.tensors, *idx.byte_fqns)))
    report.notes = [*notes, *report.notes]  # the deep check adds its own notes to the report
    frameworks.finish(report, contents, problems, options)
    return report


def _read_metadata(
    storage: Storage, upath: str, shown: str, size: int, problems: list[v.Problem]
) -> DcpIndex | None:
    name = shown.rsplit("/", 1)[-1]
    if size == 0:
        problems.append(v.Problem(v.CORRUPT, f"{shown} is empty (0 bytes)", code=v.METADATA_CORRUPT))
        return None
    try:
        data = storage.read_bytes(storage.join(upath, name), max_bytes=MAX_METADATA_BYTES)
    except StorageUnreachableError:
        raise
    except (SpecialFileError, FileTooLargeError) as e:
        # something is there but it is not a .metadata one could read: refused, not read whole
        problems.append(v.Problem(v.CORRUPT, f"{shown} refused: {e.message}", code=v.METADATA_CORRUPT))
        return None
    except StorageError as e:
        problems.append(v.Problem(v.INCOMPLETE, f"cannot read {shown}: {e.message}", code=v.READ_FAILED))
        return None
    try:
        return read_index(data)
    except MetadataError as e:
        label = "hostile or foreign pickle refused" if e.hostile else "unreadable"
        code = v.HOSTILE_PICKLE if e.hostile else v.METADATA_CORRUPT
        problems.append(v.Problem(v.CORRUPT, f"{shown} {label}: {e}", code=code))
        return None

