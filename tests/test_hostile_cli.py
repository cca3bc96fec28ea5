"""Issue 9: usage errors are one ``error:`` line and a hint (exit 2); text from logs, checkpoints
and users is shown with its control characters escaped."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ckptctl.cli.output import escape_controls

REPO = Path(__file__).resolve().parent.parent


def ckptctl(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ckptctl", *args], capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # (click's own words: "No such option: --bogus" or "No such option '--bogus'" by release)
        (["verify", "--bogus", "x"], r"error: No such option:? '?--bogus\b"),
        (["list"], r"error: Missing argument '(?i:root)'"),
        (["no-such-command"], r"error: No such command 'no-such-command'"),
        (["verify", "--world-size", "abc", "."], r"error: Invalid value for '--world-size'"),
    ],
)
def test_usage_error_is_one_line_and_a_hint(argv: list[str], message: str) -> None:
    r = ckptctl(*argv)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert re.match(message, lines[0]), r.stderr
    assert len(lines) == 2 and lines[1].startswith("hint: run 'ckptctl"), r.stderr
    assert "Usage:" not in r.stderr and "Error:" not in r.stderr


def test_escape_controls_keeps_text_and_shows_controls() -> None:
    assert escape_controls("loss 1.5\tok\n") == "loss 1.5\tok\n"
    assert escape_controls("\x1b]0;pwned\x07\x1b[2J\rx\u202e") == "\\x1b]0;pwned\\x07\\x1b[2J\\x0dx\\u202e"
    assert escape_controls("\x9b31m") == "\\x9b31m"


def _resumable_checkpoint(path: Path) -> Path:
    """A real DCP checkpoint with optimizer state (rollback passes over model-only exports)."""
    import torch
    import torch.distributed.checkpoint as dcp

    sd = {"model": {"w": torch.ones(3, 4)}, "optimizer": {"state": {"w": {"exp_avg": torch.zeros(3, 4)}}}}
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(path)))
    return path


def test_reason_with_terminal_escapes_is_escaped(tmp_path: Path) -> None:
    step = _resumable_checkpoint(tmp_path / "real" / "step_10")
    root = tmp_path / "run"
    shutil.copytree(step, root / "step_10")
    shutil.copytree(step, root / "step_20")
    r = ckptctl("rollback", str(root), "--dry-run", "--reason", "spike \x1b]0;pwned\x07\x1b[2J")
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;pwned\\x07" in text


def test_log_text_with_escapes_is_escaped(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("[rank0]: torch.OutOfMemoryError: CUDA out of memory \x1b[8mhidden\x1b[0m\n")
    r = ckptctl("classify", str(log))
    text = r.stdout + r.stderr
    assert "\x1b" not in text, text
    assert "OutOfMemoryError" in text
