"""RB-7's decisions (ckptctl.core.recover.decisions) as tables: triage, drain plan, what follows an attempt."""

from __future__ import annotations

import pytest

from ckptctl.core.recover import decisions as core
from ckptctl.core.recover.decisions import Attempt, decide_after_attempt, decide_triage, plan_drain

# -- Classify -> DrainNode / Locate / stop ---------------------------------------------------------

# (category, hosts, force, on_unknown, proceed, drain_hosts, forced, words in the reason)
TRIAGE = [
    # a job fault is not resumed onto the same bug ...
    ("job", [], False, "resume", False, (), False, ["job fault", "--force"]),
    # ... and never drains a host, whatever the logs named
    ("job", ["gpu-node-2"], False, "resume", False, (), False, ["job fault"]),
    # ... unless --force, which still drains nothing
    ("job", ["gpu-node-2"], True, "resume", True, (), True, ["--force", "crash the same way"]),
    ("job", [], True, "stop", True, (), True, ["--force"]),
    # infra: drain the culprits (deduplicated, in the order the logs named them), then resume
    (
        "infra",
        ["gpu-node-2"],
        False,
        "resume",
        True,
        ("gpu-node-2",),
        False,
        ["infra fault on gpu-node-2", "drain"],
    ),
    ("infra", ["b", "a", "b"], False, "resume", True, ("b", "a"), False, ["infra fault on b, a"]),
    # infra without a named host: nothing to drain, still resume
    ("infra", [], False, "resume", True, (), False, ["no culprit host", "nothing to drain"]),
    # --force and --on-unknown change nothing for infra
    ("infra", ["h1"], True, "stop", True, ("h1",), False, ["infra fault on h1"]),
    # preemption: straight to Locate, never a drain (the host is fine)
    ("preemption", [], False, "resume", True, (), False, ["preemption", "just resume"]),
    ("preemption", ["gpu-node-3"], False, "stop", True, (), False, ["preemption"]),
    # unknown cause: resume by default (the watch and the loop guard stay on) ...
    ("unknown", [], False, "resume", True, (), False, ["cause unknown", "restart-loop guard"]),
    ("unknown", ["h1"], False, "resume", True, (), False, ["cause unknown"]),
    # ... or stop when asked to; --force is about job faults only
    ("unknown", [], False, "stop", False, (), False, ["--on-unknown stop"]),
    ("unknown", [], True, "stop", False, (), False, ["--on-unknown stop"]),
    # a category this version does not know is treated as unknown
    ("cosmic-ray", [], False, "stop", False, (), False, ["cause unknown"]),
    ("cosmic-ray", [], False, "resume", True, (), False, ["cause unknown"]),
]


@pytest.mark.parametrize(
    "category, hosts, force, on_unknown, proceed, drain_hosts, forced, words", TRIAGE
)
def test_decide_triage(
    category: str,
    hosts: list[str],
    force: bool,
    on_unknown: core.OnUnknown,
    proceed: bool,
    drain_hosts: tuple[str, ...],
    forced: bool,
    words: list[str],
) -> None:
    d = decide_triage(category, hosts, force=force, on_unknown=on_unknown)
    assert (d.proceed, d.drain_hosts, d.forced) == (proceed, drain_hosts, forced)
    for w in words:
        assert w in d.reason, (w, d.reason)


def test_triage_defaults_resume_on_unknown_and_do_not_force() -> None:
    assert decide_triage("unknown", []).proceed
    assert not decide_triage("job", []).proceed


def test_triage_to_json() -> None:
    d = decide_triage("infra", ("h2", "h1"))
    assert d.to_json() == {
        "proceed": True,
        "drain_hosts": ["h2", "h1"],
        "reason": d.reason,
        "forced": False,
    }


# -- DrainNode -------------------------------------------------------------------------------------

REASON = "ckptctl: infra fault (RB-7)"

# (hosts, kind, expected argvs)
DRAINS = [
    (
        ["gpu-node-2"],
        "slurm",
        [("scontrol", "update", "NodeName=gpu-node-2", "State=DRAIN", f"Reason={REASON}")],
    ),
    # Slurm drains several nodes in one command; duplicates and empty names are dropped
    (
        ["n2", "n1", "n2", ""],
        "slurm",
        [("scontrol", "update", "NodeName=n2,n1", "State=DRAIN", f"Reason={REASON}")],
    ),
    # Kubernetes: one cordon per node
    (["n2", "n1", "n2"], "kubernetes", [("kubectl", "cordon", "n2"), ("kubectl", "cordon", "n1")]),
    # nothing to do
    (["gpu-node-2"], "none", []),
    ([], "slurm", []),
    ([], "kubernetes", []),
    (["", ""], "slurm", []),
]


@pytest.mark.parametrize("hosts, kind, argvs", DRAINS)
def test_plan_drain(hosts: list[str], kind: str, argvs: list[tuple[str, ...]]) -> None:
    cmds = plan_drain(hosts, kind=kind, reason=REASON)
    assert [c.argv for c in cmds] == argvs
    for c in cmds:
        assert c.kind == kind
        # the hosts a command drains are exactly the ones it names
        assert all(h in " ".join(c.argv) for h in c.hosts)


def test_drain_reason_is_one_argv_word_never_a_shell_string() -> None:
    (cmd,) = plan_drain(["h1"], kind="slurm", reason="XID 79; rm -rf / # 'quoted'")
    assert cmd.argv[-1] == "Reason=XID 79; rm -rf / # 'quoted'"
    assert cmd.to_json() == {"kind": "slurm", "hosts": ["h1"], "argv": list(cmd.argv)}


def test_unknown_drain_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown drain kind 'pbs'"):
        plan_drain(["h1"], kind="pbs", reason=REASON)


# -- Resume -> Watch -> Done / Fallback / Resume again / stop --------------------------------------


def att(
    step: int | None, exit_code: int | None, verdict: str | None = None, *, n: int = 1
) -> Attempt:
    return Attempt(
        number=n,
        checkpoint_step=step,
        checkpoint_path=None if step is None else f"/run/step_{step}",
        exit_code=exit_code,
        watch_verdict=verdict,
        stopped_by_watch=verdict in core.BAD_RESUME_VERDICTS and exit_code != 0,
    )


def hist(*spec: tuple[int | None, int | None, str | None]) -> list[Attempt]:
    return [att(s, e, v, n=i + 1) for i, (s, e, v) in enumerate(spec)]


# (history as (step, exit, verdict), max_attempts, next kind, words in the reason)
AFTER = [
    # Done: the resumed job finished; the watch agreed, could not tell, or had no baseline
    ([(30, 0, "continuous")], 3, "done", ["finished successfully"]),
    ([(30, 0, "insufficient-data")], 3, "done", ["finished successfully"]),
    ([(30, 0, None)], 3, "done", ["finished successfully"]),
    # done even on the last attempt, and after earlier failures from the same step
    ([(30, 1, None), (30, 0, "continuous")], 2, "done", ["finished successfully"]),
    # Fallback: every bad-resume verdict quarantines the checkpoint and resumes from the previous one
    (
        [(30, -15, "spike")],
        3,
        "rollback-and-resume",
        ["spike", "from step 30", "previous complete"],
    ),
    ([(30, -15, "nan")], 3, "rollback-and-resume", ["nan"]),
    ([(30, -15, "replayed-steps")], 3, "rollback-and-resume", ["replayed-steps"]),
    ([(30, -15, "skipped-steps")], 3, "rollback-and-resume", ["skipped-steps"]),
    ([(30, -15, "diverged")], 3, "rollback-and-resume", ["diverged"]),
    # the verdict wins over a clean exit (the job ran to the end on a wrong state)
    ([(30, 0, "spike")], 3, "rollback-and-resume", ["spike"]),
    # a second bad resume, from the previous checkpoint, falls back again while attempts remain
    ([(30, -15, "spike"), (20, -15, "spike")], 3, "rollback-and-resume", ["from step 20"]),
    # ... but not past the bound: quarantined all the same, then stop
    ([(30, -15, "spike")], 1, "rollback-and-stop", ["spike", "no attempts are left (1)", "quarantined"]),
    ([(30, -15, "spike"), (20, -15, "nan")], 2, "rollback-and-stop", ["nan", "no attempts are left (2)"]),
    # the verdicts the watch adds for a bad restore the loss hides are bad too
    ([(30, -15, "schedule-reset")], 3, "rollback-and-resume", ["schedule-reset"]),
    ([(30, 0, "tokens-mismatch")], 3, "rollback-and-resume", ["tokens-mismatch"]),
    # a verdict recover does not know is never acted on as a failure
    ([(30, 0, "brand-new-verdict")], 3, "done", ["finished successfully"]),
    # Resume again: a failed or preempted job, attempts left
    ([(30, 1, None)], 3, "resume", ["failed (exit 1)", "newest complete checkpoint"]),
    ([(30, 1, "continuous")], 3, "resume", ["failed (exit 1)"]),
    ([(30, 1, "insufficient-data")], 3, "resume", ["failed (exit 1)"]),
    ([(30, 75, None)], 3, "resume", ["preempted again"]),
    # the checkpoint step advanced between the failures: not a loop
    ([(30, 1, None), (31, 1, None)], 3, "resume", ["failed (exit 1)"]),
    ([(30, 75, None), (34, 75, None)], 3, "resume", ["preempted again"]),
    # a first attempt that never ran is no evidence of a loop
    ([(30, None, None), (30, 1, None)], 3, "resume", ["failed (exit 1)"]),
    # Restart loop: twice from the same step, failed both times
    (
        [(30, 1, None), (30, 1, None)],
        5,
        "stop",
        ["restart loop", "step 30", "the same way twice", "exit 1, then 1"],
    ),
    (
        [(30, 1, None), (30, 137, None)],
        5,
        "stop",
        ["restart loop", "again twice", "exit 1, then 137"],
    ),
    # a preemption that brings no new checkpoint is a loop too
    ([(30, 75, None), (30, 75, None)], 5, "stop", ["restart loop", "does not advance"]),
    # only the last two attempts count
    ([(30, 1, None), (31, 1, None), (31, 1, None)], 5, "stop", ["restart loop", "step 31"]),
    (
        [(30, 1, None), (30, 1, None)],
        2,
        "stop",
        ["restart loop"],
    ),  # named as a loop, not as the bound
    # the attempt bound
    ([(30, 1, None)], 1, "stop", ["failed (exit 1)", "no attempts are left (1)"]),
    ([(30, 75, None)], 1, "stop", ["no attempts are left (1)"]),
    ([(30, 1, None), (31, 1, None)], 2, "stop", ["no attempts are left (2)"]),
    ([(30, 1, None), (31, 1, None), (32, 1, None)], 3, "stop", ["no attempts are left (3)"]),
]


@pytest.mark.parametrize("spec, max_attempts, kind, words", AFTER)
def test_decide_after_attempt(
    spec: list[tuple[int | None, int | None, str | None]],
    max_attempts: int,
    kind: str,
    words: list[str],
) -> None:
    nxt = decide_after_attempt(hist(*spec), max_attempts=max_attempts)
    assert nxt.kind == kind, nxt.reason
    for w in words:
        assert w in nxt.reason, (w, nxt.reason)


@pytest.mark.parametrize(
    "spec, verdict, signal",
    [
        ([(30, 130, None)], None, "SIGINT"),
        ([(30, 143, None)], "continuous", "SIGTERM"),
        # not even a bad verdict is acted on: no quarantine while the operator is stopping us
        ([(30, 130, None)], "spike", "SIGINT"),
        # nor a failure that would otherwise be a restart loop or a resume
        ([(30, 1, None), (30, 130, None)], None, "SIGINT"),
        ([(30, 75, None), (36, 130, None)], None, "SIGINT"),
    ],
)
def test_an_interrupted_ckptctl_stops_whatever_the_job_did(
    spec: list[tuple[int, int, str | None]], verdict: str | None, signal: str
) -> None:
    history = hist(*spec)
    last = history[-1]
    history[-1] = Attempt(
        number=last.number,
        checkpoint_step=last.checkpoint_step,
        checkpoint_path=last.checkpoint_path,
        exit_code=last.exit_code,
        watch_verdict=verdict,
        interrupted_by=signal,
    )
    nxt = decide_after_attempt(history, max_attempts=5)
    assert nxt.kind == "stop", nxt.reason
    assert nxt.reason.startswith(f"interrupted: ckptctl received {signal}")
    assert f"resumed from step {last.checkpoint_step}" in nxt.reason and "not relaunching" in nxt.reason


def test_every_bad_verdict_falls_back_and_no_other_does() -> None:
    from ckptctl.core.watch.model import VERDICTS

    for verdict in VERDICTS:
        nxt = decide_after_attempt([att(30, 0, verdict)], max_attempts=3)
        bad = verdict in core.BAD_RESUME_VERDICTS
        assert (nxt.kind == "rollback-and-resume") == bad, verdict
    # every verdict the watch can give has a class in the table
    assert set(VERDICTS) <= set(core.VERDICT_CLASSES)
    assert {"spike", "nan", "replayed-steps", "skipped-steps", "schedule-reset", "tokens-mismatch"} <= core.BAD_RESUME_VERDICTS
    assert "continuous" not in core.BAD_RESUME_VERDICTS
    assert "insufficient-data" not in core.BAD_RESUME_VERDICTS


@pytest.mark.parametrize(
    "verdict, outcome, code",
    [
        ("continuous", "recovered", 0),
        ("insufficient-data", "resumed-unverified", 5),
        (None, "resumed-unverified", 5),
        ("some-future-verdict", "resumed-unverified", 5),
    ],
)
def test_only_continuous_is_recovered(verdict: str | None, outcome: str, code: int) -> None:
    last = att(30, 0, verdict)
    assert core.outcome_when_done(last) == outcome
    assert core.OUTCOME_EXIT[outcome] == code
    if outcome != "recovered":
        reason = core.unverified_reason(last)
        assert reason.startswith("resumed from step 30, not verified: ")
        assert (verdict or "no verdict") in reason


def test_a_detached_job_that_the_watch_passed_is_done() -> None:
    a = Attempt(number=1, checkpoint_step=30, checkpoint_path="/r/step_30", exit_code=None,
                watch_verdict="continuous", still_running=True)
    nxt = decide_after_attempt([a], max_attempts=3)
    assert nxt.kind == "done" and "keeps running" in nxt.reason


def test_no_attempt_to_judge_is_an_error() -> None:
    with pytest.raises(ValueError, match="no attempt"):
        decide_after_attempt([], max_attempts=3)


def test_bounded_loop_always_stops_within_max_attempts() -> None:
    """Drive the decisions the way ops does, with a job that always fails and always advances."""
    for max_attempts in (1, 2, 3, 7):
        history: list[Attempt] = []
        for _ in range(max_attempts + 5):  # a broken bound fails here instead of looping forever
            history.append(att(30 + len(history), 1, None, n=len(history) + 1))
            nxt = decide_after_attempt(history, max_attempts=max_attempts)
            if nxt.kind != "resume":
                break
        assert nxt.kind == "stop", nxt.reason
        assert len(history) == max_attempts


def test_next_action_json_and_outcome_codes() -> None:
    nxt = decide_after_attempt([att(30, 0, "continuous")], max_attempts=3)
    assert nxt.to_json() == {"kind": "done", "reason": nxt.reason}
    assert core.OUTCOME_EXIT == {
        "recovered": 0, "dry-run": 0, "stopped": 3, "resumed-unverified": 5, "plan-only": 2,
    }
    assert core.PREEMPTED_EXIT_CODE == 75


def test_preempted_exit_code_agrees_with_the_training_library() -> None:
    # read, not imported: ckptctl.training imports torch, and the core must not need it
    import re
    from pathlib import Path

    import ckptctl

    source = (Path(ckptctl.__file__).parent / "training" / "preemption.py").read_text()
    m = re.search(r"^PREEMPTED_EXIT_CODE = (\d+)$", source, re.M)
    assert m is not None and int(m.group(1)) == core.PREEMPTED_EXIT_CODE
