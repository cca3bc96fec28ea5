"""A tiny GPT trained with DDP or FSDP2 under torchrun, checkpointed with ``ckptctl.training``.

    torchrun --nproc-per-node=2 examples/train.py --ckpt-root /tmp/run --steps 40 --save-every 5
    torchrun --nproc-per-node=2 examples/train.py --ckpt-root /tmp/run --resume-from "$(ckptctl locate /tmp/run)"
    python examples/train.py --ckpt-root /tmp/run --resume-from auto        # one process, no torchrun

stdout, rank 0 only (``--log-all-ranks`` for every rank), one line per optimizer step::

    ckptctl-train step=<int> loss=<repr(float)> tokens_seen=<int> lr=<float> rank=<int>

``step`` counts optimizer steps completed (the first line of a fresh run is
step=1; after resuming from step_N it is step=N+1). ``loss`` is the mean over
the global batch, printed with ``repr`` so runs can be compared bit for bit.
Other stdout lines: ``ckptctl-train resumed from=<path> step=<N> world_size=<W>
saved_world_size=<W0>``, ``ckptctl-train preempted signal=<NAME> step=<N>
checkpoint=<path> exit_code=75`` and ``ckptctl-train done step=<N>``. Notices
(checkpoints skipped by ``--resume-from auto``) go to stderr.

Exit codes: 0 done; 75 preempted after an emergency checkpoint (SIGTERM or
``--preemption-signal``, however many times each arrives: docs/training.md,
"Preemption"); 2 bad flags; killed by SIGINT when aborted during a preemption;
anything else is a failure.

Fault injection (for tests and drills):
  --crash-at-step N             SIGKILL rank --crash-rank when step N is about to run
                                (the last step logged is N-1; a save of N never starts)
  --crash-during-save-at-step N SIGKILL rank --crash-rank during the save of step N, at
                                --crash-save-phase (shards_written: after every rank's shards
                                and .metadata are on disk, before the manifest; manifest_written,
                                marker_written: rank 0 only, before the commit rename)
  --hang-at-step N              rank --hang-rank blocks for good when step N is about to run:
                                the other ranks wait for it in their next collective (a real
                                hang; the last step logged is N-1). ckptctl recover's hang check
                                stops it; its stack dump (ckptctl.training.stackdump) shows where.
  --reset-data-on-resume        after a resume, start the data loader over (epoch 0, first
                                batch): a loader recreated after the restore, so the data
                                position is lost while everything else is restored
  --drop-optimizer-on-resume    resume without the optimizer's state: the load leaves the
                                optimizer out and names it in an allowance
                                (allow_unexpected=("optimizer",)), so its moments and step
                                count start over while everything else is restored (the
                                load logs "ckptctl: restored: N/M keys ... allowed-unexpected=K")

Determinism: one intra-op thread per process, data drawn from a per-sample
generator, and augmentation that uses Python's ``random``, NumPy and torch's
RNG (so restoring all three is tested, not assumed).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import signal
import sys
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ckptctl.training import (
    PREEMPTED_EXIT_CODE,
    SAVE_PHASES,
    Checkpointer,
    PreemptedExit,
    ResumableBatchSampler,
    stackdump,
)

VOCAB = 32


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(
        self, seq_len: int, dim: int = 32, heads: int = 2, layers: int = 2, dropout: float = 0.1
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB)
        self.mask: torch.Tensor
        self.register_buffer(
            "mask", torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), 1), persistent=False
        )

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t)))
        for block in self.blocks:
            x = block(x, self.mask[:t, :t])
        return self.head(self.ln(x))


class Sequences(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Deterministic synthetic text: sample i is an arithmetic progression mod VOCAB."""

    def __init__(self, num_samples: int, seq_len: int, seed: int) -> None:
        self.num_samples = num_samples
        self.seq_len = seq_len
        self.seed = seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        start = int(torch.randint(0, VOCAB, (1,), generator=g))
        stride = int(torch.randint(1, 4, (1,), generator=g))
        seq = (start + stride * torch.arange(self.seq_len + 1)) % VOCAB
        return seq[:-1], seq[1:]


def augment(x: torch.Tensor) -> torch.Tensor:
    """Token noise drawn from all three RNGs: Python picks rows, NumPy positions, torch tokens."""
    x = x.clone()
    for row in range(x.shape[0]):
        if random.random() < 0.25:
            pos = int(np.random.randint(0, x.shape[1]))
            x[row, pos] = int(torch.randint(0, VOCAB, (1,)))
    return x


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--ckpt-root", required=True, help="run root for step_N checkpoints (path or fsspec URL)"
    )
    p.add_argument(
        "--resume-from",
        default=None,
        help="checkpoint directory, or 'auto' for the newest complete one",
    )
    p.add_argument(
        "--steps", type=int, default=40, help="train until this many optimizer steps are done"
    )
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--keep-last", type=int, default=None)
    p.add_argument("--async-save", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parallel", choices=("ddp", "fsdp"), default="ddp")
    p.add_argument("--global-batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--num-samples", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--crash-at-step", type=int, default=None)
    p.add_argument("--crash-during-save-at-step", type=int, default=None)
    p.add_argument("--crash-save-phase", choices=SAVE_PHASES[:3], default="shards_written")
    p.add_argument("--crash-rank", type=int, default=0)
    p.add_argument("--hang-at-step", type=int, default=None)
    p.add_argument("--hang-rank", type=int, default=1)
    p.add_argument(
        "--preemption-signal",
        default=None,
        help="extra signal that triggers an emergency save, e.g. SIGUSR1",
    )
    p.add_argument(
        "--step-sleep-s",
        type=float,
        default=0.0,
        help="sleep per step (slows a run down for drills)",
    )
    p.add_argument("--log-all-ranks", action="store_true")
    p.add_argument(
        "--reset-data-on-resume",
        action="store_true",
        help="fault: after a resume, start the data loader over (the data position is lost)",
    )
    p.add_argument(
        "--drop-optimizer-on-resume",
        action="store_true",
        help="fault: resume without the optimizer's state, by allowance (its moments start over)",
    )
    args = p.parse_args(argv)
    if args.steps < 1 or args.save_every < 1:
        p.error("--steps and --save-every must be >= 1")
    return args


def lr_lambda(total: int) -> Any:
    warmup = max(1, total // 10)

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

    return f


def say(text: str, stream: Any = None) -> None:
    """Print one line with a single write.

    ckptctl launches jobs with PYTHONUNBUFFERED=1, where ``print`` writes the text and the
    newline separately; ranks that share torchrun's output pipe could then splice their lines.
    """
    out = stream or sys.stdout
    out.write(text + "\n")
    out.flush()


def hang_forever() -> None:
    """Block like a rank stuck in I/O or a lost collective (only a signal ends it)."""
    import time

    sys.stdout.flush()
    while True:
        time.sleep(3600)


def kill_self() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    torch.set_num_threads(1)
    distributed = (
        "WORLD_SIZE" in os.environ
        and int(os.environ["WORLD_SIZE"]) >= 1
        and "MASTER_ADDR" in os.environ
    )
    if distributed:
        dist.init_process_group(backend="gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    stackdump.install(rank)  # a stack dump on SIGUSR2 when ckptctl recover asks for hang evidence

    torch.manual_seed(args.seed)  # identical initial weights on every rank
    model: nn.Module = TinyGPT(args.seq_len, dropout=args.dropout)
    if distributed and args.parallel == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for block in model.blocks:  # type: ignore[union-attr]
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    elif distributed:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(args.steps))
    sampler = ResumableBatchSampler(args.num_samples, args.global_batch_size, seed=args.seed)
    loader = DataLoader(Sequences(args.num_samples, args.seq_len, args.seed), batch_sampler=sampler)
    # Per-rank RNG streams (dropout, augmentation), distinct per rank.
    random.seed(args.seed * 1000 + rank)
    np.random.seed(args.seed * 1000 + rank)
    torch.manual_seed(args.seed * 1000 + rank + 1)

    def on_save_phase(phase: str, step: int) -> None:
        if (
            step == args.crash_during_save_at_step
            and phase == args.crash_save_phase
            and rank == args.crash_rank
        ):
            kill_self()

    signals: list[int] = [signal.SIGTERM]
    if args.preemption_signal:
        signals.append(int(getattr(signal, args.preemption_signal.upper())))
    ckpt = Checkpointer(
        args.ckpt_root,
        save_every=args.save_every,
        keep_last=args.keep_last,
        async_save=args.async_save,
        preemption_signals=signals,
        on_save_phase=on_save_phase,
    )
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "dataloader": sampler}

    # Creating a DataLoader iterator draws a seed from torch's global RNG. Create it
    # before the resume, which restores the RNG, so that a resumed run and an
    # uninterrupted one draw the same numbers from here on.
    batches = iter(loader)
    step = 0
    tokens_seen = 0
    if args.resume_from:
        load_state: dict[str, Any] = state
        allowed: tuple[str, ...] = ()
        if args.drop_optimizer_on_resume:
            # The fault on purpose, as a trainer that rebuilt its optimizer would load: the
            # optimizer left out of the state and named in an allowance.
            load_state = {k: v for k, v in state.items() if k != "optimizer"}
            allowed = ("optimizer",)
        result = (
            ckpt.load_latest(load_state, allow_unexpected=allowed)
            if args.resume_from == "auto"
            else ckpt.load(args.resume_from, load_state, allow_unexpected=allowed)
        )
        if result is not None:
            step = result.step
            tokens_seen = result.tokens_seen or 0
            for s in result.skipped:
                say(f"ckptctl-train skipped {s}", sys.stderr)
            if rank == 0:
                say(
                    f"ckptctl-train resumed from={result.path} step={result.step} world_size={world} "
                    f"saved_world_size={result.saved_world_size}"
                )
            if args.reset_data_on_resume:
                # The fault on purpose: a fresh sampler's state (epoch 0, nothing consumed).
                sampler.load_state_dict(
                    ResumableBatchSampler(args.num_samples, args.global_batch_size, seed=args.seed).state_dict()
                )

    tokens_per_step = args.global_batch_size * args.seq_len
    model.train()
    exit_code = 0
    try:
        while step < args.steps:
            if (
                args.crash_at_step is not None
                and step + 1 == args.crash_at_step
                and rank == args.crash_rank
            ):
                kill_self()
            if args.hang_at_step is not None and step + 1 == args.hang_at_step and rank == args.hang_rank:
                hang_forever()
            # After a resume, log where the first batch comes from (`ckptctl watch` checks it
            # against the position recorded with the checkpoint: data-position-mismatch).
            ckpt.note_first_batch(sampler)
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(loader)
                continue
            x = augment(x)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            lr = scheduler.get_last_lr()[0]
            scheduler.step()
            step += 1
            tokens_seen += tokens_per_step
            mean_loss = loss.detach().clone()
            if distributed:
                dist.all_reduce(mean_loss)
                mean_loss /= world
            if rank == 0 or args.log_all_ranks:
                say(
                    f"ckptctl-train step={step} loss={float(mean_loss)!r} tokens_seen={tokens_seen} "
                    f"lr={lr:.6g} rank={rank}"
                )
            if args.step_sleep_s:
                import time

                time.sleep(args.step_sleep_s)
            ckpt.maybe_save(
                step, state, tokens_seen=tokens_seen, samples_seen=step * args.global_batch_size
            )
        if ckpt.last_committed_step != step:
            ckpt.save(
                step, state, tokens_seen=tokens_seen, samples_seen=step * args.global_batch_size
            )
        ckpt.close()
        if rank == 0:
            say(f"ckptctl-train done step={step}")
    except PreemptedExit as e:
        if rank == 0:
            say(
                f"ckptctl-train preempted signal={e.signal_name} step={e.step} checkpoint={e.checkpoint} "
                f"exit_code={PREEMPTED_EXIT_CODE}"
            )
        ckpt.close()
        # The checkpoint is committed and this process is leaving with 75. Under torchrun the
        # first rank to exit makes torchrun SIGTERM the others; that is the same preemption, so
        # it must not turn a rank's 75 into a death by SIGTERM (SIGKILL still ends it).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        exit_code = PREEMPTED_EXIT_CODE
    if distributed:
        dist.destroy_process_group()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
