"""``Checkpointer``: DCP checkpoints that ckptctl can prove complete, and a resume that restores everything.

Commit protocol (one save, every rank takes part)::

    1. agree on the directory name        rank 0 draws a token, broadcasts it
    2. dcp.save -> <root>/step_N.tmp-<tok>   every rank writes its shards; rank 0 .metadata;
                                          each rank's writer computes CRC-32s as bytes go out
    3. gather file lists                  (name, size, CRC-32) from the rank that wrote each file
    4. rank 0 writes ckptctl.json          the manifest: step, world size, files, checksums, ...
    5. rank 0 writes .ckptctl-committed    the commit marker (CRC-32 of the manifest bytes)
    6. POSIX: fsync dir, rename to step_N, fsync root     <- the commit
       object store: steps 2-5 write into step_N/ directly; the marker written last is the commit
    7. rank 0 broadcasts ok/failed; then applies retention

A crash anywhere before step 6 leaves a ``.tmp-`` directory (POSIX) or a
directory without a valid marker (object store): ``ckptctl locate`` never
returns either. See ``docs/training.md`` for the whole contract.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import secrets
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.distributed.checkpoint as dcp

import ckptctl
from ckptctl.adapters.storage import STORAGE_OPTIONS_ENV, Storage
from ckptctl.core.names import step_dir_name, temp_dir_name
from ckptctl.core.rollback.retention import RetentionPolicy
from ckptctl.core.verify.manifest import (
    COMMIT_MARKER_NAME,
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    ManifestFile,
    commit_marker_bytes,
    parse_manifest,
)
from ckptctl.errors import NotFoundError
from ckptctl.runroot import mutate
from ckptctl.runroot.root import RunRoot
from ckptctl.training import _dcp_io
from ckptctl.training import _state_dict as _sd
from ckptctl.training._dist import Coordinator, is_distributed, new_cpu_group
from ckptctl.training._state_dict import (
    PER_RANK_KEY_FMT,
    PROGRESS_KEY,
    RNG_KEY_FMT,
)
from ckptctl.training.errors import (
    CheckpointLoadError,
    CheckpointSaveError,
    IncompleteCheckpointError,
    NoCompleteCheckpointError,
    UnsafeCheckpointError,
    UnsafeStateError,
)
from ckptctl.training.preemption import PreemptedExit, PreemptionWatcher, signal_name
from ckptctl.training.retention import RetentionResult, apply_retention
from ckptctl.training.state import capture_rng_state, restore_rng_state

logger = logging.getLogger("ckptctl.training")

# DCP warns on every single-process save/load; a 1-process run is a supported case here.
_NO_DIST_WARNING = r"torch\.distributed is (disabled|unavailable)"
warnings.filterwarnings("ignore", message=_NO_DIST_WARNING)


@contextlib.contextmanager
def _quiet_no_dist() -> Iterator[None]:
    """Silence DCP's single-process warning (warning filters are global: main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_DIST_WARNING)
        yield


#: Phases reported to ``on_save_phase`` (fault injection, tracing), in order.
#: ``shards_written`` runs on every rank; the others on rank 0 only.
SAVE_PHASES = ("shards_written", "manifest_written", "marker_written", "committed")

VerifyMode = Literal["deep", "quick", "none"]


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


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadResult:
    """What a resume restored, and from where."""

    path: str
    step: int
    tokens_seen: int | None
    samples_seen: int | None
    world_size: int
    """World size now."""
    saved_world_size: int | None
    """World size of the run that wrote the checkpoint (from the manifest)."""
    skipped: tuple[str, ...] = ()
    """Newer checkpoints passed over by ``load_latest``, each ``"<path>: <why>"``."""
    notes: tuple[str, ...] = ()
    """State that could not be restored exactly (e.g. RNG of ranks that no longer exist)."""
    extra: dict[str, Any] = field(default_factory=dict)


#: Below this much tensor data, changing torch's thread count costs more than the copy gains.
PARALLEL_STAGING_MIN_BYTES = 32 << 20


def _tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, Mapping):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def _rank_cpu_share() -> int:
    """Usable CPUs divided among the ranks on this host (torchrun's ``LOCAL_WORLD_SIZE``)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    return max(1, cpus // local)


def _storage_options(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    import json

    options: dict[str, Any] = {}
    env = os.environ.get(STORAGE_OPTIONS_ENV)
    if env:
        options.update(json.loads(env))
    if extra:
        options.update(extra)
    return options


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unwrap_dcp_error(e: BaseException) -> BaseException:
    """The first per-rank failure inside a DCP ``CheckpointException`` (or ``e`` itself)."""
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        for _rank, failure in sorted(failures.items()):
            inner = failure[0] if isinstance(failure, tuple) else failure
            if isinstance(inner, BaseException):
                return inner
    return e


def _is_dcp_exception(e: BaseException) -> bool:
    from torch.distributed.checkpoint.api import CheckpointException

    return isinstance(e, CheckpointException)


class Checkpointer:
    """Save and restore the whole training state under a run root, with ckptctl's commit protocol.

    Construct it on every rank at the same point (after ``init_process_group``):
    it creates one or two gloo process groups for its own coordination, which is
    a collective call.

    ``state`` (for ``save``, ``load``, ``load_latest``, ``maybe_save``) is a dict
    naming the objects to checkpoint: at most one ``nn.Module`` (plain, DDP or
    FSDP2) and one optimizer, which are saved sharded and reshardable through
    ``torch.distributed.checkpoint.state_dict``; any object with
    ``state_dict``/``load_state_dict`` (LR scheduler, ``ResumableBatchSampler``),
    treated as identical on every rank; ``PerRank(obj)`` for per-rank state
    (torchdata's ``StatefulDataLoader`` is per-rank without it); and plain values
    (ints, floats, strings, lists and dicts of those, tensors), which ``load``
    writes back into the dict. RNG
    state (per rank) and the step/tokens/samples counters are added by the
    checkpointer.
    """

    def __init__(
        self,
        root: str,
        *,
        save_every: int | None = None,
        keep_last: int | None = None,
        async_save: bool = False,
        preemption_signals: Sequence[int | signal.Signals] | None = (signal.SIGTERM,),
        save_rng: bool = True,
        thread_count: int = 1,
        storage_options: Mapping[str, Any] | None = None,
        on_save_phase: Callable[[str, int], None] | None = None,
        staging_threads: int | None = None,
    ) -> None:
        """
        Args:
            root: run root (local path or fsspec URL); checkpoints go to ``<root>/step_N``.
            save_every: ``maybe_save`` saves when ``step % save_every == 0`` (None: only on preemption).
            keep_last: keep this many newest complete checkpoints, delete older ones (None: keep all).
            async_save: stage a CPU copy and write in a background thread (at most one in flight).
            preemption_signals: signals that request an emergency checkpoint (None or empty: install nothing).
            save_rng: save/restore the Python, NumPy, torch and CUDA RNG states of every rank.
            thread_count: DCP writer threads per rank (files per rank).
            storage_options: fsspec options for object stores (merged over ``CKPTCTL_STORAGE_OPTIONS``).
            on_save_phase: called as ``fn(phase, step)`` at each phase in ``SAVE_PHASES``
                (fault injection and tracing; runs in the saving thread).
            staging_threads: torch intra-op threads for the async save's host copy of CPU
                tensors, set only for the copy while training waits on it and only when the
                state holds at least ``PARALLEL_STAGING_MIN_BYTES`` (None: this rank's share
                of the CPUs, ``usable CPUs // LOCAL_WORLD_SIZE``, at least the current setting).
        """
        if save_every is not None and (isinstance(save_every, bool) or save_every < 1):
            raise ValueError(f"save_every must be >= 1 or None, got {save_every!r}")
        if thread_count < 1:
            raise ValueError(f"thread_count must be >= 1, got {thread_count!r}")
        if staging_threads is not None and staging_threads < 1:
            raise ValueError(f"staging_threads must be >= 1 or None, got {staging_threads!r}")
        self._staging_threads = staging_threads or _rank_cpu_share()
        self._retention = RetentionPolicy(keep_last=keep_last) if keep_last is not None else None
        self._storage, self._root_path = Storage.for_url(root)
        self.root = self._storage.url(self._root_path)
        self.save_every = save_every
        self.async_save = async_save
        self.save_rng = save_rng
        self.thread_count = thread_count
        self._storage_options = _storage_options(storage_options)
        self._on_save_phase = on_save_phase

        # Coordination groups: one for the main thread, one for the background saver.
        self._sync_group = new_cpu_group()
        self._async_group = new_cpu_group() if async_save else None
        self._coord = Coordinator(self._sync_group)
        self._async_coord = Coordinator(self._async_group) if async_save else self._coord
        self.rank = self._coord.rank
        self.world_size = self._coord.world_size

        self._executor = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckptctl-async-save")
            if async_save
            else None
        )
        self._stager: Any = None
        self._in_flight: SaveHandle | None = None
        self._last_committed_step: int | None = None
        self._last_committed_path: str | None = None
        self._lock = threading.Lock()
        self._closed = False
        signals = list(preemption_signals or ())
        self._watcher = PreemptionWatcher(signals) if signals else None

    # -- properties ---------------------------------------------------------------------------------

    @property
    def is_object_store(self) -> bool:
        return not self._storage.is_local

    @property
    def last_committed_step(self) -> int | None:
        return self._last_committed_step

    def path_for_step(self, step: int) -> str:
        return self._storage.url(Storage.join(self._root_path, step_dir_name(step)))

    # -- lifecycle ------------------------------------------------------------------------------------

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(wait=exc[0] is None or exc[0] is PreemptedExit)

    def close(self, *, wait: bool = True) -> None:
        """Wait for an in-flight save (unless ``wait=False``), restore signal handlers, free staging memory."""
        if self._closed:
            return
        self._closed = True
        try:
            if wait:
                self.wait()
        finally:
            if self._watcher is not None:
                self._watcher.close()
            if self._executor is not None:
                self._executor.shutdown(wait=wait)
            if self._stager is not None:
                self._stager.close()
                self._stager = None

    def wait(self) -> SaveResult | None:
        """Block until the in-flight async save (if any) has committed; re-raises its failure."""
        handle = self._in_flight
        if handle is None:
            return None
        try:
            return handle.result()
        finally:
            self._in_flight = None

    # -- saving -----------------------------------------------------------------------------------------

    def maybe_save(
        self,
        step: int,
        state: Mapping[str, Any],
        *,
        tokens_seen: int | None = None,
        samples_seen: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> SaveHandle | None:
        """Call once per step boundary on every rank.

        If any rank received a preemption signal: waits for an in-flight save,
        writes a synchronous emergency checkpoint of ``step`` and raises
        ``PreemptedExit`` (a ``SystemExit`` with code ``PREEMPTED_EXIT_CODE``).
        Otherwise saves when ``step`` is a multiple of ``save_every``.
        """
        signum = self.preemption_requested()
        if signum:
            return self._emergency(step, state, signum, tokens_seen, samples_seen, extra)
        if self.save_every is not None and step % self.save_every == 0:
            return self.save(
                step, state, tokens_seen=tokens_seen, samples_seen=samples_seen, extra=extra
            )
        return None

    def preemption_requested(self) -> int:
        """The preemption signal number if any rank received one, else 0 (a collective)."""
        local = self._watcher.received if self._watcher is not None else None
        return self._coord.max_int(local or 0)

    def _emergency(
        self,
        step: int,
        state: Mapping[str, Any],
        signum: int,
        tokens_seen: int | None,
        samples_seen: int | None,
        extra: Mapping[str, Any] | None,
    ) -> SaveHandle:
        name = signal_name(signum)
        logger.warning(
            "ckptctl: %s received; writing an emergency checkpoint at step %d", name, step
        )
        try:
            self.wait()
        except Exception as e:  # the emergency save matters more than the earlier failure
            logger.error("ckptctl: the previous async save failed: %s", e)
        handle = self.save(
            step,
            state,
            tokens_seen=tokens_seen,
            samples_seen=samples_seen,
            extra={**(extra or {}), "emergency": True, "signal": name},
            _force_sync=True,
        )
        result = handle.result()
        raise PreemptedExit(signal_name=name, step=step, checkpoint=result.path)

    def save(
        self,
        step: int,
        state: Mapping[str, Any],
        *,
        tokens_seen: int | None = None,
        samples_seen: int | None = None,
        extra: Mapping[str, Any] | None = None,
        _force_sync: bool = False,
    ) -> SaveHandle:
        """Checkpoint ``state`` as ``<root>/step_<step>``; every rank must call it.

        Synchronous saves return a finished handle. Async saves return once the
        state is staged in host memory; the previous async save is waited for
        first (and its failure raised here).
        """
        if self._closed:
            raise CheckpointSaveError("this Checkpointer is closed")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        t_start = time.perf_counter()
        self.wait()
        final_path = Storage.join(self._root_path, step_dir_name(step))
        if self._last_committed_step == step and self._last_committed_path is not None:
            # Already saved at this step (e.g. a periodic save, then a preemption at the same step).
            done: Future[SaveResult] = Future()
            done.set_result(
                SaveResult(
                    step=step,
                    path=self._last_committed_path,
                    world_size=self.world_size,
                    num_files=0,
                    size_bytes=0,
                    save_duration_s=0.0,
                    stall_s=0.0,
                )
            )
            return SaveHandle(step, self._last_committed_path, done)

        split = _sd.split_state(state)
        sd = self._collect(split, step, tokens_seen, samples_seen)
        self._check_state(sd, split)

        token = self._coord.broadcast_bytes(
            secrets.token_hex(4).encode() if self.rank == 0 else None
        ).decode()
        if self._storage.is_local:
            write_path = Storage.join(self._root_path, temp_dir_name(step, token))
        else:
            write_path = final_path
            self._move_aside_remote(final_path, token)

        job = _SaveJob(
            step=step,
            write_path=write_path,
            final_path=final_path,
            tokens_seen=tokens_seen,
            samples_seen=samples_seen,
            extra=dict(extra or {}),
            emergency=bool(extra and extra.get("emergency")),
            token=token,
        )
        use_async = self.async_save and not _force_sync
        if use_async:
            staged = self._stage(sd)
            stall = time.perf_counter() - t_start
            assert self._executor is not None
            future = self._executor.submit(self._run_job, job, staged, self._async_coord, stall)
            handle = SaveHandle(step, self._storage.url(final_path), future)
            self._in_flight = handle
            return handle
        done = Future()
        try:
            done.set_result(self._run_job(job, sd, self._coord, None, t_start=t_start))
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            done.set_exception(e)
            raise
        return SaveHandle(step, self._storage.url(final_path), done)

    def _collect(
        self, split: _sd.Split, step: int, tokens_seen: int | None, samples_seen: int | None
    ) -> dict[str, Any]:
        sd: dict[str, Any] = _sd.model_optim_state(split)
        for key, obj in split.stateful.items():
            sd[key] = obj.state_dict()
        for key, wrapped in split.per_rank.items():
            sd[PER_RANK_KEY_FMT.format(key=key, rank=self.rank)] = wrapped.state_dict()
        for key, value in split.plain.items():
            sd[key] = value
        sd[PROGRESS_KEY] = {"step": step, "tokens_seen": tokens_seen, "samples_seen": samples_seen}
        if self.save_rng:
            sd[RNG_KEY_FMT.format(rank=self.rank)] = capture_rng_state()
        return sd

    def _check_state(self, sd: dict[str, Any], split: _sd.Split) -> None:
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
        if self.world_size == 1:
            if unsafe is not None:
                raise unsafe
            return
        mine = {
            "unsafe": unsafe.message if unsafe else None,
            "digests": _sd.digest_replicated(sd, replicated),
        }
        everyone = self._coord.all_gather_json(mine)
        if unsafe is not None:
            raise unsafe
        others = [(r, d["unsafe"]) for r, d in enumerate(everyone) if d["unsafe"]]
        if others:
            rank, message = others[0]
            raise UnsafeStateError(f"rank {rank}: {message}")
        differing = sorted(
            k for k in replicated if len({d["digests"].get(k) for d in everyone}) > 1
        )
        if differing:
            raise CheckpointSaveError(
                f"state {', '.join(repr(k) for k in differing)} differs across ranks; DCP would keep "
                "only one rank's copy",
                hint="wrap per-rank state in ckptctl.training.PerRank(...)",
            )

    def _stage(self, sd: dict[str, Any]) -> dict[str, Any]:
        """A host-memory copy of ``sd`` that training may not touch (reused buffers across saves)."""
        if self._stager is None:
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

            cuda = torch.cuda.is_available()
            self._stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=cuda,
                    use_shared_memory=False,
                    use_async_staging=False,
                    use_non_blocking_copy=cuda,
                )
            )
        # Training is blocked on this copy: give it this rank's share of the CPUs (a large
        # tensor's copy_ is split over intra-op threads), then put the setting back.
        before = torch.get_num_threads()
        wanted = (
            max(before, self._staging_threads)
            if _tensor_bytes(sd) >= PARALLEL_STAGING_MIN_BYTES
            else before
        )
        if wanted != before:
            torch.set_num_threads(wanted)
        try:
            staged = self._stager.stage(sd)
        finally:
            if wanted != before:
                torch.set_num_threads(before)
        assert isinstance(staged, dict)
        return staged

    def _move_aside_remote(self, final_path: str, token: str) -> None:
        """Object stores write in place: quarantine an existing ``step_N/`` first (rank 0), so no
        old commit marker ever sits next to new shards."""
        err = None
        if self.rank == 0 and self._storage.exists(final_path):
            name = Storage.basename(final_path)
            try:
                aside = mutate.supersede(
                    RunRoot.at(self._storage, self._root_path),
                    name,
                    token,
                    step=None,
                    reason="a new save at the same step (resumed from an earlier checkpoint)",
                )
                logger.warning("ckptctl: %s existed; moved it to %s before saving", final_path, aside)
            except Exception as e:
                err = str(e)
        err = self._coord.broadcast_json(err)
        if err:
            raise CheckpointSaveError(f"cannot move the existing {final_path} aside: {err}")

    def _phase(self, phase: str, step: int) -> None:
        if self._on_save_phase is not None:
            self._on_save_phase(phase, step)

    def _run_job(
        self,
        job: _SaveJob,
        sd: dict[str, Any],
        coord: Coordinator,
        stall_s: float | None,
        *,
        t_start: float | None = None,
    ) -> SaveResult:
        t0 = time.perf_counter() if t_start is None else t_start
        write_url = self._storage.url(job.write_path)
        try:
            writer = _dcp_io.make_writer(
                write_url if not self._storage.is_local else job.write_path,
                is_local=self._storage.is_local,
                storage_options=self._storage_options,
                thread_count=self.thread_count,
            )
            with _quiet_no_dist():
                dcp.save(
                    sd,
                    storage_writer=writer,
                    process_group=coord.group,
                    no_dist=not coord.is_distributed,
                )
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            inner = _unwrap_dcp_error(e)
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

        path = self._storage.url(job.final_path)
        with self._lock:
            self._last_committed_step = job.step
            self._last_committed_path = path
        retention = None
        if coord.rank == 0 and self._retention is not None:
            try:
                retention = apply_retention(
                    self.root, self._retention, known_complete={step_dir_name(job.step)}
                )
                for err in retention.errors:
                    logger.warning("ckptctl: retention: %s", err)
                if retention.skipped:
                    logger.warning(
                        "ckptctl: retention skipped this save (the next save retries): %s",
                        retention.skipped,
                    )
            except Exception as e:  # never fail a committed save because cleanup failed
                logger.warning("ckptctl: retention failed: %s", e)
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
            if self._storage.is_local:
                st_size = os.stat(fpath).st_size
                if st_size != size:
                    crc = None
            if crc is None:
                with self._storage.open_read(fpath) as f:
                    size, crc = _dcp_io.crc32_of_stream(f)
            out.append({"path": name, "size_bytes": size, "checksum": crc, "rank": rank})
        if rank == 0 and not any(f["path"] == _dcp_io.METADATA_NAME for f in out):
            raise CheckpointSaveError(f"rank 0 did not see {_dcp_io.METADATA_NAME} being written")
        return out

    def _commit(
        self, job: _SaveJob, files: list[dict[str, Any]], world_size: int, duration_s: float
    ) -> dict[str, Any]:
        """Rank 0: manifest, commit marker, then (POSIX) the atomic rename."""
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
        storage = self._storage
        storage.write_bytes(Storage.join(job.write_path, MANIFEST_NAME), manifest_bytes)
        self._phase("manifest_written", job.step)
        storage.write_bytes(
            Storage.join(job.write_path, COMMIT_MARKER_NAME),
            commit_marker_bytes(job.step, manifest_bytes),
        )
        self._phase("marker_written", job.step)
        if storage.is_local:
            _fsync_dir(job.write_path)
            run_root = RunRoot.at(storage, self._root_path)
            if os.path.lexists(job.final_path):
                aside = mutate.supersede(
                    run_root,
                    step_dir_name(job.step),
                    job.token,
                    step=job.step,
                    reason="a new save at the same step (resumed from an earlier checkpoint)",
                )
                logger.warning(
                    "ckptctl: %s already existed (an older run's); moved it to %s",
                    job.final_path,
                    aside,
                )
            mutate.commit(run_root, Storage.basename(job.write_path), Storage.basename(job.final_path))
            _fsync_dir(self._root_path)
        self._phase("committed", job.step)
        return {
            "error": None,
            "num_files": len(files) + 2,
            "size_bytes": sum(int(f["size_bytes"]) for f in files) + len(manifest_bytes),
        }

    # -- loading -----------------------------------------------------------------------------------------

    def load(
        self, path: str, state: Mapping[str, Any], *, verify: VerifyMode = "deep"
    ) -> LoadResult:
        """Restore ``state`` from the checkpoint at ``path`` (every rank must call it).

        The checkpoint must be complete by ckptctl's verifier (``verify="deep"``
        also checks every file's CRC-32 against the manifest, spread over the
        ranks); otherwise ``IncompleteCheckpointError``. No fallback: the caller
        named this checkpoint.
        """
        problem = self._verify_for_load(path, verify)
        if problem is not None:
            raise IncompleteCheckpointError(
                f"{path}: {problem}",
                hint="use `ckptctl locate <root>` or load_latest() to pick a complete one",
            )
        return self._load_verified(path, state, skipped=())

    def load_latest(
        self, state: Mapping[str, Any], *, root: str | None = None, verify: VerifyMode = "deep"
    ) -> LoadResult | None:
        """Restore the newest checkpoint under ``root`` that verifies complete, falling back past bad ones.

        Returns None when the root holds no checkpoint directory at all (a fresh
        start); raises ``NoCompleteCheckpointError`` when it holds some but none
        is complete (starting over would silently discard the run's progress).
        Every checkpoint passed over is logged and listed in ``LoadResult.skipped``.
        """
        from ckptctl.runroot.locate import find_latest_complete
        from ckptctl.runroot.reports import CheckOptions

        # The caller's state decides what a resume needs: a checkpoint holding only a model is
        # right for a state that holds only a model (DCP's load refuses a missing key anyway), so
        # the library does not apply `locate`'s model-only skip meant for the CLI's resume.
        opts = CheckOptions(include_model_only=True)
        root_url = root or self.root
        skipped: list[str] = []
        before: int | None = None
        while True:
            info: dict[str, Any] | None = None
            if self.rank == 0:
                try:
                    found = find_latest_complete(root_url, before_step=before, options=opts)
                    info = {
                        "path": found.checkpoint.path if found.checkpoint else None,
                        "step": found.checkpoint.step if found.checkpoint else None,
                        "skipped": [
                            f"{r.path}: {r.status}: {'; '.join(r.problems) or 'no detail'}"
                            for r in found.skipped
                        ],
                        "error": None,
                    }
                except Exception as e:
                    if isinstance(e, NotFoundError):
                        info = {
                            "path": None,
                            "step": None,
                            "skipped": [],
                            "error": None,
                            "missing_root": True,
                        }
                    else:
                        info = {
                            "path": None,
                            "step": None,
                            "skipped": [],
                            "error": f"{type(e).__name__}: {e}",
                        }
            info = self._coord.broadcast_json(info)
            assert info is not None
            if info.get("error"):
                raise CheckpointLoadError(f"cannot search {root_url}: {info['error']}")
            for s in info["skipped"]:
                logger.warning("ckptctl: skipping %s", s)
            skipped.extend(info["skipped"])
            path = info["path"]
            if path is None:
                if not skipped and before is None:
                    return None  # nothing there: a fresh start
                raise NoCompleteCheckpointError(
                    f"{root_url}: no complete checkpoint (passed over {len(skipped)})",
                    hint="run `ckptctl list` on the root to see what is wrong with each",
                )
            step = int(info["step"])
            problem = self._verify_for_load(path, verify, quick_done=True)
            if problem is None:
                try:
                    return self._load_verified(path, state, skipped=tuple(skipped))
                except _sd.StateMismatch:
                    raise
                except (CheckpointLoadError, UnsafeCheckpointError) as e:
                    problem = e.message
            msg = f"{path}: {problem}"
            logger.warning("ckptctl: skipping %s", msg)
            skipped.append(msg)
            before = step

    def _verify_for_load(
        self, path: str, mode: VerifyMode, *, quick_done: bool = False
    ) -> str | None:
        """None if ``path`` may be loaded, else why not (the same answer on every rank)."""
        if mode == "none":
            return None
        verdict: dict[str, Any] | None = None
        if self.rank == 0:
            if quick_done:
                verdict = {"problem": None}
            else:
                try:
                    from ckptctl.runroot.locate import verify_checkpoint

                    report = verify_checkpoint(path)
                    verdict = {
                        "problem": None
                        if report.is_complete
                        else f"{report.status}: {'; '.join(report.problems) or 'no detail'}"
                    }
                except Exception as e:
                    verdict = {"problem": f"cannot verify: {e}"}
        verdict = self._coord.broadcast_json(verdict)
        assert verdict is not None
        if verdict["problem"] or mode != "deep":
            return verdict["problem"]
        return self._deep_check(path)

    def _deep_check(self, path: str) -> str | None:
        """Every file's CRC-32 against the manifest, the files spread over the ranks by size."""
        problems: list[str] = []
        try:
            storage, cpath = Storage.for_url(path)
            manifest_bytes = storage.read_bytes(Storage.join(cpath, MANIFEST_NAME))
        except Exception as e:
            manifest_bytes = None
            missing = isinstance(e, NotFoundError)
            if not missing:
                problems.append(f"cannot read {MANIFEST_NAME}: {e}")
        if manifest_bytes is None and not problems:
            # Not written by ckptctl: the verifier's own deep check, on rank 0.
            verdict: dict[str, Any] | None = None
            if self.rank == 0:
                from ckptctl.runroot.locate import verify_checkpoint

                report = verify_checkpoint(path, deep=True)
                verdict = {
                    "problem": None
                    if report.is_complete
                    else f"{report.status}: {'; '.join(report.problems)}"
                }
            verdict = self._coord.broadcast_json(verdict)
            assert verdict is not None
            return verdict["problem"]
        if manifest_bytes is not None:
            try:
                manifest = parse_manifest(manifest_bytes)
                loads = [0] * self.world_size
                mine = []
                for f in sorted(manifest.files, key=lambda f: (-f.size_bytes, f.path)):
                    target = loads.index(min(loads))
                    loads[target] += f.size_bytes + 1
                    if target == self.rank:
                        mine.append(f)
                for f in mine:
                    if f.checksum is None:
                        continue
                    with storage.open_read(Storage.join(cpath, f.path)) as fh:
                        size, crc = _dcp_io.crc32_of_stream(fh)
                    if size != f.size_bytes:
                        problems.append(f"{f.path}: {size} bytes, manifest says {f.size_bytes}")
                    elif crc != f.checksum:
                        problems.append(
                            f"{f.path}: CRC-32 {crc}, manifest says {f.checksum} (checksum mismatch)"
                        )
            except ManifestError as e:
                problems.append(f"{MANIFEST_NAME}: {e}")
            except Exception as e:
                problems.append(f"deep check failed: {e}")
        everyone = self._coord.all_gather_json(problems)
        merged = sorted({p for ps in everyone for p in ps})
        return f"corrupt: {'; '.join(merged)}" if merged else None

    def _load_verified(
        self, path: str, state: Mapping[str, Any], *, skipped: tuple[str, ...]
    ) -> LoadResult:
        storage, cpath = Storage.for_url(path)
        manifest: Manifest | None = None
        try:
            manifest = parse_manifest(storage.read_bytes(Storage.join(cpath, MANIFEST_NAME)))
        except Exception as e:
            if not isinstance(e, NotFoundError):
                raise CheckpointLoadError(f"{path}: unreadable {MANIFEST_NAME}: {e}") from e
        try:
            md_bytes = storage.read_bytes(Storage.join(cpath, _dcp_io.METADATA_NAME))
        except Exception as e:
            raise CheckpointLoadError(f"{path}: cannot read {_dcp_io.METADATA_NAME}: {e}") from e
        metadata = _dcp_io.parse_metadata_bytes(md_bytes, path)

        split = _sd.split_state(state)
        template = self._collect(split, 0, None, None)
        notes: list[str] = []
        saved_keys = _sd.top_level_keys(metadata)
        for key in list(template):
            if key in saved_keys:
                continue
            if key.startswith("ckptctl.rng.rank"):
                notes.append(
                    f"no RNG state saved for rank {self.rank} (saved world size differs); RNG not restored"
                )
                del template[key]
            elif key in {PER_RANK_KEY_FMT.format(key=k, rank=self.rank) for k in split.per_rank}:
                notes.append(f"no {key!r} in the checkpoint (saved world size differs); left as is")
                del template[key]
        for key in split.plain:
            # Plain values come back as saved, whatever the caller passed as a placeholder.
            if key in saved_keys:
                template[key] = _sd.template_from_metadata(metadata, key)
        missing = sorted(
            k for k in template if k not in saved_keys and not _sd.is_empty_state(template[k])
        )
        for key in [k for k in template if k not in saved_keys]:
            del template[key]  # empty containers: DCP saved nothing for them
        if missing:
            raise _sd.StateMismatch(
                f"{path}: the checkpoint has no {', '.join(repr(k) for k in missing)} "
                f"(it holds {', '.join(sorted(saved_keys))})",
                hint="the state dict passed to load must name the same entries as the one saved",
            )
        _sd.check_shapes(template, metadata, path)

        try:
            reader = _dcp_io.make_reader(
                storage.url(cpath) if not storage.is_local else cpath,
                metadata,
                is_local=storage.is_local,
                storage_options=self._storage_options,
            )
            with _quiet_no_dist():
                dcp.load(
                    template,
                    storage_reader=reader,
                    planner=_dcp_io.SafeLoadPlanner(),
                    process_group=self._coord.group,
                    no_dist=not self._coord.is_distributed,
                )
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)) or not (
                isinstance(e, Exception) or _is_dcp_exception(e)
            ):
                raise
            inner = _unwrap_dcp_error(e)
            if isinstance(inner, UnsafeCheckpointError):
                raise UnsafeCheckpointError(f"{path}: {inner.message}", hint=inner.hint) from inner
            raise CheckpointLoadError(
                f"{path}: load failed: {type(inner).__name__}: {str(inner).strip().splitlines()[0] if str(inner).strip() else ''}"
            ) from (inner if isinstance(inner, Exception) else None)

        self._apply(split, template, state)
        progress = template.get(PROGRESS_KEY) or {}
        rng = template.get(RNG_KEY_FMT.format(rank=self.rank))
        if rng is not None and self.save_rng:
            notes.extend(restore_rng_state(rng))
        for note in notes:
            logger.warning("ckptctl: %s", note)
        step = int(progress.get("step", manifest.step if manifest else 0))
        return LoadResult(
            path=path,
            step=step,
            tokens_seen=progress.get("tokens_seen"),
            samples_seen=progress.get("samples_seen"),
            world_size=self.world_size,
            saved_world_size=manifest.world_size if manifest else None,
            skipped=skipped,
            notes=tuple(notes),
            extra=dict(manifest.extra) if manifest else {},
        )

    def _apply(self, split: _sd.Split, loaded: dict[str, Any], state: Mapping[str, Any]) -> None:
        if split.model is not None:
            from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

            if split.optimizer is not None:
                set_state_dict(
                    split.model,
                    split.optimizer,
                    model_state_dict=loaded[str(split.model_key)],
                    optim_state_dict=loaded[str(split.optim_key)],
                )
            else:
                set_model_state_dict(split.model, loaded[str(split.model_key)])
        for key, obj in split.stateful.items():
            obj.load_state_dict(loaded[key])
        for key, wrapped in split.per_rank.items():
            per_key = PER_RANK_KEY_FMT.format(key=key, rank=self.rank)
            if per_key in loaded:
                wrapped.load_state_dict(loaded[per_key])
        if split.plain:
            if not isinstance(state, MutableMapping):
                raise TypeError(
                    "state holds plain values; pass a mutable dict so load can write them back"
                )
            for key in split.plain:
                state[key] = loaded[key]


@dataclass(frozen=True, kw_only=True, slots=True)
class _SaveJob:
    step: int
    write_path: str
    final_path: str
    tokens_seen: int | None
    samples_seen: int | None
    extra: dict[str, Any]
    emergency: bool
    token: str


__all__ = [
    "SAVE_PHASES",
    "Checkpointer",
    "LoadResult",
    "SaveHandle",
    "SaveResult",
    "is_distributed",
]
