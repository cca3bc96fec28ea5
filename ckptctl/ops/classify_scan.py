"""classify's matching engine: the prefilter engine, the worker count, and blocks matched in order.

``_BlockMatcher`` matches the blocks of one input here or in worker processes
(bounded queue, constant memory); ``classify_logs`` (``ckptctl.ops.classify``)
keeps the per-file state.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from ckptctl.adapters import logs
from ckptctl.core.classify.catalog import Signature
from ckptctl.core.classify.scan import BlockScan, Matcher
from ckptctl.errors import CkptctlError, UsageError

__all__ = [
    "ENGINES",
    "ENGINE_ENV",
    "MAX_AUTO_JOBS",
    "PARALLEL_MIN_BYTES",
    "auto_jobs",
    "make_matcher",
    "pick_engine",
]

#: Inputs at least this big are matched by worker processes (when ``jobs`` is auto).
PARALLEL_MIN_BYTES = 64 << 20
#: At most this many worker processes by default (matching is CPU-bound; more
#: rarely pays on a shared login node).
MAX_AUTO_JOBS = 8

#: Prefilter engines (``engine=``, or the ``CKPTCTL_CLASSIFY_ENGINE`` variable):
#: ``auto`` is Hyperscan when the ``hyperscan`` package imports, else ``re``.
ENGINES = ("auto", "hyperscan", "re")
ENGINE_ENV = "CKPTCTL_CLASSIFY_ENGINE"


def pick_engine(engine: str | None = None) -> str:
    """The engine to use: ``engine``, else ``$CKPTCTL_CLASSIFY_ENGINE``, else ``auto``, resolved."""
    from ckptctl.adapters import hsscan

    name = engine or os.environ.get(ENGINE_ENV) or "auto"
    if name not in ENGINES:
        raise UsageError(f"unknown classify engine {name!r} (one of {', '.join(ENGINES)})")
    if name == "auto":
        return hsscan.NAME if hsscan.available() else "re"
    if name == hsscan.NAME and not hsscan.available():
        raise UsageError(
            "the hyperscan engine was asked for but the hyperscan package is not installed",
            hint="pip install 'ckptctl[fast]', or use the re engine",
        )
    return name


def make_matcher(signatures: Sequence[Signature], engine: str) -> Matcher:
    """A matcher whose keyword prefilter runs on ``engine`` (resolved by ``pick_engine``)."""
    if engine == "re":
        return Matcher(signatures)
    from ckptctl.adapters.hsscan import HyperscanBlockScanner

    return Matcher(signatures, HyperscanBlockScanner)


_worker_matcher: Matcher | None = None


def _init_worker(signatures: tuple[Signature, ...], engine: str) -> None:
    global _worker_matcher
    _worker_matcher = make_matcher(signatures, engine)


def _scan_in_worker(block: bytes) -> BlockScan:
    assert _worker_matcher is not None, "worker not initialised"
    return _worker_matcher.scan_block(block)


def auto_jobs(total_bytes: int | None, cpu_count: int | None = None) -> int:
    """Worker processes for ``total_bytes`` of input.

    1 below ``PARALLEL_MIN_BYTES`` or on fewer than 4 CPUs (the parent reads and
    keeps the state: on a 2-vCPU VM two workers measured no faster than one
    process); else one per CPU but one, up to ``MAX_AUTO_JOBS``.
    """
    cpus = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    if total_bytes is None or total_bytes < PARALLEL_MIN_BYTES or cpus < 4:
        return 1
    return min(cpus - 1, MAX_AUTO_JOBS)


class _BlockMatcher:
    """Matches blocks in order: here, or in worker processes with a bounded queue.

    The per-file state (line numbers, torchrun records) stays in this process;
    workers run only the stateless ``Matcher.scan_block``. At most ``2 x jobs``
    blocks are in flight, so memory stays constant however big the input.
    """

    def __init__(self, matcher: Matcher, jobs: int) -> None:
        self._matcher = matcher
        self._jobs = jobs
        self._pool: Any = None

    def __enter__(self) -> _BlockMatcher:
        if self._jobs > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # forkserver where it exists: no fork() of a process that may run a
            # progress-bar thread; workers import only the matcher.
            method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
            self._pool = ProcessPoolExecutor(
                max_workers=self._jobs,
                mp_context=multiprocessing.get_context(method),
                initializer=_init_worker,
                initargs=(self._matcher.signatures, self._matcher.engine),
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def scan(self, blocks: Iterator[logs.Block]) -> Iterator[tuple[BlockScan, int | None]]:
        """``(scan, fixed_line)`` per block, in order. A read error is raised after the
        blocks read before it (they still count)."""
        if self._pool is None:
            for block in blocks:
                yield self._matcher.scan_block(block.data), block.fixed_line
            return
        pending: deque[tuple[Any, int | None]] = deque()
        error: CkptctlError | None = None
        try:
            for block in blocks:
                pending.append((self._pool.submit(_scan_in_worker, block.data), block.fixed_line))
                while len(pending) > 2 * self._jobs:
                    future, fixed = pending.popleft()
                    yield future.result(), fixed
        except CkptctlError as e:
            error = e
        while pending:
            future, fixed = pending.popleft()
            yield future.result(), fixed
        if error is not None:
            raise error
