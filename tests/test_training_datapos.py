"""The data position end to end: a real 2-rank torchrun of examples/train.py crashes, resumes,
and ``ckptctl watch`` judges the log it wrote (``ckptctl: data position recorded`` at each
save, ``ckptctl: data position first-batch`` at the resume)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ckptctl.training import Checkpointer, ResumableBatchSampler
from tests.training_helpers import REPO, child_env, torchrun_argv

COMMON = ("--steps", "24", "--save-every", "5", "--seed", "0", "--num-samples", "64")
POS_RE = re.compile(r"ckptctl: data position (recorded|first-batch) step=(\d+) epoch=(\d+) index=(\d+)")


def run_into(log: Path, *args: str) -> int:
    with log.open("a") as fh:
        return subprocess.run(
            torchrun_argv(2, *args), stdout=fh, stderr=subprocess.STDOUT, text=True,
            env=child_env(), timeout=240, cwd=REPO,
        ).returncode


def watch(log: Path) -> tuple[int, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "ckptctl", "watch", str(log), "--json"],
        capture_output=True, text=True, env=child_env(), timeout=120, cwd=REPO,
    )
    return out.returncode, json.loads(out.stdout)


def crash_then_resume(tmp_path: Path, *resume_args: str) -> tuple[Path, list[tuple[str, ...]]]:
    root, log = tmp_path / "run", tmp_path / "train.log"
    assert run_into(log, "--ckpt-root", str(root), *COMMON, "--crash-at-step", "13") != 0
    assert run_into(log, "--ckpt-root", str(root), "--resume-from", "auto", *COMMON, *resume_args) == 0
    text = log.read_text()
    assert re.search(r"ckptctl: restored: (\d+)/\1 keys step=10", text), text[-3000:]
    return log, POS_RE.findall(text)


@pytest.mark.slow
def test_a_clean_resume_logs_both_positions_and_watch_finds_no_mismatch(tmp_path: Path) -> None:
    log, positions = crash_then_resume(tmp_path)
    recorded = {s: (e, i) for k, s, e, i in positions if k == "recorded"}
    first = [(s, e, i) for k, s, e, i in positions if k == "first-batch"]
    assert set(recorded) >= {"5", "10", "15", "20"}
    # 64 samples / global batch 8 = 8 batches an epoch: after 10 steps, epoch 1, batch 2
    assert recorded["10"] == ("1", "2")
    assert first == [("10", "1", "2")]
    _rc, result = watch(log)
    assert result["verdict"] != "data-position-mismatch", result
    assert result["checks"]["data_position"]["recorded"]["step"] == 10


@pytest.mark.slow
def test_a_resume_with_the_loader_reset_is_a_data_position_mismatch(tmp_path: Path) -> None:
    log, positions = crash_then_resume(tmp_path, "--reset-data-on-resume")
    first = [(s, e, i) for k, s, e, i in positions if k == "first-batch"]
    assert first == [("10", "0", "0")]
    rc, result = watch(log)
    assert rc == 3 and result["verdict"] == "data-position-mismatch", result


def test_note_first_batch_logs_once_after_a_load_and_never_without_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import torch

    model = torch.nn.Linear(2, 2)
    sampler = ResumableBatchSampler(32, 4, seed=0)
    it = iter(sampler)
    for _ in range(3):
        next(it)
    ckpt = Checkpointer(str(tmp_path), preemption_signals=None)
    with caplog.at_level("WARNING", logger="ckptctl.training"):
        assert ckpt.note_first_batch(sampler) is None  # not resumed
        ckpt.save(3, {"model": model, "data": sampler})
        fresh = ResumableBatchSampler(32, 4, seed=0)
        ckpt.load(ckpt.path_for_step(3), {"model": model, "data": fresh})
        line = ckpt.note_first_batch(fresh)
        assert ckpt.note_first_batch(fresh) is None  # once per resume
    assert line == "ckptctl: data position first-batch step=3 epoch=0 index=3"
    msgs = [r.getMessage() for r in caplog.records]
    assert "ckptctl: data position recorded step=3 epoch=0 index=3" in msgs
    assert msgs.count(line) == 1
