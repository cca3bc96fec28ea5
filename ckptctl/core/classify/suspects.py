"""Suspects: whom a verdict's evidence points at, each with a role and a reason (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ckptctl.core.classify.events import Event


@dataclass(frozen=True, kw_only=True, slots=True)
class Suspect:
    """Someone the evidence points at: a host, GPU, rank, peer or pod, and why."""

    host: str | None = None
    gpu: str | None = None
    """PCI bus id, or ``cuda:N`` when the line gives only the CUDA index."""
    rank: int | None = None
    local_rank: int | None = None
    peer: str | None = None
    """The other end of a failed connection (host or IP)."""
    pod: str | None = None
    role: str = "suspect"
    """``culprit`` (the root cause names it), ``endpoint`` (one end of a failed
    link: which end is bad is not decidable from one side), ``first-failure``
    (torchrun's first failed rank), ``peer`` (the end a closed connection names:
    it went away first), ``cause`` (another cause of the verdict's category),
    ``suspect`` (named without proof)."""
    reason: str = ""


def _label(e: Event) -> str:
    return e.signature.description or e.signature.id


#: Appended to the action of a link fault (an IB/RoCE/socket error naming a peer).
LINK_ACTION = (
    "Which end of the link is bad cannot be told from one side: on both {a} and {b} compare "
    "ibstat / ibv_devinfo -v (port state, physical state, rate) and the port error counters "
    "(perfquery -x, or /sys/class/infiniband/*/ports/*/counters: symbol_error, link_downed, "
    "port_rcv_errors), and the switch ports between them; the end whose counters grow, or "
    "that other peers also fail against, is the bad one."
)

#: Most suspects listed in a verdict.
MAX_SUSPECTS = 20


def _gpu_name(e: Event) -> str | None:
    return e.gpu or (None if e.gpu_index is None else f"cuda:{e.gpu_index}")


def name_suspects(
    *,
    root: Event | None,
    is_link: bool,
    causes: Sequence[Event],
    first_failures: Sequence[Event],
    symptoms: Sequence[Event],
    symptom_hosts: Sequence[str] = (),
) -> tuple[Suspect, ...]:
    """Whom the evidence points at, most important first, each once.

    A preemption suspects nobody: its root cause and its other causes are where the job
    was ``stopped``, and torchrun's first failure, the peers and the reporters of
    symptoms (the ranks that lost their peers when the job was stopped) are not listed."""
    out: list[Suspect] = []
    seen: set[tuple[object, ...]] = set()

    def add(s: Suspect) -> None:
        key = (s.host, s.gpu, s.rank, s.local_rank, s.peer, s.pod)
        if any(v is not None for v in key) and key not in seen and len(out) < MAX_SUSPECTS:
            seen.add(key)
            out.append(s)

    def of(e: Event, role: str, reason: str) -> Suspect:
        return Suspect(
            host=e.host, gpu=_gpu_name(e), rank=e.rank, local_rank=e.local_rank, pod=e.pod,
            role=role, reason=reason,
        )  # fmt: skip

    if root is not None:
        label = _label(root)
        if is_link:
            add(of(root, "endpoint", f"reporting end of the failed link: {label}"))
            add(Suspect(host=root.peer_host, peer=root.peer, role="endpoint",
                        reason=f"remote end of the failed link: {label}"))  # fmt: skip
        elif root.category == "preemption":
            add(of(root, "stopped", f"stopped from outside: {label}"))
        else:
            add(of(root, "culprit", f"root cause: {label}"))
    if root is not None and root.category == "preemption" and not is_link:
        for e in causes:
            add(of(e, "stopped", f"stopped from outside: {_label(e)}"))
        return tuple(out)
    for e in causes:
        add(of(e, "cause", _label(e)))
    for e in first_failures:
        add(of(e, "first-failure", "torchrun's first observed failure"))
    for e in symptoms:
        if e.peer is not None:
            add(Suspect(host=e.peer_host, peer=e.peer, role="peer",
                        reason=f"named by {_label(e)}: the other end went away first"))  # fmt: skip
    if root is None:
        for e in symptoms:
            if e.host in symptom_hosts:
                add(of(e, "suspect", f"reported {_label(e)}"))
    return tuple(out)
