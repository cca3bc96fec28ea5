"""``ckptctl watch LOG``: is the loss continuous across the resume? (RB-7 step "Confirm the loss continues")."""

from __future__ import annotations

from enum import Enum
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated

import typer

from ckptctl import exit_codes
from ckptctl.cli import output as out
from ckptctl.cli.options import JsonOpt

if TYPE_CHECKING:
    from ckptctl.ops.watch import WatchResult

# The ops/core modules are imported inside the command: `ckptctl --help` stays fast.


class LogFormat(str, Enum):
    """``--format`` choices (``ckptctl.core.watch.losslog.FORMATS`` plus auto)."""

    auto = "auto"
    ckptctl = "ckptctl"
    megatron = "megatron"
    torchtitan = "torchtitan"
    nanogpt = "nanogpt"
    detectron2 = "detectron2"
    fairseq = "fairseq"
    deepspeed = "deepspeed"
    coqui = "coqui"
    lightning = "lightning"
    keras = "keras"
    jsonl = "jsonl"
    hf = "hf"
    lightning_csv = "lightning-csv"
    columns = "columns"
    generic = "generic"


LogArg = Annotated[
    str,
    typer.Argument(
        metavar="LOG",
        help="Training log: a file, an fsspec URL (s3://...), or - for stdin.",
        show_default=False,
    ),
]
BaselineOpt = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        metavar="FILE",
        help="Pre-failure log, when LOG holds only the resumed run. Default: the part of LOG "
        "before the resume.",
    ),
]
ResumeStepOpt = Annotated[
    int | None,
    typer.Option(
        "--resume-step",
        metavar="N",
        min=0,
        help="Step of the checkpoint the run resumed from. Default: the trainer's restore line, "
        "else the restart of the step counter (replayed/skipped steps are then only partly checked).",
    ),
]
FormatOpt = Annotated[
    LogFormat,
    typer.Option("--format", help="Log format (auto: detect from the first loss line)."),
]
PatternOpt = Annotated[
    str | None,
    typer.Option(
        "--pattern",
        metavar="REGEX",
        help="Regular expression with named groups loss (required), step, rank, epoch, "
        "for any other log format.",
    ),
]
MetricOpt = Annotated[
    str | None,
    typer.Option(
        "--metric",
        metavar="TAG",
        help="For a TensorBoard event file/dir or an MLflow run as LOG: the scalar that is the "
        "training loss (e.g. train/loss). Default: the best loss-like name.",
    ),
]
CheckpointOpt = Annotated[
    str | None,
    typer.Option(
        "--checkpoint",
        metavar="DIR",
        help="The checkpoint the run resumed from: its ckptctl.json gives the resume step (unless "
        "--resume-step) and the tokens seen that the resumed counter must continue from.",
    ),
]
FollowOpt = Annotated[
    bool,
    typer.Option(
        "--follow", "-f", help="Keep reading the growing log until a decision or --timeout."
    ),
]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        min=0,
        help="With --follow: seconds to wait for a decision (0: no limit).",
    ),
]
StepsOpt = Annotated[
    int, typer.Option("--steps", min=1, help="Logged points after the resume that are judged (N).")
]
WindowOpt = Annotated[
    int,
    typer.Option("--window", min=3, help="Pre-failure points the baseline is fitted on (W)."),
]
KOpt = Annotated[
    float,
    typer.Option(
        "--k",
        min=0,
        help="Tolerance of a single point in robust standard deviations (1.4826 x MAD) of the "
        "baseline; --persistence points in a row above it make a spike.",
    ),
]
KMedianOpt = Annotated[
    float,
    typer.Option(
        "--k-median",
        min=0,
        help="Tolerance of the median of the first N points, in the same units (lower than --k: "
        "a median moves far less than one point).",
    ),
]
MinRelTolOpt = Annotated[
    float,
    typer.Option(
        "--min-rel-tol",
        min=0,
        help="Floor of the tolerance as a fraction of the loss level (0.02 = 2%).",
    ),
]
PersistenceOpt = Annotated[
    int,
    typer.Option(
        "--persistence", min=1, help="Consecutive points above the threshold that make a spike."
    ),
]
ExpectIdenticalOpt = Annotated[
    bool,
    typer.Option(
        "--expect-identical",
        help="Training is deterministic: re-run steps must reproduce the pre-failure losses exactly.",
    ),
]

DataMayRestartOpt = Annotated[
    bool,
    typer.Option(
        "--data-may-restart",
        help="The data loader is not resumable by design (it starts its epoch over on a resume): "
        "other batches at the re-run steps are a note, not data-stream-reset / data-position-mismatch.",
    ),
]

DataMustContinueOpt = Annotated[
    bool,
    typer.Option(
        "--data-must-continue",
        help="Judge a data loader that starts over as data-stream-reset even for the loggers whose stock "
        "loader does so by design (detectron2, nanoGPT: a note otherwise).",
    ),
]

# WatchConfig's defaults, spelled out so that building the CLI does not import the
# watch core; tests/test_watch_cli.py checks they agree.
_DEFAULTS = SimpleNamespace(
    num_steps=20, window=100, k=4.0, k_median=2.5, min_rel_tol=0.02, persistence=3,
    min_baseline_points=10, local_points=9,
)  # fmt: skip
DEFAULT_TIMEOUT_S = 1800.0


def watch(
    log: LogArg,
    baseline: BaselineOpt = None,
    resume_step: ResumeStepOpt = None,
    log_format: FormatOpt = LogFormat.auto,
    pattern: PatternOpt = None,
    metric: MetricOpt = None,
    checkpoint: CheckpointOpt = None,
    follow: FollowOpt = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    steps: StepsOpt = _DEFAULTS.num_steps,
    window: WindowOpt = _DEFAULTS.window,
    k: KOpt = _DEFAULTS.k,
    k_median: KMedianOpt = _DEFAULTS.k_median,
    min_rel_tol: MinRelTolOpt = _DEFAULTS.min_rel_tol,
    persistence: PersistenceOpt = _DEFAULTS.persistence,
    expect_identical: ExpectIdenticalOpt = False,
    data_may_restart: DataMayRestartOpt = False,
    data_must_continue: DataMustContinueOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Check that the loss continues across a resume: no spike, NaN, replayed or skipped steps,
    tokens seen, data position and learning-rate schedule consistent with the checkpoint,
    re-run steps on the same batches as before the failure.

    LOG: a text log (any logger; .gz too), a TensorBoard event file/dir or an MLflow run.
    Exit 0 when continuous, 3 for a problem (spike, nan, replayed-steps, skipped-steps,
    tokens-mismatch, data-position-mismatch, schedule-reset, data-stream-reset, diverged),
    5 for insufficient-data (not decided).
    """
    from ckptctl.ops import watch as watch_ops

    checkpoint_tokens: float | None = None
    if checkpoint is not None:
        ckpt_step, checkpoint_tokens = watch_ops.read_checkpoint(checkpoint)
        resume_step = ckpt_step if resume_step is None else resume_step

    config = watch_ops.make_config(
        num_steps=steps,
        window=window,
        k=k,
        k_median=k_median,
        min_rel_tol=min_rel_tol,
        # The default persistence shrinks with a short --steps; an explicit one must fit.
        persistence=min(persistence, steps)
        if persistence == _DEFAULTS.persistence
        else persistence,
        min_baseline_points=min(_DEFAULTS.min_baseline_points, window),
        local_points=min(_DEFAULTS.local_points, window),
        expect_identical=expect_identical,
        data_may_restart=data_may_restart,
        data_must_continue=data_must_continue,
    )
    if follow and not json_output:
        out.info(
            f"following {log} until a decision"
            + (f" or {timeout:g} s" if timeout else "")
            + f" ({steps} points after the resume)"
        )
    result = watch_ops.watch_log(
        log,
        baseline_path=baseline,
        resume_step=resume_step,
        config=config,
        log_format=str(log_format.value),
        pattern=pattern,
        follow=follow,
        timeout_s=timeout if timeout else None,
        metric=metric,
        checkpoint_tokens=checkpoint_tokens,
    )
    if json_output:
        out.emit_json(result.to_json())
    else:
        _render(result)
    raise typer.Exit(exit_code(result.verdict))


def exit_code(verdict: str) -> int:
    """0 continuous, 5 insufficient-data (undecided), 3 any problem."""
    if verdict == "continuous":
        return exit_codes.OK
    if verdict == "insufficient-data":
        return exit_codes.UNDECIDED
    return exit_codes.PROBLEM


def _render(result: WatchResult) -> None:
    r = result.report
    where = (
        result.log
        if result.baseline_path is None
        else f"{result.log} (baseline {result.baseline_path})"
    )
    fmt = result.log_format or "no format recognised"
    rank = "" if r.rank is None else f", rank {r.rank}"
    out.print_line(f"verdict: {result.verdict}  [{where}: {fmt}{rank}]")
    for line in r.explanation:
        out.print_line(f"  {line}")
    for finding in r.findings[1:]:
        out.print_line(f"  also: {finding.verdict} - {finding.message}")
    for note in r.notes:
        out.print_line(f"  note: {note}")
    if r.confidence is not None:
        out.print_line(f"  confidence: {r.confidence}")
    out.print_loss_chart(result.to_json())


def register(app: typer.Typer) -> None:
    """Add the command(s) of this module to the app."""
    app.command("watch")(watch)
