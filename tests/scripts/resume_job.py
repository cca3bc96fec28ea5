"""A stand-in trainer for the recover tests: ``ckptctl-train`` lines without a model.

Run by real ``torchrun`` (any number of ranks; no process group is joined, so it
starts in the time torchrun takes). It reads ``--resume-from PATH`` the way
``examples/train.py`` does: PATH must be a checkpoint directory ``step_N`` that
holds a DCP ``.metadata`` (else exit 2). Rank 0 then prints, like train.py::

    ckptctl-train resumed from=PATH step=N world_size=W saved_world_size=W
    ckptctl-train step=S loss=<repr(float)> tokens_seen=<int> lr=<float> rank=0

for S = N+1 .. ``--steps``, with ``loss = curve_loss(S)``. The tests write the
pre-failure baseline log from the same function (``baseline_lines``), so a resume
from a good checkpoint continues the curve bit for bit, and the re-run steps equal
the pre-failure ones exactly. Then ``ckptctl-train done step=<steps>`` and exit 0.

How the run goes wrong, chosen by the checkpoint it was resumed from:

* ``--spike-from-step K``: resumed from a step >= K, the losses sit
  ``SPIKE_JUMP`` above the curve (a resume that restored the wrong state), and
  after them the job keeps "training" (sleeps ``--hang-s``) so only a stop from
  the outside ends it: the loss watch must stop it.
* ``--fail-on-resume``: resumed from anything, every rank exits 1 right after the
  start line (a restart loop: the same crash from the same step every time).
* ``--fail-after-steps K``: resumed from a step below ``--fail-below-step``
  (default: any), the run logs K steps of the curve, saves ``step_<N+K>`` (see
  below: a new complete checkpoint, so the step advances), then rank 0 exits 1
  (torchrun: the job failed). Resumed from a later step it runs normally.

``--emergency-save``: on SIGTERM (the watch's stop), rank 0 "saves" an emergency
checkpoint ``step_<last step printed>`` the same way, prints ``ckptctl-train preempted
... exit_code=75`` and exits 75, as ``ckptctl.training`` does.

``--hang-after-steps K``: resumed from a step below ``--hang-below-step`` (default:
any), rank 0 logs K steps (and any ``--save-at-step`` among them), then stops making
progress: it sleeps ``--hang-s`` without a word, as a job stuck in a collective or in
I/O would (recover's hang check must stop it). Resumed from a later step it runs normally.

``--save-at-step K``: after printing step K, rank 0 "saves" ``step_K`` next to
the checkpoint it resumed from: a copy of that checkpoint (real DCP files), written
under a temporary name and renamed, as a committed save is. Its content is the
state the run resumed from, which is exactly what makes a checkpoint saved by a
bad resume as bad as the one it came from.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
from typing import TextIO

#: How far above the curve the losses of a bad resume sit.
SPIKE_JUMP = 3.0
_STEP_DIR = re.compile(r"^step_(\d+)$")


def say(text: str, stream: TextIO | None = None) -> None:
    """One write per line (PYTHONUNBUFFERED ``print`` writes the newline separately, and ranks
    share torchrun's pipe)."""
    out = stream or sys.stdout
    out.write(text + "\n")
    out.flush()


def curve_loss(step: int) -> float:
    """A smooth, falling, slightly wavy loss curve (the same in every process)."""
    return 1.8 + 1.6 * math.exp(-step / 12.0) + 0.015 * math.sin(1.3 * step)


def loss_line(step: int, loss: float, *, tokens_per_step: int = 128, rank: int = 0) -> str:
    return (
        f"ckptctl-train step={step} loss={loss!r} tokens_seen={step * tokens_per_step} "
        f"lr=0.001 rank={rank}"
    )


def baseline_lines(last_step: int) -> list[str]:
    """The pre-failure log of an uninterrupted run up to ``last_step`` (for the tests)."""
    return [loss_line(s, curve_loss(s)) for s in range(1, last_step + 1)]


def save_copy(src: str, step: int) -> str:
    """Commit a copy of checkpoint ``src`` as ``step_<step>`` beside it (temp dir, then rename)."""
    final = os.path.join(os.path.dirname(src), f"step_{step}")
    if os.path.lexists(final):
        raise SystemExit(f"resume_job: {final} exists already")
    tmp = f"{final}.tmp-{os.getpid()}"
    shutil.copytree(src, tmp)
    os.rename(tmp, final)
    return final


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--resume-from", default=None)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-sleep-s", type=float, default=0.0)
    p.add_argument("--spike-from-step", type=int, default=None)
    p.add_argument("--hang-s", type=float, default=120.0)
    p.add_argument("--fail-on-resume", action="store_true")
    p.add_argument("--fail-after-steps", type=int, default=None)
    p.add_argument("--fail-below-step", type=int, default=None)
    p.add_argument("--save-at-step", type=int, default=None)
    p.add_argument("--emergency-save", action="store_true")
    p.add_argument("--hang-after-steps", type=int, default=None)
    p.add_argument("--hang-below-step", type=int, default=None)
    args = p.parse_args()

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    start = 0
    path: str | None = None
    if args.resume_from is not None:
        path = args.resume_from.rstrip("/")
        m = _STEP_DIR.match(os.path.basename(path))
        if m is None or not os.path.isfile(os.path.join(path, ".metadata")):
            print(
                f"resume_job: {args.resume_from} is not a step_N checkpoint with a .metadata",
                file=sys.stderr,
            )
            return 2
        start = int(m.group(1))
        if rank == 0:
            say(f"ckptctl-train resumed from={path} step={start} world_size={world} saved_world_size={world}")
            # ckptctl recover passes the token of the run-root lock it holds (the training
            # library's retention uses it); check it against the lock file itself
            token = os.environ.get("CKPTCTL_RUN_LOCK_TOKEN")
            lock_file = os.path.join(os.path.dirname(path), ".ckptctl", "lock")
            held = None
            if os.path.isfile(lock_file):
                with open(lock_file) as f:
                    held = json.load(f).get("token")
            say(f"resume_job: lock token passed={token is not None} matches={token is not None and token == held}")
        if args.fail_on_resume:
            say(f"rank={rank} failing right after the resume from step {start}", sys.stderr)
            return 1

    failing_after: int | None = None
    if (
        args.fail_after_steps is not None
        and path is not None
        and (args.fail_below_step is None or start < args.fail_below_step)
    ):
        failing_after = start + args.fail_after_steps
    spiking = (
        args.spike_from_step is not None
        and args.resume_from is not None
        and start >= args.spike_from_step
    )
    hang_at: int | None = None
    if args.hang_after_steps is not None and (args.hang_below_step is None or start < args.hang_below_step):
        hang_at = start + args.hang_after_steps
    last = [start]
    if args.emergency_save and path is not None:
        import signal

        def on_term(_signum: int, _frame: object) -> None:
            final = os.path.join(os.path.dirname(path or "."), f"step_{last[0]}")
            if rank == 0 and last[0] > start and path is not None and not os.path.lexists(final):
                saved = save_copy(path, last[0])
                say(f"ckptctl-train preempted signal=SIGTERM step={last[0]} checkpoint={saved} exit_code=75")
            raise SystemExit(75)

        signal.signal(signal.SIGTERM, on_term)
    for step in range(start + 1, args.steps + 1):
        loss = curve_loss(step) + (SPIKE_JUMP if spiking else 0.0)
        if rank == 0:
            say(loss_line(step, loss))
            last[0] = step
            if path is not None and step in (args.save_at_step, failing_after):
                say(f"resume_job: saved {save_copy(path, step)}")
        if step == failing_after and rank == 0:  # after its save; the other ranks finish
            say(f"rank={rank} failing after saving step {step}", sys.stderr)
            return 1
        if step == hang_at:
            time.sleep(args.hang_s)  # no progress, no word: only a stop from outside ends this
            return 0
        if args.step_sleep_s:
            time.sleep(args.step_sleep_s)
    if spiking:
        time.sleep(args.hang_s)  # still "training": only the loss watch's stop ends this
        return 0
    if rank == 0:
        say(f"ckptctl-train done step={args.steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
