"""What recover keeps about a hung job, and whom it points at (pure).

When ``core.recover.progress`` calls a relaunched job hung, recover gathers the evidence
that is cheap and already there before it stops the job (``ops.recover_hang``):

* the last step each rank logged (ranks that log; many trainers log on rank 0 only);
* the job's last output lines;
* torch's NCCL flight-recorder dumps, when the job enabled the recorder
  (``TORCH_FR_BUFFER_SIZE`` / ``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0; the files are
  ``TORCH_FR_DUMP_TEMP_FILE`` / ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + rank, default
  ``/tmp/nccl_trace_rank_<rank>``): listed, never unpickled (``torchfrtrace`` reads them);
* a Python stack dump of every rank whose process armed one: the training library's
  ``ckptctl.training.stackdump.install()`` registers ``faulthandler`` on ``SIGUSR2`` when
  ``CKPTCTL_STACK_DUMP_DIR`` is set (recover sets it for each attempt) and leaves an
  *armed* record ``armed-rank<R>-pid<P>.json`` there (``ArmedDump``); recover signals
  exactly those processes (never one that did not arm: SIGUSR2 would kill it) and reads
  ``stack-rank<R>-pid<P>.txt``.

``suspects`` names a culprit when the evidence does: ranks whose last logged step is
behind the others' (a rank stuck before its collective), and ranks that armed a stack
dump but whose process is gone (it died and left the others waiting).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Set by recover in the job's environment: where armed records and stack dumps go.
STACK_DUMP_DIR_ENV = "CKPTCTL_STACK_DUMP_DIR"
#: The signal the training library's hook answers with a stack dump.
STACK_DUMP_SIGNAL = "SIGUSR2"
_ARMED = re.compile(r"^armed-rank(\d+|x)-pid(\d+)\.json$")

#: Flight recorder: buffer-size variables (newest first) and dump-file prefixes.
FR_BUFFER_ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FR_FILE_ENV = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
FR_DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"


def armed_name(rank: int | None, pid: int) -> str:
    return f"armed-rank{'x' if rank is None else rank}-pid{pid}.json"


def stack_name(rank: int | None, pid: int) -> str:
    return f"stack-rank{'x' if rank is None else rank}-pid{pid}.txt"


@dataclass(frozen=True, kw_only=True, slots=True)
class ArmedDump:
    """A process that installed the stack-dump hook (its armed record)."""

    rank: int | None
    pid: int
    host: str
    signal: str
    stack_file: str
    """The dump file's name, in the same directory."""

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "pid": self.pid, "host": self.host, "signal": self.signal, "stack_file": self.stack_file}

    @classmethod
    def parse(cls, name: str, data: bytes) -> ArmedDump | None:
        """The record in file ``name`` holding ``data``; None when it is not one."""
        m = _ARMED.match(name)
        if m is None:
            return None
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("pid") != int(m.group(2)):
            return None
        rank = None if m.group(1) == "x" else int(m.group(1))
        return cls(
            rank=rank,
            pid=int(m.group(2)),
            host=str(doc.get("host") or ""),
            signal=str(doc.get("signal") or STACK_DUMP_SIGNAL),
            stack_file=stack_name(rank, int(m.group(2))),
        )


def flight_recorder(env: Mapping[str, str]) -> tuple[bool, str]:
    """Whether the job enabled torch's flight recorder, and its dump files' prefix."""
    enabled = False
    for key in FR_BUFFER_ENV:
        try:
            enabled = enabled or int(env.get(key, "0") or "0") > 0
        except ValueError:
            continue
    prefix = next((env[k] for k in FR_FILE_ENV if env.get(k)), FR_DEFAULT_PREFIX)
    return enabled, prefix


@dataclass(frozen=True, kw_only=True, slots=True)
class Suspects:
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    why: str | None

    def to_json(self) -> dict[str, Any]:
        return {"ranks": list(self.ranks), "hosts": list(self.hosts), "why": self.why}


def suspects(
    last_step_by_rank: Mapping[int | None, int | None],
    *,
    dead_armed: tuple[ArmedDump, ...] = (),
    host_of_rank: Mapping[int, str] | None = None,
) -> Suspects:
    """Whom the evidence names (module docstring); no one when it does not."""
    steps = {r: s for r, s in last_step_by_rank.items() if r is not None and s is not None}
    ranks: list[int] = []
    why: list[str] = []
    if len(steps) >= 2 and len(set(steps.values())) > 1:
        low = min(steps.values())
        behind = sorted(r for r, s in steps.items() if s == low)
        ahead = max(steps.values())
        ranks += behind
        why.append(
            f"rank{'s' if len(behind) > 1 else ''} {', '.join(map(str, behind))} stopped at step {low} "
            f"while others reached {ahead}"
        )
    gone = sorted({a.rank for a in dead_armed if a.rank is not None})
    if gone:
        ranks += [r for r in gone if r not in ranks]
        why.append(f"the process of rank{'s' if len(gone) > 1 else ''} {', '.join(map(str, gone))} is gone")
    hosts = tuple(dict.fromkeys(h for r in ranks if (h := (host_of_rank or {}).get(r))))
    return Suspects(ranks=tuple(ranks), hosts=hosts, why="; ".join(why) or None)
