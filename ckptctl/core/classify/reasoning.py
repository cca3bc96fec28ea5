"""Reasoning across lines: what several lines say together that none says alone (pure).

``reason_across_lines`` rewrites the collected evidence before the verdict:

* a **fallback** cause (the generic Python exception) is a consequence when another
  cause of its category explains the failure (a DataLoader worker killed, then the
  re-raised ``RuntimeError``);
* ranks whose NCCL watchdog lines **disagree on the collective** they wait in (the
  ``SeqNum``/``OpType``/``NumelIn`` of ``WorkNCCL(...)``, or how many collectives they
  enqueued) took different code paths: a **desync**, a job fault naming the odd ranks;
* **several unrelated programs failing on one host** (the kernel names them: a
  segfault of ``python`` and one of ``sshd``) point at the host, and those crashes are
  its consequences;
* a cause whose line names no host takes the host that **the other lines of its file**
  name, or the lines naming **its GPU** (bus id) with a host elsewhere, or the lines of
  **the same second** in other files (any line shape: a syslog prefix, a pod or node
  name, an instance id), when exactly one host is named there;
* a cause whose entry **explains** another (``explains:`` in the catalog) makes that one's
  lines a few lines below it in the same file its consequences (a traceback through
  CPython's semaphore creation explains the ``No space left on device`` under it);
* a **state report alone** (a query tool's reading of a device, nvidia-smi's "GPU is
  lost") with no other line of any failure in the input says the device is bad now,
  not that it ended the job: its confidence drops to low.

Each rule is a function of typed event fields, table-tested in tests/test_classify_reasoning.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from ckptctl.core.classify.catalog import Signature
from ckptctl.core.classify.events import Event
from ckptctl.core.classify.evidence import Evidence, SignatureTally, time_key

#: The derived causes' source: these lines exist only together.
_DERIVED = "derived across lines (ckptctl.core.classify.reasoning)"

DESYNC = Signature(
    id="collective-desync",
    pattern="",
    category="job",
    severity="error",
    confidence="medium",
    description="the ranks disagree on the collective they wait in (a desync: some ranks took another code path)",
    action=(
        "The ranks called collectives in a different order, count or size (a branch taken on some "
        "ranks only, an uneven last batch, a rank that skipped a step); fix the job. "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL, or torch's flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE), "
        "shows the first mismatching call."
    ),
    settle="the stack of the odd ranks at the time of the timeout (py-spy dump, or the flight recorder dump)",
    source=_DERIVED,
)

HOST_MANY_PROGRAMS = Signature(
    id="host-many-programs-failed",
    pattern="",
    category="infra",
    severity="error",
    confidence="medium",
    drain=True,
    description="several unrelated programs failed on the same host (its memory, CPU or GPU, not one program's bug)",
    action=(
        "Drain {host} and test it (memtest / EDAC counters, dcgmi diag -r 3, the BMC event log) "
        "before it returns to service."
    ),
    source=_DERIVED,
)

#: Collectives whose input size is the same on every rank (a size mismatch is a desync);
#: others (gather, scatter, all-to-all with splits) legitimately differ.
SAME_SIZE_OPS = frozenset({
    "ALLREDUCE", "ALLREDUCE_COALESCED", "BROADCAST", "ALLGATHER", "_ALLGATHER_BASE",
    "ALLGATHER_COALESCED", "ALLGATHER_INTO_TENSOR_COALESCED", "REDUCE_SCATTER",
    "_REDUCE_SCATTER_BASE", "REDUCE_SCATTER_TENSOR_COALESCED", "REDUCE", "BARRIER",
})  # fmt: skip

#: Most odd ranks kept as evidence.
MAX_ODD_RANKS = 20

#: How many lines below an explaining line an explained cause may be (one traceback's tail).
EXPLAINS_WITHIN = 20


def reason_across_lines(evidence: Evidence) -> tuple[Evidence, tuple[str, ...]]:
    """The evidence with the cross-line rules applied, and one sentence per rule that fired."""
    notes: list[str] = []
    tallies = _demote_explained(evidence.tallies, notes)
    tallies = _demote_fallbacks(tallies, notes)
    tallies = _lone_state_reports(tallies, notes)
    tallies = _attach_hosts(tallies, evidence, notes)
    tallies.extend(desync_tallies(evidence.collectives, evidence.rank_hosts, notes))
    host_tallies = many_program_tallies(evidence.programs, notes)
    tallies = _demote_explained_crashes(tallies, host_tallies, evidence.programs)
    tallies.extend(host_tallies)
    return replace(evidence, tallies=tuple(tallies)), tuple(notes)


def _as_symptom(t: SignatureTally) -> SignatureTally:
    symptom = replace(t.signature, role="symptom")
    return replace(t, signature=symptom, samples=tuple(replace(e, signature=symptom) for e in t.samples))


def _demote_explained_crashes(
    tallies: Sequence[SignatureTally],
    host_tallies: Sequence[SignatureTally],
    programs: Mapping[str, Mapping[str, Event]],
) -> list[SignatureTally]:
    """The crashes of programs on a host that several programs failed on are consequences
    of the host (a python segfault there is not the job's bug): those causes, when every
    line of them is on such a host, become symptoms."""
    bad_hosts = {h for t in host_tallies for h in t.hosts}
    crash_ids = {e.signature.id for h in bad_hosts for e in programs.get(h, {}).values()}
    if not bad_hosts:
        return list(tallies)
    return [
        _as_symptom(t)
        if t.signature.id in crash_ids and t.signature.role == "cause" and t.num_hosts == len(t.hosts)
        and set(t.hosts) <= bad_hosts and all(e.host in bad_hosts for e in t.samples)
        else t
        for t in tallies
    ]  # fmt: skip


def _demote_explained(tallies: Sequence[SignatureTally], notes: list[str]) -> list[SignatureTally]:
    """Causes whose every line sits a few lines below a line of a cause that explains them
    (its entry's ``explains``, in the same file) are that cause's consequences."""
    anchors: dict[str, list[tuple[str, int]]] = {}
    for t in tallies:
        if t.signature.role == "cause" and t.signature.explains:
            for sig_id in t.signature.explains:
                anchors.setdefault(sig_id, []).extend((e.file, e.line) for e in t.samples)
    if not anchors:
        return list(tallies)
    out = []
    for t in tallies:
        spots = anchors.get(t.signature.id)
        if (
            spots and t.signature.role == "cause" and t.samples and t.count == len(t.samples)
            and all(any(f == e.file and 0 < e.line - n <= EXPLAINS_WITHIN for f, n in spots) for e in t.samples)
        ):
            t = _as_symptom(t)
            notes.append(
                f"{_plural(t.count, 'line')} of {t.signature.description or t.signature.id} follow a line "
                "that explains them (a consequence, not a cause)"
            )
        out.append(t)
    return out


def _lone_state_reports(tallies: Sequence[SignatureTally], notes: list[str]) -> list[SignatureTally]:
    """State reports decide at low confidence when no other line of the input shows a
    failure (no cause or symptom of another kind: the job's own error, a kernel event)."""
    failing = [t for t in tallies if t.signature.role in ("cause", "symptom")]
    if not failing or not all(t.signature.state_report for t in failing):
        return list(tallies)
    out = []
    for t in tallies:
        sig = t.signature
        if sig.state_report and sig.role == "cause" and sig.confidence != "low":
            low = replace(sig, confidence="low")
            t = replace(t, signature=low, samples=tuple(replace(e, signature=low) for e in t.samples))
            notes.append(
                f"{sig.description or sig.id} is a reading of the device's state, and no other line "
                "shows the job failing or the kernel reporting an event: it may not be what ended the "
                "job (low confidence)"
            )
        out.append(t)
    return out


def _demote_fallbacks(tallies: Sequence[SignatureTally], notes: list[str]) -> list[SignatureTally]:
    explained = {
        t.signature.category for t in tallies if t.signature.role == "cause" and not t.signature.fallback
    }
    out = []
    for t in tallies:
        sig = t.signature
        if sig.fallback and sig.role == "cause" and sig.category in explained:
            t = _as_symptom(t)
            notes.append(
                f"{_plural(t.count, 'line')} of {sig.description or sig.id} follow from another "
                f"{sig.category} cause (a consequence, not a cause)"
            )
        out.append(t)
    return out


def desync_tallies(
    collectives: Mapping[tuple[str, str, int], Event], rank_hosts: Mapping[int, str], notes: list[str]
) -> list[SignatureTally]:
    """One derived cause per (watchdog signature, process group) whose ranks disagree."""
    groups: dict[tuple[str, str], dict[int, Event]] = {}
    for (sid, pg, rank), event in collectives.items():
        groups.setdefault((sid, pg), {})[rank] = event
    out = []
    for (_, pg), ranks in sorted(groups.items()):
        if len(ranks) < 2:
            continue
        keys = {rank: _collective_key(e) for rank, e in ranks.items()}
        counts = Counter(keys.values())
        if len(counts) < 2:
            continue
        majority, top = counts.most_common(1)[0]
        tie = sum(1 for c in counts.values() if c == top) > 1
        odd = sorted(r for r, k in keys.items() if tie or k != majority)
        events = [ranks[r] for r in odd[:MAX_ODD_RANKS]]
        samples = tuple(
            replace(e, signature=DESYNC, host=e.host or _rank_host(e, rank_hosts),
                    host_source=e.host_source or ("rank map" if _rank_host(e, rank_hosts) else None))
            for e in events
        )  # fmt: skip
        hosts = _unique(e.host for e in samples)
        what = ", ".join(f"rank {r}: {_describe(ranks[r])}" for r in odd[:4])
        if not tie:
            what += f"; the other {_plural(top, 'rank')}: {_describe_key(majority)}"
        notes.append(
            f"the ranks{f' of process group {pg}' if pg else ''} disagree on the collective "
            f"({what}): a desync; odd ranks {', '.join(map(str, odd[:MAX_ODD_RANKS]))}"
        )
        out.append(
            SignatureTally(
                signature=DESYNC, count=len(odd), hosts=hosts, num_hosts=len(hosts), samples=samples,
                num_ranks=len(odd),
            )
        )  # fmt: skip
    return out


def _rank_host(e: Event, rank_hosts: Mapping[int, str]) -> str | None:
    return rank_hosts.get(e.rank) if e.rank is not None else None


def _collective_key(e: Event) -> tuple[int | None, str | None, int | None]:
    numel = e.numel if e.op is not None and e.op.upper() in SAME_SIZE_OPS else None
    return (e.seq, e.op, numel)


def _describe_key(key: tuple[int | None, str | None, int | None]) -> str:
    seq, op, numel = key
    parts = [f"SeqNum {seq}" if seq is not None else "", op or "", f"{numel} elements" if numel is not None else ""]
    return " ".join(p for p in parts if p) or "no collective"


def _describe(e: Event) -> str:
    return _describe_key(_collective_key(e))


def many_program_tallies(programs: Mapping[str, Mapping[str, Event]], notes: list[str]) -> list[SignatureTally]:
    """One derived infra cause per host on which at least two different programs failed."""
    out = []
    for host, by_program in sorted(programs.items()):
        if len(by_program) < 2:
            continue
        names = sorted(by_program)
        samples = tuple(replace(by_program[n], signature=HOST_MANY_PROGRAMS) for n in names)
        notes.append(f"{_plural(len(names), 'different program')} failed on {host} ({', '.join(names)}): the host is suspect")
        out.append(
            SignatureTally(signature=HOST_MANY_PROGRAMS, count=len(names), hosts=(host,), num_hosts=1, samples=samples)
        )
    return out


def _attach_hosts(
    tallies: Sequence[SignatureTally], evidence: Evidence, notes: list[str]
) -> list[SignatureTally]:
    """Causes whose lines name no host take the one host their file, or their second, names."""
    out = []
    for t in tallies:
        if t.signature.role != "cause" or all(e.host is not None for e in t.samples):
            out.append(t)
            continue
        samples: list[Event] = []
        for e in t.samples:
            if e.host is None:
                host, how = _host_for(e, evidence)
                if host is not None:
                    if not any(s.host_source == how for s in samples):  # one note per signature
                        notes.append(
                            f"{e.file}:{e.line} names no host; {how} names only {host}, so it is taken to be there"
                        )
                    e = replace(e, host=host, host_source=how)
            samples.append(e)
        hosts = _unique([*t.hosts, *(e.host for e in samples)])
        out.append(replace(t, samples=tuple(samples), hosts=hosts, num_hosts=max(t.num_hosts, len(hosts))))
    return out


def _host_for(e: Event, evidence: Evidence) -> tuple[str | None, str]:
    in_file = evidence.file_hosts.get(e.file, ())
    if len(in_file) == 1:
        return in_file[0], "the rest of its file"
    with_gpu = evidence.gpu_hosts.get(e.gpu, ()) if e.gpu is not None else ()
    if len(with_gpu) == 1 and not in_file:
        return with_gpu[0], "every line naming its GPU"
    key = time_key(e.time)
    at_time = evidence.time_hosts.get(key, ()) if key is not None else ()
    if len(at_time) == 1 and not in_file:
        return at_time[0], "every line of the same second"
    return None, ""


def _unique(items: Iterable[str | None]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        if item:
            seen.setdefault(item, None)
    return tuple(seen)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
