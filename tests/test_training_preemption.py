"""Preemption however it is delivered: one emergency checkpoint, exit 75; SIGINT aborts.

A scheduler signals every process of the job and torchrun forwards the signal to
its workers, so a worker sees the notice twice; that is one preemption (the save
goes on). The rule is in ``ckptctl/training/preemption.py`` and docs/training.md.

The fast tests send real signals to this process, or to a child Python that dies
of the abort. The slow ones run examples/train.py under real torchrun (2 ranks,
gloo, CPU) and send the signals as schedulers do: SIGTERM to torchrun only;
SIGTERM to torchrun and every worker at once (``scancel``, a pod's termination);
SIGUSR1 to every process, torchrun ignoring it as ckptctl's Slurm batch script
makes it (``--signal=USR1@<grace>``). The workers' exit statuses are read by
``strace -f`` on torchrun (process ends and execs only): torchrun itself, once
signalled, reports none.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ckptctl.training import PREEMPTED_EXIT_CODE, Checkpointer, PreemptedExit
from ckptctl.training.preemption import PreemptionWatcher
from tests.test_training_resume import children_of, wait_for_step
from tests.training_helpers import (
    REPO,
    TRAIN,
    child_env,
    ckptctl_cli,
    describe,
    independently_complete,
    torchrun_argv,
)

# -- the rule, on real signals to this process ------------------------------------------------


def test_repeated_deliveries_within_the_grace_are_one_preemption() -> None:
    w = PreemptionWatcher([signal.SIGTERM, signal.SIGUSR1])
    try:
        for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGUSR1, signal.SIGTERM):
            os.kill(os.getpid(), sig)  # would have killed this process under the old rule
        assert w.received == signal.SIGTERM and w.deliveries == 4
    finally:
        w.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_doubly_delivered_sigterm_still_writes_the_emergency_checkpoint(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), save_every=100)
    state = {"model": torch.nn.Linear(8, 8)}
    assert ckpt.maybe_save(1, state) is None
    os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's
    os.kill(os.getpid(), signal.SIGTERM)  # torchrun's, forwarded
    with pytest.raises(PreemptedExit) as exc:
        ckpt.maybe_save(2, state)
    ckpt.close()
    assert exc.value.code == PREEMPTED_EXIT_CODE and exc.value.signal_name == "SIGTERM"
    assert exc.value.checkpoint == str(tmp_path / "step_2")
    assert independently_complete(tmp_path / "step_2") is None
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


WATCHER_SCRIPT = """
import os, signal, sys, time
from ckptctl.training.preemption import PreemptionWatcher
# SIGINT as in an interactive Python, or ignored as in a shell script's background job
signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[2] == "ignored" else signal.default_int_handler)
w = PreemptionWatcher([signal.SIGTERM, signal.SIGUSR1], grace_s=float(sys.argv[1]))
for word in sys.argv[3:]:
    if word.startswith("sleep"):
        time.sleep(float(word[5:]))
        continue
    try:
        os.kill(os.getpid(), getattr(signal, word))
        time.sleep(0.05)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
    print("alive after", word, flush=True)
print("received", w.received, "deliveries", w.deliveries, flush=True)
"""


def run_watcher(grace_s: float, *words: str, sigint: str = "default") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WATCHER_SCRIPT, str(grace_s), sigint, *words],
        capture_output=True, text=True, env=child_env(), cwd=REPO, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "grace_s, words, killed_by, last_alive",
    [
        # SIGINT while a preemption is pending: the documented abort, at once
        (30, ("SIGTERM", "SIGTERM", "SIGINT"), signal.SIGINT, "SIGTERM"),
        # the first signal again after the grace: the save outlasted any scheduler's wait
        (0.3, ("SIGTERM", "sleep0.6", "SIGTERM"), signal.SIGTERM, "SIGTERM"),
    ],
)
def test_the_aborts_end_the_process_by_the_signal(
    grace_s: float, words: tuple[str, ...], killed_by: int, last_alive: str
) -> None:
    proc = run_watcher(grace_s, *words)
    assert proc.returncode == -killed_by, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == f"alive after {last_alive}", proc.stdout


@pytest.mark.parametrize(
    "grace_s, words, expected",
    [
        # no preemption pending: SIGINT is Python's KeyboardInterrupt, as without ckptctl
        (30, ("SIGINT",), "KeyboardInterrupt"),
        # Slurm: SIGUSR1 warning, SIGTERM at the time limit after the grace: one preemption
        (0.3, ("SIGUSR1", "sleep0.6", "SIGTERM"), f"received {int(signal.SIGUSR1)} deliveries 2"),
    ],
)
def test_what_does_not_abort(grace_s: float, words: tuple[str, ...], expected: str) -> None:
    proc = run_watcher(grace_s, *words)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expected in proc.stdout.splitlines(), proc.stdout


def test_an_ignored_sigint_stays_ignored() -> None:
    proc = run_watcher(30, "SIGTERM", "SIGINT", sigint="ignored")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-2:] == [
        "alive after SIGINT",
        f"received {int(signal.SIGTERM)} deliveries 1",
    ], proc.stdout


# -- real torchrun, real signal patterns ------------------------------------------------------

STRACE = shutil.which("strace")
#: strace options that report every process's end and every execve (to tell the workers apart)
#: and stop the tracee at nothing else.
TRACE_EXITS = ("-f", "--seccomp-bpf", "-q", "-s", "200", "-e", "trace=execve", "-e", "signal=none")
EXIT_RE = re.compile(r"^(?P<pid>\d+) +\+\+\+ (?:exited with (?P<code>\d+)|killed by (?P<sig>\w+))")
EXECVE_RE = re.compile(r'^(?P<pid>\d+) +execve\("[^"]*", \[(?P<argv>.*?)\]')


def process_ends(trace: Path) -> dict[int, str]:
    """pid -> ``exit N`` / ``SIGNAME`` for every process and thread strace saw end."""
    ends: dict[int, str] = {}
    for line in trace.read_text().splitlines():
        m = EXIT_RE.match(line)
        if m:
            ends[int(m["pid"])] = f"exit {m['code']}" if m["code"] else m["sig"]
    return ends


def worker_pids_in_trace(trace: Path, script: str = "train.py") -> list[int]:
    """torchrun's workers: the processes that exec'd ``python -u <script>`` (torchrun's own
    argv names the script too, after its options)."""
    pids = []
    for line in trace.read_text().splitlines():
        m = EXECVE_RE.match(line)
        if m:
            argv = re.findall(r'"((?:[^"\\]|\\.)*)"', m["argv"])
            if len(argv) >= 3 and argv[1] == "-u" and argv[2].endswith(script):
                pids.append(int(m["pid"]))
    return sorted(set(pids))


def start_job(tmp_path: Path, *, ignore_usr1: bool, env: dict[str, str]) -> tuple[subprocess.Popen[str], Path, Path]:
    root = tmp_path / "run"
    trace = tmp_path / "exits.strace"
    job = torchrun_argv(
        2, "--ckpt-root", str(root), "--steps", "100000", "--save-every", "1000", "--step-sleep-s", "0.05"
    )
    if ignore_usr1:  # what the srun task of ckptctl's Slurm batch script does (core/launch/slurm_batch.py)
        job = ["bash", "-c", 'trap "" USR1; exec "$@"', "ckptctl-task", *job]
    argv = [str(STRACE), *TRACE_EXITS, "-o", str(trace), *job]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**child_env(), **env}, cwd=REPO
    )  # fmt: skip
    return proc, root, trace


def torchrun_and_workers(strace_pid: int, timeout_s: float = 60) -> tuple[int, list[int]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        top = children_of(strace_pid)
        if top:
            workers = children_of(top[0])
            if len(workers) >= 2:
                return top[0], workers
        time.sleep(0.2)
    raise AssertionError("torchrun and its 2 workers did not start")


def preempt(tmp_path: Path, sig: signal.Signals, who: str) -> None:
    """Run the job to step 3, send ``sig`` to ``who`` (``torchrun`` or ``all``), then check that
    the emergency checkpoint holds the last step logged, verifies deep, and every worker exits 75."""
    env = {"CKPTCTL_PREEMPTION_SIGNALS": "USR1"} if sig == signal.SIGUSR1 else {}
    proc, root, trace = start_job(tmp_path, ignore_usr1=sig == signal.SIGUSR1, env=env)
    lines: list[str] = []
    try:
        torchrun, workers = torchrun_and_workers(proc.pid)
        wait_for_step(proc, lines, 3, timeout_s=240)
        targets = [torchrun] if who == "torchrun" else [torchrun, *workers]
        for pid in targets:  # back to back, as slurmstepd or the kubelet signals a job's processes
            os.kill(pid, sig)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines.extend(out.splitlines(keepends=True))
    text = "".join(lines)
    m = re.search(rf"^ckptctl-train preempted signal={sig.name} step=(\d+) checkpoint=(\S+) exit_code=75$", text, re.M)
    assert m, text[-3000:] + err[-5000:]
    step, ckpt = int(m.group(1)), m.group(2)
    assert Path(ckpt) == root / f"step_{step}"
    logged = [int(x) for x in re.findall(r"^ckptctl-train step=(\d+) ", text, re.M)]
    assert logged and max(logged) == step  # the checkpoint holds the last step completed
    manifest = json.loads((root / f"step_{step}" / "ckptctl.json").read_text())
    assert manifest["extra"] == {"emergency": True, "signal": sig.name} and manifest["world_size"] == 2
    verify = ckptctl_cli("verify", "--deep", ckpt)
    assert verify.returncode == 0, describe(verify)
    assert ckptctl_cli("locate", str(root)).stdout.strip() == ckpt
    ends = process_ends(trace)
    assert worker_pids_in_trace(trace) == sorted(workers)
    assert [ends.get(w) for w in workers] == ["exit 75", "exit 75"], (ends, err[-5000:])
    assert "forcefully exiting" not in err  # no worker needed torchrun's SIGKILL
    if who == "all" and sig == signal.SIGTERM:
        # the pattern under test happened: torchrun forwarded the signal the workers already had
        assert err.count("closing signal SIGTERM") == 2, err[-5000:]


needs_strace = pytest.mark.skipif(STRACE is None, reason="strace is not installed (it reads the workers' exit statuses)")


@pytest.mark.slow
@needs_strace
def test_sigterm_to_torchrun_only(tmp_path: Path) -> None:
    preempt(tmp_path, signal.SIGTERM, "torchrun")


@pytest.mark.slow
@needs_strace
def test_sigterm_to_every_process_at_once_like_a_scheduler(tmp_path: Path) -> None:
    preempt(tmp_path, signal.SIGTERM, "all")


@pytest.mark.slow
@needs_strace
def test_sigusr1_to_every_process_like_slurms_signal_option(tmp_path: Path) -> None:
    preempt(tmp_path, signal.SIGUSR1, "all")


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_sigint_during_a_pending_preemption_aborts_without_a_checkpoint(tmp_path: Path) -> None:
    """The documented abort, end to end: SIGTERM, then SIGINT before the step boundary."""
    root = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(TRAIN), "--ckpt-root", str(root), "--steps", "100000", "--save-every", "1000",
         "--step-sleep-s", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=REPO,
        preexec_fn=default_sigint,  # as from a terminal, even when the tests run in the background
    )  # fmt: skip
    lines: list[str] = []
    try:
        wait_for_step(proc, lines, 1, timeout_s=240)  # now sleeping 5 s before the step boundary
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGINT, out + err
    assert "preempted" not in out
    assert not root.exists() or not any(p.name.startswith("step_") for p in root.iterdir())
