"""The whole incident ledger as pure decisions (core.recover.ledger, core.recover.incidents, core.launch.job)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ckptctl.core.launch.job import JobStart, parse_job_start
from ckptctl.core.recover import ledger
from ckptctl.core.recover.cadence import CheckpointTiming, plan_cadence
from ckptctl.core.recover.incidents import make_incident, observed_mtbf, summarize
from ckptctl.core.recover.ledger import (
    IN_PROGRESS,
    REQUEUED,
    UNRECORDED,
    ObservedStart,
    RecordedRecovery,
    RecoverAct,
    last_logged_step,
    restart_incidents,
    unrecorded_incidents,
)
from tests.scripts.resume_job import baseline_lines

T0 = datetime(2026, 11, 21, 3, 0, 0, tzinfo=timezone.utc)


def iso(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- the job start line -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (
            "ckptctl: job start job_id=4412 restart=1 time=2026-11-21T03:10:00Z resuming from checkpoint=/r/a b/step_70",
            JobStart(job_id="4412", restart=1, time="2026-11-21T03:10:00Z", checkpoint="/r/a b/step_70", line_no=5),
        ),
        (
            "ckptctl: job start job_id=4412 restart=0 time=2026-11-21T03:00:00Z from scratch",
            JobStart(job_id="4412", restart=0, time="2026-11-21T03:00:00Z", checkpoint=None, line_no=5),
        ),
        ("ckptctl: slurm job 4412 on n1", None),
        ("ckptctl: job start job_id=4412 restart=x time=T", None),
        ("ckptctl-train step=3 loss=1.0", None),
    ],
)
def test_parse_job_start(line: str, want: JobStart | None) -> None:
    assert parse_job_start(line, 5) == want


def test_the_job_start_line_is_a_restore_marker_for_the_watch() -> None:
    from ckptctl.core.watch.logevents import ResumeMarker
    from ckptctl.core.watch.losslog import parse_lines

    events = parse_lines(
        ["ckptctl: job start job_id=7 restart=1 time=2026-11-21T03:10:00Z resuming from checkpoint=/r/step_70"]
    )
    assert [(type(e), e.step) for e in events] == [(ResumeMarker, 70)]


# -- the crash step ------------------------------------------------------------------------------


def test_last_logged_step_reads_loss_and_save_lines_not_a_window() -> None:
    lines = [*baseline_lines(73), "noise", "Saving checkpoint step_75 to /r/step_75"]
    assert last_logged_step(baseline_lines(73)) == 73
    assert last_logged_step(lines) == 75
    assert last_logged_step(["nothing here", "Xid 79"]) is None


# -- recoveries that left no report ----------------------------------------------------------------


def test_a_recovery_that_died_after_launching_is_one_unrecorded_incident() -> None:
    acts = [
        RecoverAct(time=iso(0), host="login-1", pid=100, kind="drain"),
        RecoverAct(time=iso(1), host="login-1", pid=100, kind="launch", job_id="77", resume_from="/r/step_50"),
        RecoverAct(time=iso(2), host="login-1", pid=100, kind="launch", job_id="78", resume_from="/r/step_40"),
        # the next recover broke its lock: the same process, one incident
        RecoverAct(time=iso(0), host="login-1", pid=100, kind="lock"),
    ]
    (inc,) = unrecorded_incidents(acts, [])
    assert (inc.outcome, inc.source, inc.job_id, inc.checkpoint_step) == (UNRECORDED, "audit", "78", 50)
    assert inc.detected == iso(0) and inc.relaunched == iso(1)
    assert inc.note is not None and "pid 100 on login-1" in inc.note and "job 77, job 78" in inc.note


def test_acts_a_finished_recovery_accounts_for_are_not_incidents() -> None:
    acts = [
        RecoverAct(time=iso(0), host="h", pid=1, kind="launch", job_id="1"),  # closed by its recover record
        RecoverAct(time=iso(10), host="h", pid=2, kind="launch", job_id="2"),  # inside a report's span
        RecoverAct(time=iso(20), host="h", pid=3, kind="launch", job_id="3"),  # nothing: died
    ]
    recorded = [
        RecordedRecovery(host="h", pid=1, time=iso(5)),
        RecordedRecovery(host="h", pid=99, time=iso(12), started=iso(9), ended=iso(12)),
    ]
    assert [i.job_id for i in unrecorded_incidents(acts, recorded)] == ["3"]
    # a recover record of the same process BEFORE the act does not close it (pid reused later)
    late = [RecoverAct(time=iso(30), host="h", pid=1, kind="launch", job_id="4")]
    assert [i.job_id for i in unrecorded_incidents(late, recorded)] == ["4"]


def test_a_live_lock_holder_is_a_recovery_in_progress() -> None:
    live = [RecoverAct(time=iso(0), host="h", pid=5, kind="lock", holder_alive=True, current_lock=True)]
    (inc,) = unrecorded_incidents(live, [])
    assert inc.outcome == IN_PROGRESS and inc.job_id is None and "still running" in str(inc.note)
    other_host = [RecoverAct(time=iso(0), host="far", pid=5, kind="lock", holder_alive=None, current_lock=True)]
    assert unrecorded_incidents(other_host, [])[0].outcome == IN_PROGRESS
    gone = [RecoverAct(time=iso(0), host="h", pid=5, kind="lock", holder_alive=False, current_lock=True)]
    assert unrecorded_incidents(gone, [])[0].outcome == UNRECORDED


# -- restarts by the scheduler -------------------------------------------------------------------------


def test_each_restart_is_a_requeued_incident_with_its_steps_recomputed() -> None:
    starts = [
        ObservedStart(start=JobStart(job_id="9", restart=0, time=iso(0), checkpoint="/r/step_30"), last_step_before=None),
        ObservedStart(start=JobStart(job_id="9", restart=1, time=iso(30), checkpoint="/r/step_70"), last_step_before=73),
        ObservedStart(start=JobStart(job_id="9", restart=2, time=iso(60), checkpoint=None), last_step_before=12),
    ]
    one, two = restart_incidents(starts)
    assert (one.outcome, one.source, one.job_id) == (REQUEUED, "job-output", "9")
    assert (one.crash_step, one.checkpoint_step, one.steps_recomputed) == (73, 70, 3)
    assert one.detected == iso(30) and "restart 1" in str(one.note) and "/r/step_70" in str(one.note)
    assert (two.checkpoint_step, two.steps_recomputed) == (None, None) and "from scratch" in str(two.note)


def test_the_ledger_is_ordered_by_failure_time() -> None:
    def inc(minutes: int, outcome: str) -> object:
        return make_incident(outcome=outcome, category=None, failure_time=None, detected=T0 + timedelta(minutes=minutes),
                             drained=None, capacity=None, relaunched=None, first_step=None, crash_step=None,
                             checkpoint_step=None, verdicts=(), drained_hosts=(), job_id=None)

    got = ledger.ledger([inc(10, "recovered")], [inc(5, UNRECORDED)], [inc(20, REQUEUED)])  # type: ignore[list-item]
    assert [i.outcome for i in got] == [UNRECORDED, "recovered", REQUEUED]


# -- one MTBF ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failures", "first", "last", "want"),
    [
        ([], 0.0, 100.0, (None, 0)),
        ([50.0], 0.0, 100.0, (100.0, 1)),  # 100 s observed, 1 failure
        ([50.0], None, None, (None, 0)),  # the failure opens the span: nothing observed
        ([10.0, 40.0, 100.0], None, None, (45.0, 2)),  # failure times only: the mean gap
        ([10.0, 40.0, 100.0], 0.0, 200.0, (200.0 / 3, 3)),
        ([250.0], 0.0, 100.0, (250.0, 1)),  # a failure after the newest checkpoint ends the span
    ],
)
def test_observed_mtbf(failures: list[float], first: float | None, last: float | None, want: tuple[float | None, int]) -> None:
    got = observed_mtbf(failures, first_s=first, last_s=last)
    assert got[1] == want[1]
    assert got[0] == (None if want[0] is None else pytest.approx(want[0], abs=1e-3))


def test_cadence_and_incidents_share_the_mtbf() -> None:
    failures = [T0 + timedelta(hours=h) for h in (3, 5)]
    incidents = [
        make_incident(outcome="recovered", category="infra", failure_time=f, detected=f + timedelta(seconds=30),
                      drained=None, capacity=None, relaunched=None, first_step=None, crash_step=None,
                      checkpoint_step=None, verdicts=(), drained_hosts=(), job_id=None)
        for f in failures
    ]
    span = (T0.timestamp(), (T0 + timedelta(hours=8)).timestamp())
    cks = [CheckpointTiming(step=i, time_s=T0.timestamp() + 1800 * i, save_duration_s=20.0,
                            save_duration_source="manifest") for i in range(17)]
    cad = plan_cadence(cks, failure_times_s=[f.timestamp() for f in failures], span_s=span)
    inc = summarize(incidents, checkpoint_span_s=span)
    assert cad.mtbf_s == inc["mtbf_s"] == 4 * 3600.0 and cad.mtbf_source == "ledger"


# -- the watch sees a restart as a resume of its own ---------------------------------------------------


def _restarted_log(restart_from: int, first_after: int) -> list[str]:
    from tests.scripts.resume_job import curve_loss, loss_line

    lines = [
        "ckptctl: job start job_id=5 restart=0 time=2026-11-21T03:00:00Z resuming from checkpoint=/r/step_30",
        "ckptctl-train resumed from=/r/step_30 step=30 world_size=2 saved_world_size=2",
        *(loss_line(s, curve_loss(s)) for s in range(31, 37)),
        f"ckptctl: job start job_id=5 restart=1 time=2026-11-21T03:05:00Z resuming from checkpoint=/r/step_{restart_from}",
        *(loss_line(s, curve_loss(s)) for s in range(first_after, first_after + 12)),
    ]
    return lines


def test_a_requeue_inside_the_watched_run_is_a_resume_not_a_replay(tmp_path: pytest.TempPathFactory) -> None:
    """Requeued after step 36, the job resumed from step_35 (its own save) and went on at 36: the
    step counter goes back, but after a restore line naming the step it continues from. Before
    the restart was read as one, this was ``replayed-steps`` (and recover quarantined)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    d = Path(str(tmp_path))
    (d / "base.log").write_text("\n".join(baseline_lines(35)) + "\n")
    (d / "job.log").write_text("\n".join(_restarted_log(35, 36)) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ckptctl", "watch", str(d / "job.log"), "--baseline", str(d / "base.log"),
         "--resume-step", "30", "--steps", "10", "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert json.loads(proc.stdout)["verdict"] == "continuous", proc.stdout[-2000:]


# -- the outcome of a recovery's incident --------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "still_running", "exit_code", "want"),
    [
        ("continuous", True, None, "recovered"),  # interrupted after the verdict; the job runs on
        ("continuous", False, 0, "recovered"),  # ... or finished cleanly
        ("continuous", False, 143, "stopped"),  # the interruption stopped the job
        (None, True, None, "stopped"),  # nothing verified it
        ("spike", True, None, "stopped"),
    ],
)
def test_an_interrupted_recovery_whose_job_recovered_is_recorded_as_recovered(
    verdict: str | None, still_running: bool, exit_code: int | None, want: str
) -> None:
    from ckptctl.core.recover.decisions import Attempt
    from ckptctl.ops.recover_report import AttemptRecord, RecoveryReport, incident_outcome

    report = RecoveryReport(root="/r", dry_run=False, started=iso(0), outcome="stopped")
    attempt = Attempt(number=1, checkpoint_step=30, checkpoint_path="/r/step_30", exit_code=exit_code,
                      watch_verdict=verdict, still_running=still_running, interrupted_by="SIGINT")
    report.attempts.append(AttemptRecord(attempt, [], None, None, None, None))
    assert incident_outcome(report) == want
