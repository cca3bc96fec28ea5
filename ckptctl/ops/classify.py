"""classify: read the logs an on-call engineer has, say what failed and what to do.

``classify_logs`` is the use case behind ``ckptctl classify`` and the first step
of ``ckptctl recover``. It loads the signature catalog (the built-in
``ckptctl/signatures/default.yaml`` plus any user files), streams every source
through ``ckptctl.adapters.logs`` in constant memory, turns matching lines into
events (``ckptctl.core.classify``), and returns a ``ClassifyResult`` whose
verdict is a pure function of those events. Nothing here prints.

Inputs that cannot be read (missing, permission denied, binary, broken gzip)
are skipped and listed in ``ClassifyResult.skipped``; only when *nothing* could
be read is it an error (``InputError``, exit 1).
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import IO, Any

from ckptctl import exit_codes
from ckptctl.adapters import logs
from ckptctl.core import classify as core
from ckptctl.errors import CkptctlError, ConfigError, InputError, UsageError

__all__ = [
    "ClassifyResult",
    "classify_logs",
    "load_catalog",
]

#: Exit code per verdict (documented in the README and docs/classify.md).
EXIT_CODES: dict[str, int] = {
    "infra": exit_codes.CLASSIFY_INFRA,
    "job": exit_codes.CLASSIFY_JOB,
    "preemption": exit_codes.CLASSIFY_PREEMPTION,
    "unknown": exit_codes.CLASSIFY_UNKNOWN,
}

DEFAULT_CATALOG = "default.yaml"
#: The built-in catalogs (``ckptctl/signatures/``), in precedence order: a line becomes
#: an event of the first signature that matches it. XIDs first (the code decides);
#: then NCCL's and the fabric's specific errors and the platforms' preemption and
#: maintenance wordings; then the general catalog (ending with the generic Python
#: exception rule).
BUILTIN_CATALOGS = ("xids.yaml", "nccl.yaml", "preemption.yaml", DEFAULT_CATALOG)
#: Evidence lines kept per signature in the result (counts are always complete).
MAX_EVIDENCE_PER_SIGNATURE = 5

ProgressFn = Callable[[int], None]


# --------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------


def _yaml_load(text: str, source: str) -> Any:
    import yaml

    # The C loader parses the built-in catalogs (250 signatures) in a tenth of the time.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # a safe loader (C or pure Python)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from e


@functools.lru_cache(maxsize=1)
def load_default_signatures() -> tuple[core.Signature, ...]:
    """The catalogs shipped in the package (``BUILTIN_CATALOGS``), in order; parsed once."""
    signatures: list[core.Signature] = []
    seen: set[str] = set()
    for name in BUILTIN_CATALOGS:
        text = resources.files("ckptctl.signatures").joinpath(name).read_text("utf-8")
        try:
            parsed = core.parse_catalog(_yaml_load(text, name), source=name)
        except core.CatalogError as e:  # pragma: no cover - the shipped catalogs are tested
            raise ConfigError(str(e)) from e
        for sig in parsed:
            if sig.id in seen:  # pragma: no cover - the shipped catalogs are tested
                raise ConfigError(f"{name}: id {sig.id!r} is also in another built-in catalog")
            seen.add(sig.id)
            signatures.append(sig)
    return tuple(signatures)


def load_signature_file(path: str) -> tuple[core.Signature, ...]:
    """One user signature file (a local path or fsspec URL); ``ConfigError`` names the problem."""
    from ckptctl.adapters.storage import Storage

    try:
        storage, inner = Storage.for_url(path)
        data = storage.read_bytes(inner)
    except CkptctlError as e:
        raise ConfigError(f"signature file {e.message}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"signature file {path}: not UTF-8 text") from e
    try:
        return core.parse_catalog(_yaml_load(text, path), source=path)
    except core.CatalogError as e:
        raise ConfigError(str(e), hint="docs/classify.md describes the signature format") from e


def load_catalog(extra_signature_files: Sequence[str] = ()) -> tuple[core.Signature, ...]:
    """Built-in signatures with the user's files merged in front (same id replaces)."""
    extras = [load_signature_file(p) for p in extra_signature_files]
    return core.merge_catalogs(load_default_signatures(), extras)


# --------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------


def _gpu_json(g: core.GpuRef) -> dict[str, Any]:
    return {"host": g.host, "pci_bus_id": g.pci_bus_id, "index": g.index}


def evidence_json(e: core.Event, role: str | None = None) -> dict[str, Any]:
    """One evidence item: ``{file, line, text, signature, ...}`` (keys: add, never rename)."""
    return {
        "file": e.file,
        "line": e.line,
        "text": e.text,
        "signature": e.signature.id,
        "description": e.signature.description,
        "category": e.signature.category,
        "role": role or e.signature.role,
        "severity": e.signature.severity,
        "confidence": e.signature.confidence,
        "host": e.host,
        "host_source": e.host_source,
        "gpu": e.gpu,
        "gpu_index": e.gpu_index,
        "rank": e.rank,
        "local_rank": e.local_rank,
        "xid": e.xid,
        "signal": e.signal,
        "exitcode": e.exitcode,
        "first_failure": e.first_failure,
        "peer": e.peer,
        "peer_host": e.peer_host,
        "pod": e.pod,
        "time": e.time,
        "cause_xid": e.cause_xid,
    }


def suspect_json(s: core.Suspect) -> dict[str, Any]:
    """One suspect: ``{host, gpu, rank, local_rank, peer, pod, role, reason}``."""
    return {
        "host": s.host,
        "gpu": s.gpu,
        "rank": s.rank,
        "local_rank": s.local_rank,
        "peer": s.peer,
        "pod": s.pod,
        "role": s.role,
        "reason": s.reason,
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class ClassifyResult:
    """The verdict on a set of logs, with its evidence and what was read.

    Fields (all also in ``to_json()``):
    ``category`` infra | job | preemption | unknown; ``confidence`` high | medium |
    low; ``hosts`` the hosts to drain (infra only); ``gpus`` the GPUs the root cause
    names; ``action`` the runbook action; ``root_cause`` the event judged to have
    started it; ``evidence`` root cause, other causes, then symptoms;
    ``symptoms`` the consequences; ``what_would_settle_it`` the logs that would make
    an ``unknown`` or weak verdict certain; ``exit_code`` the CLI's exit code.
    """

    verdict: core.Verdict
    tallies: tuple[core.SignatureTally, ...]
    sources: tuple[str, ...]
    skipped: tuple[logs.Skipped, ...]
    num_bytes: int
    num_lines: int
    num_matched_lines: int
    num_overlong_lines: int
    signature_files: tuple[str, ...]
    num_signatures: int
    elapsed_s: float = 0.0
    jobs: int = 1
    """Processes that matched the input."""
    engine: str = "re"
    """The keyword prefilter's engine (``hyperscan`` or ``re``)."""
    warnings: tuple[str, ...] = field(default=())

    @property
    def category(self) -> str:
        return self.verdict.category

    @property
    def confidence(self) -> str:
        return self.verdict.confidence

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.verdict.hosts

    @property
    def gpus(self) -> tuple[core.GpuRef, ...]:
        return self.verdict.gpus

    @property
    def action(self) -> str:
        return self.verdict.action

    @property
    def root_cause(self) -> core.Event | None:
        return self.verdict.root_cause

    @property
    def symptoms(self) -> tuple[core.Event, ...]:
        return self.verdict.symptoms

    @property
    def evidence(self) -> tuple[core.Event, ...]:
        return tuple(core.iter_events(self.verdict))

    @property
    def what_would_settle_it(self) -> tuple[str, ...]:
        return self.verdict.what_would_settle_it

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict.category]

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document (schema in docs/classify.md; keys: add, never rename)."""
        v = self.verdict
        root = v.root_cause

        def role_of(e: core.Event) -> str:
            if e is root:
                return "root_cause"
            return e.signature.role

        return {
            "category": v.category,
            "confidence": v.confidence,
            "action": v.action,
            "hosts": list(v.hosts),
            "gpus": [_gpu_json(g) for g in v.gpus],
            "root_cause": evidence_json(root, "root_cause") if root is not None else None,
            "evidence": [evidence_json(e, role_of(e)) for e in core.iter_events(v)],
            "symptoms": [evidence_json(e) for e in v.symptoms],
            "other_causes": [evidence_json(e) for e in v.other_causes],
            "suspect_hosts": list(v.suspect_hosts),
            "reasons": list(v.reasons),
            "what_would_settle_it": list(v.what_would_settle_it),
            "signatures": [
                {
                    "id": t.signature.id,
                    "category": t.signature.category,
                    "role": t.signature.role,
                    "count": t.count,
                    "hosts": list(t.hosts),
                    "num_hosts": t.num_hosts,
                    "num_ranks": t.num_ranks,
                }
                for t in self.tallies
            ],
            "inputs": {
                "sources": list(self.sources),
                "skipped": [{"source": s.source, "reason": s.reason} for s in self.skipped],
                "bytes": self.num_bytes,
                "lines": self.num_lines,
                "matched_lines": self.num_matched_lines,
                "overlong_lines": self.num_overlong_lines,
                "jobs": self.jobs,
                "engine": self.engine,
            },
            "catalog": {
                "signatures": self.num_signatures,
                "files": [*("builtin:" + n for n in BUILTIN_CATALOGS), *self.signature_files],
            },
            "warnings": list(self.warnings),
            "elapsed_s": round(self.elapsed_s, 3),
            "exit_code": self.exit_code,
            "suspects": [suspect_json(s) for s in v.suspects],
        }


# --------------------------------------------------------------------------------------
# The use case
# --------------------------------------------------------------------------------------


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


def make_matcher(signatures: Sequence[core.Signature], engine: str) -> core.Matcher:
    """A matcher whose keyword prefilter runs on ``engine`` (resolved by ``pick_engine``)."""
    if engine == "re":
        return core.Matcher(signatures)
    from ckptctl.adapters.hsscan import HyperscanBlockScanner

    return core.Matcher(signatures, HyperscanBlockScanner)


_worker_matcher: core.Matcher | None = None


def _init_worker(signatures: tuple[core.Signature, ...], engine: str) -> None:
    global _worker_matcher
    _worker_matcher = make_matcher(signatures, engine)


def _scan_in_worker(block: bytes) -> core.BlockScan:
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

    def __init__(self, matcher: core.Matcher, jobs: int) -> None:
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

    def scan(self, blocks: Iterator[logs.Block]) -> Iterator[tuple[core.BlockScan, int | None]]:
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


def classify_logs(
    sources: Sequence[str],
    *,
    extra_signature_files: Sequence[str] = (),
    progress: ProgressFn | None = None,
    stdin: IO[bytes] | None = None,
    jobs: int | None = None,
    block_bytes: int = logs.DEFAULT_BLOCK_BYTES,
    max_line_bytes: int = logs.DEFAULT_MAX_LINE_BYTES,
    engine: str | None = None,
) -> ClassifyResult:
    """Classify the failure the logs in ``sources`` describe.

    ``sources``: files, directories, globs, fsspec URLs, ``-`` for ``stdin``.
    ``extra_signature_files``: YAML catalogs whose signatures take precedence.
    ``progress`` is called with the number of bytes read as reading goes.
    ``jobs``: worker processes that match blocks (1: all in this process; None:
    ``auto_jobs``). The result does not depend on it.
    ``engine``: the keyword prefilter, ``auto`` (default), ``hyperscan`` or ``re``
    (see ``pick_engine``). The result does not depend on it either.
    Raises ``UsageError`` (no sources, bad ``jobs``), ``ConfigError`` (bad signature
    file), ``InputError`` (nothing readable).
    """
    import time

    if not sources:
        raise UsageError("no logs given", hint="ckptctl classify LOG [LOG...] (or - for stdin)")
    if list(sources).count(logs.STDIN) > 1:
        raise UsageError("'-' (stdin) given more than once")
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {jobs}")
    started = time.perf_counter()
    engine = pick_engine(engine)
    signatures = load_catalog(extra_signature_files)
    matcher = make_matcher(signatures, engine)
    expanded, skipped = logs.expand_sources(list(sources))
    if jobs is None:
        sizes = [s.size_bytes for s in expanded]
        jobs = auto_jobs(None if any(n is None for n in sizes) else sum(n or 0 for n in sizes))
    collector = core.EvidenceCollector(max_samples=max(20, MAX_EVIDENCE_PER_SIGNATURE))
    num_bytes = 0
    num_matched = 0
    overlong = 0
    read_names: list[str] = []
    warnings: list[str] = []

    def count_bytes(n: int) -> None:
        nonlocal num_bytes
        num_bytes += n
        if progress is not None:
            progress(n)

    def count_overlong() -> None:
        nonlocal overlong
        overlong += 1

    with _BlockMatcher(matcher, jobs) as block_matcher:
        for index, source in enumerate(expanded):
            scanner = core.FileScanner(
                matcher, file=source.name, file_index=index, file_host=logs.host_from_name(source.name)
            )
            blocks = logs.iter_blocks(
                source,
                block_bytes=block_bytes,
                max_line_bytes=max_line_bytes,
                stdin=stdin,
                on_bytes=count_bytes,
                on_overlong_line=count_overlong,
            )
            try:
                for scan, fixed_line in block_matcher.scan(blocks):
                    for event in scanner.feed_scan(scan, fixed_line=fixed_line):
                        collector.add(event)
            except CkptctlError as e:
                skipped.append(logs.Skipped(source=source.name, reason=e.message))
                if scanner.num_lines == 0:
                    continue
                warnings.append(f"{source.name}: read only its first {scanner.num_lines} lines")
            num_matched += scanner.num_matched_lines
            collector.add_file(scanner)
            read_names.append(source.name)

    if not read_names:
        reasons = "; ".join(f"{s.reason}" for s in skipped) or "no input"
        raise InputError(
            f"no readable log among the inputs: {reasons}",
            hint="pass log files, directories, globs, fsspec URLs or - for stdin",
        )
    if overlong:
        warnings.append(
            f"{overlong} line(s) longer than {max_line_bytes >> 10} KiB were matched in pieces"
        )
    evidence = collector.evidence()
    verdict = core.decide_verdict(evidence, max_samples=MAX_EVIDENCE_PER_SIGNATURE)
    return ClassifyResult(
        verdict=verdict,
        tallies=evidence.tallies,
        sources=tuple(read_names),
        skipped=tuple(skipped),
        num_bytes=num_bytes,
        num_lines=evidence.num_lines,
        num_matched_lines=num_matched,
        num_overlong_lines=overlong,
        signature_files=tuple(extra_signature_files),
        num_signatures=len(signatures),
        elapsed_s=time.perf_counter() - started,
        jobs=jobs,
        engine=engine,
        warnings=tuple(warnings),
    )
