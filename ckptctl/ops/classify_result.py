"""classify's result: ``ClassifyResult`` (the verdict, its evidence, what was read) and its JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptctl import exit_codes
from ckptctl.adapters import logs
from ckptctl.core.classify.events import Event
from ckptctl.core.classify.evidence import SignatureTally
from ckptctl.core.classify.suspects import Suspect
from ckptctl.core.classify.verdict import GpuRef, Verdict, iter_events
from ckptctl.ops.classify_catalog import BUILTIN_CATALOGS

__all__ = [
    "EXIT_CODES",
    "ClassifyResult",
    "evidence_json",
    "suspect_json",
]

#: Exit code per verdict (documented in the README and docs/classify.md).
EXIT_CODES: dict[str, int] = {
    "infra": exit_codes.CLASSIFY_INFRA,
    "job": exit_codes.CLASSIFY_JOB,
    "preemption": exit_codes.CLASSIFY_PREEMPTION,
    "unknown": exit_codes.CLASSIFY_UNKNOWN,
}


def _gpu_json(g: GpuRef) -> dict[str, Any]:
    return {"host": g.host, "pci_bus_id": g.pci_bus_id, "index": g.index}


def evidence_json(e: Event, role: str | None = None) -> dict[str, Any]:
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
        "code": e.code,
        "program": e.program,
        "collective": None
        if e.seq is None and e.op is None
        else {"pg": e.pg, "seq": e.seq, "op": e.op, "numel": e.numel},
        "signature_source": e.signature.source,
    }


def suspect_json(s: Suspect) -> dict[str, Any]:
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

    verdict: Verdict
    tallies: tuple[SignatureTally, ...]
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
    def gpus(self) -> tuple[GpuRef, ...]:
        return self.verdict.gpus

    @property
    def action(self) -> str:
        return self.verdict.action

    @property
    def root_cause(self) -> Event | None:
        return self.verdict.root_cause

    @property
    def symptoms(self) -> tuple[Event, ...]:
        return self.verdict.symptoms

    @property
    def evidence(self) -> tuple[Event, ...]:
        return tuple(iter_events(self.verdict))

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

        def role_of(e: Event) -> str:
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
            "evidence": [evidence_json(e, role_of(e)) for e in iter_events(v)],
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
