"""A followed log (``recover``'s watch: line by line, stopped at the first decided verdict) gets
the verdict of the same log read whole, on every corpus log."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptctl.core.watch.analyze import analyze
from ckptctl.core.watch.losslog import parse_lines
from ckptctl.ops.watch import watch_lines

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FOLDERS = ("losslogs", "losslogs_realistic", "losslogs_openworld", "losslogs_holdout", "losslogs_replay", "losslogs_restore")

#: Logs of two attempts whose first resume is judged (and decided) before the second starts:
#: followed, the first attempt's verdict; whole, the last's.
TWO_ATTEMPTS = {
    "fallback_newer_clean.log",
    "fallback_older_clean.log",
    "second_resume_reset.log",
    "d24_data_reset_second.log",
    "d25_data_reset_second.log",
}


def _logs(folder: str) -> list[Path]:
    return [p for p in sorted((FIXTURES / folder).rglob("*")) if p.is_file() and p.suffix not in (".json", ".py", ".yaml", ".md")]


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_followed_log_gets_the_whole_logs_verdict(folder: str) -> None:
    differ = []
    for path in _logs(folder):
        lines = path.read_text(errors="replace").split("\n")
        whole = watch_lines(lines, stop_when_decided=False)
        followed = watch_lines(lines, stop_when_decided=True)
        if path.name in TWO_ATTEMPTS:
            # (the exception is the mechanism: an earlier resume was judged, not another verdict of this one)
            assert followed.report.resume_line < whole.report.resume_line, path.name
            continue
        if followed.verdict != whole.verdict:
            differ.append(f"{path.name}: whole {whole.verdict}, followed {followed.verdict}: {followed.report.explanation[-1]}")
    assert not differ, "\n".join(differ)


def _run(start: int, steps: range, restore: str | None = None) -> list[str]:
    lines = [restore] if restore else []
    return lines + [f"iteration {s} | lm loss: {2.0 + 1.0 / (1 + s / 50):.4f} | lr: 3.0E-04" for s in steps]


def test_no_step_verdict_on_an_interval_not_yet_seen() -> None:
    """A run that opens with a restore line of step 0 and logs every 10 steps: after its first
    point the interval is a guess (1): no skipped-steps decided, but with two steps seen it is."""
    lines = _run(0, range(10, 30, 10), "loading checkpoint from /ckpt at iteration 0")
    one = analyze(parse_lines(lines[:2]))
    assert not one.decided, one.explanation
    skipped = _run(0, range(300, 330, 10), "loading checkpoint from /ckpt at iteration 0")
    report = analyze(parse_lines(skipped))
    assert report.verdict == "skipped-steps" and report.decided, report.explanation


def test_no_replay_decided_against_a_history_of_one_point() -> None:
    """A lone point before a run (a note quoting a step and a loss) is no history to replay."""
    lines = ["the loss was 2.37 at step 1570", *_run(0, range(10, 60, 10))]
    report = analyze(parse_lines(lines))
    assert not (report.decided and report.verdict == "replayed-steps"), report.explanation
