"""The hang rule (core/recover/progress.py) and what the hang evidence names (core/recover/evidence.py),
as pure functions: times are given, nothing sleeps. Plus the config keys and the stack-dump hook's
armed record read back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptctl.core.config.parse import config_from_dict
from ckptctl.core.recover import decisions
from ckptctl.core.recover.evidence import (
    STACK_DUMP_DIR_ENV,
    ArmedDump,
    armed_name,
    flight_recorder,
    suspects,
)
from ckptctl.core.recover.progress import (
    PROGRESS_FLOOR_S,
    SAVE_ALLOWANCE_S,
    ProgressPolicy,
    ProgressTracker,
)
from ckptctl.errors import ConfigError
from tests.scripts.resume_job import loss_line


def step(t: ProgressTracker, n: int, at: float, rank: int = 0) -> None:
    t.feed(loss_line(n, 2.0, rank=rank), at)


def test_no_first_step_within_the_start_deadline_is_a_hang() -> None:
    t = ProgressTracker(policy=ProgressPolicy(start_timeout_s=60))
    assert t.check(10_000) is None, "a job that is not running yet (PENDING) is never late"
    t.running(100)
    assert t.check(160) is None
    hang = t.check(161)
    assert hang is not None and hang.kind == "start" and hang.last_step is None
    assert "no training step logged 61 s after the job started (start deadline 60 s)" in hang.reason


def test_the_default_timeout_has_a_floor_and_grows_with_the_step_time() -> None:
    t = ProgressTracker()
    t.running(0)
    for i in range(1, 6):
        step(t, i, float(i))  # 1 s steps: 10 x 1 s is below the floor
    limit, basis = t.progress_limit()
    assert limit == PROGRESS_FLOOR_S + SAVE_ALLOWANCE_S and basis.startswith("floor")
    assert t.check(5 + limit - 1) is None and t.check(5 + limit + 1) is not None
    slow = ProgressTracker()
    slow.running(0)
    for i in range(1, 6):
        step(slow, i, i * 100.0)  # 100 s steps: 10 x 100 s is above the floor
    limit, basis = slow.progress_limit()
    assert limit == 1000 + SAVE_ALLOWANCE_S and basis.startswith("10 x step time 100")


def test_a_slow_save_is_not_a_hang_once_one_has_been_seen() -> None:
    t = ProgressTracker(policy=ProgressPolicy(floor_s=5))
    t.running(0)
    for i in range(1, 5):
        step(t, i, float(i))
    t.feed("ckptctl-train saving checkpoint step_4", 4.5)
    step(t, 5, 44.0)  # the save took 40 s: not a step interval
    assert t.intervals == [1.0, 1.0, 1.0] and t.longest_save_gap == 40.0
    limit, basis = t.progress_limit()
    assert limit == 10 + 80 and "2 x the longest save seen 40 s" in basis


def test_a_fixed_timeout_is_used_as_given_and_zero_turns_the_checks_off() -> None:
    t = ProgressTracker(policy=ProgressPolicy(progress_timeout_s=6))
    t.running(0)
    step(t, 31, 1.0)
    assert t.check(7.0) is None
    hang = t.check(7.5)
    assert hang is not None and hang.kind == "progress" and hang.basis == "fixed" and hang.last_step == 31
    assert hang.reason == "hang: no new training step for 6 s after step 31 (progress timeout 6 s: fixed)"
    off = ProgressTracker(policy=ProgressPolicy(progress_timeout_s=0, start_timeout_s=0))
    off.running(0)
    assert off.check(1e9) is None
    step(off, 1, 1.0)
    assert off.check(1e9) is None


def test_steps_are_read_as_the_watch_reads_them_per_rank() -> None:
    t = ProgressTracker()
    t.running(0)
    t.feed("[default1]:iter 7: loss 2.31, time 110.2ms", 1.0)  # nanoGPT's lines, tagged by torchrun --tee
    t.feed("[default0]:some warning without a loss", 2.0)
    t.feed("[default0]:iter 8: loss 2.29, time 110.9ms", 3.0)
    assert t.steps_seen == 2 and t.last_step_by_rank == {1: 7, 0: 8}
    assert t.last_step_at == 3.0 and t.last_step == 8


def test_suspects_are_the_ranks_behind_and_the_ranks_gone() -> None:
    assert suspects({0: 34, 1: 34}).ranks == ()
    s = suspects({0: 34, 1: 33, 2: 34}, host_of_rank={1: "gpu-node-7"})
    assert s.ranks == (1,) and s.hosts == ("gpu-node-7",) and "rank 1 stopped at step 33 while others reached 34" in str(s.why)
    gone = ArmedDump(rank=3, pid=99, host="h", signal="SIGUSR2", stack_file="x")
    s = suspects({0: 5}, dead_armed=(gone,))
    assert s.ranks == (3,) and "rank 3 is gone" in str(s.why)
    assert suspects({None: 5}).why is None


def test_flight_recorder_is_enabled_by_its_buffer_size() -> None:
    assert flight_recorder({}) == (False, "/tmp/nccl_trace_rank_")
    assert flight_recorder({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}) == (True, "/tmp/nccl_trace_rank_")
    assert flight_recorder({"TORCH_FR_BUFFER_SIZE": "x", "TORCH_FR_DUMP_TEMP_FILE": "/l/fr_"}) == (False, "/l/fr_")
    assert flight_recorder({"TORCH_FR_BUFFER_SIZE": "1", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/o/"}) == (True, "/o/")


def test_armed_records_parse_only_when_name_and_content_agree() -> None:
    ok = ArmedDump.parse(armed_name(1, 4242), json.dumps({"rank": 1, "pid": 4242, "host": "h"}).encode())
    assert ok is not None and (ok.rank, ok.pid, ok.stack_file) == (1, 4242, "stack-rank1-pid4242.txt")
    assert ArmedDump.parse(armed_name(1, 4242), b'{"pid": 1}') is None
    assert ArmedDump.parse(armed_name(1, 4242), b'{"pid": 42') is None
    assert ArmedDump.parse("armed-rank1-pid4242.json.tmp", b"{}") is None


def test_the_training_hook_dumps_a_stack_on_sigusr2_and_carries_on(tmp_path: Path) -> None:
    """A real process arms the hook (without importing torch: the module is loaded by path)
    and keeps running after the dump."""
    code = (
        "import importlib.util, sys, time\n"
        "spec = importlib.util.spec_from_file_location('sd', sys.argv[1])\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "def waiting_in_a_collective():\n"
        "    print(m.install(3), flush=True)\n"
        "    time.sleep(30)\n"
        "waiting_in_a_collective()\n"
    )
    hook = Path(__file__).resolve().parents[1] / "ckptctl" / "training" / "stackdump.py"
    env = {**os.environ, STACK_DUMP_DIR_ENV: str(tmp_path / "stacks")}
    proc = subprocess.Popen([sys.executable, "-c", code, str(hook)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        path = proc.stdout.readline().strip()
        assert path == str(tmp_path / "stacks" / f"stack-rank3-pid{proc.pid}.txt")
        armed = tmp_path / "stacks" / armed_name(3, proc.pid)
        rec = ArmedDump.parse(armed.name, armed.read_bytes())
        assert rec is not None and rec.rank == 3 and rec.signal == "SIGUSR2"
        os.kill(proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while "waiting_in_a_collective" not in Path(path).read_text():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(0.3)
        assert proc.poll() is None, "the dump must not end the process"
    finally:
        proc.kill()
        proc.wait()


def test_the_hook_is_off_without_its_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != STACK_DUMP_DIR_ENV}
    hook = Path(__file__).resolve().parents[1] / "ckptctl" / "training" / "stackdump.py"
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('sd', sys.argv[1])\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(m.install())\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(hook)], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "None", out.stderr


def test_config_keys_and_their_checks() -> None:
    cfg = config_from_dict({"recover": {"start_timeout_s": 0, "progress_timeout_s": "90"}})
    assert cfg.recover.start_timeout_s == 0 and cfg.recover.progress_timeout_s == 90.0
    assert config_from_dict({}).recover.progress_timeout_s is None
    for bad in ({"progress_timeout_s": -1}, {"start_timeout_s": ".inf"}, {"progress_timeout_s": "soon"}):
        with pytest.raises(ConfigError, match=r"recover\.(progress|start)_timeout_s"):
            config_from_dict({"recover": bad})


@pytest.mark.parametrize(
    "history, kind, words",
    [
        ([(30, 143, "hang")], "resume", ["hung (no progress)", "newest complete checkpoint"]),
        ([(30, 143, "hang"), (30, 143, "hang")], "stop", ["restart loop", "hung (no progress), then hung"]),
        ([(30, 143, "hang"), (30, 1, None)], "stop", ["restart loop", "hung (no progress), then failed (exit 1)"]),
        ([(30, 143, "hang"), (34, 143, "hang")], "stop", ["no attempts are left (2)", "hung"]),
    ],
)
def test_a_hang_is_a_failed_attempt_in_the_fallback_policy(
    history: list[tuple[int, int, str | None]], kind: str, words: list[str]
) -> None:
    attempts = [
        decisions.Attempt(number=i, checkpoint_step=s, checkpoint_path=f"/r/step_{s}", exit_code=code,
                          watch_verdict=None, cause=cause)
        for i, (s, code, cause) in enumerate(history, 1)
    ]
    nxt = decisions.decide_after_attempt(attempts, max_attempts=2 if len(history) == 2 else 3)
    assert nxt.kind == kind
    for w in words:
        assert w in nxt.reason
