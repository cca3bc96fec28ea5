"""Trainers whose stock data loader starts over on a resume, by design.

Pure, stdlib only. Some trainers restore the model, optimizer, scheduler and step counter but
never the data loader's position: a resumed run draws other batches at the re-run steps,
every time, and ``data-stream-reset`` would be a finding on every one of their resumes, with
nothing a fall-back could change. For the loggers below (``logplan.DIALECTS``: the shape of
their record lines names them) that restart is what their own code does, so the replay and
data-position checks give the note ``data-restarted-by-design`` instead, naming why, as
``--data-may-restart`` does. ``--data-must-continue`` (``WatchConfig.data_must_continue``)
judges them like any other log (a fork that made its loader resumable).

Each entry says what the trainer's source does; a logger is listed only when its stock
training loop has no resumable loader at all (a trainer whose loader may or may not be
resumable, such as Lightning's, is not: it says so itself when it is not).
"""

from __future__ import annotations

from collections.abc import Sequence

from ckptctl.core.watch.context import CheckContext
from ckptctl.core.watch.logevents import LogEvent, LossPoint

#: Logger (``LossPoint.fmt``) -> why its resumed run draws other batches.
RESTARTS_BY_DESIGN: dict[str, str] = {
    "detectron2": (
        "detectron2's training samplers (TrainingSampler, RepeatFactorTrainingSampler in "
        "detectron2/data/samplers/distributed_sampler.py) are infinite streams seeded when the loader "
        "is built, and resume_or_load (detectron2/engine/defaults.py) restores the model, optimizer, "
        "scheduler and iteration, not the sampler"
    ),
    "nanogpt": (
        "nanoGPT's get_batch (karpathy/nanoGPT train.py) draws random offsets with torch.randint, seeded "
        "at start-up, and its ckpt.pt holds no RNG or loader state"
    ),
}


def restart_by_design(events: Sequence[LogEvent], first_line: int) -> str | None:
    """Why the run's data loader starts over on a resume (``RESTARTS_BY_DESIGN``), judged by the
    logger of the resumed run's first point (at line ``first_line`` or after); None otherwise."""
    for e in events:
        if isinstance(e, LossPoint) and e.line_no >= first_line:
            return RESTARTS_BY_DESIGN.get(e.fmt)
    return None


def expected_restart(ctx: CheckContext) -> str | None:
    """Why a data loader that started over on the resume judged is expected (the caller said so,
    ``data_may_restart``, or the logger's stock loader does: ``restart_by_design``), else None."""
    if ctx.cfg.data_may_restart:
        return "the run's loader starts over by design"
    if ctx.cfg.data_must_continue or ctx.resumed.source != "log" or not ctx.resumed.points:
        return None
    events = next((events for source, events in ctx.sources if source == "log"), ())
    return restart_by_design(events, ctx.resumed.points[0].line_no)
