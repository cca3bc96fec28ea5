"""RB-7 as decisions: what ``ckptctl recover`` does next, as pure functions on plain data.

    Classify -> (infra) DrainNode -> Locate -> Verify -> Resume -> Watch -> Done
       |  (job fault: stop, do not resume onto the same bug, unless --force)
       |                      Verify --(missing/corrupt)--> Fallback -> Verify
       |                                        Watch --(spike/replay/NaN)--> Fallback -> Resume
       (preemption) ---------> Locate

The ops layer carries out each decision (drain, launch, rename) and feeds what
happened back in as plain data. Attempts are bounded, and the restart-loop guard
stops a resume that fails the same way twice from the same checkpoint step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ckptctl.core.watch.model import BAD, GOOD, UNDECIDED, VERDICT_CLASS, verdict_class

Category = Literal["infra", "job", "preemption", "unknown"]
OnUnknown = Literal["resume", "stop"]
DrainKind = Literal["slurm", "kubernetes", "none"]
NextKind = Literal["done", "resume", "rollback-and-resume", "rollback-and-stop", "stop"]
VerdictClass = Literal["good", "bad", "unverified"]
Outcome = Literal["recovered", "resumed-unverified", "stopped", "dry-run", "plan-only"]

#: examples/train.py (and any trainer following ckptctl.training) exits 75 after an
#: emergency checkpoint on SIGTERM: a preemption of the relaunched job.
PREEMPTED_EXIT_CODE = 75

#: recover's word for each verdict class the watch declares (``core.watch.model.VERDICT_CLASS``,
#: the one table): ``good``: the resume is verified (the only way to the ``recovered``
#: outcome). ``bad``: the resume restored the wrong state (loss jump, NaN, steps
#: replayed/skipped, the LR schedule restarted, the data position off): quarantine the
#: checkpoint and every one the attempt wrote, fall back one. ``unverified`` (the watch's
#: ``undecided``): the watch could not tell; a verdict this version does not know is
#: ``unverified`` too: never read as a success, never acted on as a failure.
_RECOVER_CLASS: dict[str, VerdictClass] = {GOOD: "good", BAD: "bad", UNDECIDED: "unverified"}

#: Every watch verdict and what it means for the recovery (derived, never listed here).
VERDICT_CLASSES: dict[str, VerdictClass] = {v: _RECOVER_CLASS[c] for v, c in VERDICT_CLASS.items()}

#: Watch verdicts that mean the resume restored the wrong state: fall back one checkpoint.
BAD_RESUME_VERDICTS = frozenset(v for v, c in VERDICT_CLASSES.items() if c == "bad")


def classify_verdict(verdict: str | None) -> VerdictClass:
    """``good`` / ``bad`` / ``unverified`` for a watch verdict (``None``: no watch ran)."""
    return _RECOVER_CLASS[verdict_class(verdict)]


@dataclass(frozen=True, kw_only=True, slots=True)
class TriageDecision:
    """What the classification means for the recovery."""

    proceed: bool
    """Go on to locate and resume."""
    drain_hosts: tuple[str, ...]
    """Hosts to take out of the pool before resuming (infra faults only)."""
    reason: str
    forced: bool = False
    """A job fault resumed anyway because of --force."""

    def to_json(self) -> dict[str, Any]:
        return {
            "proceed": self.proceed,
            "drain_hosts": list(self.drain_hosts),
            "reason": self.reason,
            "forced": self.forced,
        }


def decide_triage(
    category: Category | str,
    hosts: Sequence[str],
    *,
    force: bool = False,
    on_unknown: OnUnknown = "resume",
) -> TriageDecision:
    """Classify -> DrainNode / Locate / stop."""
    if category == "job":
        if force:
            return TriageDecision(
                proceed=True,
                drain_hosts=(),
                reason="job fault, resuming anyway because of --force (it may crash the same way)",
                forced=True,
            )
        return TriageDecision(
            proceed=False,
            drain_hosts=(),
            reason="job fault: resuming onto the same bug re-crashes; fix the job (or pass --force)",
        )
    if category == "infra":
        if not hosts:
            return TriageDecision(
                proceed=True,
                drain_hosts=(),
                reason="infra fault but no culprit host named in the logs: nothing to drain; resuming",
            )
        return TriageDecision(
            proceed=True,
            drain_hosts=tuple(dict.fromkeys(hosts)),
            reason=f"infra fault on {', '.join(dict.fromkeys(hosts))}: drain, then resume without it",
        )
    if category == "preemption":
        return TriageDecision(proceed=True, drain_hosts=(), reason="preemption: just resume")
    if on_unknown == "stop":
        return TriageDecision(
            proceed=False,
            drain_hosts=(),
            reason="cause unknown and --on-unknown stop: gather the logs classify asks for",
        )
    return TriageDecision(
        proceed=True,
        drain_hosts=(),
        reason="cause unknown: resuming (the loss watch and the restart-loop guard stay on)",
    )


@dataclass(frozen=True, slots=True)
class DrainCommand:
    """One command that takes hosts out of the scheduler's pool."""

    kind: DrainKind
    hosts: tuple[str, ...]
    argv: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "hosts": list(self.hosts), "argv": list(self.argv)}


def _scontrol_drain(hosts: tuple[str, ...], reason: str) -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """Slurm: one ``scontrol update ... State=DRAIN`` for every host at once."""
    return ((hosts, ("scontrol", "update", f"NodeName={','.join(hosts)}", "State=DRAIN", f"Reason={reason}")),)


def _kubectl_cordon(hosts: tuple[str, ...], reason: str) -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """Kubernetes: ``kubectl cordon NODE``, one per host (the reason has no place there)."""
    return tuple(((h,), ("kubectl", "cordon", h)) for h in hosts)


#: ``recover.drain.kind`` -> the commands that take hosts out of that scheduler's pool, as
#: ``(hosts, argv)`` pairs. ``none`` drains nothing. A new scheduler adds one entry here
#: and its name to ``core.config.checks.DRAIN_KINDS``.
DRAIN_METHODS: dict[str, Callable[[tuple[str, ...], str], tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]]] = {
    "slurm": _scontrol_drain,
    "kubernetes": _kubectl_cordon,
    "none": lambda hosts, reason: (),
}


def plan_drain(hosts: Sequence[str], *, kind: DrainKind | str, reason: str) -> tuple[DrainCommand, ...]:
    """The drain step for the culprit hosts: Slurm DRAIN or Kubernetes cordon (``DRAIN_METHODS``)."""
    hosts = tuple(dict.fromkeys(h for h in hosts if h))
    if not hosts:
        return ()
    method = DRAIN_METHODS.get(kind)
    if method is None:
        raise ValueError(f"unknown drain kind {kind!r} ({', '.join(DRAIN_METHODS)})")
    return tuple(DrainCommand(kind=kind, hosts=group, argv=argv) for group, argv in method(hosts, reason))  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True, slots=True)
class Attempt:
    """One relaunch and how it ended."""

    number: int
    checkpoint_step: int | None
    checkpoint_path: str | None
    exit_code: int | None
    """The job's exit status (None if it never ran)."""
    watch_verdict: str | None
    """The loss watch's verdict, if it reached one."""
    stopped_by_watch: bool = False
    still_running: bool = False
    """The job was left running (``--detach``, or a scheduler job) after the watch decided."""
    interrupted_by: str | None = None
    """The signal (``SIGINT``, ``SIGTERM``) that interrupted ckptctl itself during the
    attempt; ckptctl stopped the job because of it."""


@dataclass(frozen=True, slots=True)
class NextAction:
    kind: NextKind
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason}


def decide_after_attempt(history: Sequence[Attempt], *, max_attempts: int) -> NextAction:
    """Resume -> Watch -> Done / Fallback / Resume again / stop (bounded, loop-guarded).

    Precedence: an interruption of ckptctl itself stops; then a bad-resume verdict
    falls back (or stops at the bound); a clean exit is done; two failures from the
    same checkpoint step are a restart loop; then the attempt bound; else resume.
    """
    if not history:
        raise ValueError("no attempt to judge")
    last = history[-1]
    left = max_attempts - len(history)
    if last.interrupted_by is not None:
        # The operator (or the scheduler ending ckptctl's own allocation) stopped us: the
        # job's exit says nothing about the resume, and relaunching would fight the stop.
        return NextAction(
            "stop",
            f"interrupted: ckptctl received {last.interrupted_by} and stopped the job "
            f"(resumed from step {last.checkpoint_step}); not relaunching. Run recover again to continue",
        )
    if classify_verdict(last.watch_verdict) == "bad":
        if left <= 0:
            # Still quarantined: locate must not hand the bad state to the next person.
            return NextAction(
                "rollback-and-stop",
                f"loss watch said {last.watch_verdict} and no attempts are left ({max_attempts}); "
                "its checkpoints are quarantined",
            )
        return NextAction(
            "rollback-and-resume",
            f"loss watch said {last.watch_verdict} after resuming from step {last.checkpoint_step}: "
            "quarantine that checkpoint and resume from the previous complete one",
        )
    if last.still_running:
        return NextAction("done", "the loss watch decided and the resumed job keeps running")
    if last.exit_code == 0:
        return NextAction("done", "the resumed job finished successfully")
    if len(history) >= 2:
        prev = history[-2]
        if (
            prev.checkpoint_step == last.checkpoint_step
            and prev.exit_code not in (0, None)
            and last.exit_code not in (0, None)
        ):
            same = "the same way" if prev.exit_code == last.exit_code else "again"
            return NextAction(
                "stop",
                f"restart loop: resuming from step {last.checkpoint_step} failed {same} twice "
                f"(exit {prev.exit_code}, then {last.exit_code}); the checkpoint step does not advance",
            )
    if left <= 0:
        return NextAction("stop", f"the job failed (exit {last.exit_code}) and no attempts are left ({max_attempts})")
    if last.exit_code == PREEMPTED_EXIT_CODE:
        return NextAction("resume", "the job was preempted again after an emergency checkpoint: resume")
    return NextAction("resume", f"the job failed (exit {last.exit_code}): locate the newest complete checkpoint and resume")


#: ``recover`` resumed the job (it finished, or runs on) but the watch never said
#: ``continuous`` (too few points, no pre-failure log, a verdict recover does not know).
RESUMED_UNVERIFIED_EXIT = 5

#: Exit codes of `ckptctl recover` by outcome (also in the README). ``plan-only``: the
#: invocation lacked what a real run needs (run root, ``--logs``/``--no-logs``): the plan
#: was printed and nothing was done (a usage error).
OUTCOME_EXIT: dict[str, int] = {
    "recovered": 0,
    "dry-run": 0,
    "stopped": 3,
    "resumed-unverified": RESUMED_UNVERIFIED_EXIT,
    "plan-only": 2,
}


def outcome_when_done(last: Attempt) -> Outcome:
    """``recovered`` only when the watch said continuous; else ``resumed-unverified``."""
    return "recovered" if classify_verdict(last.watch_verdict) == "good" else "resumed-unverified"


def unverified_reason(last: Attempt) -> str:
    if last.watch_verdict is None:
        why = "the loss watch gave no verdict (no pre-failure loss to compare with: pass --baseline or --logs)"
    elif last.watch_verdict in VERDICT_CLASSES:
        why = f"the loss watch said {last.watch_verdict}"
    else:
        why = f"the loss watch said {last.watch_verdict!r}, a verdict this recover does not know"
    return f"resumed from step {last.checkpoint_step}, not verified: {why}"

