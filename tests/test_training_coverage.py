"""Load coverage on real DCP checkpoints: every saved key restored, every expected key found.

Each fault is made on the saving side of a real ``Checkpointer`` save (an optimizer moment
deleted before the save, a state saved without its data loader, a model with one more
layer), then loaded into a full live state.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from ckptctl.core.watch.restored import parse_restored
from ckptctl.training import Checkpointer, LoadCoverageError, ResumableBatchSampler
from ckptctl.training.coverage import LINE_PREFIX, compare, matches


def make_state(extra_layer: bool = False, data: bool = True) -> dict[str, Any]:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)]
    if extra_layer:
        layers.append(torch.nn.Linear(4, 4))
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    state: dict[str, Any] = {
        "model": model,
        "optimizer": opt,
        "scheduler": torch.optim.lr_scheduler.StepLR(opt, 3, 0.5),
    }
    if data:
        state["data"] = ResumableBatchSampler(64, 8, seed=1)
    return state


def step_once(state: dict[str, Any]) -> None:
    model = state["model"]
    loss = model(torch.randn(8, 8)).square().mean()
    state["optimizer"].zero_grad()
    loss.backward()
    state["optimizer"].step()
    state["scheduler"].step()


def save(root: Path, state: dict[str, Any], step: int = 5) -> str:
    ckpt = Checkpointer(str(root), preemption_signals=None)
    ckpt.save(step, state)
    ckpt.close()
    return ckpt.path_for_step(step)


def restored_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(LINE_PREFIX)]


def test_a_clean_resume_restores_every_key_and_logs_the_full_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    saved = make_state()
    step_once(saved)
    path = save(tmp_path, saved)
    live = make_state()
    with caplog.at_level(logging.WARNING, logger="ckptctl.training"):
        result = Checkpointer(str(tmp_path), preemption_signals=None).load(path, live)
    lines = restored_lines(caplog)
    assert len(lines) == 1
    n = result.keys_restored
    # model 4 tensors, AdamW 3 per parameter (step, exp_avg, exp_avg_sq) over 4 parameters
    assert n == result.keys_total and n >= 4 + 12
    assert lines[0] == f"{LINE_PREFIX} {n}/{n} keys step=5"
    for a, b in zip(saved["model"].parameters(), live["model"].parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_dropped_optimizer_moment_is_an_error_naming_it(tmp_path: Path) -> None:
    saved = make_state()
    step_once(saved)
    first = next(iter(saved["model"].parameters()))
    del saved["optimizer"].state[first]["exp_avg"]
    path = save(tmp_path, saved)
    with pytest.raises(LoadCoverageError) as err:
        Checkpointer(str(tmp_path), preemption_signals=None).load(path, make_state())
    assert err.value.missing == ("optimizer.state.0.weight.exp_avg",)
    assert err.value.unexpected == ()
    assert "optimizer.state.0.weight.exp_avg" in err.value.message
    assert "expected but not in the checkpoint" in err.value.message


def test_a_missing_data_loader_state_is_an_error(tmp_path: Path) -> None:
    saved = make_state(data=False)
    step_once(saved)
    path = save(tmp_path, saved)
    with pytest.raises(LoadCoverageError) as err:
        Checkpointer(str(tmp_path), preemption_signals=None).load(path, make_state())
    assert err.value.missing and all(k.startswith("data.") for k in err.value.missing)
    assert "data.epoch" in err.value.missing and "data.batches_done" in err.value.missing


def test_load_latest_raises_on_a_coverage_error_instead_of_falling_back(tmp_path: Path) -> None:
    saved = make_state(data=False)
    step_once(saved)
    save(tmp_path, saved, step=3)
    save(tmp_path, saved, step=5)
    with pytest.raises(LoadCoverageError):
        Checkpointer(str(tmp_path), preemption_signals=None).load_latest(make_state())


def test_an_extra_model_key_in_the_checkpoint_is_an_error(tmp_path: Path) -> None:
    saved = make_state(extra_layer=True)
    step_once(saved)
    path = save(tmp_path, saved)
    with pytest.raises(LoadCoverageError) as err:
        Checkpointer(str(tmp_path), preemption_signals=None).load(path, make_state())
    assert "model.2.weight" in err.value.unexpected and "model.2.bias" in err.value.unexpected
    assert "saved but not restored" in err.value.message


def test_the_named_allowances_let_the_intended_differences_through(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A new head: the checkpoint has no layer 2 (missing, allowed, kept live); the
    # checkpoint's data loader state is not wanted (unexpected, allowed).
    saved = make_state()
    step_once(saved)
    path = save(tmp_path, saved)
    live = make_state(extra_layer=True, data=False)
    head_before = live["model"][2].weight.detach().clone()
    with caplog.at_level(logging.WARNING, logger="ckptctl.training"):
        result = Checkpointer(str(tmp_path), preemption_signals=None).load(
            path,
            live,
            allow_missing=("model.2.*", "optimizer.state.2"),
            allow_unexpected=("data",),
        )
    assert "model.2.weight" in result.allowed_missing
    assert "optimizer.state.2.weight.exp_avg" in result.allowed_missing
    assert set(result.allowed_unexpected) >= {"data.epoch", "data.batches_done"}
    assert torch.equal(live["model"][2].weight, head_before)  # the new head kept its values
    assert torch.equal(live["model"][0].weight, saved["model"][0].weight)  # the rest restored
    (line,) = restored_lines(caplog)
    assert line.startswith(f"{LINE_PREFIX} {result.keys_restored}/{result.keys_total} keys step=5")
    assert f"allowed-missing={len(result.allowed_missing)}" in line
    assert result.keys_restored < result.keys_total
    # what `ckptctl watch` reads from it: the same counts, the allowances accounting for the rest
    read = parse_restored("WARNING:ckptctl.training:" + line, 1)
    assert read is not None and read.allowance_named and not read.complete
    assert (read.restored, read.total, read.step) == (result.keys_restored, result.keys_total, 5)
    assert (read.allowed_missing, read.allowed_unexpected) == (
        len(result.allowed_missing),
        len(result.allowed_unexpected),
    )
    assert read.groups == ("data", "model", "optimizer")


def test_an_allowance_that_does_not_cover_every_difference_still_fails(tmp_path: Path) -> None:
    saved = make_state()
    step_once(saved)
    path = save(tmp_path, saved)
    with pytest.raises(LoadCoverageError) as err:
        Checkpointer(str(tmp_path), preemption_signals=None).load(
            path, make_state(extra_layer=True), allow_missing=("model.2.*",)
        )
    # the new head's optimizer state is still missing
    assert err.value.missing and all(k.startswith("optimizer.state.") for k in err.value.missing)


def test_patterns_and_other_ranks_keys() -> None:
    assert matches("model.head.weight", ["model.head"])
    assert matches("model.head.weight", ["model.*"])
    assert not matches("model.headx.weight", ["model.head"])
    import re

    cov = compare(
        ["a.x", "ckptctl.rng.rank0.py"],
        ["a.x", "ckptctl.rng.rank0.py", "ckptctl.rng.rank1.py", "b"],
        not_mine=re.compile(r"ckptctl\.rng\.rank\d+(?:\.|$)"),
    )
    assert cov.unexpected == ("b",)
    assert cov.restored == ("a.x", "ckptctl.rng.rank0.py")
