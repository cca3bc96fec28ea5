"""Training state beyond weights: RNG round trip and the resumable sampler (no processes, no disk)."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch

from ckptctl.training import PerRank, ResumableBatchSampler, capture_rng_state, restore_rng_state


def draw() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_rng_round_trip_restores_python_numpy_torch() -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    draw()
    random.gauss(0, 1)  # leaves a cached gaussian in Python's state
    state = capture_rng_state()
    expected = [draw() for _ in range(3)]
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    assert restore_rng_state(state) == []
    assert [draw() for _ in range(3)] == expected


def test_rng_state_loads_with_weights_only() -> None:
    buf = io.BytesIO()
    torch.save(capture_rng_state(), buf)
    buf.seek(0)
    restored = torch.load(buf, weights_only=True)
    assert set(restored) >= {"python", "torch", "numpy"}


def consume(sampler: ResumableBatchSampler, n: int) -> list[list[int]]:
    """Take n batches the way a training loop does (a new iterator at each epoch end)."""
    out: list[list[int]] = []
    it = iter(sampler)
    while len(out) < n:
        try:
            out.append(next(it))
        except StopIteration:
            it = iter(sampler)
    return out


@pytest.mark.parametrize("cut", [0, 1, 5, 7, 8, 13])
def test_sampler_resume_continues_exactly(cut: int) -> None:
    """Stop after `cut` batches (incl. exactly at an epoch end), restore, and get the same batches."""
    ref = consume(ResumableBatchSampler(60, 8, rank=0, world_size=1, seed=4), 20)
    a = ResumableBatchSampler(60, 8, rank=0, world_size=1, seed=4)
    first = consume(a, cut)
    state = a.state_dict()
    b = ResumableBatchSampler(60, 8, rank=0, world_size=1, seed=4)
    b.load_state_dict(state)
    assert first + consume(b, 20 - cut) == ref


def test_sampler_global_batches_do_not_depend_on_world_size() -> None:
    one = consume(ResumableBatchSampler(64, 8, rank=0, world_size=1, seed=1), 12)
    r0 = consume(ResumableBatchSampler(64, 8, rank=0, world_size=2, seed=1), 12)
    r1 = consume(ResumableBatchSampler(64, 8, rank=1, world_size=2, seed=1), 12)
    assert [a + b for a, b in zip(r0, r1, strict=True)] == one


def test_sampler_state_from_two_ranks_resumes_on_one() -> None:
    r0 = ResumableBatchSampler(64, 8, rank=0, world_size=2, seed=1)
    consume(r0, 5)
    solo = ResumableBatchSampler(64, 8, rank=0, world_size=1, seed=1)
    solo.load_state_dict(r0.state_dict())
    ref = consume(ResumableBatchSampler(64, 8, rank=0, world_size=1, seed=1), 9)
    assert consume(solo, 4) == ref[5:]


def test_sampler_epochs_differ_and_cover_the_data() -> None:
    s = ResumableBatchSampler(32, 8, rank=0, world_size=1, seed=0)
    e0 = consume(s, 4)
    e1 = consume(s, 4)
    assert sorted(i for b in e0 for i in b) == list(range(32))
    assert e0 != e1


def test_sampler_refuses_mismatched_state() -> None:
    s = ResumableBatchSampler(64, 8, rank=0, world_size=1, seed=1)
    other = ResumableBatchSampler(64, 16, rank=0, world_size=1, seed=1)
    with pytest.raises(ValueError, match="global_batch_size"):
        s.load_state_dict(other.state_dict())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_samples": 10, "global_batch_size": 3, "rank": 0, "world_size": 2}, "divisible"),
        (
            {"num_samples": 4, "global_batch_size": 8, "rank": 0, "world_size": 1},
            "global_batch_size",
        ),
        ({"num_samples": 8, "global_batch_size": 4, "rank": 2, "world_size": 2}, "rank"),
    ],
)
def test_sampler_validates_arguments(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ResumableBatchSampler(**kwargs)  # type: ignore[arg-type]


def test_per_rank_needs_a_stateful_object() -> None:
    with pytest.raises(TypeError, match="state_dict"):
        PerRank(object())
