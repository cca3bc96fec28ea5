"""Checkpointer in one process (no process group): layout, commit protocol, safe load, fallback.

Real ``torch.distributed.checkpoint`` writes and reads throughout; the multi-rank
and torchrun cases are in ``test_training_resume.py`` and ``test_training_kill_points.py``.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp

from ckptctl.core.verify.manifest import check_commit_marker
from ckptctl.runroot.locate import find_latest_complete, verify_checkpoint
from ckptctl.training import (
    PREEMPTED_EXIT_CODE,
    SAVE_PHASES,
    Checkpointer,
    CheckpointLoadError,
    CheckpointSaveError,
    IncompleteCheckpointError,
    NoCompleteCheckpointError,
    PreemptedExit,
    ResumableBatchSampler,
    UnsafeCheckpointError,
    UnsafeStateError,
)
from tests.training_helpers import file_crc32, independently_complete


def make_state(seed: int = 0, width: int = 8) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 4)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 3, 0.5)
    return {
        "model": model,
        "optimizer": opt,
        "scheduler": sched,
        "data": ResumableBatchSampler(64, 8, seed=1),
    }


DATA = torch.Generator().manual_seed(7)
X = torch.randn(64, 8, generator=DATA)
Y = torch.randn(64, 4, generator=DATA)


def train(state: dict[str, Any], ckpt: Checkpointer, start: int, stop: int) -> list[str]:
    """Steps start+1..stop; returns the loss reprs. Uses all three RNGs (dropout + noise)."""
    losses = []
    it = iter(state["data"])
    step = start
    while step < stop:
        try:
            idx = next(it)
        except StopIteration:
            it = iter(state["data"])
            continue
        x = X[idx] + random.random() * 0.01 + float(np.random.rand()) * 0.01
        loss = (state["model"](x) - Y[idx]).square().mean()
        state["optimizer"].zero_grad()
        loss.backward()
        state["optimizer"].step()
        state["scheduler"].step()
        step += 1
        losses.append(repr(loss.item()))
        ckpt.maybe_save(step, state, tokens_seen=step * 8)
    return losses


def test_save_writes_the_contract_layout(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), preemption_signals=None)
    state = make_state()
    result = ckpt.save(7, state, tokens_seen=56, samples_seen=7, extra={"run": "a"}).result()
    ckpt.close()
    d = tmp_path / "step_7"
    assert result.path == str(d)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_7"]  # no temp dir left
    assert sorted(p.name for p in d.iterdir()) == sorted(
        [".metadata", "__0_0.distcp", "ckptctl.json", ".ckptctl-committed"]
    )
    manifest_bytes = (d / "ckptctl.json").read_bytes()
    manifest = json.loads(manifest_bytes)
    assert manifest["step"] == 7 and manifest["world_size"] == 1
    assert manifest["tokens_seen"] == 56 and manifest["samples_seen"] == 7
    assert manifest["extra"] == {"run": "a"}
    assert manifest["torch_version"] == torch.__version__
    files = {f["path"]: f for f in manifest["files"]}
    assert set(files) == {".metadata", "__0_0.distcp"}
    for name, f in files.items():
        assert f["size_bytes"] == (d / name).stat().st_size
        assert f["checksum"] == file_crc32(d / name)  # computed while writing, equal to a re-read
        assert f["rank"] == 0
    assert check_commit_marker((d / ".ckptctl-committed").read_bytes(), manifest_bytes) is None
    assert verify_checkpoint(str(d), deep=True).status == "complete"


@pytest.mark.parametrize("phase", SAVE_PHASES[:3])
def test_a_save_that_stops_before_the_commit_is_never_complete(tmp_path: Path, phase: str) -> None:
    def fail(p: str, step: int) -> None:
        if p == phase and step == 2:
            raise RuntimeError(f"injected failure at {p}")

    ckpt = Checkpointer(str(tmp_path), preemption_signals=None, on_save_phase=fail)
    state = make_state()
    ckpt.save(1, state)
    with pytest.raises((CheckpointSaveError, RuntimeError)):
        ckpt.save(2, state)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "step_2" not in names
    assert any(n.startswith("step_2.tmp-") for n in names)
    located = find_latest_complete(str(tmp_path))
    assert located.checkpoint is not None and located.checkpoint.step == 1


def test_resume_restores_weights_optimizer_scheduler_data_and_rng(tmp_path: Path) -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    ref_state = make_state()
    ref = train(
        ref_state, Checkpointer(str(tmp_path / "a"), save_every=6, preemption_signals=None), 0, 20
    )

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    state = make_state()
    train(
        state, Checkpointer(str(tmp_path / "b"), save_every=6, preemption_signals=None), 0, 14
    )  # "crash" at 14

    fresh = make_state(seed=123)
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    ckpt = Checkpointer(str(tmp_path / "b"), save_every=6, preemption_signals=None)
    result = ckpt.load_latest(fresh)
    assert result is not None and result.step == 12 and result.tokens_seen == 96
    assert train(fresh, ckpt, result.step, 20) == ref[12:]


def test_plain_values_come_back_as_saved(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), preemption_signals=None)
    model = torch.nn.Linear(2, 2)
    ckpt.save(
        1,
        {
            "model": model,
            "extra": {"epoch": 3, "name": "x", "hist": [1.5, 2.5], "t": torch.ones(2)},
        },
    )
    state: dict[str, Any] = {"model": model, "extra": {}}
    ckpt.load(str(tmp_path / "step_1"), state)
    assert state["extra"]["epoch"] == 3 and state["extra"]["name"] == "x"
    assert state["extra"]["hist"] == [1.5, 2.5]
    assert torch.equal(state["extra"]["t"], torch.ones(2))


def test_async_save_writes_the_state_as_it_was_when_save_returned(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), async_save=True, preemption_signals=None)
    model = torch.nn.Linear(256, 256)
    with torch.no_grad():
        model.weight.fill_(1.0)
    handle = ckpt.save(1, {"model": model})
    with torch.no_grad():  # training goes on while the save is in flight
        model.weight.fill_(2.0)
    result = handle.result()
    assert result.stall_s > 0 and result.save_duration_s > 0
    ckpt.save(2, {"model": model})  # waits for nothing (done); stages 2.0
    ckpt.close()
    check = torch.nn.Linear(256, 256)
    Checkpointer(str(tmp_path), preemption_signals=None).load(
        str(tmp_path / "step_1"), {"model": check}
    )
    assert torch.all(check.weight == 1.0)
    Checkpointer(str(tmp_path), preemption_signals=None).load(
        str(tmp_path / "step_2"), {"model": check}
    )
    assert torch.all(check.weight == 2.0)


def test_async_staging_uses_the_staging_threads_only_for_the_copy(tmp_path: Path) -> None:
    from ckptctl.training.staging import PARALLEL_STAGING_MIN_BYTES

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ckpt = Checkpointer(
            str(tmp_path), async_save=True, preemption_signals=None, staging_threads=3
        )
        model = torch.nn.Linear(1024, 1024)
        big = {"model": model, "pad": torch.zeros(PARALLEL_STAGING_MIN_BYTES // 4)}
        ckpt.save(1, big).result()  # creates the stager
        assert torch.get_num_threads() == 1
        stager = ckpt._stager
        assert stager is not None
        during: list[int] = []
        real_stage = stager.stage

        def spy(sd: Any) -> Any:
            during.append(torch.get_num_threads())
            return real_stage(sd)

        stager.stage = spy  # type: ignore[method-assign]
        ckpt.save(2, big).result()
        ckpt.save(3, {"model": model}).result()  # 4 MiB: not worth a thread-count change
        ckpt.close()
        assert during == [3, 1] and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="staging_threads"):
        Checkpointer(str(tmp_path), preemption_signals=None, staging_threads=0)


class Evil:
    """A value whose unpickling would create a file (stands in for any payload)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path.touch, (Path(self.marker),))


def test_hostile_record_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    d = tmp_path / "run" / "step_3"
    model = torch.nn.Linear(2, 2)
    # A checkpoint written by stock DCP whose non-tensor record is a hostile pickle.
    dcp.save(
        {
            "model": model.state_dict(),
            "extra": {"x": Evil(str(marker))},
            "ckptctl.progress": {"step": 3, "tokens_seen": None, "samples_seen": None},
        },
        checkpoint_id=str(d),
    )
    assert not marker.exists()
    ckpt = Checkpointer(str(tmp_path / "run"), preemption_signals=None)
    with pytest.raises(UnsafeCheckpointError, match=r"record 'extra\.x'.*refused"):
        ckpt.load(str(d), {"model": model, "extra": {}}, verify="none")
    assert not marker.exists()


def test_hostile_metadata_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    ckpt = Checkpointer(str(tmp_path / "run"), preemption_signals=None)
    model = torch.nn.Linear(2, 2)
    ckpt.save(1, {"model": model})
    d = tmp_path / "run" / "step_1"
    (d / ".metadata").write_bytes(pickle.dumps(Evil(str(marker))))
    with pytest.raises(UnsafeCheckpointError, match="disallowed global"):
        ckpt.load(str(d), {"model": model}, verify="none")
    assert not marker.exists()


def test_state_that_would_not_load_safely_is_refused_at_save(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), preemption_signals=None)
    with pytest.raises(UnsafeStateError, match=r"extra\.arr.*weights_only"):
        ckpt.save(1, {"model": torch.nn.Linear(2, 2), "extra": {"arr": np.zeros(3)}})
    assert list(tmp_path.iterdir()) == []


def test_loading_into_a_different_model_is_a_clear_error(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), preemption_signals=None)
    ckpt.save(1, {"model": torch.nn.Linear(4, 4)})
    with pytest.raises(
        CheckpointLoadError, match=r"weight \(shape \(5, 4\) here, \(4, 4\) saved\)"
    ):
        ckpt.load(str(tmp_path / "step_1"), {"model": torch.nn.Linear(4, 5)})


def test_load_refuses_an_incomplete_checkpoint(tmp_path: Path) -> None:
    def fail(p: str, step: int) -> None:
        if p == "manifest_written":
            raise RuntimeError("crash")

    ckpt = Checkpointer(str(tmp_path), preemption_signals=None, on_save_phase=fail)
    model = torch.nn.Linear(2, 2)
    with pytest.raises(CheckpointSaveError):
        ckpt.save(1, {"model": model})
    (tmp_dir,) = list(tmp_path.iterdir())
    with pytest.raises(IncompleteCheckpointError):
        ckpt.load(str(tmp_dir), {"model": model})


def flip_bit(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x10
    path.write_bytes(bytes(data))


def test_load_latest_skips_a_bit_flip_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = Checkpointer(str(tmp_path), preemption_signals=None)
    model = torch.nn.Linear(64, 64)
    for step in (1, 2, 3):
        with torch.no_grad():
            model.weight.fill_(float(step))
        ckpt.save(step, {"model": model})
    flip_bit(tmp_path / "step_3" / "__0_0.distcp")
    assert independently_complete(tmp_path / "step_3") == "__0_0.distcp crc"
    target = torch.nn.Linear(64, 64)
    with caplog.at_level("WARNING", logger="ckptctl.training"):
        result = ckpt.load_latest({"model": target})
    assert result is not None and result.step == 2
    assert (
        len(result.skipped) == 1
        and "step_3" in result.skipped[0]
        and "checksum mismatch" in result.skipped[0]
    )
    assert "skipping" in caplog.text and "step_3" in caplog.text
    assert torch.all(target.weight == 2.0)


def test_load_latest_on_an_empty_root_is_a_fresh_start(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path / "nothing-yet"), preemption_signals=None)
    assert ckpt.load_latest({"model": torch.nn.Linear(2, 2)}) is None


def test_load_latest_with_only_broken_checkpoints_refuses(tmp_path: Path) -> None:
    (tmp_path / "step_5").mkdir()
    (tmp_path / "step_5" / "__0_0.distcp").write_bytes(b"partial")
    ckpt = Checkpointer(str(tmp_path), preemption_signals=None)
    with pytest.raises(NoCompleteCheckpointError):
        ckpt.load_latest({"model": torch.nn.Linear(2, 2)})


def test_preemption_signal_triggers_an_emergency_checkpoint(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), save_every=100, preemption_signals=(signal.SIGUSR1,))
    state = make_state()
    assert ckpt.maybe_save(1, state) is None
    os.kill(os.getpid(), signal.SIGUSR1)
    with pytest.raises(PreemptedExit) as exc:
        ckpt.maybe_save(2, state)
    ckpt.close()
    assert exc.value.code == PREEMPTED_EXIT_CODE and exc.value.signal_name == "SIGUSR1"
    assert exc.value.checkpoint == str(tmp_path / "step_2")
    manifest = json.loads((tmp_path / "step_2" / "ckptctl.json").read_bytes())
    assert manifest["extra"] == {"emergency": True, "signal": "SIGUSR1"}
    assert verify_checkpoint(str(tmp_path / "step_2"), deep=True).status == "complete"
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # handler restored by close()


def test_object_store_commit_marker_is_the_commit() -> None:
    """memory:// (fsspec, non-local): written in place, the marker last; without it, never complete."""
    import fsspec

    root = f"memory://ckpt-{os.getpid()}-{random.randrange(1 << 30)}"

    def fail(p: str, step: int) -> None:
        if p == "manifest_written" and step == 2:
            raise RuntimeError("crash before the marker")

    ckpt = Checkpointer(root, preemption_signals=None, on_save_phase=fail)
    model = torch.nn.Linear(8, 8)
    # with an optimizer: `locate` passes over model-only exports when it picks a resume point
    optim = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 8)).sum().backward()
    optim.step()
    ckpt.save(1, {"model": model, "optim": optim})
    with pytest.raises(CheckpointSaveError):
        ckpt.save(2, {"model": model, "optim": optim})
    fs = fsspec.filesystem("memory")
    base = root.removeprefix("memory://")
    assert fs.exists(f"{base}/step_2/ckptctl.json") and not fs.exists(
        f"{base}/step_2/.ckptctl-committed"
    )
    assert verify_checkpoint(f"{root}/step_2").status != "complete"
    located = find_latest_complete(root)
    assert located.checkpoint is not None and located.checkpoint.step == 1
    target = torch.nn.Linear(8, 8)
    result = ckpt.load_latest({"model": target})
    assert result is not None and result.step == 1
    assert torch.equal(target.weight, model.weight)


def test_s3_save_commit_marker_and_resume(s3_bucket: str, s3_env: dict[str, str]) -> None:
    """A real S3-compatible server (moto): DCP shards, manifest and marker go straight into
    step_N/; a save that dies before the marker is never located; load_latest reads back."""
    root = f"s3://{s3_bucket}/run"

    def fail(p: str, step: int) -> None:
        if p == "manifest_written" and step == 2:
            raise RuntimeError("crash before the marker")

    ckpt = Checkpointer(root, preemption_signals=None, on_save_phase=fail)
    state = make_state()
    ckpt.save(1, state, tokens_seen=8)
    with pytest.raises(CheckpointSaveError):
        ckpt.save(2, state)
    report = verify_checkpoint(f"{root}/step_1", deep=True)
    assert report.status == "complete", report.problems
    assert verify_checkpoint(f"{root}/step_2").status != "complete"
    located = find_latest_complete(root)
    assert located.checkpoint is not None and located.checkpoint.step == 1
    fresh = make_state(seed=5)
    result = Checkpointer(root, preemption_signals=None).load_latest(fresh)
    assert result is not None and result.step == 1 and result.tokens_seen == 8
    for a, b in zip(fresh["model"].parameters(), state["model"].parameters(), strict=True):
        assert torch.equal(a, b)
    # saving step 2 again moves the uncommitted attempt aside first (never overwrites in place)
    again = Checkpointer(root, preemption_signals=None).save(2, state).result()
    assert verify_checkpoint(again.path, deep=True).status == "complete"


def test_s3_retention_takes_the_lock_and_keeps_the_newest(
    s3_bucket: str, s3_env: dict[str, str]
) -> None:
    """keep_last on a real S3-compatible server: the marker goes first, the lock is taken by a
    conditional PUT and released, and a pass is skipped while another operation holds it."""
    from ckptctl.adapters.runlock import read_lock, run_lock
    from ckptctl.adapters.storage import Storage

    root = f"s3://{s3_bucket}/run"
    state = make_state()
    ckpt = Checkpointer(root, keep_last=1, preemption_signals=None)
    assert ckpt.save(1, state).result().retention is not None
    second = ckpt.save(2, state).result()
    assert second.retention is not None and second.retention.deleted == ["step_1"]
    storage, path = Storage.for_url(root)
    assert read_lock(storage, path) is None
    with run_lock(storage, path, operation="rollback"):
        third = ckpt.save(3, state).result()
    assert third.retention is not None and third.retention.skipped is not None
    assert "rollback by" in third.retention.skipped
    names = sorted(e.name for e in storage.list_dir(path) if e.is_dir and e.name.startswith("step_"))
    assert names == ["step_2", "step_3"]  # nothing deleted while rollback held the lock
    fourth = ckpt.save(4, state).result()  # the next pass catches up
    ckpt.close()
    assert fourth.retention is not None and sorted(fourth.retention.deleted) == ["step_2", "step_3"]
    names = sorted(e.name for e in storage.list_dir(path) if e.is_dir and e.name.startswith("step_"))
    assert names == ["step_4"] and read_lock(storage, path) is None
    assert verify_checkpoint(f"{root}/step_4", deep=True).status == "complete"


def test_several_files_per_rank_each_get_their_checksum(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), thread_count=3, preemption_signals=None)
    ckpt.save(1, make_state())
    d = tmp_path / "step_1"
    manifest = json.loads((d / "ckptctl.json").read_bytes())
    shards = sorted(f["path"] for f in manifest["files"] if f["path"].endswith(".distcp"))
    assert shards == ["__0_0.distcp", "__0_1.distcp", "__0_2.distcp"]
    for f in manifest["files"]:
        assert f["checksum"] == file_crc32(d / f["path"])


def test_async_saves_with_retention_keep_exactly_the_newest(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), async_save=True, keep_last=2, preemption_signals=None)
    state = make_state()
    for step in range(1, 6):
        ckpt.save(step, state)
    ckpt.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("step_")) == [
        "step_4",
        "step_5",
    ]
    for name in ("step_4", "step_5"):
        assert independently_complete(tmp_path / name) is None


@pytest.mark.parametrize("thread_count", [1, 3])
def test_large_writes_checksummed_beside_the_write_match_a_re_read(
    tmp_path: Path, thread_count: int
) -> None:
    """Writes of >= OVERLAP_MIN_BYTES are checksummed on a helper thread while they go out."""
    from ckptctl.training._dcp_io import OVERLAP_MIN_BYTES

    g = torch.Generator().manual_seed(3)
    big = {
        f"t{i}": torch.randn(OVERLAP_MIN_BYTES // 4 * (i + 1) + 7, generator=g) for i in range(4)
    }
    small = torch.randn(100, generator=g)
    ckpt = Checkpointer(str(tmp_path), thread_count=thread_count, preemption_signals=None)
    ckpt.save(1, {"big": big, "small": small})
    ckpt.close()
    d = tmp_path / "step_1"
    manifest = json.loads((d / "ckptctl.json").read_bytes())
    sizes = [f["size_bytes"] for f in manifest["files"] if f["path"].endswith(".distcp")]
    assert sum(sizes) > 10 * OVERLAP_MIN_BYTES
    for f in manifest["files"]:
        assert f["checksum"] == file_crc32(d / f["path"]), f["path"]
    assert verify_checkpoint(str(d), deep=True).status == "complete"
