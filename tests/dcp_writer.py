"""Write real DCP checkpoints for the tests (run under torchrun, gloo on CPU).

Usage: torchrun --nproc-per-node=N tests/dcp_writer.py OUT_DIR

Writes into OUT_DIR:
- ``run/step_10``, ``run/step_20``, ``run/step_30``: model + optimizer + LR scheduler +
  extra state (step, python/numpy/torch RNG per rank), FSDP2-sharded when N > 1;
- ``variants/ddp_dedup``: replicated (DDP-like) state saved with
  ``dedup_save_to_lowest_rank=True`` (higher ranks leave 0-byte shards);
- ``variants/threads2``: ``FileSystemWriter(thread_count=2)`` (several files per rank);
- ``variants/rank_local``: ``use_collectives=False`` (``__r.metadata`` per rank);
- ``variants/hostile_record``: a non-tensor value whose pickle calls ``os.system``
  (nothing runs while saving; DCP would run it at load).
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.state_dict import get_state_dict


class Evil:
    """A value whose unpickling would run a shell command."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Embedding(64, 16), torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 64)
    )


def train_state(model: torch.nn.Module, steps: int, rank: int):  # type: ignore[no-untyped-def]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    g = torch.Generator().manual_seed(1234 + rank)
    for _ in range(steps):
        x = torch.randint(0, 64, (4, 8), generator=g)
        loss = model(x).logsumexp(-1).mean()
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    return opt, sched


def full_state(model, opt, sched, step: int, rank: int):  # type: ignore[no-untyped-def]
    msd, osd = get_state_dict(model, opt)
    return {
        "model": msd,
        "optim": osd,
        "lr_scheduler": sched.state_dict(),
        "extra": {
            "step": step,
            f"py_rng.rank{rank}": random.getstate(),
            f"np_rng.rank{rank}": np.random.get_state(),
            f"torch_rng.rank{rank}": torch.get_rng_state(),
        },
    }


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    random.seed(rank)
    np.random.seed(rank)

    model = make_model()
    if world > 1:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if any(True for _ in layer.parameters()):
                fully_shard(layer)
        fully_shard(model)
    opt, sched = None, None
    done = 0
    for step in (10, 20, 30):
        if opt is None:
            opt, sched = train_state(model, step, rank)
        else:
            opt2, sched2 = opt, sched
            g = torch.Generator().manual_seed(step + rank)
            for _ in range(step - done):
                x = torch.randint(0, 64, (4, 8), generator=g)
                model(x).logsumexp(-1).mean().backward()
                opt2.step()
                sched2.step()
                opt2.zero_grad()
        done = step
        dcp.save(full_state(model, opt, sched, step, rank), checkpoint_id=os.path.join(out, "run", f"step_{step}"))

    # Replicated state (every rank holds the same full tensors), deduplicated onto rank 0.
    plain = make_model()
    popt, _psched = train_state(plain, 3, 0)
    rep = {"model": plain.state_dict(), "optim": popt.state_dict()}
    dcp.save(
        rep,
        checkpoint_id=os.path.join(out, "variants", "ddp_dedup"),
        planner=DefaultSavePlanner(dedup_save_to_lowest_rank=True),
    )
    dcp.save(
        full_state(model, opt, sched, 30, rank),
        storage_writer=dcp.FileSystemWriter(os.path.join(out, "variants", "threads2"), thread_count=2),
    )
    dcp.save(
        full_state(model, opt, sched, 30, rank),
        checkpoint_id=os.path.join(out, "variants", "rank_local"),
        use_collectives=False,
    )
    sd = full_state(model, opt, sched, 30, rank)
    sd["extra"]["evil"] = Evil(os.path.join(out, "PWNED"))
    dcp.save(sd, checkpoint_id=os.path.join(out, "variants", "hostile_record"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
