"""20 SIGKILLs during saves: ``ckptctl locate`` never returns an incomplete checkpoint.

How the kills are made real but cheap: two ranks (gloo, a real process group,
real ``torch.distributed.checkpoint`` writes through ``Checkpointer``) are forked
from a multiprocessing forkserver that has torch already imported, instead of
being launched by torchrun. torchrun adds nothing to the save path under test,
only ~5 s of interpreter start and rendezvous per launch, which 20 launches on
2 cores cannot afford. Each worker trains a replicated ~6 MB model (weights + Adam) and saves at
every step, so most of its time is spent inside a save. Kill points:

* 12 at a random time, 0-0.6 s after the workers' first save committed (both ranks
  at once, or one rank then the other), which lands in the DCP write, the checksum
  gather, the manifest/marker writes or the rename, wherever the clock says;
* 8 at a chosen phase boundary via ``on_save_phase`` (after the shards, after the
  manifest, after the commit marker), so each window is hit for certain.

The run root accumulates every leftover across the 20 kills. After each kill:
``ckptctl locate ROOT`` (the CLI) returns a checkpoint that ``ckptctl verify --deep``
calls complete and that an independent check (manifest, marker, every file's
size and CRC-32) accepts; it is the newest such checkpoint; and every
``step_N`` under the root (a final name) is complete, because on POSIX the
rename is the commit.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
from pathlib import Path

import pytest

from ckptctl.runroot.locate import verify_checkpoint
from tests.training_helpers import (
    FORKSERVER_PRELOAD,
    ckptctl_cli,
    describe,
    independently_complete,
    kill_point_worker,
)

pytestmark = pytest.mark.slow

NUM_KILLS = 20
PHASE_KILLS = [
    ("shards_written", 0),
    ("shards_written", 1),
    ("manifest_written", 0),
    ("marker_written", 0),
] * 2


def final_steps(root: Path) -> dict[int, Path]:
    out = {}
    for p in root.iterdir():
        name = p.name
        if name.startswith("step_") and name[5:].isdigit():
            out[int(name[5:])] = p
    return out


def all_steps(root: Path) -> list[int]:
    steps = []
    for p in root.iterdir():
        head = p.name.split(".", 1)[0]
        if head.startswith("step_") and head[5:].isdigit():
            steps.append(int(head[5:]))
    return steps


def test_twenty_kills_during_saves_never_leave_a_located_incomplete_checkpoint(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("CKPTCTL_TEST_SEED") or time.time_ns() % 1_000_000)
    print(f"CKPTCTL_TEST_SEED={seed}")
    rng = random.Random(seed)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    root = tmp_path / "run"
    root.mkdir()
    plan: list[tuple[str, int] | None] = [None] * (NUM_KILLS - len(PHASE_KILLS)) + list(PHASE_KILLS)
    rng.shuffle(plan)
    located_steps: list[int | None] = []
    for i, kill in enumerate(plan):
        start = max(all_steps(root), default=0)
        store = tmp_path / f"store-{i}"
        phase, kill_rank = kill if kill else (None, -1)
        kill_save = rng.randint(1, 3)
        saving = ctx.Event()
        procs = [
            ctx.Process(
                target=kill_point_worker,
                args=(r, 2, str(store), str(root), start, phase, kill_rank, kill_save, saving),
                daemon=True,
            )
            for r in range(2)
        ]
        for p in procs:
            p.start()
        if phase is None:
            assert saving.wait(timeout=120), f"kill {i}: the workers never saved"
            time.sleep(rng.uniform(0.0, 0.6))
            victims = procs if rng.random() < 0.5 else [procs[rng.randint(0, 1)]]
            for p in victims:
                if p.pid is not None and p.is_alive():
                    os.kill(p.pid, signal.SIGKILL)
            time.sleep(rng.uniform(0.0, 0.2))
        else:
            procs[kill_rank].join(timeout=60)
            assert procs[kill_rank].exitcode == -signal.SIGKILL, (
                f"kill {i}: {phase} was never reached"
            )
        # The job is dead once one rank is: kill whatever survived (a stuck peer, or one mid-save).
        for p in procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGKILL)
            p.join(timeout=30)

        # -- what readers see now ------------------------------------------------------------------
        finals = final_steps(root)
        for d in finals.values():
            assert independently_complete(d) is None, (
                f"kill {i} ({kill}): final-named {d.name} is not complete"
            )
        loc = ckptctl_cli("locate", str(root))
        if not finals:
            assert loc.returncode == 3, describe(loc)
            located_steps.append(None)
            continue
        assert loc.returncode == 0, describe(loc)
        located = Path(loc.stdout.strip())
        assert located == finals[max(finals)], (
            f"kill {i} ({kill}): located {located}, newest complete {max(finals)}"
        )
        assert ".tmp" not in located.name
        assert independently_complete(located) is None
        report = verify_checkpoint(str(located), deep=True)  # `ckptctl verify --deep`'s own code
        assert report.status == "complete", report.problems
        located_steps.append(int(located.name[5:]))

    # and the CLI agrees on the last one
    last = ckptctl_cli("verify", "--deep", ckptctl_cli("locate", str(root)).stdout.strip())
    assert last.returncode == 0, describe(last)
    leftovers = [p.name for p in root.iterdir() if ".tmp-" in p.name]
    print(f"located after each kill: {located_steps}; temp leftovers: {len(leftovers)}")
    # The kills really hit saves: most left a half-written temporary directory behind.
    assert len(leftovers) >= NUM_KILLS // 2, leftovers
    assert located_steps[-1] is not None
