"""Async saves: a host-memory copy staged while training waits, then the write in the background.

``Checkpointer(async_save=True)`` blocks the training loop only for the copy
(``stage``); the DCP write, the checksums and the commit run on one background
thread, at most one save in flight (the next save, ``wait()`` or ``close()``
waits for it and raises its failure). The copy reuses its buffers across saves
(pinned when CUDA is there), so an async save costs one extra copy of the
state in host memory for the life of the checkpointer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from ckptctl.training.save import SaveHandle, SaveResult

#: Below this much tensor data, changing torch's thread count costs more than the copy gains.
PARALLEL_STAGING_MIN_BYTES = 32 << 20


def tensor_bytes(obj: Any) -> int:
    """Bytes of tensor data in a state dict (nested mappings, lists and tuples)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, Mapping):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def rank_cpu_share() -> int:
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


class BackgroundSaver:
    """Stages host copies and runs saves on one background thread, at most one in flight."""

    def __init__(self, *, staging_threads: int) -> None:
        self.staging_threads = staging_threads
        #: torch's ``DefaultStager``, made on the first ``stage`` (None before).
        self.stager: Any = None
        self.in_flight: SaveHandle | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckptctl-async-save")

    def stage(self, sd: dict[str, Any]) -> dict[str, Any]:
        """A host-memory copy of ``sd`` that training may not touch (reused buffers across saves)."""
        if self.stager is None:
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

            cuda = torch.cuda.is_available()
            self.stager = DefaultStager(
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
            max(before, self.staging_threads)
            if tensor_bytes(sd) >= PARALLEL_STAGING_MIN_BYTES
            else before
        )
        if wanted != before:
            torch.set_num_threads(wanted)
        try:
            staged = self.stager.stage(sd)
        finally:
            if wanted != before:
                torch.set_num_threads(before)
        assert isinstance(staged, dict)
        return staged

    def submit(self, step: int, path: str, run: Callable[[], SaveResult]) -> SaveHandle:
        """Run ``run`` (the write and commit of a staged state) in the background."""
        handle = SaveHandle(step, path, self._executor.submit(run))
        self.in_flight = handle
        return handle

    def wait(self) -> SaveResult | None:
        """Block until the in-flight save (if any) has committed; re-raises its failure."""
        handle = self.in_flight
        if handle is None:
            return None
        try:
            return handle.result()
        finally:
            self.in_flight = None

    def close(self, *, wait: bool) -> None:
        """Stop the background thread (after the in-flight save when ``wait``); free the copy."""
        self._executor.shutdown(wait=wait)
        if self.stager is not None:
            self.stager.close()
            self.stager = None
