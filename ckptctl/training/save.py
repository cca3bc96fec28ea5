"""One save, from the state dict to a committed checkpoint (every rank takes part).

The sequence ``SaveWriter.run`` drives, after the checkpointer has agreed on a
token and the commit protocol (``commit.py``) has prepared the write path::

    dcp.save -> write path        every rank writes its shards; rank 0 .metadata; each
                                  rank's writer computes CRC-32s as bytes go out
    gather file lists             (name, size, CRC-32) from the rank that wrote each file
    rank 0 writes ckptctl.json    the manifest: step, world size, files, checksums, ...
    rank 0 writes the marker      .ckptctl-committed (CRC-32 of the manifest bytes)
    rank 0 publishes              the commit protocol's commit (rename, or nothing)
    rank 0 broadcasts ok/failed   then applies retention

Also here: what a save collects from the caller's state (``collect_state``, used by
loads too as the template) and the refusal of state that would not load safely.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed.checkpoint as dcp

import ckptctl
from ckptctl.adapters.storage import Storage
from ckptctl.core.names import step_dir_name
from ckptctl.core.rollback.retention import RetentionPolicy
from ckptctl.core.verify.manifest import (
    COMMIT_MARKER_NAME,
    MANIFEST_NAME,
    Manifest,
    ManifestFile,
    commit_marker_bytes,
)
from ckptctl.training import _dcp_io
from ckptctl.training import _state_dict as _sd
from ckptctl.training._dist import Coordinator
from ckptctl.training._state_dict import PER_RANK_KEY_FMT, PROGRESS_KEY, RNG_KEY_FMT
from ckptctl.training.commit import CommitProtocol
from ckptctl.training.errors import CheckpointSaveError, UnsafeStateError
from ckptctl.training.retention import RetentionResult, apply_retention
from ckptctl.training.state import capture_rng_state

logger = logging.getLogger("ckptctl.training")

#: Phases reported to ``on_save_phase`` (fault injection, tracing), in order.
#: ``shards_written`` runs on every rank; the others on rank 0 only.
SAVE_PHASES = ("shards_written", "manifest_written", "marker_written", "committed")


@dataclass(frozen=True, kw_only=True, slots=True)
class SaveResult:
    """A committed checkpoint."""

    step: int
    path: str
    """Final location (a path for local storage, a URL otherwise)."""
    world_size: int
    num_files: int
    size_bytes: int
    save_duration_s: float
    """From the start of the DCP write to the commit (background time for async saves)."""
    stall_s: float
    """Time the training loop was blocked by this save (staging only, for async saves)."""
    emergency: bool = False
    retention: RetentionResult | None = None


class SaveHandle:
    """A save that may still be running in the background (``result()`` waits for it)."""

    def __init__(self, step: int, path: str, future: Future[SaveResult]) -> None:
        self.step = step
        self.path = path
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> SaveResult:
        return self._future.result(timeout)


def finished_handle(step: int, path: str, result: SaveResult) -> SaveHandle:
    done: Future[SaveResult] = Future()
    done.set_result(result)
    return SaveHandle(step, path, done)


@dataclass(frozen=True, kw_only=True, slots=True)
class SaveJob:
    """One save's names and counters, fixed before the DCP write starts."""

    step: int
    write_path: str
    final_path: str
    tokens_seen: int | None
    samples_seen: int | None
    extra: dict[str, Any]
    emergency: bool
    token: str


def collect_state(
    split: _sd.Split,
    *,
    rank: int,
    step: int,
    tokens_seen: int | None,
    samples_seen: int | None,
    save_rng: bool,
) -> dict[str, Any]:
    """The state dict DCP saves (or, for a load, fills in) for the caller's ``state``."""
    sd: dict[str, Any] = _sd.model_optim_state(split)
    for key, obj in split.stateful.items():
        sd[key] = obj.state_dict()
    for key, wrapped in split.per_rank.items():
        sd[PER_RANK_KEY_FMT.format(key=key, rank=rank)] = wrapped.state_dict()
    for key, value in split.plain.items():
        sd[key] = value
    sd[PROGRESS_KEY] = {"step": step, "tokens_seen": tokens_seen, "samples_seen": samples_seen}
    if save_rng:
        sd[RNG_KEY_FMT.format(rank=rank)] = capture_rng_state()
    return sd


def check_state(sd: dict[str, Any], split: _sd.Split, coord: Coordinator) -> None:
    """Refuse state that would not load safely, or replicated state that differs across ranks.

    One collective carries both answers, so every rank raises together: a rank that
    refused on its own would leave the others waiting in the save's first collective.
    """
    unsafe: UnsafeStateError | None = None
    leaves: list[tuple[str, Any]] = []
    for key, value in sd.items():
        _sd.flatten_leaves(value, key, leaves)
    try:
        for name, value in leaves:
            if not isinstance(value, torch.Tensor):
                _dcp_io.check_loads_safely(value, name)
    except UnsafeStateError as e:
        unsafe = e
    replicated = sorted([*split.stateful, *split.plain])
    if coord.world_size == 1:
        if unsafe is not None:
            raise unsafe
        return
    mine = {
        "unsafe": unsafe.message if unsafe else None,
        "digests": _sd.digest_replicated(sd, replicated),
    }
    everyone = coord.all_gather_json(mine)
    if unsafe is not None:
        raise unsafe
    others = [(r, d["unsafe"]) for r, d in enumerate(everyone) if d["unsafe"]]
    if others:
        rank, message = others[0]
        raise UnsafeStateError(f"rank {rank}: {message}")
    differing = sorted(k for k in replicated if len({d["digests"].get(k) for d in everyone}) > 1)
    if differing:
        raise CheckpointSaveError(
            f"state {', '.join(repr(k) for k in differing)} differs across ranks; DCP would keep "
            "only one rank's copy",
            hint="wrap per-rank state in ckptctl.training.PerRank(...)",
        )


class SaveWriter:
    """Writes, checksums and commits save jobs under one run root; remembers the last commit."""

    def __init__(
        self,
        *,
        storage: Storage,
        root_path: str,
        protocol: CommitProtocol,
        thread_count: int,
        retention: RetentionPolicy | None,
        on_save_phase: Callable[[str, int], None] | None,
    ) -> None:
        self.storage = storage
        self.root_path = root_path
        self.protocol = protocol
        self.thread_count = thread_count
        self.retention = retention
        self._on_save_phase = on_save_phase
        self._lock = threading.Lock()
        self._last_committed: tuple[int, str] | None = None

    @property
    def last_committed(self) -> tuple[int, str] | None:
        """(step, path) of the newest save this writer committed, or None."""
        with self._lock:
            return self._last_committed

    def _phase(self, phase: str, step: int) -> None:
        if self._on_save_phase is not None:
            self._on_save_phase(phase, step)

    def run(
        self,
        job: SaveJob,
        sd: dict[str, Any],
        coord: Coordinator,
        stall_s: float | None,
        *,
        t_start: float | None = None,
    ) -> SaveResult:
        """The DCP write of ``sd``, the file lists, the commit, then retention (every rank)."""
        t0 = time.perf_counter() if t_start is None else t_start
        write_url = self.storage.url(job.write_path)
        try:
            writer = self.protocol.make_writer(job.write_path, thread_count=self.thread_count)
            with _dcp_io.quiet_no_dist():
                dcp.save(
                    sd,
                    storage_writer=writer,
                    process_group=coord.group,
                    no_dist=not coord.is_distributed,
                )
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            inner = _dcp_io.unwrap_dcp_error(e)
            raise CheckpointSaveError(
                f"step {job.step}: DCP write to {write_url} failed: {type(inner).__name__}: {inner}"
            ) from (inner if isinstance(inner, Exception) else None)
        self._phase("shards_written", job.step)

        local_error = None
        files: list[dict[str, Any]] = []
        try:
            files = self._checksummed_files(writer, job.write_path, coord.rank)
        except Exception as e:
            local_error = f"rank {coord.rank}: checksum failed: {e}"
        reports = coord.all_gather_json({"files": files, "error": local_error})

        outcome: dict[str, Any] = {"error": None}
        if coord.rank == 0:
            try:
                errors = [r["error"] for r in reports if r["error"]]
                if errors:
                    raise CheckpointSaveError("; ".join(errors))
                all_files = [f for r in reports for f in r["files"]]
                outcome = self._commit(job, all_files, coord.world_size, time.perf_counter() - t0)
            except Exception as e:
                outcome = {"error": f"{type(e).__name__}: {e}"}
        outcome = coord.broadcast_json(outcome)
        if outcome.get("error"):
            raise CheckpointSaveError(f"step {job.step}: commit failed: {outcome['error']}")

        path = self.storage.url(job.final_path)
        with self._lock:
            self._last_committed = (job.step, path)
        retention = None
        if coord.rank == 0 and self.retention is not None:
            retention = self._apply_retention(job.step)
        duration = time.perf_counter() - t0
        return SaveResult(
            step=job.step,
            path=path,
            world_size=coord.world_size,
            num_files=int(outcome.get("num_files", 0)),
            size_bytes=int(outcome.get("size_bytes", 0)),
            save_duration_s=duration,
            stall_s=stall_s if stall_s is not None else duration,
            emergency=job.emergency,
            retention=retention,
        )

    def _apply_retention(self, step: int) -> RetentionResult | None:
        assert self.retention is not None
        try:
            retention = apply_retention(
                self.storage.url(self.root_path),
                self.retention,
                known_complete={step_dir_name(step)},
            )
            for err in retention.errors:
                logger.warning("ckptctl: retention: %s", err)
            if retention.skipped:
                logger.warning(
                    "ckptctl: retention skipped this save (the next save retries): %s",
                    retention.skipped,
                )
            return retention
        except Exception as e:  # never fail a committed save because cleanup failed
            logger.warning("ckptctl: retention failed: %s", e)
            return None

    def _checksummed_files(self, writer: Any, write_path: str, rank: int) -> list[dict[str, Any]]:
        """The files this rank wrote, each with size and CRC-32 (re-read only if the stream seeked)."""
        fs = writer.fs
        written: dict[str, _dcp_io.WrittenFile] = dict(getattr(fs, "written", {}))
        out = []
        for name, rec in sorted(written.items()):
            if name.endswith(".tmp"):
                continue  # DCP's .metadata.tmp, renamed; a leftover means the rename did not happen
            size, crc = rec.size_bytes, rec.crc32
            fpath = Storage.join(write_path, name)
            if crc is not None and not self.protocol.recorded_size_holds(fpath, size):
                crc = None
            if crc is None:
                with self.storage.open_read(fpath) as f:
                    size, crc = _dcp_io.crc32_of_stream(f)
            out.append({"path": name, "size_bytes": size, "checksum": crc, "rank": rank})
        if rank == 0 and not any(f["path"] == _dcp_io.METADATA_NAME for f in out):
            raise CheckpointSaveError(f"rank 0 did not see {_dcp_io.METADATA_NAME} being written")
        return out

    def _commit(
        self, job: SaveJob, files: list[dict[str, Any]], world_size: int, duration_s: float
    ) -> dict[str, Any]:
        """Rank 0: manifest, commit marker, then the commit protocol's publish."""
        manifest = Manifest(
            step=job.step,
            world_size=world_size,
            files=tuple(
                ManifestFile(
                    path=f["path"],
                    size_bytes=f["size_bytes"],
                    checksum=f["checksum"],
                    rank=f["rank"],
                )
                for f in sorted(files, key=lambda f: f["path"])
            ),
            tokens_seen=job.tokens_seen,
            samples_seen=job.samples_seen,
            created_unix_s=round(time.time(), 3),
            save_duration_s=round(duration_s, 6),
            torch_version=torch.__version__,
            ckptctl_version=ckptctl.__version__,
            python_version=platform.python_version(),
            extra=job.extra,
        )
        manifest_bytes = manifest.to_json_bytes()
        self.storage.write_bytes(Storage.join(job.write_path, MANIFEST_NAME), manifest_bytes)
        self._phase("manifest_written", job.step)
        self.storage.write_bytes(
            Storage.join(job.write_path, COMMIT_MARKER_NAME),
            commit_marker_bytes(job.step, manifest_bytes),
        )
        self._phase("marker_written", job.step)
        self.protocol.publish(job.step, job.write_path, job.final_path, job.token)
        self._phase("committed", job.step)
        return {
            "error": None,
            "num_files": len(files) + 2,
            "size_bytes": sum(int(f["size_bytes"]) for f in files) + len(manifest_bytes),
        }
