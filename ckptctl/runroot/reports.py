"""Result values of the verification engine: one checkpoint's report, a run root's listing,
``locate``'s answer, ``verify``'s answer. Plain data with ``to_json()`` (the JSON keys are a
contract: add, never rename). No I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ckptctl.core.verify import contract as v

ProgressFn = Callable[[int], None]


def noop(_: int) -> None:
    return None


@dataclass(kw_only=True, slots=True)
class CheckpointReport:
    """Everything ckptctl found out about one checkpoint directory."""

    path: str
    name: str
    step: int | None
    framework: str | None
    kind: str
    """dcp | dcp-rank-local | dcp-nested | deepspeed | hf | torch-save | empty | unknown"""
    status: v.Status
    problems: list[str] = field(default_factory=list)
    problem_details: list[v.Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    world_size: int | None = None
    world_size_source: str = "unknown"
    num_files: int = 0
    size_bytes: int = 0
    mtime_s: float | None = None
    has_manifest: bool = False
    committed: bool | None = None
    is_temp: bool = False
    is_quarantined: bool = False
    deep: bool = False
    bytes_read: int = 0
    records_checked: int = 0
    members_crc_checked: int = 0
    tokens_seen: int | None = None
    contents: list[str] | None = None
    """Top-level state found (model, optimizer, lr_scheduler, ... as the writer names it); None: unknown."""
    model_only: bool | None = None
    """No optimizer state: a weights export, not a point to resume training from."""

    @property
    def is_complete(self) -> bool:
        return self.status == v.COMPLETE

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "step": self.step,
            "framework": self.framework,
            "kind": self.kind,
            "status": self.status,
            "problems": self.problems,
            "problem_details": [p.to_json() for p in self.problem_details],
            "notes": self.notes,
            "world_size": self.world_size,
            "world_size_source": self.world_size_source,
            "num_files": self.num_files,
            "size_bytes": self.size_bytes,
            "mtime": iso_time(self.mtime_s),
            "manifest": self.has_manifest,
            "committed": self.committed,
            "temporary": self.is_temp,
            "quarantined": self.is_quarantined,
            "deep": self.deep,
            "bytes_read": self.bytes_read,
            "records_checked": self.records_checked,
            "crc_members_checked": self.members_crc_checked,
            "tokens_seen": self.tokens_seen,
            "contents": self.contents,
            "model_only": self.model_only,
        }


def iso_time(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class PointerHint:
    """A framework's 'latest' file: what it names, and whether verification agrees."""

    file: str
    names: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "names": self.names}


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """How hard to look."""

    deep: bool = False
    world_size: int | None = None
    check_finite: bool = False
    allowed_globals: frozenset[str] = frozenset()
    require: frozenset[str] = frozenset()
    """Parts the checkpoint must hold (``--require optimizer,lr_scheduler``); missing ones are problems."""
    include_model_only: bool = False
    """``locate``: accept a model-only export as the resume point (skipped by default)."""


#: The quick check (no deep read, no world-size assertion).
DEFAULT_OPTIONS = CheckOptions()


# ---------------------------------------------------------------------------------------
# Use-case results
# ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class ListResult:
    root: str
    checkpoints: list[CheckpointReport]
    pointers: list[PointerHint]

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "checkpoints": [c.to_json() for c in self.checkpoints],
            "pointers": [p.to_json() for p in self.pointers],
        }


@dataclass(slots=True)
class LocateResult:
    root: str
    checkpoint: CheckpointReport | None
    skipped: list[CheckpointReport]
    """Newer candidates that failed verification, newest first."""
    pointers: list[PointerHint]
    before_step: int | None = None
    elapsed_s: float = 0.0
    vanished: list[str] = field(default_factory=list)
    """Candidates the listing named that were gone when probed (retention, a save's rename)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "path": self.checkpoint.path if self.checkpoint else None,
            "step": self.checkpoint.step if self.checkpoint else None,
            "before_step": self.before_step,
            "skipped": [c.to_json() for c in self.skipped],
            "vanished": self.vanished,
            "pointers": [
                {**p.to_json(), "agrees": bool(self.checkpoint and pointer_agrees(p, self.checkpoint))}
                for p in self.pointers
            ],
        }


def pointer_agrees(p: PointerHint, c: CheckpointReport) -> bool:
    if p.names.strip().rstrip("/").split("/")[-1] == c.name:
        return True
    return p.names.strip().isdigit() and c.step is not None and int(p.names.strip()) == c.step


@dataclass(slots=True)
class VerifyResult:
    target: str
    checkpoints: list[CheckpointReport]
    is_run_root: bool

    @property
    def ok(self) -> bool:
        return bool(self.checkpoints) and all(c.is_complete for c in self.checkpoints)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "run_root": self.is_run_root,
            "ok": self.ok,
            "checkpoints": [c.to_json() for c in self.checkpoints],
        }

