"""``ckptctl watch``: fixture logs of every format, JSON contract, exit codes, --follow, stdin, ops API."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ckptctl.adapters.follow import LineReader
from ckptctl.cli import output as out
from ckptctl.cli.app import app
from ckptctl.cli.watch import LogFormat
from ckptctl.core.watch.losslog import FORMATS
from ckptctl.errors import InputError, UsageError
from ckptctl.ops import watch as ops

REPO = Path(__file__).resolve().parent.parent
LOGS = Path(__file__).resolve().parent / "fixtures" / "losslogs"
CUSTOM_PATTERN = r"it=(?P<step>\d+)\s*\|\s*train/loss=(?P<loss>\S+)"

runner = CliRunner()


def watch(*args: str, stdin: str | None = None) -> Any:
    out.reset()
    return runner.invoke(app, ["watch", *args], input=stdin, catch_exceptions=False)


def strict_json(text: str) -> dict[str, Any]:
    def reject(token: str) -> None:
        raise AssertionError(f"non-standard JSON constant {token}")

    doc = json.loads(text, parse_constant=reject)
    assert isinstance(doc, dict)
    return doc


# (log, extra args, verdict, format, resume_step, first resumed step)
CASES: list[tuple[str, tuple[str, ...], str, str, int | None, int]] = [
    ("ckptctl_resume_ok.log", ("--resume-step", "120"), "continuous", "ckptctl", 120, 121),
    ("ckptctl_resume_ok.log", (), "continuous", "ckptctl", None, 121),
    ("ckptctl_resume_spike.log", ("--resume-step", "120"), "spike", "ckptctl", 120, 121),
    ("ckptctl_resume_replayed.log", ("--resume-step", "120"), "replayed-steps", "ckptctl", 120, 61),
    ("ckptctl_resume_skipped.log", ("--resume-step", "120"), "skipped-steps", "ckptctl", 120, 141),
    ("ckptctl_resume_nan.log", ("--resume-step", "120"), "nan", "ckptctl", 120, 121),
    ("ckptctl_from_scratch.log", (), "replayed-steps", "ckptctl", None, 1),
    ("ckptctl_preempted_seamless.log", (), "continuous", "ckptctl", 120, 121),
    ("jsonl_resume_ok.jsonl", ("--resume-step", "200"), "continuous", "jsonl", 200, 201),
    ("torchtitan_resume_ok.log", (), "continuous", "torchtitan", 500, 510),
    ("torchtitan_resume_spike.log", (), "spike", "torchtitan", 500, 510),
    ("hf_trainer_resume_ok.log", (), "continuous", "hf", 500, 51),
    ("hf_trainer_resume_spike.log", (), "spike", "hf", 500, 51),
    ("hf_trainer_from_scratch.log", (), "replayed-steps", "hf", None, 1),
    ("lightning_bar_resume_ok.log", (), "continuous", "lightning", 500, 501),
    ("lightning_bar_resume_spike.log", (), "spike", "lightning", 500, 501),
    (
        "lightning_csv/version_1/metrics.csv",
        ("--baseline", str(LOGS / "lightning_csv/version_0/metrics.csv"), "--resume-step", "1000"),
        "continuous",
        "lightning-csv",
        1000,
        1009,
    ),
    ("megatron_resume_ok.log", (), "continuous", "megatron", 1000, 1010),
    ("megatron_resume_nan.log", (), "nan", "megatron", 1000, 1010),
    ("nanogpt_resume_ok.log", ("--resume-step", "500"), "continuous", "nanogpt", 500, 500),
    ("custom_resume_spike.log", ("--pattern", CUSTOM_PATTERN), "spike", "pattern", None, 151),
]


@pytest.mark.parametrize(
    ("log", "args", "verdict", "fmt", "resume_step", "first"),
    CASES,
    ids=[f"{c[0]}{'+' + c[1][0] if c[1] else ''}" for c in CASES],
)
def test_fixture_logs(
    log: str, args: tuple[str, ...], verdict: str, fmt: str, resume_step: int | None, first: int
) -> None:
    result = watch(str(LOGS / log), *args, "--json")
    assert result.exit_code == (0 if verdict == "continuous" else 3), result.output
    doc = strict_json(result.stdout)
    assert doc["verdict"] == verdict, doc["explanation"]
    assert doc["log"]["format"] == fmt
    assert doc["resume_step"] == resume_step
    assert doc["first_resumed_step"] == first
    assert doc["decided"] is True
    if verdict != "continuous":
        assert doc["findings"] and doc["findings"][0]["verdict"] == verdict


def test_json_document_schema() -> None:
    result = watch(str(LOGS / "ckptctl_resume_spike.log"), "--resume-step", "120", "--json")
    doc = strict_json(result.stdout)
    for key in (
        "schema",
        "verdict",
        "decided",
        "resume_step",
        "baseline",
        "observed",
        "threshold",
        "findings",
        "explanation",
        "log",
        "config",
    ):
        assert key in doc
    assert doc["schema"] == ops.SCHEMA
    b, t, o = doc["baseline"], doc["threshold"], doc["observed"]
    assert {
        "level",
        "spread",
        "slope_per_step",
        "num_points",
        "first_step",
        "last_step",
        "log_interval",
    } <= set(b)
    assert t["value"] == pytest.approx(b["level"] + t["tolerance"])
    assert t["median_value"] == pytest.approx(b["level"] + t["median_tolerance"])
    assert o["num_points"] == doc["config"]["num_steps"] == 20
    assert [s for s, _ in o["losses"]] == list(range(121, 141))
    assert o["median_loss"] > t["median_value"]
    assert doc["log"]["rank"] == 0 and doc["log"]["step_kind"] == "logged"


def test_nan_is_json_safe() -> None:
    result = watch(str(LOGS / "megatron_resume_nan.log"), "--steps", "10", "--json")
    doc = strict_json(result.stdout)
    assert doc["verdict"] == "nan" and doc["findings"][0]["step"] == 1050


def test_human_output_explains_with_numbers() -> None:
    result = watch(str(LOGS / "ckptctl_resume_spike.log"), "--resume-step", "120")
    assert result.exit_code == 3
    doc = strict_json(
        watch(str(LOGS / "ckptctl_resume_spike.log"), "--resume-step", "120", "--json").stdout
    )
    text = result.stdout
    assert text.startswith("verdict: spike")
    for number in (
        doc["baseline"]["level"],
        doc["baseline"]["spread"],
        doc["threshold"]["value"],
        doc["observed"]["median_loss"],
    ):
        assert f"{number:.4g}" in text
    assert "decision: spike" in text
    text.encode("ascii")  # pasted into tickets


def test_thresholds_are_flags() -> None:
    spike = str(LOGS / "ckptctl_resume_spike.log")
    strict = strict_json(watch(spike, "--resume-step", "120", "--json").stdout)
    loose = strict_json(
        watch(spike, "--resume-step", "120", "--k", "100", "--k-median", "100", "--json").stdout
    )
    assert loose["verdict"] == "continuous" and strict["verdict"] == "spike"
    assert loose["threshold"]["tolerance"] > strict["threshold"]["tolerance"]
    few = strict_json(
        watch(
            spike,
            "--steps",
            "5",
            "--window",
            "30",
            "--persistence",
            "2",
            "--min-rel-tol",
            "0.1",
            "--json",
        ).stdout
    )
    assert few["config"]["num_steps"] == 5 and few["observed"]["num_points"] == 5
    assert few["baseline"]["num_points"] == 30 and few["config"]["persistence"] == 2
    assert few["threshold"]["relative_floor"] == pytest.approx(0.1 * few["baseline"]["level"])


def test_stdin() -> None:
    text = (LOGS / "ckptctl_resume_ok.log").read_text()
    result = watch("-", "--json", stdin=text)
    assert result.exit_code == 0
    assert strict_json(result.stdout)["log"]["path"] == "-"


def test_fsspec_url() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe_file("/watch-test/train.log", (LOGS / "ckptctl_resume_spike.log").read_bytes())
    result = ops.watch_log("memory://watch-test/train.log", resume_step=120)
    assert result.verdict == "spike"


def test_log_format_choices_match_the_parser() -> None:
    assert [f.value for f in LogFormat] == ["auto", *FORMATS]


# -- errors: one line, the documented exit code -------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("CKPTCTL_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "ckptctl", "watch", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("/nonexistent/train.log",), 1, "no such file"),
        ((str(LOGS / "make_fixtures.py"),), 1, "no training loss lines"),
        ((str(LOGS / "custom_resume_spike.log"), "--pattern", "("), 2, "--pattern"),
        (
            (str(LOGS / "custom_resume_spike.log"), "--pattern", r"it=(?P<step>\d+)"),
            2,
            "named group 'loss'",
        ),
        ((str(LOGS / "ckptctl_resume_ok.log"), "--baseline", "-"), 2, "--baseline cannot be stdin"),
        (
            (str(LOGS / "ckptctl_resume_ok.log"), "--baseline", str(LOGS / "make_fixtures.py")),
            1,
            "no training loss lines",
        ),
        ((str(LOGS / "ckptctl_resume_ok.log"), "--format", "csv"), 2, "--format"),
        ((str(LOGS / "ckptctl_resume_ok.log"), "--steps", "0"), 2, "--steps"),
        (
            (str(LOGS / "ckptctl_resume_ok.log"), "--steps", "4", "--persistence", "6"),
            2,
            "persistence",
        ),
    ],
)
def test_errors(args: tuple[str, ...], code: int, needle: str) -> None:
    proc = run_cli(*args)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert needle in proc.stderr
    assert proc.stdout == ""


def test_watch_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "from ckptctl.cli.app import main\n"
        f"for argv in (['watch', {str(LOGS / 'ckptctl_resume_ok.log')!r}, '--json'], ['watch', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), (argv, e.code)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


# -- following a live log ------------------------------------------------------------------


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines(keepends=True)


def _writer(path: Path, chunks: list[list[str]], delay_s: float) -> threading.Thread:
    def write() -> None:
        for chunk in chunks:
            time.sleep(delay_s)
            with path.open("a") as f:
                f.writelines(chunk)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_follow_decides_as_the_resumed_run_logs(tmp_path: Path) -> None:
    lines = _lines("ckptctl_resume_spike.log")
    restart = next(i for i, line in enumerate(lines) if "restart worker group" in line)
    log = tmp_path / "train.log"
    log.write_text("".join(lines[:restart]))
    post = lines[restart:]
    # The resumed run logs a few lines at a time; far more than N points in total.
    writer = _writer(log, [post[i : i + 6] for i in range(0, len(post), 6)], 0.05)
    started = time.monotonic()
    result = ops.watch_log(
        str(log), resume_step=120, follow=True, timeout_s=20, poll_interval_s=0.02
    )
    assert result.verdict == "spike" and result.decided and not result.timed_out
    assert result.followed
    assert time.monotonic() - started < 15
    writer.join()


def test_follow_times_out_without_a_decision(tmp_path: Path) -> None:
    lines = _lines("ckptctl_resume_ok.log")
    restart = next(i for i, line in enumerate(lines) if "restart worker group" in line)
    log = tmp_path / "train.log"
    log.write_text("".join(lines[: restart + 10]))  # the resumed run logged 5 steps so far
    result = ops.watch_log(str(log), follow=True, timeout_s=0.3, poll_interval_s=0.05)
    assert result.verdict == "insufficient-data" and result.timed_out and not result.decided
    assert "timed out before a decision" in result.report.notes
    proc = run_cli(str(log), "--follow", "--timeout", "0.3", "--json")
    assert proc.returncode == 5  # insufficient-data: undecided
    assert strict_json(proc.stdout)["timed_out"] is True


def test_follow_waits_for_the_log_to_appear(tmp_path: Path) -> None:
    log = tmp_path / "late.log"
    baseline = tmp_path / "before.log"
    lines = _lines("ckptctl_resume_ok.log")
    restart = next(i for i, line in enumerate(lines) if "restart worker group" in line)
    baseline.write_text("".join(lines[:restart]))
    writer = _writer(log, [lines[restart:]], 0.2)
    result = ops.watch_log(
        str(log),
        baseline_path=str(baseline),
        resume_step=120,
        follow=True,
        timeout_s=10,
        poll_interval_s=0.02,
    )
    assert result.verdict == "continuous" and result.report.resume_detected_by == "baseline-file"
    writer.join()


def test_line_reader_survives_truncation(tmp_path: Path) -> None:
    log = tmp_path / "rotating.log"
    log.write_text("a\nb\n")
    reader = LineReader(str(log), follow=True, timeout_s=5, poll_interval_s=0.01)
    seen: list[str] = []
    for item in reader:
        if item is None:
            if seen == ["a", "b"]:
                log.write_text("c\n")  # truncated and rewritten (copytruncate)
            elif "c" in seen:
                break
            continue
        seen.append(item)
    assert seen == ["a", "b", "c"] and reader.num_truncations == 1


def test_line_reader_follows_a_pipe_with_a_deadline() -> None:
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd) as stream, os.fdopen(write_fd, "w") as sink:
        sink.write("one\ntwo\n")
        sink.flush()
        reader = LineReader("-", follow=True, timeout_s=0.3, poll_interval_s=0.05, stdin=stream)
        started = time.monotonic()
        lines = [item for item in reader if item is not None]
        assert lines == ["one", "two"] and reader.timed_out
        assert time.monotonic() - started < 3


def test_line_reader_decodes_damaged_bytes(tmp_path: Path) -> None:
    log = tmp_path / "bin.log"
    log.write_bytes(b"ok \xff\xfe line\r\nlast line without newline")
    assert list(LineReader(str(log))) == ["ok \ufffd\ufffd line", "last line without newline"]


# -- the ops API recover builds on ---------------------------------------------------------


def test_watch_lines_stops_reading_at_the_decision() -> None:
    lines = _lines("ckptctl_resume_spike.log")
    consumed = 0

    def stream() -> Iterator[str]:
        nonlocal consumed
        for line in lines:
            consumed += 1
            yield line

    result = ops.watch_lines(stream(), resume_step=120)
    assert result.verdict == "spike" and result.decided
    assert consumed < len(lines)  # did not drain the child's output


def test_loss_watcher_push_api_with_separate_baseline() -> None:
    lines = _lines("ckptctl_resume_ok.log")
    restart = next(i for i, line in enumerate(lines) if "restart worker group" in line)
    watcher = ops.LossWatcher(
        resume_step=120, baseline_lines=lines[:restart], config=ops.make_config(num_steps=10)
    )
    decided = None
    for n, line in enumerate(lines[restart:], start=1):  # noqa: B007 - n is checked below
        decided = watcher.feed(line)
        if decided is not None:
            break
    assert decided is not None and decided.verdict == "continuous"
    assert decided.report.observed is not None and decided.report.observed.num_points == 10
    assert n < len(lines) - restart
    assert decided.to_json()["baseline_log"]["num_points"] == 150


def test_ops_errors_are_domain_errors() -> None:
    with pytest.raises(UsageError, match="named group 'loss'"):
        ops.LossWatcher(pattern=r"(?P<step>\d+)")
    with pytest.raises(UsageError, match="k_median"):
        ops.make_config(k_median=0)
    with pytest.raises(InputError, match="no training loss lines"):
        ops.LossWatcher(baseline_lines=["nothing here"])
    with pytest.raises(InputError, match="no training loss lines"):
        ops.watch_log("-", stdin=io.StringIO("hello\nworld\n"))


# -- the real example trainer ----------------------------------------------------------------


@pytest.mark.slow
def test_real_trainer_crash_and_resume(tmp_path: Path) -> None:
    """examples/train.py killed mid-run and resumed reproduces its losses bit for bit;
    the same run restarted without its checkpoint is caught."""
    pytest.importorskip("torch")
    train = REPO / "examples" / "train.py"
    if not train.exists():
        pytest.skip("examples/train.py not present")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    common = [sys.executable, str(train), "--steps", "40", "--save-every", "10"]

    def run(*args: str) -> str:
        proc = subprocess.run(
            [*common, *args], capture_output=True, text=True, env=env, timeout=300
        )
        return proc.stdout

    crashed = run("--ckpt-root", str(tmp_path / "run"), "--crash-at-step", "35")
    resumed = run("--ckpt-root", str(tmp_path / "run"), "--resume-from", "auto")
    log = tmp_path / "train.log"
    log.write_text(crashed + resumed)
    result = watch(str(log), "--expect-identical", "--steps", "10", "--json")
    doc = strict_json(result.stdout)
    assert result.exit_code == 0 and doc["verdict"] == "continuous", doc["explanation"]
    assert doc["resume_step"] == 30 and doc["resume_step_source"] == "log-marker"
    assert doc["rerun"]["num_compared"] == 4 and doc["rerun"]["num_identical"] == 4  # steps 31..34

    fresh = run("--ckpt-root", str(tmp_path / "other"))  # "resumed" with no state at all
    log.write_text(crashed + fresh)
    doc = strict_json(watch(str(log), "--json").stdout)
    assert doc["verdict"] == "replayed-steps" and doc["first_resumed_step"] == 1


def test_cli_defaults_match_the_watch_config() -> None:
    """cli/watch.py spells out WatchConfig's defaults (so --help need not import the core)."""
    from ckptctl.cli import watch as cli_watch
    from ckptctl.core.watch.model import WatchConfig
    from ckptctl.ops import watch as ops_watch

    cfg = WatchConfig()
    for name, value in vars(cli_watch._DEFAULTS).items():
        assert getattr(cfg, name) == value, name
    assert cli_watch.DEFAULT_TIMEOUT_S == ops_watch.DEFAULT_TIMEOUT_S
