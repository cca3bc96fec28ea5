"""On-call drills on the local backend: real ``ckptctl recover`` processes relaunching real
``torchrun`` jobs (``tests/scripts/resume_job.py`` on the golden DCP run root, and
``examples/train.py`` for a real collective hang), a real pseudo-terminal that is closed,
real signals. Each drill checks the job, the lock, the report, the audit log and
``ckptctl status`` (``tests/drills/drill.py``). The README's "what happens when" table
names these tests (``test_drill_table.py`` keeps the two in step).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.drills.drill import (
    END_S,
    Terminal,
    alive,
    check_after,
    job_pids,
    job_record,
    kill_leftovers,
    log_has,
    recover_process,
    reports,
    status,
    wait_for,
)
from tests.test_recover import (  # noqa: F401 - `crashed` is a module-scoped fixture used below
    CKPTCTL,
    CrashedRun,
    Scene,
    _env,
    attempt_log,
    audit_records,
    crashed,
    crashed_scene,
    golden_scene,
    launch_logs,
    run_recover,
    supervisor_files,
)

pytestmark = pytest.mark.slow


def _events(root: Path) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for p in sorted((root / ".ckptctl" / "logs").glob("recover-*.events.jsonl")):
        out += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return out


# -- SIGHUP: the terminal goes away ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["pty-closed", "sighup"])
def test_terminal_closed_during_the_watch_local(tmp_path: Path, golden: dict[int, Path], how: str) -> None:
    """The ssh session drops while recover watches the resumed job: the recovery goes on to its
    end in its supervisor; the foreground's writes to the dead terminal are dropped, never fatal."""
    s = golden_scene(tmp_path, golden, "--steps", "70", "--step-sleep-s", "0.15")
    args = ["--config", str(s.config), "--no-logs", "--baseline", "baseline.log"]
    try:
        if how == "pty-closed":
            term = Terminal(*args, cwd=s.dir)
            wait_for("the resumed job's step 33", lambda: log_has(s.root, "ckptctl-train step=33 "), proc=term.proc)
            shown_before = term.text()
            term.close()  # the terminal hangs up: SIGHUP, then EIO on every write
            code = term.wait()
            assert "[supervisor] pid" in shown_before and "[launch]" in shown_before, shown_before[-2000:]
        else:
            proc = recover_process(*args, cwd=s.dir)
            wait_for("the resumed job's step 33", lambda: log_has(s.root, "ckptctl-train step=33 "), proc=proc)
            proc.send_signal(signal.SIGHUP)
            out, err = proc.communicate(timeout=END_S)
            code = proc.returncode
            assert json.loads(out)["outcome"] == "recovered", err[-3000:]
        assert code == 0
        rep = check_after(s.root, outcome="recovered", job_phase="ended", actions=["launch", "recover"])
        (att,) = rep["attempts"]
        assert att["interrupted_by"] is None and att["exit_code"] == 0 and att["watch_verdict"] == "continuous"
        assert "ckptctl-train done step=70" in attempt_log(att), "the job was cut short"
        assert not any(alive(p) for p in job_pids(s.root))
        # everything the terminal missed is in the run root's logs: the verdict and the end
        events = _events(s.root)
        assert any(e.get("kind") == "event" and "loss watch verdict: continuous" in str(e.get("message")) for e in events)
        assert events[-1]["kind"] == "end" and events[-1]["exit_code"] == 0
        assert job_record(s.root)["supervisor_log"] == str(next(p for p in (s.root / ".ckptctl" / "logs").glob("recover-*.events.jsonl")))
    finally:
        kill_leftovers(s.root)


# -- SIGTERM / Ctrl-C: the operator stops the recovery ----------------------------------------------


@pytest.mark.parametrize(
    "target, sig, code",
    [("foreground", signal.SIGTERM, 143), ("foreground", signal.SIGINT, 130), ("supervisor", signal.SIGTERM, 143)],
)
def test_sigterm_or_ctrl_c_to_recover_stops_the_job_local(
    tmp_path: Path, golden: dict[int, Path], target: str, sig: signal.Signals, code: int
) -> None:
    s = golden_scene(tmp_path, golden, "--steps", "1000", "--step-sleep-s", "0.2")
    proc = recover_process("--config", str(s.config), "--no-logs", "--baseline", "baseline.log", cwd=s.dir)
    try:
        wait_for("a resumed step", lambda: log_has(s.root, "ckptctl-train step=3"), proc=proc)
        pids = job_pids(s.root)
        assert pids and all(alive(p) for p in pids)
        if target == "foreground":
            proc.send_signal(sig)
        else:  # someone (a shutdown, an operator with `kill`) signals the supervisor itself
            holder = json.loads((s.root / ".ckptctl" / "lock").read_text())
            os.kill(holder["pid"], sig)
        out, err = proc.communicate(timeout=END_S)
        assert proc.returncode == code, err[-3000:]
        doc = json.loads(out)
        assert doc["exit_code"] == code and doc["interrupted_by"] == sig.name
        assert doc["reason"].startswith(f"interrupted: ckptctl received {sig.name} and stopped the job")
        rep = check_after(s.root, outcome="stopped", interrupted_by=sig.name, job_phase="ended",
                          actions=["launch", "recover"])
        assert rep == doc
        (att,) = rep["attempts"]
        assert att["interrupted_by"] == sig.name and "ckptctl-train done" not in attempt_log(att)
        assert len(launch_logs(s.root)) == 1, "relaunched after an interrupt"
        assert not any(alive(p) for p in pids), "a process of the job outlived the stop"
        assert job_record(s.root)["end_reason"].startswith("ended under recover: ckptctl received")
    finally:
        kill_leftovers(s.root)


# -- a second engineer ------------------------------------------------------------------------------


def test_a_second_recover_while_a_detached_job_runs_local(tmp_path: Path, golden: dict[int, Path]) -> None:
    """recover --detach returned and its job trains on: a second recover (and launch) is refused,
    naming the job and how to stop it; --replace stops it first (audited); a record whose job
    has ended is superseded (audited)."""
    s = golden_scene(tmp_path, golden, "--steps", "3000", "--step-sleep-s", "0.1")
    base = ["--config", str(s.config), "--no-logs", "--baseline", "baseline.log", "--json"]
    try:
        first = run_recover(*base, "--detach", cwd=s.dir, timeout=END_S)
        assert first.returncode == 0, first.stderr[-3000:]
        job1 = json.loads(first.stdout)["job"]["job_id"]
        assert alive(int(job1))
        check_after(s.root, outcome="recovered", job_phase="running", actions=["launch", "recover"])
        before = (audit_records(s.root), supervisor_files(s.root), len(reports(s.root)))

        second = run_recover(*base, cwd=s.dir, timeout=120)
        assert second.returncode == 4 and second.stdout == "", second.stderr
        (error,) = [ln for ln in second.stderr.splitlines() if ln.startswith("error:")]
        assert f"local job {job1} (attempt 1, from step_30)" in error and "RUNNING" in error
        assert f"kill -TERM -{job1}" in second.stderr and "--replace" in second.stderr
        assert "Traceback" not in second.stderr
        launch = subprocess.run([CKPTCTL, "launch", "--config", str(s.config)], capture_output=True, text=True,
                                cwd=s.dir, env=_env(), timeout=120)
        assert launch.returncode == 4 and f"local job {job1}" in launch.stderr, launch.stderr
        assert (audit_records(s.root), supervisor_files(s.root), len(reports(s.root))) == before, "a refusal wrote"
        assert alive(int(job1))

        third = run_recover(*base, "--replace", "--detach", cwd=s.dir, timeout=END_S)
        assert third.returncode == 0, third.stderr[-3000:]
        doc = json.loads(third.stdout)
        job2 = doc["job"]["job_id"]
        assert job2 != job1 and not alive(int(job1)) and alive(int(job2))
        assert any(t["stage"] == "replace" and f"stopped local job {job1}" in t["message"] for t in doc["timeline"])
        check_after(s.root, outcome="recovered", job_phase="running",
                    actions=["launch", "recover", "stop-job", "launch", "recover"])
        stopped = next(r for r in audit_records(s.root) if r["action"] == "stop-job")
        assert stopped["job_id"] == job1 and stopped["job"]["job_id"] == job1 and stopped["reason"].startswith("--replace")

        # the job dies behind ckptctl's back: its record is stale, the next recover supersedes it
        for pid in job_pids(s.root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_for("the job's end", lambda: status(s.root)["job"]["now"]["phase"] == "ended")
        last = run_recover("--config", str(s.config), "--no-logs", "--on-unknown", "stop", "--json", cwd=s.dir)
        assert last.returncode == 3, last.stderr[-3000:]
        check_after(s.root, outcome="stopped", job_phase="ended",
                    actions=["launch", "recover", "stop-job", "launch", "recover", "supersede-job", "recover"])
        rec = job_record(s.root)
        assert rec["job_id"] == job2 and rec["end_reason"].startswith("superseded: the job had ended")
    finally:
        kill_leftovers(s.root)


def test_a_second_recover_while_the_first_still_watches_local(tmp_path: Path, golden: dict[int, Path]) -> None:
    """The first recover still supervises its job: the second is refused naming both; --replace
    stops the first recovery (its report says SIGTERM) and its job, then carries on."""
    s = golden_scene(tmp_path, golden, "--steps", "3000", "--step-sleep-s", "0.1")
    first = recover_process("--config", str(s.config), "--no-logs", "--baseline", "baseline.log", cwd=s.dir)
    try:
        wait_for("the first job's steps", lambda: log_has(s.root, "ckptctl-train step=32 "), proc=first)
        holder = json.loads((s.root / ".ckptctl" / "lock").read_text())
        job1 = job_record(s.root)["job_id"]
        second = run_recover("--config", str(s.config), "--no-logs", "--json", cwd=s.dir, timeout=120)
        assert second.returncode == 4, second.stderr
        assert f"pid {holder['pid']}" in second.stderr and f"its job: local job {job1}" in second.stderr
        assert "--replace" in second.stderr and first.poll() is None

        third = run_recover("--config", str(s.config), "--no-logs", "--baseline", "baseline.log", "--replace",
                            "--detach", "--json", cwd=s.dir, timeout=END_S)
        out1, err1 = first.communicate(timeout=END_S)
        assert first.returncode == 143, err1[-3000:]
        doc1 = json.loads(out1)
        assert doc1["interrupted_by"] == "SIGTERM" and doc1["outcome"] == "stopped"
        assert third.returncode == 0, third.stderr[-3000:]
        doc3 = json.loads(third.stdout)
        assert any(t["stage"] == "replace" and "stopped the recover" in t["message"] for t in doc3["timeline"])
        assert not alive(int(job1)) and doc3["job"]["job_id"] != job1
        check_after(s.root, outcome="recovered", job_phase="running",
                    actions=["launch", "recover", "launch", "recover"])
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
        kill_leftovers(s.root)


# -- a job that hangs ----------------------------------------------------------------------------


def _hang_scene(tmp_path: Path, crashed: CrashedRun, hang_at: int, **recover: float) -> Scene:  # noqa: F811
    """The crashed run resumed by examples/train.py whose rank 1 blocks for good before step
    ``hang_at`` (rank 0 then waits in DDP's all-reduce), with ``recover`` settings in the config."""
    s = crashed_scene(tmp_path, crashed, "--hang-at-step", str(hang_at), "--hang-rank", "1", "--log-all-ranks")
    cfg = yaml.safe_load(s.config.read_text())
    cfg["recover"].update(recover)
    s.config.write_text(yaml.safe_dump(cfg))
    return s


def _recover_once(s: Scene) -> subprocess.CompletedProcess[str]:
    """One attempt of ``ckptctl recover --json`` on the scene, with its logs."""
    return run_recover("--config", str(s.config), "--logs", "kern.log", "--logs", "train.log", "--json",
                       "--max-attempts", "1", cwd=s.dir, timeout=END_S)


def test_a_hang_after_the_first_resumed_steps_local(tmp_path: Path, crashed: CrashedRun) -> None:  # noqa: F811
    """examples/train.py resumed from step_12: rank 1 blocks before step 15, rank 0 waits for it
    in DDP's all-reduce (a real collective hang). No step for recover.progress_timeout_s: the
    evidence is taken while it hangs (each rank's Python stack, through SIGUSR2), the job is
    stopped, the attempt is a hang; no attempts left, so the recovery stops."""
    s = _hang_scene(tmp_path, crashed, 15, progress_timeout_s=12)
    try:
        t0 = time.monotonic()
        proc = _recover_once(s)
        assert proc.returncode == 3, proc.stderr[-4000:]
        doc = json.loads(proc.stdout)
        assert "hung (no progress) and no attempts are left (1)" in doc["reason"]
        (att,) = doc["attempts"]
        assert att["cause"] == "hang" and att["stop_reason"].startswith("hang: no new training step for")
        hang = att["hang"]
        assert hang["kind"] == "progress" and hang["limit_s"] == 12 and hang["basis"] == "fixed"
        assert hang["last_step"] == 14 and hang["last_step_by_rank"] == {"0": 14, "1": 14}
        assert any("ckptctl-train step=14 " in line for line in hang["last_lines"])
        dumps = {d["rank"]: d for d in hang["stack_dumps"]}
        assert set(dumps) == {0, 1} and all(d["signalled"] for d in dumps.values()), hang["stack_dumps"]
        assert any("hang_forever" in line for line in dumps[1]["stack"]), dumps[1]["stack"][:30]
        assert not any("hang_forever" in line for line in dumps[0]["stack"])
        assert hang["flight_recorder"] == {"enabled": False}
        assert "[hang] hang: no new training step" in proc.stderr
        check_after(s.root, outcome="stopped", job_phase="ended", actions=["launch", "recover"])
        assert not any(alive(p) for p in job_pids(s.root)), "a rank outlived the stop"
        assert time.monotonic() - t0 < END_S
    finally:
        kill_leftovers(s.root)


def test_a_hang_before_the_first_resumed_step_local(tmp_path: Path, crashed: CrashedRun) -> None:  # noqa: F811
    """The relaunch loads step_12 and hangs before it logs a single step: rank 1 blocks before
    step 13, rank 0 waits for it in DDP's all-reduce. No progress timeout can fire (there is no
    last step to count from): the start deadline (recover.start_timeout_s) does, with the same
    evidence as a hang after the first steps, and the job is stopped."""
    s = _hang_scene(tmp_path, crashed, 13, start_timeout_s=20, progress_timeout_s=12)
    try:
        t0 = time.monotonic()
        proc = _recover_once(s)
        assert proc.returncode == 3, proc.stderr[-4000:]
        doc = json.loads(proc.stdout)
        (att,) = doc["attempts"]
        assert att["cause"] == "hang", att
        hang = att["hang"]
        assert (hang["kind"], hang["limit_s"], hang["basis"], hang["last_step"]) == ("start", 20, "start deadline", None)
        dumps = {d["rank"]: d for d in hang["stack_dumps"]}
        assert set(dumps) == {0, 1} and all(d["signalled"] for d in dumps.values()), hang["stack_dumps"]
        assert any("hang_forever" in line for line in dumps[1]["stack"]), dumps[1]["stack"][:30]
        assert "[hang] hang: no training step logged" in proc.stderr, proc.stderr[-3000:]
        check_after(s.root, outcome="stopped", job_phase="ended", actions=["launch", "recover"])
        assert not any(alive(p) for p in job_pids(s.root)), "a rank outlived the stop"
        assert time.monotonic() - t0 < END_S
    finally:
        kill_leftovers(s.root)


def test_a_hang_falls_back_and_the_next_attempt_recovers_local(tmp_path: Path, golden: dict[int, Path]) -> None:
    """The relaunch saves step_33, logs step 34 and goes silent: a hang (--progress-timeout 6).
    The fallback policy resumes from the newest complete checkpoint (step_33): that attempt trains
    on and is verified."""
    s = golden_scene(tmp_path, golden, "--steps", "48", "--save-at-step", "33", "--hang-after-steps", "4",
                     "--hang-below-step", "33", "--hang-s", "300")
    try:
        proc = run_recover("--config", str(s.config), "--no-logs", "--baseline", "baseline.log",
                           "--progress-timeout", "6", "--json", cwd=s.dir, timeout=END_S)
        assert proc.returncode == 0, proc.stderr[-4000:]
        doc = json.loads(proc.stdout)
        first, second = doc["attempts"]
        assert (first["checkpoint_step"], first["cause"], first["hang"]["last_step"]) == (30, "hang", 34)
        assert first["hang"]["limit_s"] == 6 and first["hang"]["suspects"] == {"ranks": [], "hosts": [], "why": None}
        assert (second["checkpoint_step"], second["cause"], second["watch_verdict"]) == (33, None, "continuous")
        assert "the job hung (no progress) and was stopped: locate the newest complete checkpoint" in proc.stderr
        check_after(s.root, outcome="recovered", job_phase="ended", actions=["launch", "launch", "recover"])
        assert not any(alive(p) for p in job_pids(s.root))
    finally:
        kill_leftovers(s.root)


# -- --no-logs ----------------------------------------------------------------------------------


def test_no_logs_says_the_watch_cannot_judge_local(tmp_path: Path, golden: dict[int, Path]) -> None:
    """Without a pre-failure log the plan says so and how to give one; a detached recovery then
    returns after watch_steps resumed steps (not at the job's end) as resumed-unverified."""
    s = golden_scene(tmp_path, golden, "--steps", "3000", "--step-sleep-s", "0.1")
    try:
        dry = run_recover("--config", str(s.config), "--no-logs", "--dry-run", cwd=s.dir, timeout=120)
        assert dry.returncode == 0, dry.stderr
        assert "NO pre-failure log" in dry.stdout and "--baseline LOG" in dry.stdout
        proc = run_recover("--config", str(s.config), "--no-logs", "--detach", "--json", cwd=s.dir, timeout=END_S)
        assert proc.returncode == 5, proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
        assert doc["outcome"] == "resumed-unverified" and "not verified" in doc["reason"]
        (att,) = doc["attempts"]
        assert att["still_running"] and att["watch_verdict"] == "insufficient-data"
        said = [ln for ln in proc.stderr.splitlines() if "no pre-failure log" in ln]
        assert said and "--baseline" in said[0], proc.stderr[-2000:]
        assert "nothing to compare them with: not verified" in proc.stderr
        rep = check_after(s.root, outcome="resumed-unverified", job_phase="running", actions=["launch", "recover"])
        assert rep["job"]["still_running"] and not log_has(s.root, "ckptctl-train done")
    finally:
        kill_leftovers(s.root)
