"""The watch's ``curve`` (the points a picture of the verdict needs) and the chart `watch` prints:
plain ASCII through a pipe, rich (colours, Unicode) on a real pseudo-terminal, never with --json."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ckptctl.ops import watch as ops

LOGS = Path(__file__).resolve().parent / "fixtures" / "losslogs"
CKPTCTL = str(Path(sys.executable).parent / "ckptctl")
SPIKE = str(LOGS / "ckptctl_resume_spike.log")
GRID = re.compile(r"^ *(?:[-\d.e+]+|thr [-\d.e+]+)? \|(.*)$")


def env() -> dict[str, str]:
    e = dict(os.environ, CKPTCTL_NO_PROGRESS="1")
    e.pop("NO_COLOR", None)
    return e


def watch_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CKPTCTL, "watch", *args], capture_output=True, text=True, env=env(), timeout=60)


def chart_of(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("loss around the resume"))
    return lines[start:]


def rows(chart: list[str]) -> list[str]:
    """The grid's rows (right of the axis), padded to one width (plain output strips line ends)."""
    grid = [m.group(1) for line in chart[1:] if (m := GRID.match(line))]
    width = max(len(r) for r in grid)
    return [r.ljust(width) for r in grid]


def test_the_curve_is_what_was_judged() -> None:
    doc: dict[str, Any] = ops.watch_log(SPIKE, resume_step=120).to_json()
    curve = doc["curve"]
    assert [p[:2] for p in curve["after"]] == doc["observed"]["losses"]
    assert curve["expected"][0][1] == doc["baseline"]["level"]
    assert curve["expected"][0][2] == doc["threshold"]["value"]
    # every point above its threshold, as the watch counted
    above = sum(p[1] > e[2] for p, e in zip(curve["after"], curve["expected"], strict=True))
    assert above == doc["observed"]["num_above_threshold"] == 20
    # the pre-failure window, in log order, with the lr the trainer logged
    assert len(curve["before"]) == doc["config"]["window"] == 100
    assert all(p[2] == 0.001 for p in curve["before"] + curve["after"])
    # a NaN stays a JSON-safe string
    nan = ops.watch_log(str(LOGS / "ckptctl_resume_nan.log"), resume_step=120).to_json()["curve"]
    assert "nan" in [p[1] for p in nan["after"]]
    json.dumps(nan, allow_nan=False)


def test_no_resume_no_curve(tmp_path: Path) -> None:
    head = tmp_path / "head.log"
    head.write_text("".join(SPIKE_LINES[:100]))
    doc = ops.watch_log(str(head)).to_json()
    assert doc["verdict"] == "insufficient-data" and doc["curve"] is None
    proc = watch_cli(str(head))
    assert proc.returncode == 5 and "loss around the resume" not in proc.stdout


SPIKE_LINES = Path(SPIKE).read_text().splitlines(keepends=True)


def test_through_a_pipe_the_chart_is_ascii_with_the_threshold() -> None:
    proc = watch_cli(SPIKE, "--resume-step", "120")
    assert proc.returncode == 3
    chart = chart_of(proc.stdout)
    assert chart[0].startswith("loss around the resume (checkpoint step 120, verdict spike)")
    assert proc.stdout.isascii() and "\x1b" not in proc.stdout
    grid = rows(chart)
    assert len(grid) == 8
    # the resume column, then the 20 resumed points: every one above the threshold
    cols = len(grid[0])
    resume = grid[0].index("|")
    assert all(row[resume] == "|" for row in grid)
    after = ["".join(row[x] for row in grid) for x in range(resume + 1, cols)]
    assert len(after) == 20 and all("#" in col and "*" not in col for col in after)
    # the threshold row is labelled with the watch's number
    threshold = json.loads(watch_cli(SPIKE, "--resume-step", "120", "--json").stdout)["threshold"]["value"]
    assert any(line.lstrip().startswith(f"thr {threshold:.4g} |") for line in chart)
    assert "- threshold" in chart[-1] and "# above the threshold" in chart[-1]


def test_a_continuous_resume_is_drawn_under_its_threshold() -> None:
    proc = watch_cli(str(LOGS / "ckptctl_resume_ok.log"), "--resume-step", "120")
    assert proc.returncode == 0
    chart = chart_of(proc.stdout)
    grid = rows(chart)
    resume = grid[0].index("|")
    after = ["".join(row[x] for row in grid) for x in range(resume + 1, len(grid[0]))]
    assert len(after) == 20 and all("*" in col and "#" not in col for col in after)
    # each resumed point is below (a higher row number than) its threshold mark
    for col in after:
        if "-" in col:
            assert col.index("*") > col.index("-")


def test_json_has_no_chart() -> None:
    proc = watch_cli(SPIKE, "--resume-step", "120", "--json")
    doc = json.loads(proc.stdout)
    assert "loss around the resume" not in proc.stdout + proc.stderr
    assert doc["curve"]["after"]


def test_on_a_terminal_the_chart_is_rich() -> None:
    """A real pseudo-terminal: rich colours the points and uses Unicode glyphs."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [CKPTCTL, "watch", SPIKE, "--resume-step", "120"],
        stdout=slave, stderr=slave, stdin=subprocess.DEVNULL,
        env={**env(), "TERM": "xterm-256color", "COLUMNS": "120"},
    )  # fmt: skip
    os.close(slave)
    data = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=30) == 3
    text = data.decode("utf-8")
    assert "loss around the resume" in text
    assert "\x1b[" in text, "no colour on a terminal"
    assert "\u25b2" in text and "\u2502" in text, "no Unicode glyphs on a terminal"
