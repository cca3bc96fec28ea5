"""The verdict: infra / job / preemption / unknown from the collected evidence (pure).

Only causes decide; symptoms (timeouts, killed ranks, closed connections) never
do. The strongest cause wins (confidence, then severity; on a tie infra, then
job, then preemption). Every verdict names its suspects: the hosts, GPUs, ranks
and peers the evidence points at, each with its role and the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import cast

from ckptctl.core.classify.catalog import (
    _CATEGORY_PRECEDENCE,
    _CONFIDENCE_RANK,
    _SEVERITY_RANK,
    Category,
    Confidence,
    Signature,
    VerdictCategory,
)
from ckptctl.core.classify.events import Event
from ckptctl.core.classify.evidence import Evidence, SignatureTally
from ckptctl.core.classify.reasoning import reason_across_lines
from ckptctl.core.classify.suspects import LINK_ACTION, Suspect, name_suspects


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuRef:
    """A GPU named by the evidence: its host and PCI bus id and/or CUDA index."""

    host: str | None
    pci_bus_id: str | None
    index: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """RB-7 step 1's answer: what failed, how sure, what to do, and why."""

    category: VerdictCategory
    confidence: Confidence
    action: str
    """The runbook action: drain hosts and resume / fix the job / just resume / collect logs."""
    root_cause: Event | None
    """The event judged to have started it (None for ``unknown``)."""
    causes: tuple[Event, ...]
    """Cause events of the verdict's category (samples), root cause first."""
    other_causes: tuple[Event, ...]
    """Cause events of other categories: outweighed, but worth a look."""
    symptoms: tuple[Event, ...]
    """Consequences (samples): timeouts, killed ranks, aborted communicators."""
    hosts: tuple[str, ...]
    """Hosts to drain before resuming (infra verdicts only)."""
    suspect_hosts: tuple[str, ...]
    """Hosts the evidence points at without proof (e.g. torchrun's first failed rank)."""
    gpus: tuple[GpuRef, ...]
    reasons: tuple[str, ...]
    """How the decision was reached, one sentence each."""
    what_would_settle_it: tuple[str, ...]
    """Logs that would make an ``unknown`` or weak verdict certain."""
    suspects: tuple[Suspect, ...] = ()
    """Whom the evidence points at, most important first (see ``Suspect.role``)."""


_LOWER_CONFIDENCE: dict[str, Confidence] = {"high": "medium", "medium": "low", "low": "low"}
_HIGHER_CONFIDENCE: dict[str, Confidence] = {"low": "medium", "medium": "high", "high": "high"}


class _SafeFormat(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "?"


def _fill(template: str, event: Event) -> str:
    """Fill ``{host}``, ``{rank}``, ``{gpu}``, ... in a signature's action or settle text."""
    if not template:
        return ""
    values = _SafeFormat(
        host=event.host or f"the host that wrote {event.file}",
        file=event.file,
        line=str(event.line),
        rank="the failed rank" if event.rank is None else f"rank {event.rank}",
        gpu=event.gpu or ("the GPU" if event.gpu_index is None else f"GPU {event.gpu_index}"),
        signal=event.signal or "a signal",
        xid="?" if event.xid is None else str(event.xid),
    )
    try:
        return template.format_map(values)
    except (ValueError, IndexError, AttributeError):
        return template


def _most_informative(events: Iterable[Event]) -> Event:
    """The sample that says the most: torchrun's first failure, then one naming its host and rank."""
    return min(
        events,
        key=lambda e: (not e.first_failure, e.host is None, e.rank is None, e.order),
    )


def _where(event: Event) -> str:
    parts = []
    if event.host:
        parts.append(event.host)
    if event.rank is not None:
        parts.append(f"rank {event.rank}")
    if event.gpu:
        parts.append(f"GPU {event.gpu}")
    elif event.gpu_index is not None:
        parts.append(f"GPU {event.gpu_index}")
    return " ".join(parts) if parts else f"{event.file}:{event.line}"


def _label(sig: Signature) -> str:
    return sig.description or sig.id


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def decide_verdict(evidence: Evidence, *, max_samples: int = 5) -> Verdict:
    """Decide infra / job / preemption / unknown from collected evidence.

    1. Only causes decide. No cause: ``unknown``, naming the logs that would settle it.
    2. The strongest cause (confidence, then severity) wins; equal strength: infra,
       then job, then preemption.
    3. Confidence is the winner's; one level up when two different signatures of
       the winning category agree, one level down when another category has a
       cause at least as confident.
    4. Hosts to drain: the hosts named by the winning infra causes that ask for a
       drain and are as confident as the best of them.
    """
    evidence, across = reason_across_lines(evidence)
    tallies = evidence.tallies
    cause_tallies = [t for t in tallies if t.signature.role == "cause"]
    symptom_tallies = [t for t in tallies if t.signature.role == "symptom"]
    symptoms = tuple(e for t in symptom_tallies for e in t.samples[:max_samples])
    symptom_reasons = across + tuple(
        f"{_plural(t.count, 'line')} of {_label(t.signature)}"
        + (f" from {_plural(t.num_ranks, 'rank')}" if t.num_ranks > 1 else "")
        + (f" on {_plural(t.num_hosts, 'known host')}" if t.num_hosts else "")
        + " (a consequence, not a cause)"
        for t in symptom_tallies
    )
    first_failures = [
        e for t in tallies for e in t.samples if e.first_failure and (e.host or e.rank is not None)
    ]
    suspects_from_symptoms = _unique(e.host for e in first_failures)

    if not cause_tallies:
        return _unknown_verdict(
            evidence, symptom_tallies, symptoms, symptom_reasons, suspects_from_symptoms, first_failures
        )

    def best(ts: Sequence[SignatureTally]) -> tuple[int, int]:
        return max(_strength(t.signature) for t in ts)

    by_category: dict[str, list[SignatureTally]] = {}
    for t in cause_tallies:
        by_category.setdefault(t.signature.category, []).append(t)
    ranked = sorted(
        by_category,
        key=lambda c: (best(by_category[c]), _CATEGORY_PRECEDENCE[c]),
        reverse=True,
    )
    winner = cast(Category, ranked[0])
    win_tallies = by_category[winner]
    win_strength = best(win_tallies)

    reasons: list[str] = []
    confidence: Confidence = cast(Confidence, _confidence_name(win_strength[0]))
    strongest = [t for t in win_tallies if _strength(t.signature) == win_strength]
    # Corroboration: two different signatures of the winning category, at least
    # medium confidence, naming the same host (or, in host-less logs, no host).
    agreeing: dict[str | None, set[str]] = {}
    for t in win_tallies:
        if _strength(t.signature)[0] >= 2:
            for h in t.hosts or (None,):
                agreeing.setdefault(h, set()).add(t.signature.id)
    corroborated = max(agreeing.items(), key=lambda kv: len(kv[1]), default=(None, set()))
    if len(corroborated[1]) >= 2 and confidence != "high":
        confidence = _HIGHER_CONFIDENCE[confidence]
        reasons.append(
            f"{len(corroborated[1])} different {winner} signatures agree"
            + (f" on {corroborated[0]}" if corroborated[0] else "")
            + f" ({', '.join(sorted(corroborated[1]))})"
        )
    rivals = [c for c in ranked[1:] if best(by_category[c])[0] >= win_strength[0]]
    if winner == "job" and not rivals:
        # An application fault on a GPU that also shows a hardware cause (XID 13, then XID 109
        # on the same GPU) is not certain: NVIDIA's catalog says such XIDs can be the hardware.
        job_gpus = {(e.host, e.gpu) for t in win_tallies for e in t.samples if e.gpu}
        infra_gpus = {
            (e.host, e.gpu) for t in by_category.get("infra", ()) for e in t.samples if e.gpu
        }
        shared = sorted(g for h, g in job_gpus & infra_gpus if g)
        if shared:
            confidence = _LOWER_CONFIDENCE[confidence]
            reasons.append(f"an infra cause names the same GPU ({', '.join(shared)}): not certain it is the job's")
    if rivals:
        confidence = _LOWER_CONFIDENCE[confidence]
        reasons.append(
            "also found a "
            + " and a ".join(rivals)
            + " cause as confident as the winner; compare their timestamps"
        )

    # Among equals: torchrun's first observed failure, then a line that names its
    # host (the one to act on), then the earliest.
    root_tally = min(
        strongest,
        key=lambda t: (not any(e.first_failure for e in t.samples), not t.hosts, t.samples[0].order),
    )
    root = min(root_tally.samples, key=lambda e: (not e.first_failure, e.host is None, e.order))
    root = _earlier_xid(root, [e for t in win_tallies for e in t.samples])
    causes = (root, *[
        e
        for t in sorted(win_tallies, key=lambda t: (_strength(t.signature), -t.samples[0].order), reverse=True)
        for e in t.samples[:max_samples]
        if e is not root
    ])
    other_causes = tuple(
        e for c in ranked[1:] for t in by_category[c] for e in t.samples[:max_samples]
    )

    hosts: tuple[str, ...] = ()
    gpus: tuple[GpuRef, ...] = ()
    settle: list[str] = []
    if winner == "infra":
        drain_tallies = [
            t for t in win_tallies if t.signature.drain and _strength(t.signature)[0] == win_strength[0]
        ]
        hosts = _unique(h for t in drain_tallies for h in t.hosts)
        gpus = _unique_gpus(e for t in drain_tallies for e in t.samples)
        if drain_tallies and not hosts and root.host is None and len(evidence.named_hosts) == 1:
            # The cause's lines carry no host (plain dmesg, a bare nvidia-smi paste), but the
            # input names one host only, in any line shape: the cause happened there.
            (only,) = evidence.named_hosts
            hosts = (only,)
            root = replace(root, host=only, host_source="the only host the input names")
            causes = (root, *causes[1:])
            reasons.append(
                f"{root.file} names no host; {only} is the only host anywhere in the input, "
                "so the cause is taken to be there"
            )
        if drain_tallies and not hosts:
            if root.signature.settle:
                settle.append(_fill(root.signature.settle, root))
            else:
                files = _unique(e.file for t in drain_tallies for e in t.samples)
                settle.append(
                    "the hostname of the machine that wrote "
                    + ", ".join(files)
                    + ": its lines carry none (pass journalctl output, which prefixes it, "
                    "or name the file after the host, e.g. dmesg-<host>.log)"
                )
    # Hosts named by infra causes that are not drained (weaker or fabric-wide evidence).
    suspect_hosts = (
        tuple(h for h in _unique(h for t in win_tallies for h in t.hosts) if h not in hosts)
        if winner == "infra"
        else ()
    )
    is_link = winner == "infra" and root.peer is not None
    if is_link:
        # A failed link: both ends are suspects until counters on both say which is bad.
        ends = (root.host, root.peer_host or root.peer)
        suspect_hosts = _unique([*suspect_hosts, *(h for h in ends if h not in hosts)])
    if winner == "infra" and not gpus and (root.gpu or root.gpu_index is not None):
        gpus = _unique_gpus([root])

    root_sig = root.signature
    reasons.insert(
        0,
        f"root cause: {_label(root_sig)} at {_where(root)} ({root.file}:{root.line}); "
        f"signature {root_sig.id} is {'an' if winner == 'infra' else 'a'} {winner} cause "
        f"with {root_sig.confidence} confidence",
    )
    reasons.extend(symptom_reasons)
    for c in ranked[1:]:
        for t in by_category[c]:
            reasons.append(
                f"outweighed: {_plural(t.count, 'line')} of {_label(t.signature)} ({c}, "
                f"{t.signature.confidence} confidence)"
            )
    if confidence != "high" and root_sig.settle:
        settle.append(_fill(root_sig.settle, root))
    if rivals:
        contenders = [root, *(by_category[c][0].samples[0] for c in rivals)]
        settle.append(
            "the timestamps of "
            + " and ".join(f"{e.file}:{e.line}" for e in contenders)
            + ": the earlier event is the root cause"
        )

    action = _action(winner, root, hosts, gpus, confidence)
    if is_link:
        action += " " + LINK_ACTION.format(
            a=root.host or f"the host that wrote {root.file}", b=root.peer_host or root.peer
        )
    suspects = name_suspects(
        root=root,
        is_link=is_link,
        causes=causes[1:],
        first_failures=first_failures,
        symptoms=symptoms,
    )
    return Verdict(
        category=winner,
        confidence=confidence,
        action=action,
        root_cause=root,
        causes=tuple(causes),
        other_causes=other_causes,
        symptoms=symptoms,
        hosts=hosts,
        suspect_hosts=suspect_hosts,
        gpus=gpus,
        reasons=tuple(reasons),
        what_would_settle_it=_unique(s for s in settle if s),
        suspects=suspects,
    )


def _earlier_xid(root: Event, events: Sequence[Event]) -> Event:
    """The XID a root-cause line names as its own cause (``... due to Xid 48``), when
    that XID is in the evidence on the same GPU (or host): it came first."""
    seen: set[int] = set()
    while root.cause_xid is not None and root.cause_xid not in seen:
        seen.add(root.cause_xid)
        named = [
            e for e in events
            if (e.xid if e.xid is not None else e.signature.xid) == root.cause_xid
            and e is not root and e.host == root.host
            and (root.gpu is None or e.gpu == root.gpu)
        ]  # fmt: skip
        if not named:
            break
        root = min(named, key=lambda e: e.order)
    return root


def _strength(sig: Signature) -> tuple[int, int]:
    return (_CONFIDENCE_RANK[sig.confidence], _SEVERITY_RANK[sig.severity])


def _confidence_name(rank: int) -> str:
    return {3: "high", 2: "medium", 1: "low"}[rank]


def _unique(items: Iterable[str | None]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        if item:
            seen.setdefault(item, None)
    return tuple(seen)


def _unique_gpus(events: Iterable[Event]) -> tuple[GpuRef, ...]:
    """GPUs named by ``events``; a bare CUDA index is dropped when the same host's
    GPU is also named by PCI bus id (the kernel's name is the one to act on)."""
    events = list(events)
    hosts_with_pci = {e.host for e in events if e.gpu is not None}
    seen: dict[tuple[str | None, str | None, int | None], GpuRef] = {}
    for e in events:
        if e.gpu is None and (e.gpu_index is None or e.host in hosts_with_pci):
            continue
        key = (e.host, e.gpu, None if e.gpu else e.gpu_index)
        seen.setdefault(key, GpuRef(host=e.host, pci_bus_id=e.gpu, index=key[2]))
    return tuple(seen.values())


def _action(
    category: Category, root: Event, hosts: Sequence[str], gpus: Sequence[GpuRef], confidence: str
) -> str:
    specific = _fill(root.signature.action, root)
    if category == "infra":
        if hosts:
            gpu_text = ", ".join(
                f"{g.host + ' ' if g.host and len(hosts) > 1 else ''}"
                + (g.pci_bus_id if g.pci_bus_id else f"cuda:{g.index}")
                for g in gpus
            )
            label = "GPU" if len(gpus) == 1 else "GPUs"
            head = f"Drain {', '.join(hosts)}" + (f" ({label} {gpu_text})" if gpu_text else "")
            head += " and resume from the last complete checkpoint on healthy nodes."
        elif root.signature.drain:
            head = (
                "Drain the failed host (the evidence does not name it: see what would settle it) "
                "and resume from the last complete checkpoint on healthy nodes."
            )
        else:
            head = "Fix the infrastructure problem below, then resume from the last complete checkpoint."
    elif category == "job":
        head = (
            "Do not resume as is: the job itself failed, and resuming onto the same bug "
            "re-crashes. Fix it first."
        )
    else:
        head = "Just resume from the last complete checkpoint: the job was stopped from outside."
    if confidence == "low":
        head = "Likely, not certain: " + head[0].lower() + head[1:]
    return f"{head} {specific}".strip()


_GENERIC_SETTLE = (
    "the kernel log of every host (journalctl -k -o short-iso, or dmesg -T) for NVIDIA XID, "
    "ECC, PCIe and OOM-killer lines",
    "the stderr of every rank (the earliest error is usually the cause)",
    "the scheduler's record of the job (sacct -j JOB -o JobID,State,ExitCode,NodeList, "
    "or kubectl get events / kubectl describe pod) for preemption, time limit or node failure",
)


def _unknown_verdict(
    evidence: Evidence,
    symptom_tallies: Sequence[SignatureTally],
    symptoms: tuple[Event, ...],
    symptom_reasons: tuple[str, ...],
    suspects: tuple[str, ...],
    first_failures: Sequence[Event] = (),
) -> Verdict:
    settle: list[str] = []
    for t in sorted(symptom_tallies, key=lambda t: not any(e.first_failure for e in t.samples)):
        if t.signature.settle:
            settle.append(_fill(t.signature.settle, _most_informative(t.samples)))
    settle.extend(_GENERIC_SETTLE)
    if symptom_tallies:
        reasons = (
            "only consequences were found (no root-cause signature): classifying them "
            "would be a guess",
            *symptom_reasons,
        )
        action = (
            "Do not act on this yet: the logs show that the job died but not why. "
            "Collect the logs below and classify again."
        )
    else:
        reasons = (
            f"no known failure signature in {_plural(evidence.num_lines, 'line')} of "
            f"{_plural(evidence.num_files, 'file')}",
        )
        action = (
            "Nothing recognisable: collect the logs below and classify again "
            "(or add a signature with --signatures)."
        )
    symptom_hosts = _unique(h for t in symptom_tallies for h in t.hosts if len(t.hosts) <= 2)
    category: VerdictCategory = "unknown"
    lone = [t.signature for t in symptom_tallies if t.signature.lone_verdict]
    if lone:
        # a symptom that names its own class (NCCL's remote/system error: Signature.lone_verdict)
        # is the only word on the failure: its category at low confidence, the peers its lines
        # name as suspects
        category = lone[0].category
        reasons = (*reasons, f"{lone[0].id} is all the input says: {category}, low")
        action = (
            f"Likely, not certain: {lone[0].description}. Read the suspects' logs below before "
            "draining anything, then resume from the last complete checkpoint."
        )
    return Verdict(
        category=category,
        confidence="low",
        action=action,
        root_cause=None,
        causes=(),
        other_causes=(),
        symptoms=symptoms,
        hosts=(),
        suspect_hosts=_unique([*suspects, *symptom_hosts]),
        gpus=(),
        reasons=reasons,
        what_would_settle_it=_unique(settle),
        suspects=name_suspects(
            root=None,
            is_link=False,
            causes=(),
            first_failures=first_failures,
            symptoms=[e for t in symptom_tallies for e in t.samples],
            symptom_hosts=symptom_hosts,
        ),
    )


def iter_events(verdict: Verdict) -> Iterator[Event]:
    """Root cause, other causes of its category, outweighed causes, then symptoms."""
    seen: set[int] = set()
    for e in (*verdict.causes, *verdict.other_causes, *verdict.symptoms):
        if id(e) not in seen:
            seen.add(id(e))
            yield e
