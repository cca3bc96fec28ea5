"""A tiny torchrun worker for the launch tests (no training, starts in milliseconds).

Every rank prints one line ``rank=R world=W pid=P ppid=Q resume_from=X``, then:

* ``--mode ok``: exits 0 (with ``--gloo``: first joins a gloo process group and
  all-reduces its rank, printing ``rank=R allreduce=S``);
* ``--mode fail``: rank ``--fail-rank`` exits with ``--fail-code``, the others 0;
* ``--mode sleep``: prints ``rank=R ready`` and sleeps (until signalled);
* ``--mode ignore-term``: ignores SIGTERM, prints ``rank=R ready``, sleeps.

Extra lines ``step=N`` (``--steps N``) let a line callback pick a point to stop.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import TextIO


def say(text: str, stream: TextIO | None = None) -> None:
    """One write per line: the job runs with PYTHONUNBUFFERED=1, where ``print`` writes the
    text and its newline separately, so two ranks sharing torchrun's pipe could splice lines."""
    out = stream or sys.stdout
    out.write(text + "\n")
    out.flush()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ok", "fail", "sleep", "ignore-term"], default="ok")
    p.add_argument("--fail-rank", type=int, default=1)
    p.add_argument("--fail-code", type=int, default=3)
    p.add_argument("--gloo", action="store_true")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--resume-from", default=None)
    p.add_argument("--touch", default=None, help="create this file (proves the job ran)")
    args = p.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if args.mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.touch and rank == 0:
        with open(args.touch, "w") as f:
            f.write("ran\n")
    say(f"rank={rank} world={world} pid={os.getpid()} ppid={os.getppid()} resume_from={args.resume_from}")
    if args.gloo:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        t = torch.tensor([float(rank)])
        dist.all_reduce(t)
        say(f"rank={rank} allreduce={int(t.item())}")
        dist.destroy_process_group()
    for step in range(args.steps):
        say(f"rank={rank} step={step}")
    if args.mode == "fail" and rank == args.fail_rank:
        say(f"rank={rank} failing with {args.fail_code}", sys.stderr)
        return args.fail_code
    if args.mode in ("sleep", "ignore-term"):
        say(f"rank={rank} ready")
        time.sleep(300)
    return 0


if __name__ == "__main__":
    sys.exit(main())
