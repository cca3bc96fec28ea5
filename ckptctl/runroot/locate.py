"""The read-only use cases on a run root: list, locate (newest complete), verify.

``locate`` lists the run root once, probes candidates newest first and stops at
the first complete one; it never lists every step directory. Nothing here writes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ckptctl.adapters.storage import Entry, Storage
from ckptctl.core.names import CheckpointName, parse_checkpoint_name
from ckptctl.errors import NotFoundError, ProblemFound
from ckptctl.runroot import frameworks
from ckptctl.runroot.inspect import (
    RootScan,
    inspect_checkpoint,
    looks_like_checkpoint,
    refused_report,
    scan_root,
    whole_file_options,
)
from ckptctl.runroot.reports import (
    DEFAULT_OPTIONS,
    CheckOptions,
    CheckpointReport,
    ListResult,
    LocateResult,
    ProgressFn,
    VerifyResult,
    noop,
)
from ckptctl.runroot.root import RunRoot, as_run_root


def _open_root(url: str) -> tuple[Storage, str, list[Entry]]:
    storage, root = Storage.open_directory(url)
    return storage, root, storage.list_dir(root)


def inspect_entry(
    storage: Storage, e: Entry, options: CheckOptions, progress: ProgressFn, cn: CheckpointName | None = None
) -> CheckpointReport | None:
    """Inspect a directory the scan listed; None when it is gone by now.

    Retention (hide, then purge) and a save's commit rename run beside readers: a
    directory listed a moment ago may no longer exist. That is not an error of the
    run root; the caller treats it as absent and says so.
    """
    if cn is not None and cn.refused:
        return refused_report(storage, cn, e)  # never read: one problem on this entry
    try:
        if not e.is_dir:  # a single-file checkpoint (Lightning .ckpt, .pt/.pth/.pth.tar)
            return frameworks.inspect_file(storage, e, whole_file_options(options))
        return inspect_checkpoint(storage, e.path, options=options, progress=progress)
    except NotFoundError:
        return None


def list_checkpoints(
    url: str | RunRoot, *, options: CheckOptions = DEFAULT_OPTIONS, progress: ProgressFn = noop
) -> ListResult:
    """Every checkpoint under a run root, newest first, each verified."""
    root = as_run_root(url)
    scan = scan_root(root.storage, root.path, root.list())
    reports = [
        r
        for cn, e in scan.candidates
        if (r := inspect_entry(root.storage, e, options, progress, cn)) is not None
    ]
    return ListResult(root=root.url, checkpoints=reports, pointers=scan.pointers)


def find_latest_complete(
    root: str | RunRoot,
    *,
    deep: bool = False,
    before_step: int | None = None,
    world_size: int | None = None,
    options: CheckOptions | None = None,
    progress: ProgressFn = noop,
) -> LocateResult:
    """Newest complete checkpoint under ``root`` (older than ``before_step`` if given).

    Lists the root once, probes candidates newest first and stops at the first
    complete one. Temporary and quarantined directories are never probed.
    """
    t0 = time.perf_counter()
    opts = options or CheckOptions(deep=deep, world_size=world_size)
    rr = as_run_root(root)
    scan = scan_root(rr.storage, rr.path, rr.list())
    result = locate_in(scan, options=opts, before_step=before_step, progress=progress)
    result.elapsed_s = time.perf_counter() - t0
    return result


def locate_in(
    scan: RootScan,
    *,
    options: CheckOptions = DEFAULT_OPTIONS,
    before_step: int | None = None,
    progress: ProgressFn = noop,
) -> LocateResult:
    """``locate`` over a listing already made: the walk ``rollback`` plans with, too."""
    t0 = time.perf_counter()
    storage = scan.storage
    skipped: list[CheckpointReport] = []
    vanished: list[str] = []
    found: CheckpointReport | None = None
    for cn, e in scan.candidates:
        if not cn.is_candidate:
            continue
        if before_step is not None and cn.step >= before_step:
            continue
        report = inspect_entry(storage, e, options, progress)
        if report is None:
            vanished.append(cn.name)
            continue
        if not options.include_model_only:
            frameworks.skip_model_only(report)  # a weights export is no resume point: say so
        if report.is_complete:
            found = report
            break
        skipped.append(report)
    return LocateResult(
        root=storage.url(scan.root),
        checkpoint=found,
        skipped=skipped,
        pointers=scan.pointers,
        before_step=before_step,
        elapsed_s=time.perf_counter() - t0,
        vanished=vanished,
    )


def verify_checkpoint(
    url: str,
    *,
    deep: bool = False,
    world_size: int | None = None,
    check_finite: bool = False,
    progress: ProgressFn = noop,
) -> CheckpointReport:
    """Verify one checkpoint directory (not a run root)."""
    storage, path, entries = _open_root(url)
    return inspect_checkpoint(
        storage,
        path,
        options=CheckOptions(deep=deep, world_size=world_size, check_finite=check_finite),
        entries=entries,
        progress=progress,
    )


def verify_target(
    url: str, *, options: CheckOptions = DEFAULT_OPTIONS, progress: ProgressFn = noop
) -> VerifyResult:
    """Verify a checkpoint directory or file, or every checkpoint under a run root."""
    storage, path = Storage.for_url(url)
    info = storage.info(path)
    if info is not None and not info.is_dir and frameworks.is_checkpoint_file_name(info.name):
        report = frameworks.inspect_file(storage, info, whole_file_options(options))
        return VerifyResult(target=storage.url(path), checkpoints=[report], is_run_root=False)
    storage, path, entries = _open_root(url)
    base = Storage.basename(path)
    if looks_like_checkpoint(entries) or (
        parse_checkpoint_name(base) is not None and not _has_checkpoint_subdirs(entries)
    ):
        report = inspect_checkpoint(storage, path, options=options, entries=entries, progress=progress)
        return VerifyResult(target=storage.url(path), checkpoints=[report], is_run_root=False)
    scan = scan_root(storage, path, entries)
    if not scan.candidates:
        # a directory of nested DCP dirs under a non-step name (e.g. "final/")
        if any(e.is_dir for e in entries):
            report = inspect_checkpoint(storage, path, options=options, entries=entries, progress=progress)
            if report.kind.startswith("dcp"):
                return VerifyResult(target=storage.url(path), checkpoints=[report], is_run_root=False)
        raise ProblemFound(
            f"{storage.url(path)}: no checkpoint here (no .metadata) and no checkpoint directories under it",
            hint="point at a DCP checkpoint directory or a run root holding step_N/ directories",
        )
    reports = [
        r
        for cn, e in scan.candidates
        if (r := inspect_entry(storage, e, options, progress, cn)) is not None
    ]
    return VerifyResult(target=storage.url(path), checkpoints=reports, is_run_root=True)


def _has_checkpoint_subdirs(entries: Iterable[Entry]) -> bool:
    return any(e.is_dir and parse_checkpoint_name(e.name) is not None for e in entries)
