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

The parts live by responsibility: ``classify_catalog`` (the signature files),
``classify_scan`` (engine, workers, block matching) and ``classify_result``
(``ClassifyResult`` and its JSON); import each name from its module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import IO

from ckptctl.adapters import logs
from ckptctl.core.classify.events import FileScanner
from ckptctl.core.classify.evidence import EvidenceCollector
from ckptctl.core.classify.verdict import decide_verdict
from ckptctl.errors import CkptctlError, InputError, UsageError
from ckptctl.ops.classify_catalog import (
    load_catalog,
)
from ckptctl.ops.classify_result import ClassifyResult
from ckptctl.ops.classify_scan import (
    _BlockMatcher,
    auto_jobs,
    make_matcher,
    pick_engine,
)

__all__ = [
    "MAX_EVIDENCE_PER_SIGNATURE",
    "classify_logs",
]

#: Evidence lines kept per signature in the result (counts are always complete).
MAX_EVIDENCE_PER_SIGNATURE = 5

ProgressFn = Callable[[int], None]


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
    collector = EvidenceCollector(max_samples=max(20, MAX_EVIDENCE_PER_SIGNATURE))
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
            scanner = FileScanner(
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
    verdict = decide_verdict(evidence, max_samples=MAX_EVIDENCE_PER_SIGNATURE)
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
