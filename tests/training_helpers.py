"""Helpers for the ckptctl.training tests: run examples/train.py, parse its log, check checkpoints.

Also the body of the kill-point workers (``kill_point_worker``), which the
20-kill-points test forks from a forkserver that has torch already imported,
so each kill costs a fork instead of a 2-second interpreter start.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import torchrun_cmd

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "examples" / "train.py"

STEP_RE = re.compile(
    r"^ckptctl-train step=(?P<step>\d+) loss=(?P<loss>\S+) tokens_seen=(?P<tokens>\d+) lr=(?P<lr>\S+) rank=(?P<rank>\d+)$"
)
RESUMED_RE = re.compile(
    r"^ckptctl-train resumed from=(?P<path>\S+) step=(?P<step>\d+) world_size=(?P<w>\d+) saved_world_size=(?P<w0>\S+)$"
)


def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def torchrun_argv(nproc: int, *train_args: str) -> list[str]:
    return [*torchrun_cmd(nproc), "--max-restarts=0", str(TRAIN), *train_args]


def run_train(
    nproc: int, *train_args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """examples/train.py under torchrun (nproc >= 1), or as one plain process when nproc == 0."""
    argv = torchrun_argv(nproc, *train_args) if nproc else [sys.executable, str(TRAIN), *train_args]
    return subprocess.run(
        argv, capture_output=True, text=True, env=child_env(), timeout=timeout, cwd=REPO
    )


@dataclass
class TrainLog:
    steps: list[int]
    losses: dict[int, str]
    """step -> loss exactly as printed (repr of a float)."""
    tokens: dict[int, int]
    resumed: dict[str, str] | None
    lines: list[str]


def parse_log(stdout: str) -> TrainLog:
    steps: list[int] = []
    losses: dict[int, str] = {}
    tokens: dict[int, int] = {}
    resumed = None
    lines = stdout.splitlines()
    for line in lines:
        m = STEP_RE.match(line.strip())
        if m:
            step = int(m["step"])
            steps.append(step)
            losses[step] = m["loss"]
            tokens[step] = int(m["tokens"])
            continue
        r = RESUMED_RE.match(line.strip())
        if r:
            resumed = r.groupdict()
    return TrainLog(steps=steps, losses=losses, tokens=tokens, resumed=resumed, lines=lines)


def ckptctl_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckptctl", *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout,
        cwd=REPO,
    )


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"


def file_crc32(path: Path) -> str:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def independently_complete(step_dir: Path) -> str | None:
    """None if the directory is a committed ckptctl checkpoint whose every file matches the
    manifest (size and CRC-32), else why not. Written without ckptctl's verifier, on purpose."""
    from ckptctl.core.verify.manifest import check_commit_marker

    if ".tmp" in step_dir.name:
        return "temporary name"
    manifest_path = step_dir / "ckptctl.json"
    marker_path = step_dir / ".ckptctl-committed"
    if not manifest_path.exists():
        return "no manifest"
    if not marker_path.exists():
        return "no commit marker"
    manifest_bytes = manifest_path.read_bytes()
    why = check_commit_marker(marker_path.read_bytes(), manifest_bytes)
    if why:
        return why
    manifest = json.loads(manifest_bytes)
    names = {f["path"] for f in manifest["files"]}
    if ".metadata" not in names:
        return "manifest does not list .metadata"
    for f in manifest["files"]:
        p = step_dir / f["path"]
        if not p.exists():
            return f"{f['path']} missing"
        if p.stat().st_size != f["size_bytes"]:
            return f"{f['path']} size"
        if file_crc32(p) != f["checksum"]:
            return f"{f['path']} crc"
    return None


# -- kill-point workers (forked from a forkserver with torch preloaded) --------------------------

#: What a forked worker would otherwise import on its first save (torch._dynamo alone is ~1 s).
FORKSERVER_PRELOAD = [
    "torch",
    "torch._dynamo",
    "torch.distributed.checkpoint",
    "torch.distributed.checkpoint.state_dict",
    "torch.distributed.checkpoint.staging",
    "numpy.random",
    "fsspec",
    "ckptctl.training",
    "ckptctl.runroot.locate",
    "tests.training_helpers",
]


def kill_point_worker(
    rank: int,
    world: int,
    store_path: str,
    root: str,
    start_step: int,
    kill_phase: str | None,
    kill_rank: int,
    kill_save: int,
    saving: Any = None,
) -> None:
    """Train a small model and save every step until killed.

    ``kill_phase``: SIGKILL this process at that save phase of the ``kill_save``-th
    save if this is ``kill_rank`` (None: wait for the parent's SIGKILL). ``saving`` (an
    Event) is set once the first save has committed, so the parent's clock starts when the
    save loop is running, not while the process is still starting.
    """
    import torch
    import torch.distributed as dist

    from ckptctl.training import Checkpointer, ResumableBatchSampler

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world
    )
    torch.manual_seed(0)
    # Replicated weights, as under DDP (DDP itself is left out: constructing it imports
    # torch._dynamo and friends, seconds per fork, and adds nothing to the save path).
    model = torch.nn.Sequential(*(torch.nn.Linear(256, 256) for _ in range(8)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sampler = ResumableBatchSampler(64, 8)
    saves = 0

    def on_phase(phase: str, step: int) -> None:
        if kill_phase == phase and rank == kill_rank and saves + 1 == kill_save:
            os.kill(os.getpid(), signal.SIGKILL)

    ckpt = Checkpointer(root, preemption_signals=None, on_save_phase=on_phase)
    state = {"model": model, "optimizer": opt, "data": sampler}
    step = start_step
    batches = iter(sampler)
    while True:
        try:
            next(batches)
        except StopIteration:
            batches = iter(sampler)
            continue
        loss = model(torch.randn(4, 256)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        ckpt.save(step, state)
        saves += 1
        if saving is not None and saves == 1:
            saving.set()


# -- small 2-rank scenarios (forked from a forkserver with torch preloaded) -----------------------


class Counter:
    """A per-rank stateful object (like a StatefulDataLoader's iterator position)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.value = int(state["value"])


def multirank_worker(
    rank: int, world: int, store_path: str, root: str, scenario: str, results: Any
) -> None:
    """Run one scenario on ``world`` gloo ranks; put ``(rank, outcome)`` on ``results``."""
    import random

    import torch
    import torch.distributed as dist

    from ckptctl.training import Checkpointer, PerRank

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world
    )
    try:
        model = torch.nn.Linear(4, 4)
        ckpt = Checkpointer(root, preemption_signals=None)
        if scenario == "replicated-differs":
            try:
                ckpt.save(1, {"model": model, "extra": {"rank": rank}})
                outcome = "saved"
            except Exception as e:
                outcome = f"{type(e).__name__}: {e}"
        elif scenario == "unsafe-on-one-rank":
            import numpy as np

            value = np.zeros(2) if rank == 1 else 0
            try:
                ckpt.save(1, {"model": model, "loader": PerRank(_Holder(value))})
                outcome = "saved"
            except Exception as e:
                outcome = f"{type(e).__name__}: {e}"
        elif scenario == "per-rank-round-trip":
            random.seed(100 + rank)
            ckpt.save(1, {"model": model, "loader": PerRank(Counter(10 + rank))})
            expected = random.random()
            random.seed(0)
            counter = Counter(-1)
            result = ckpt.load(f"{root}/step_1", {"model": model, "loader": PerRank(counter)})
            outcome = f"counter={counter.value} rng_ok={random.random() == expected} notes={list(result.notes)}"
        elif scenario == "grow-1-to-2":
            # step_1 was written by one process (the test itself, no process group)
            torch.manual_seed(123)  # different weights, so the load has to change them
            model = torch.nn.Linear(4, 4)
            result = ckpt.load(f"{root}/step_1", {"model": model})
            outcome = (
                f"sum={float(model.weight.sum()):.6f} w0={result.saved_world_size} "
                f"rng_note={any('RNG' in n for n in result.notes)}"
            )
        elif scenario == "stateful-dataloader":
            outcome = _stateful_dataloader_round_trip(ckpt, root, model, rank, world)
        else:
            raise ValueError(scenario)
        ckpt.close()
        results.put((rank, outcome))
    finally:
        dist.destroy_process_group()


def _stateful_dataloader_round_trip(ckpt: Any, root: str, model: Any, rank: int, world: int) -> str:
    """torchdata's StatefulDataLoader with 2 worker processes, passed *unwrapped*: saved mid-epoch
    per rank, restored into a fresh loader; the next batches and the global RNG must match."""
    import torch
    from torch.utils.data import DistributedSampler
    from torchdata.stateful_dataloader import StatefulDataLoader

    data = list(range(60))

    def make(seed: int) -> Any:
        sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
        gen = torch.Generator().manual_seed(seed)
        return StatefulDataLoader(data, batch_size=3, sampler=sampler, num_workers=2, generator=gen)

    torch.manual_seed(1000 + rank)
    loader = make(100 + rank)  # per-rank seeds: the ranks' loader states differ
    it = iter(loader)
    before = [next(it).tolist() for _ in range(3)]
    ckpt.save(3, {"model": model, "loader": loader})
    expected = [next(it).tolist() for _ in range(3)]
    expected_rand = float(torch.rand(()))
    del it

    torch.manual_seed(5)
    fresh = make(999)  # another generator: only the restored state can give the same batches
    ckpt.load(f"{root}/step_3", {"model": model, "loader": fresh})
    it2 = iter(fresh)
    got = [next(it2).tolist() for _ in range(3)]
    same_rand = float(torch.rand(())) == expected_rand
    seen = sorted(x for b in before + got for x in b)
    return f"batches_equal={got == expected} rng_equal={same_rand} distinct={len(set(seen)) == len(seen)} got={got}"


class _Holder:
    def __init__(self, value: Any) -> None:
        self.value = value

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = state["value"]
