"""Rank coordination on 2 real gloo ranks: state that must agree, per-rank state, no hangs.

The two ranks are forked from a forkserver with torch preloaded (see
``test_training_kill_points.py`` for why not torchrun); the save and load paths are the
real ones.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

from tests.training_helpers import FORKSERVER_PRELOAD, multirank_worker

pytestmark = pytest.mark.slow


def run_two_ranks(tmp_path: Path, scenario: str) -> dict[int, str]:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    results = ctx.Queue()
    store = tmp_path / f"store-{scenario}"
    procs = [
        ctx.Process(
            target=multirank_worker,
            args=(r, 2, str(store), str(tmp_path / "run"), scenario, results),
        )
        for r in range(2)
    ]
    for p in procs:
        p.start()
    out = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return out


def test_replicated_state_that_differs_across_ranks_is_refused_on_every_rank(
    tmp_path: Path,
) -> None:
    out = run_two_ranks(tmp_path, "replicated-differs")
    for rank in (0, 1):
        assert (
            out[rank].startswith("CheckpointSaveError")
            and "'extra' differs across ranks" in out[rank]
        )
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_unsafe_state_on_one_rank_fails_every_rank_without_a_hang(tmp_path: Path) -> None:
    out = run_two_ranks(tmp_path, "unsafe-on-one-rank")
    assert out[1].startswith("UnsafeStateError") and "weights_only" in out[1]
    assert out[0].startswith("UnsafeStateError") and "rank 1" in out[0]


def test_per_rank_state_and_rng_come_back_to_their_own_rank(tmp_path: Path) -> None:
    out = run_two_ranks(tmp_path, "per-rank-round-trip")
    assert out == {0: "counter=10 rng_ok=True notes=[]", 1: "counter=11 rng_ok=True notes=[]"}


def test_a_one_process_checkpoint_loads_on_two_ranks(tmp_path: Path) -> None:
    import torch

    from ckptctl.training import Checkpointer

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    Checkpointer(str(tmp_path / "run"), preemption_signals=None).save(1, {"model": model})
    out = run_two_ranks(tmp_path, "grow-1-to-2")
    expected = f"sum={float(model.weight.sum()):.6f} w0=1"
    # both ranks get the weights; rank 1 had no RNG state in a 1-process checkpoint, and says so
    assert out[0] == f"{expected} rng_note=False"
    assert out[1] == f"{expected} rng_note=True"


def test_torchdata_stateful_dataloader_resumes_each_rank_at_its_own_position(tmp_path: Path) -> None:
    """Passed without a PerRank wrapper: recognised as per-rank state, so each rank gets its own."""
    out = run_two_ranks(tmp_path, "stateful-dataloader")
    for rank in (0, 1):
        assert out[rank].startswith("batches_equal=True rng_equal=True distinct=True"), out[rank]
    # the two ranks read disjoint shards, so their resumed batches differ
    assert out[0].split("got=")[1] != out[1].split("got=")[1]
    step = tmp_path / "run" / "step_3"
    from ckptctl.adapters.dcp_metadata import read_index

    index = read_index((step / ".metadata").read_bytes())
    keys = set(index.tensors) | set(index.byte_fqns)
    assert any(k.startswith("loader.rank0.") for k in keys) and any(k.startswith("loader.rank1.") for k in keys)
