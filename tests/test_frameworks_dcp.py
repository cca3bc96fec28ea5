"""DCP in its other writer variants: SAFETENSORS serialization, HuggingFaceStorageWriter (1 and 2
ranks), torchtitan's model-only last step, and zstd records without a decoder (--deep)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ckptctl.runroot.locate import find_latest_complete, list_checkpoints, verify_checkpoint
from ckptctl.runroot.reports import CheckOptions
from tests.conftest import REPO, TESTS, torchrun_cmd
from tests.damage import flip_bit, truncate
from tests.test_verify import _zstd_checkpoint, codes


def _state(seed: int) -> dict[str, object]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return {
        "model": {"w": torch.randn(16, 8, generator=g), "b": torch.randn(8, generator=g)},
        "optimizer": {"state": {"w": {"exp_avg": torch.randn(16, 8, generator=g)}}, "lr": 0.1},
        "extra": {"step": seed},
    }


def test_dcp_safetensors_serialization_is_its_record_format_not_corrupt(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import SerializationFormat

    root = tmp_path / "run"
    for step in (10, 20):
        writer = dcp.FileSystemWriter(str(root / f"step_{step}"), serialization_format=SerializationFormat.SAFETENSORS)
        dcp.save(_state(step), storage_writer=writer)
    for deep in (False, True):
        res = list_checkpoints(str(root), options=CheckOptions(deep=deep))
        assert [(c.name, c.status) for c in res.checkpoints] == [("step_20", "complete"), ("step_10", "complete")], [
            c.problems for c in res.checkpoints]
        assert any("safetensors format" in n for n in res.checkpoints[0].notes)
    assert res.checkpoints[0].contents == ["extra", "model", "optimizer"]
    truncate(root / "step_20" / "__0_0.distcp", 0.8)
    r = verify_checkpoint(str(root / "step_20"))
    assert r.status == "corrupt" and "shard-truncated" in codes(r)
    assert find_latest_complete(str(root)).checkpoint.name == "step_10"  # type: ignore[union-attr]


def test_hf_storage_writer_single_rank_and_its_index(tmp_path: Path) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    root = tmp_path / "checkpoint"
    sd = {"embed.weight": torch.randn(8, 4), "head.weight": torch.randn(4, 8)}
    for step in (1, 2):  # torchtitan's last_save_in_hf: step-N with safetensors + index, model only
        dcp.save(sd, storage_writer=HuggingFaceStorageWriter(str(root / f"step-{step}"),
                                                             fqn_to_index_mapping={"embed.weight": 1, "head.weight": 2}))
    r = list_checkpoints(str(root)).checkpoints[0]
    assert (r.name, r.status, r.framework, r.model_only) == ("step-2", "complete", "torchtitan", True)
    (root / "step-2" / "model-00002-of-00002.safetensors").unlink()
    r = list_checkpoints(str(root)).checkpoints[0]
    assert r.status == "incomplete" and codes(r) == {"shard-missing"}


@pytest.mark.slow
def test_hf_storage_writer_on_two_ranks_loses_tensors(tmp_path: Path) -> None:
    out = tmp_path / "titan" / "step-5"
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.run([*torchrun_cmd(2), str(TESTS / "scripts" / "hf_storage_writer.py"), str(out)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = verify_checkpoint(str(out))
    assert r.status == "corrupt" and codes(r) == {"tensors-lost"}
    assert "2 tensor(s) the index places in model-00001-of-00001.safetensors are not in it" in r.problems[0]


def test_torchtitan_model_only_last_step_is_skipped_by_locate(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    root = tmp_path / "checkpoint"
    full = _state(1)
    # torchtitan flattens the model's keys to the top level beside optimizer/lr_scheduler/...
    flat = {**full["model"], "optimizer": full["optimizer"], "lr_scheduler": {"last_epoch": 1},  # type: ignore[dict-item]
            "train_state": {"step": 10}}
    dcp.save(flat, checkpoint_id=str(root / "step-10"))
    dcp.save(dict(full["model"]), checkpoint_id=str(root / "step-20"))  # type: ignore[call-overload]
    res = list_checkpoints(str(root))
    assert [(c.name, c.status, c.contents, c.model_only) for c in res.checkpoints] == [
        ("step-20", "complete", ["model"], True),
        ("step-10", "complete", ["lr_scheduler", "model", "optimizer", "train_state"], False),
    ]
    loc = find_latest_complete(str(root))
    assert loc.checkpoint.name == "step-10"  # type: ignore[union-attr]
    assert "model-only export" in loc.skipped[0].problems[0]


def test_deep_never_passes_zstd_records_it_could_not_decode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = tmp_path / "step_1"
    _zstd_checkpoint(ck)
    flipped = tmp_path / "step_2"
    shutil.copytree(ck, flipped)
    data = bytearray((flipped / "__0_0.distcp").read_bytes())
    flip_bit(flipped / "__0_0.distcp", len(data) // 2)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if `zstandard` were not installed
    for path in (ck, flipped):
        assert verify_checkpoint(str(path)).status == "complete"  # quick: sizes only
        r = verify_checkpoint(str(path), deep=True)
        assert r.status == "unsupported" and codes(r) == {"not-checked"}
        assert "pip install 'ckptctl[fast]'" in r.problems[0]
