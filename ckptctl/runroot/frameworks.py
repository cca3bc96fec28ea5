"""Framework checkpoints: check a directory or file against its writer's layout (core/verify/layouts.py).

``inspect.inspect_checkpoint`` verifies the DCP parts (the step directory itself
or nested ones such as ``pytorch_model_fsdp_0/``); this module adds what the
framework's resume reads besides: the required parts and the one written last,
every torch.save / JSON / safetensors file checked by ``adapters.archives``,
DeepSpeed's file counts against the world size recorded inside, the contents
(``model``, ``optimizer``...) and whether the checkpoint is a model-only export.
Single-file checkpoints (``epoch=0-step=400.ckpt``, ``checkpoint-3.pth.tar``)
are inspected here whole. Nothing here writes.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from ckptctl.adapters import archives
from ckptctl.adapters.storage import Entry, Storage
from ckptctl.core.names import CheckpointName
from ckptctl.core.verify import contract as v
from ckptctl.core.verify import layouts as L
from ckptctl.core.verify import safetensors as st
from ckptctl.core.verify.dcp import DcpIndex, StorageItem
from ckptctl.errors import StorageError, StorageUnreachableError
from ckptctl.runroot.reports import CheckOptions, CheckpointReport

_KEYS_OF = frozenset({"meta", "module", "common", "checkpoint"})
"""Parts whose archive's top-level keys are the checkpoint's contents (meta.pt, model states)."""


def file_candidate(e: Entry) -> CheckpointName | None:
    """A single-file checkpoint in a run root, as a candidate with its step."""
    if e.is_dir:
        return None
    fc = L.parse_file_checkpoint_name(e.name)
    if fc is None:
        return None
    return CheckpointName(name=e.name, step=fc.step, framework=fc.layout.key, is_temp=False, is_quarantined=False)


def dir_candidate(e: Entry) -> CheckpointName | None:
    """A directory named like a framework's step that ``core.names`` does not know (Lightning)."""
    step = L.parse_lightning_dir_name(e.name) if e.is_dir else None
    if step is None:
        return None
    return CheckpointName(name=e.name, step=step, framework="lightning", is_temp=False, is_quarantined=False)


@dataclass(slots=True)
class FrameworkCheck:
    found: L.Found | None
    problems: list[v.Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    contents: list[str] = field(default_factory=list)
    world_size: int | None = None
    bytes_read: int = 0
    members_checked: int = 0


def detect(name: str, cn: CheckpointName | None, files: dict[str, int], dirs: list[str]) -> L.Found | None:
    return L.detect_layout(name, files, dirs, framework_hint=cn.framework if cn else None)


def check_dir(
    storage: Storage,
    path: str,
    found: L.Found,
    files: dict[str, int],
    dcp_subdirs: set[str],
    # ^ nested DCP directories the engine already judged (committed or not)
    indexes: list[DcpIndex],
    options: CheckOptions,
) -> FrameworkCheck:
    """Check every part of ``found`` present in the directory, then the layout's needs."""
    res = FrameworkCheck(found=found)
    lay = found.layout
    state_keys: list[str] = []
    for idx in indexes:
        state_keys.extend(L.state_key_roots([*idx.tensors, *idx.byte_fqns]))
    headers: dict[str, st.Header | None] = {}
    tops: dict[str, Any] = {}
    deferred_indexes: list[str] = []
    jobs: list[tuple[str, L.Part, str]] = []
    for entry, part in sorted(found.entries()):
        shown = entry + ("/" if part.is_dir else "")
        if part.check == "deepspeed-dir":
            sub = _check_nested_deepspeed(storage, storage.join(path, entry), shown, options)
            res.problems.extend(sub.problems)
            res.notes.extend(sub.notes)
            res.bytes_read += sub.bytes_read
            res.members_checked += sub.members_checked
            state_keys.extend(sub.contents)
            res.world_size = res.world_size or sub.world_size
            continue
        if part.check == "dcp":
            if part.is_dir and entry not in dcp_subdirs:
                res.problems.append(
                    v.Problem(v.INCOMPLETE, f"{shown}: no .metadata: the save never committed", code=v.METADATA_MISSING)
                )
            continue
        if part.check == "safetensors-index":
            deferred_indexes.append(entry)
        elif part.check in ("torch-zip", "json", "safetensors"):
            jobs.append((entry, part, shown))
    # a few small ranged reads per file: in parallel on object stores; CRCs on every core (as the
    # DCP deep check does); one thread for the quick check of a local disk
    workers = (os.cpu_count() or 2 if options.deep else 1) if storage.is_local else 8
    workers = max(1, min(workers, len(jobs)))
    if workers == 1:
        checked = [_check_file(storage, path, files, j, lay, options) for j in jobs]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            checked = list(pool.map(lambda j: _check_file(storage, path, files, j, lay, options), jobs))
    for (entry, part, _shown), (chk, top, header) in zip(jobs, checked, strict=True):
        if top is not None and part.holds in _KEYS_OF:
            tops[entry] = top
        if part.check == "safetensors":
            headers[entry] = header
        res.problems.extend(chk.problems)
        res.notes.extend(chk.notes)
        res.bytes_read += chk.bytes_read
        res.members_checked += chk.members_checked
    for entry in deferred_indexes:
        chk = archives.check_safetensors_index(storage, path, entry, files, headers)
        res.problems.extend(chk.problems)
        res.bytes_read += chk.bytes_read
    for top in tops.values():
        if isinstance(top, dict):
            state_keys.extend(k for k, val in top.items() if isinstance(k, str) and val is not None)
    if lay.key == "deepspeed":
        _check_deepspeed(found, tops, res)
    res.problems.extend(L.check_found(found))
    res.contents = L.contents_of(found, state_keys)
    return res


def _check_file(
    storage: Storage, path: str, files: dict[str, int], job: tuple[str, L.Part, str], lay: L.Layout,
    options: CheckOptions,
) -> tuple[archives.FileCheck, Any, st.Header | None]:
    entry, part, shown = job
    fpath, size = storage.join(path, entry), files.get(entry, 0)
    if part.check == "torch-zip":
        chk = archives.check_torch_zip(
            storage, fpath, size, shown=shown, deep=options.deep, want_top=part.holds in _KEYS_OF,
            allowed_globals=options.allowed_globals, allowed_modules=lay.pickle_modules,
        )
        return chk, chk.top, None
    if part.check == "json":
        return archives.check_json(storage, fpath, size, shown=shown)[0], None, None
    chk, header = archives.read_safetensors_header(storage, fpath, size, shown=shown)
    return chk, None, header


# -- DeepSpeed: file counts against the world size recorded in the model states -------------


def _check_nested_deepspeed(storage: Storage, sub_path: str, shown: str, options: CheckOptions) -> FrameworkCheck:
    """A DeepSpeed tag directory inside another framework's checkpoint (HF Trainer, accelerate)."""
    try:
        entries = storage.list_dir(sub_path)
    except StorageUnreachableError:
        raise
    except StorageError as e:
        out = FrameworkCheck(found=None)
        out.problems.append(v.Problem(v.INCOMPLETE, f"cannot list {shown}: {e.message}", code=v.READ_FAILED))
        return out
    files = {e.name: e.size_bytes for e in entries if not e.is_dir}
    found = L.match_parts(L.layout("deepspeed"), files, [e.name for e in entries if e.is_dir])
    sub = check_dir(storage, sub_path, found, files, set(), [], options)
    sub.problems = [v.Problem(p.severity, f"{shown}: {p.message}", code=p.code) for p in sub.problems]
    return sub


_DS_OPTIM = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
_DS_MODEL = re.compile(r"^mp_rank_(\d+)_model_states\.pt$")
_DS_ZERO3_MODEL = re.compile(r"^zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt$")


def _check_deepspeed(found: L.Found, tops: dict[str, Any], res: FrameworkCheck) -> None:
    names = [e for es in found.present.values() for e in es]
    first = next((n for n in sorted(tops) if n.endswith("_model_states.pt") and isinstance(tops[n], dict)), None)
    if first is None:
        return
    top = tops[first]
    dp, mp = top.get("dp_world_size"), top.get("mp_world_size")
    if not (isinstance(dp, int) and isinstance(mp, int) and dp > 0 and mp > 0):
        res.problems.append(
            v.Problem(v.UNSUPPORTED, f"{first} records no dp_world_size/mp_world_size (DeepSpeed writes both): "
                                     "the ZeRO files cannot be counted", code=v.UNSUPPORTED_FORMAT)
        )
        return
    res.world_size = dp * mp
    where = f"dp_world_size {dp} x mp_world_size {mp} recorded in {first}"
    optim = {(int(m.group(1)), int(m.group(2))) for m in (_DS_OPTIM.match(n) for n in names) if m}
    zero3 = {(int(m.group(1)), int(m.group(2))) for m in (_DS_ZERO3_MODEL.match(n) for n in names) if m}
    model = {int(m.group(1)) for m in (_DS_MODEL.match(n) for n in names) if m}
    zero = top.get("optimizer") is None and (top.get("param_shapes") is not None or bool(optim))
    grid = {(d, m) for d in range(dp) for m in range(mp)}
    prefix = "bf16_" if any(n.startswith("bf16_") for n in names) else ""
    missing: list[str] = []
    if zero:
        missing += [f"{prefix}zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt" for d, m in sorted(grid - optim)]
    if zero3:
        missing += [f"zero_pp_rank_{d}_mp_rank_{m:02d}_model_states.pt" for d, m in sorted(grid - zero3)]
    else:
        missing += [f"mp_rank_{m:02d}_model_states.pt" for m in range(mp) if m not in model]
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        res.problems.append(
            v.Problem(v.INCOMPLETE, f"DeepSpeed checkpoint without {shown} ({where})", code=v.PART_MISSING)
        )
    beyond = sorted((optim | zero3) - grid)
    if beyond:
        res.problems.append(
            v.Problem(v.CORRUPT, f"DeepSpeed files from ranks {beyond[:4]} beyond the grid ({where})",
                      code=v.RANK_OUT_OF_RANGE)
        )
    if zero and optim:
        found.present.setdefault("zero_pp_rank_{n}_mp_rank_{n}_optim_states.pt", [])


# -- DCP written with SerializationFormat.SAFETENSORS ----------------------------------------


def resolve_safetensors_records(
    storage: Storage, upath: str, idx: DcpIndex, files: dict[str, int], where: str, problems: list[v.Problem],
    *, deep: bool = True,
) -> tuple[DcpIndex, DcpIndex] | None:
    """For DCP written with ``FileSystemWriter(serialization_format=SAFETENSORS)``: the index with
    each tensor record's real byte range, and the index the deep check reads (its torch.save
    records only); None when the tensor records are torch.save archives (the default format).

    That writer stores a file's tensors as one safetensors blob and records, for each of them,
    the blob's offset and the tensor's byte count; the bytes sit where the blob's own header
    says. Non-tensor values stay torch.save records before it. One 9-byte read tells them apart.

    ``deep=False`` (a quick check): the read is made only when tensor records share an offset,
    which only that writer does (torch.save records never overlap). With one tensor per blob
    both formats pass the quick check alike, so ``locate`` probing a run root pays no extra
    request per checkpoint for it.
    """
    tensor_items = [it for it in idx.items
                    if it.chunk_offsets is not None and it.relative_path in files and not it.transformed]
    blobs = sorted({(it.relative_path, it.offset) for it in tensor_items})
    if not blobs or (not deep and len(blobs) == len(tensor_items)):
        return None
    rel0, off0 = max(blobs, key=lambda b: files[b[0]])
    if files[rel0] < off0 + 9:
        return None
    try:
        first = storage.read_bytes(storage.join(upath, rel0), off0, off0 + 9)
    except StorageUnreachableError:
        raise
    except StorageError:
        return None
    if not st.looks_like_safetensors(first):
        return None
    headers: dict[tuple[str, int], st.Header | None] = {}
    for rel, off in blobs:
        chk, headers[(rel, off)] = archives.read_safetensors_header(
            storage, storage.join(upath, rel), files[rel], shown=f"{where}{rel}@{off}", at=off
        )
        problems.extend(chk.problems)
    items: list[StorageItem] = []
    lost: list[str] = []
    for it in idx.items:
        key = (it.relative_path, it.offset)
        if it.chunk_offsets is None or key not in headers:
            items.append(it)
            continue
        h = headers[key]
        t = h.tensors.get(it.fqn) if h is not None else None
        if h is None or t is None:
            if h is not None:
                lost.append(it.fqn)
            continue
        items.append(replace(it, offset=it.offset + h.data_start + t.begin, length=t.end - t.begin))
    if lost:
        problems.append(
            v.Problem(v.CORRUPT, f"{len(lost)} record(s) listed in .metadata are not in their safetensors blob "
                                 f"(e.g. {lost[0]})", code=v.TENSORS_LOST)
        )
    full = replace(idx, items=tuple(items))
    zips = replace(idx, items=tuple(it for it in items if (it.relative_path, it.offset) not in headers
                                    and it.chunk_offsets is None))
    return full, zips


# -- single-file checkpoints ---------------------------------------------------------------------


def is_checkpoint_file_name(name: str) -> bool:
    """Could ``verify`` check this file (a torch.save archive or a safetensors file, by its suffix)?"""
    return name.endswith(".safetensors") or L.has_checkpoint_file_suffix(name)


def inspect_file(storage: Storage, e: Entry, options: CheckOptions) -> CheckpointReport:
    """Verify a single-file checkpoint (Lightning ``.ckpt``, ``torch.save`` ``.pt/.pth/.pth.tar``,
    a ``.safetensors`` file)."""
    if e.name.endswith(".safetensors"):
        return _inspect_safetensors_file(storage, e, options)
    fc = L.parse_file_checkpoint_name(e.name)
    lay = fc.layout if fc is not None else L.layout("torch-save", "file")
    report = CheckpointReport(
        path=storage.url(e.path),
        name=e.name,
        step=fc.step if fc else None,
        framework=lay.key,
        kind="torch-save-file",
        status=v.COMPLETE,
        num_files=1,
        size_bytes=e.size_bytes,
        mtime_s=e.mtime_s,
        deep=options.deep,
    )
    chk = archives.check_torch_zip(
        storage, e.path, e.size_bytes, shown=e.name, deep=options.deep, want_top=True,
        allowed_globals=options.allowed_globals, allowed_modules=lay.pickle_modules,
    )
    problems = list(chk.problems)
    report.bytes_read = chk.bytes_read
    report.members_crc_checked = chk.members_checked
    keys = L.contents_of(None, [k for k, val in chk.top.items() if val is not None]) if isinstance(chk.top, dict) else []
    if chk.top is not None and not isinstance(chk.top, dict):
        report.notes.append(f"the archive holds a {archives.plain(chk.top)!s}, not a dict of states")
    if not problems:
        problems.extend(L.check_found(L.Found(layout=lay), contents=keys))
    report.notes.extend(chk.notes)
    finish(report, keys if chk.top is not None else None, problems, options)
    return report


def _inspect_safetensors_file(storage: Storage, e: Entry, options: CheckOptions) -> CheckpointReport:
    report = CheckpointReport(
        path=storage.url(e.path), name=e.name, step=None, framework="safetensors", kind="safetensors-file",
        status=v.COMPLETE, num_files=1, size_bytes=e.size_bytes, mtime_s=e.mtime_s, deep=options.deep,
    )
    chk, header = archives.read_safetensors_header(storage, e.path, e.size_bytes, shown=e.name)
    report.bytes_read = chk.bytes_read
    if options.deep:
        report.notes.append("safetensors carries no checksums: its header, offsets and size were checked")
    finish(report, ["model"] if header is not None else None, list(chk.problems), options)
    return report


def finish(report: CheckpointReport, contents: list[str] | None, problems: list[v.Problem], options: CheckOptions) -> None:
    """Set contents and model_only, add ``--require`` problems, and the verdict."""
    if contents:
        report.contents = contents
        report.model_only = L.is_model_only(contents)
        missing = L.missing_required(contents, sorted(options.require))
        if missing:
            problems.append(
                v.Problem(v.INCOMPLETE, f"does not hold {', '.join(missing)} (--require); it holds "
                                        f"{', '.join(contents)}", code=v.REQUIRED_MISSING)
            )
    elif options.require:
        problems.append(
            v.Problem(v.INCOMPLETE, f"contents unknown: cannot show it holds {', '.join(sorted(options.require))} "
                                    "(--require)", code=v.REQUIRED_MISSING)
        )
    report.problem_details = problems
    report.problems = [p.message for p in problems]
    report.status = v.status_of(problems)


def skip_model_only(report: CheckpointReport) -> bool:
    """``locate`` for a resume: a complete model-only export is skipped (and says why)."""
    if not (report.is_complete and report.model_only):
        return False
    p = v.Problem(
        v.INCOMPLETE,
        "model-only export (no optimizer state): training cannot resume from it "
        "(locate --include-model-only accepts it)",
        code=v.REQUIRED_MISSING,
    )
    report.problem_details = [*report.problem_details, p]
    report.problems = [*report.problems, p.message]
    report.status = v.status_of(report.problem_details)
    return True
