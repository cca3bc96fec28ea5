"""list/locate/verify against real DCP checkpoints (1, 2, 4 ranks) and damaged copies."""

from __future__ import annotations

import pickle
import shutil
import sys
from pathlib import Path

import pytest

from ckptctl.core.verify.contract import PROBLEM_CODES
from ckptctl.core.verify.manifest import MANIFEST_NAME
from ckptctl.runroot.locate import (
    find_latest_complete,
    list_checkpoints,
    verify_checkpoint,
    verify_target,
)
from ckptctl.runroot.reports import CheckOptions, CheckpointReport
from tests.damage import (
    flip_bit,
    hostile_metadata,
    stealth_metadata,
    tensor_data_offset,
    truncate,
    write_manifest,
)


def codes(report: CheckpointReport) -> set[str]:
    """The problem codes of a report; every problem must carry a known one."""
    found = {p.code for p in report.problem_details}
    assert found <= PROBLEM_CODES, found - PROBLEM_CODES
    assert len(report.problem_details) == len(report.problems)
    return found


@pytest.mark.parametrize("world", [1, 2, 4])
def test_intact_checkpoints_are_complete_with_inferred_world_size(golden: dict[int, Path], world: int) -> None:
    for step in (10, 20, 30):
        r = verify_checkpoint(str(golden[world] / "run" / f"step_{step}"), deep=True)
        assert r.status == "complete", r.problems
        assert r.world_size == world
        assert r.world_size_source == "shard names"
        assert r.step == step
        assert r.records_checked > 20 and r.members_crc_checked > 100


@pytest.mark.parametrize("world", [1, 2, 4])
def test_world_size_assertion(golden: dict[int, Path], world: int) -> None:
    path = str(golden[world] / "run" / "step_10")
    assert verify_checkpoint(path, world_size=world).status == "complete"
    other = verify_checkpoint(path, world_size=world + 1)
    assert other.status == "incomplete"
    assert any("expected" in p for p in other.problems)
    assert codes(other) == {"world-size-mismatch"}


def test_ddp_dedup_zero_byte_shards_are_legitimate(golden: dict[int, Path]) -> None:
    path = golden[4] / "variants" / "ddp_dedup"
    sizes = {p.name: p.stat().st_size for p in path.glob("*.distcp")}
    assert sorted(sizes) == ["__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp"]
    assert any(s == 0 for s in sizes.values()), sizes
    r = verify_checkpoint(str(path), deep=True, world_size=4)
    assert r.status == "complete", r.problems
    assert r.world_size == 4


def test_several_files_per_rank(golden: dict[int, Path]) -> None:
    path = golden[2] / "variants" / "threads2"
    assert len(list(path.glob("*.distcp"))) == 4
    r = verify_checkpoint(str(path), deep=True, world_size=2)
    assert r.status == "complete", r.problems
    assert r.world_size == 2


def test_rank_local_layout_is_verified_and_flagged(golden: dict[int, Path], tmp_path: Path) -> None:
    path = golden[2] / "variants" / "rank_local"
    r = verify_checkpoint(str(path), deep=True)
    assert r.kind == "dcp-rank-local"
    assert r.status == "complete", r.problems
    assert r.world_size == 2 and r.world_size_source == "rank-local metadata"
    assert any("loadable only at world size 2" in n for n in r.notes)
    assert verify_checkpoint(str(path), world_size=1).status != "complete"
    broken = shutil.copytree(path, tmp_path / "rl")
    (broken / "__1.metadata").unlink()
    (broken / "__1_0.distcp").unlink()
    assert verify_checkpoint(str(broken)).status == "incomplete"


def test_missing_metadata_is_incomplete(run_root: Path) -> None:
    (run_root / "step_30" / ".metadata").unlink()
    r = verify_checkpoint(str(run_root / "step_30"))
    assert r.status == "incomplete"
    assert any("no .metadata" in p for p in r.problems)
    assert codes(r) == {"metadata-missing"}


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b"", "empty"),
        (b"\x07garbage that is not a pickle" * 10, "unreadable"),
        (None, "truncated"),
    ],
)
def test_bad_metadata_is_corrupt(run_root: Path, content: bytes | None, expect: str) -> None:
    meta = run_root / "step_30" / ".metadata"
    if content is None:
        truncate(meta, 0.5)
    else:
        meta.write_bytes(content)
    r = verify_checkpoint(str(run_root / "step_30"))
    assert r.status == "corrupt"
    assert any(expect in p for p in r.problems), r.problems
    assert codes(r) == {"metadata-corrupt"}


def test_hostile_metadata_is_refused_and_never_runs(run_root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    hostile_metadata(run_root / "step_30", marker)
    r = verify_checkpoint(str(run_root / "step_30"), deep=True)
    assert r.status == "corrupt"
    assert any("disallowed global" in p for p in r.problems)
    assert codes(r) == {"hostile-pickle"}
    assert not marker.exists()
    # and locate falls back past it
    assert find_latest_complete(str(run_root)).checkpoint.name == "step_20"  # type: ignore[union-attr]
    assert not marker.exists()


def test_stealth_metadata_that_dcp_would_load_is_refused(run_root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "STEALTH"
    stealth_metadata(run_root / "step_30", marker)
    r = verify_checkpoint(str(run_root / "step_30"))
    assert r.status == "corrupt"
    assert not marker.exists()


def test_missing_rank_shard_is_incomplete(run_root: Path) -> None:
    (run_root / "step_30" / "__1_0.distcp").unlink()
    r = verify_checkpoint(str(run_root / "step_30"))
    assert r.status == "incomplete"
    assert any("shard missing: __1_0.distcp" in p for p in r.problems)
    assert "shard-missing" in codes(r)


@pytest.mark.parametrize("fraction", [0.5, 0.0, 0.999])
def test_truncated_shard_is_corrupt(run_root: Path, fraction: float) -> None:
    truncate(run_root / "step_30" / "__0_0.distcp", fraction)
    r = verify_checkpoint(str(run_root / "step_30"))
    assert r.status == "corrupt"
    assert any("shard truncated: __0_0.distcp" in p for p in r.problems)
    assert "shard-truncated" in codes(r)


def test_every_problem_is_reported_not_just_the_first(run_root: Path) -> None:
    truncate(run_root / "step_30" / "__0_0.distcp", 0.5)
    (run_root / "step_30" / "__1_0.distcp").unlink()
    r = verify_checkpoint(str(run_root / "step_30"))
    assert len(r.problems) >= 2
    assert r.status == "corrupt"
    assert {"shard-missing", "shard-truncated"} <= codes(r)


def test_temp_dir_beside_complete_ones_is_never_complete(run_root: Path) -> None:
    # a complete-looking save under a temp name (crash between save and rename)
    shutil.copytree(run_root / "step_30", run_root / "step_40.tmp-9f2c")
    shutil.copytree(run_root / "step_30", run_root / "tmp-checkpoint-50")
    listing = list_checkpoints(str(run_root))
    by_name = {c.name: c for c in listing.checkpoints}
    assert by_name["step_40.tmp-9f2c"].status == "incomplete"
    assert by_name["step_40.tmp-9f2c"].is_temp
    assert by_name["tmp-checkpoint-50"].status == "incomplete"
    assert codes(by_name["step_40.tmp-9f2c"]) == {"temp-dir"}
    assert [c.name for c in listing.checkpoints][:2] == ["tmp-checkpoint-50", "step_40.tmp-9f2c"]
    loc = find_latest_complete(str(run_root))
    assert loc.checkpoint is not None and loc.checkpoint.name == "step_30"


def test_locate_goes_back_past_two_broken_newest(run_root: Path) -> None:
    (run_root / "step_30" / ".metadata").unlink()
    truncate(run_root / "step_20" / "__1_0.distcp", 0.3)
    loc = find_latest_complete(str(run_root))
    assert loc.checkpoint is not None and loc.checkpoint.name == "step_10"
    assert [s.name for s in loc.skipped] == ["step_30", "step_20"]
    assert [s.status for s in loc.skipped] == ["incomplete", "corrupt"]


def test_locate_before_step_is_the_rollback_target(run_root: Path) -> None:
    assert find_latest_complete(str(run_root), before_step=30).checkpoint.name == "step_20"  # type: ignore[union-attr]
    assert find_latest_complete(str(run_root), before_step=11).checkpoint.name == "step_10"  # type: ignore[union-attr]
    assert find_latest_complete(str(run_root), before_step=10).checkpoint is None


def test_no_complete_checkpoint_at_all(run_root: Path) -> None:
    for d in run_root.iterdir():
        (d / ".metadata").unlink()
    loc = find_latest_complete(str(run_root))
    assert loc.checkpoint is None
    assert len(loc.skipped) == 3


def test_bit_flip_needs_deep_without_manifest(run_root: Path) -> None:
    ckpt = run_root / "step_30"
    shard, off = tensor_data_offset(ckpt)
    flip_bit(ckpt / shard, off)
    assert verify_checkpoint(str(ckpt)).status == "complete"  # quick verify cannot see it
    deep = verify_checkpoint(str(ckpt), deep=True)
    assert deep.status == "corrupt"
    assert any("CRC-32 mismatch" in p for p in deep.problems), deep.problems
    assert codes(deep) == {"crc-mismatch"}
    loc = find_latest_complete(str(run_root), deep=True)
    assert loc.checkpoint is not None and loc.checkpoint.name == "step_20"


def test_bit_flip_with_manifest_is_caught_by_both_checks(run_root: Path) -> None:
    ckpt = run_root / "step_30"
    write_manifest(ckpt, step=30, world_size=2)
    clean = verify_checkpoint(str(ckpt), deep=True)
    assert clean.status == "complete", clean.problems
    assert clean.world_size_source == "manifest"
    assert clean.committed is True
    shard, off = tensor_data_offset(ckpt)
    flip_bit(ckpt / shard, off)
    assert verify_checkpoint(str(ckpt)).status == "complete"
    deep = verify_checkpoint(str(ckpt), deep=True)
    assert deep.status == "corrupt"
    assert any("CRC-32 mismatch" in p for p in deep.problems)
    assert any(p.startswith("checksum mismatch: " + shard) for p in deep.problems), deep.problems
    assert codes(deep) == {"crc-mismatch", "checksum-mismatch"}


def test_manifest_checksum_catches_a_flip_outside_records(run_root: Path) -> None:
    """A flip in bytes no record covers (here: .metadata's tail padding is not possible,
    so flip inside .metadata's string data) is caught by the manifest checksum only."""
    ckpt = run_root / "step_30"
    write_manifest(ckpt, step=30, world_size=2)
    meta = (ckpt / ".metadata").read_bytes()
    pos = meta.find(b"save_id") if b"save_id" in meta else len(meta) // 2
    flip_bit(ckpt / ".metadata", pos + 2)
    deep = verify_checkpoint(str(ckpt), deep=True)
    assert any(p.startswith("checksum mismatch: .metadata") for p in deep.problems), deep.problems


def test_manifest_sizes_and_commit_marker(run_root: Path) -> None:
    ckpt = run_root / "step_30"
    write_manifest(ckpt, step=30, world_size=2)
    (ckpt / ".ckptctl-committed").unlink()
    r = verify_checkpoint(str(ckpt))
    assert r.status == "incomplete" and r.committed is False
    assert codes(r) == {"uncommitted"}
    write_manifest(ckpt, step=30, world_size=2)
    with open(ckpt / "__0_0.distcp", "ab") as f:
        f.write(b"\0" * 10)  # longer than recorded: records still fit, manifest disagrees
    r = verify_checkpoint(str(ckpt))
    assert r.status == "corrupt"
    assert any("the manifest recorded" in p for p in r.problems)
    assert codes(r) == {"manifest-mismatch"}
    write_manifest(ckpt, step=99, world_size=2)
    assert any("directory name says step 30" in p for p in verify_checkpoint(str(ckpt)).problems)


def test_manifest_names_a_missing_rank(run_root: Path) -> None:
    ckpt = run_root / "step_30"
    write_manifest(ckpt, step=30, world_size=4)  # two ranks never wrote
    r = verify_checkpoint(str(ckpt))
    assert r.status == "incomplete"
    assert any("rank(s) [2, 3]" in p for p in r.problems)
    assert codes(r) == {"rank-missing"}


def test_hostile_byte_record_is_found_by_deep_scan(golden: dict[int, Path], tmp_path: Path) -> None:
    path = golden[2] / "variants" / "hostile_record"
    assert verify_checkpoint(str(path)).status == "complete"  # offsets all fit
    r = verify_checkpoint(str(path), deep=True)
    assert r.status == "corrupt"
    assert any("posix.system" in p and "extra.evil" in p for p in r.problems), r.problems
    assert codes(r) == {"hostile-pickle"}  # the record is intact: only its pickle is refused
    assert not (golden[2] / "PWNED").exists()


def _largest_tensor_record(ckpt: Path) -> tuple[str, int, int]:
    """(shard, offset, length) of the largest tensor record of a real checkpoint."""
    from ckptctl.adapters.dcp_metadata import read_index

    idx = read_index((ckpt / ".metadata").read_bytes())
    item = max((i for i in idx.items if i.chunk_offsets is not None), key=lambda i: i.length)
    return item.relative_path, item.offset, item.length


def test_record_cut_short_is_record_truncated(run_root: Path) -> None:
    """The shard keeps its size but a record's second half never reached the disk (zeros),
    as after a crash where the file size was committed before the data."""
    ckpt = run_root / "step_30"
    shard, offset, length = _largest_tensor_record(ckpt)
    with open(ckpt / shard, "r+b") as f:
        f.seek(offset + length // 2)
        f.write(bytes(length - length // 2))
    assert verify_checkpoint(str(ckpt)).status == "complete"  # every size still fits
    deep = verify_checkpoint(str(ckpt), deep=True)
    assert deep.status == "corrupt"
    assert codes(deep) == {"record-truncated"}, deep.problems
    assert any("cut short" in p and f"@{offset}" in p for p in deep.problems), deep.problems


def test_damage_kinds_get_their_own_codes_in_one_report(run_root: Path) -> None:
    """A flipped bit in one record, another record cut short: each keeps its own code."""
    ckpt = run_root / "step_30"
    shard, offset, length = _largest_tensor_record(ckpt)
    with open(ckpt / shard, "r+b") as f:
        f.seek(offset + length // 2)
        f.write(bytes(length - length // 2))
    other = "__1_0.distcp" if shard == "__0_0.distcp" else "__0_0.distcp"
    flip_shard, flip_at = tensor_data_offset(ckpt, other)
    flip_bit(ckpt / flip_shard, flip_at)
    deep = verify_checkpoint(str(ckpt), deep=True)
    assert codes(deep) == {"record-truncated", "crc-mismatch"}, deep.problems
    by_code = {d.code: d.message for d in deep.problem_details}
    assert by_code["crc-mismatch"].startswith(flip_shard) and "CRC-32 mismatch" in by_code["crc-mismatch"]
    assert by_code["record-truncated"].startswith(shard)


def test_record_directory_damage_is_record_corrupt(run_root: Path) -> None:
    """Garbage (not zeros) where a record's zip directory belongs: damaged, not cut short."""
    ckpt = run_root / "step_30"
    shard, offset, length = _largest_tensor_record(ckpt)
    with open(ckpt / shard, "r+b") as f:
        f.seek(offset + length - 200)
        f.write(b"\xa5" * 200)
    deep = verify_checkpoint(str(ckpt), deep=True)
    assert deep.status == "corrupt"
    assert codes(deep) == {"record-corrupt"}, deep.problems


def test_relative_path_escaping_the_directory_is_corrupt(run_root: Path) -> None:
    import torch.distributed.checkpoint as dcp  # a trusted file of our own: real classes

    ckpt = run_root / "step_30"
    md = dcp.FileSystemReader(str(ckpt)).read_metadata()
    first = next(iter(md.storage_data))
    md.storage_data[first].relative_path = "../../etc/passwd"
    (ckpt / ".metadata").write_bytes(pickle.dumps(md))
    r = verify_checkpoint(str(ckpt))
    assert r.status == "corrupt"
    assert any("escapes the checkpoint directory" in p for p in r.problems)
    assert "path-escape" in codes(r)


def test_nested_hf_fsdp_layout_is_the_union(golden: dict[int, Path], tmp_path: Path) -> None:
    ck = tmp_path / "out" / "checkpoint-500"
    shutil.copytree(golden[2] / "run" / "step_10", ck / "pytorch_model_fsdp_0")
    shutil.copytree(golden[2] / "run" / "step_20", ck / "optimizer_0")
    (ck / "trainer_state.json").write_text('{"global_step": 500}')
    import torch

    torch.save({"last_epoch": 500}, ck / "scheduler.pt")
    r = verify_target(str(ck)).checkpoints[0]
    assert r.kind == "dcp-nested" and r.status == "complete", r.problems
    assert r.step == 500 and r.framework == "hf"
    (ck / "optimizer_0" / "__1_0.distcp").unlink()
    r = verify_target(str(ck)).checkpoints[0]
    assert r.status == "incomplete"
    assert any("optimizer_0/__1_0.distcp" in p for p in r.problems)


def test_deepspeed_states_without_recorded_world_size_are_unsupported(tmp_path: Path) -> None:
    import torch

    root = tmp_path / "ds"
    (root / "global_step30").mkdir(parents=True)
    torch.save({"module": {}}, root / "global_step30" / "mp_rank_00_model_states.pt")
    torch.save({"optimizer_state_dict": {}}, root / "global_step30" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (root / "latest").write_text("global_step30")
    res = list_checkpoints(str(root))
    assert res.checkpoints[0].status == "unsupported"
    assert res.checkpoints[0].kind == "deepspeed"
    assert codes(res.checkpoints[0]) == {"unsupported-format"}
    assert res.pointers[0].names == "global_step30"
    assert find_latest_complete(str(root)).checkpoint is None


def test_megatron_and_torchtitan_names(golden: dict[int, Path], tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    shutil.copytree(golden[1] / "run" / "step_10", root / "iter_0000010")
    shutil.copytree(golden[1] / "run" / "step_20", root / "iter_0000020")
    (root / "latest_checkpointed_iteration.txt").write_text("10\n")
    # Megatron's save writes metadata.json (rank 0) after the DCP commit; its load needs it
    assert codes(find_latest_complete(str(root)).skipped[0]) == {"commit-missing"}
    for it in ("iter_0000010", "iter_0000020"):
        (root / it / "metadata.json").write_text('{"sharded_backend": "torch_dist", "sharded_backend_version": 1}')
    loc = find_latest_complete(str(root))
    assert loc.checkpoint is not None and loc.checkpoint.step == 20
    assert loc.to_json()["pointers"] == [{"file": "latest_checkpointed_iteration.txt", "names": "10", "agrees": False}]
    root2 = tmp_path / "titan" / "checkpoint"
    shutil.copytree(golden[1] / "run" / "step_30", root2 / "step-30")
    assert find_latest_complete(str(root2)).checkpoint.framework == "torchtitan"  # type: ignore[union-attr]


def test_memory_filesystem(golden: dict[int, Path]) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    for p in (golden[2] / "run").rglob("*"):
        if p.is_file():
            fs.pipe_file(f"/memrun/{p.relative_to(golden[2] / 'run').as_posix()}", p.read_bytes())
    fs.rm("/memrun/step_30/__1_0.distcp")
    loc = find_latest_complete("memory://memrun", deep=True)
    assert loc.checkpoint is not None and loc.checkpoint.name == "step_20"
    assert loc.checkpoint.path == "memory:///memrun/step_20"
    assert loc.skipped[0].status == "incomplete"


def test_check_finite_flags_nan(tmp_path: Path) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    sd = {"w": torch.ones(4, 4), "b": torch.tensor([1.0, float("nan"), float("inf")])}
    dcp.save(sd, checkpoint_id=str(tmp_path / "step_1"))
    assert verify_checkpoint(str(tmp_path / "step_1"), deep=True).status == "complete"
    r = verify_checkpoint(str(tmp_path / "step_1"), check_finite=True)
    assert r.status == "corrupt"
    assert any("1 NaN, 1 Inf" in p for p in r.problems), r.problems
    assert codes(r) == {"non-finite"}


def test_read_only_commands_write_nothing(run_root: Path) -> None:
    def snapshot() -> dict[str, tuple[int, int]]:
        return {
            str(p.relative_to(run_root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in run_root.rglob("*")
        }

    before = snapshot()
    list_checkpoints(str(run_root), options=CheckOptions(deep=True))
    find_latest_complete(str(run_root), deep=True)
    verify_target(str(run_root), options=CheckOptions(deep=True))
    assert snapshot() == before
    assert not (run_root / ".ckptctl").exists()


def test_metadata_reader_does_not_import_torch() -> None:
    import subprocess

    code = (
        "import sys\n"
        "from ckptctl.adapters.dcp_metadata import read_index\n"
        f"idx = read_index(open({str(Path(__file__).parent / 'fixtures' / 'dcp' / 'metadata_w2.bin')!r}, 'rb').read())\n"
        "assert 'torch' not in sys.modules\n"
        "print(len(idx.items))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) > 10


def test_manifest_file_name_constant() -> None:
    assert MANIFEST_NAME == "ckptctl.json"


def test_streaming_path_for_large_records_agrees(run_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records above the in-memory limit are checked member by member; same verdicts."""
    import ckptctl.runroot.deep as ops

    monkeypatch.setattr(ops, "_WHOLE_RECORD_MAX_BYTES", 1000)
    monkeypatch.setattr(ops, "_STREAM_CHUNK_BYTES", 700)
    ckpt = run_root / "step_30"
    write_manifest(ckpt, step=30, world_size=2)
    clean = verify_checkpoint(str(ckpt), deep=True)
    assert clean.status == "complete", clean.problems
    assert clean.members_crc_checked > 100
    shard, off = tensor_data_offset(ckpt)
    flip_bit(ckpt / shard, off)
    r = verify_checkpoint(str(ckpt), deep=True)
    assert any("CRC-32 mismatch" in p for p in r.problems), r.problems
    assert any(p.startswith("checksum mismatch: " + shard) for p in r.problems), r.problems


def test_crc_of_pieces_matches_plain_crc() -> None:
    import os
    import random
    import zlib

    from ckptctl.core.verify.crc import crc32_of_pieces

    rng = random.Random(7)
    for _ in range(50):
        buf = os.urandom(rng.randint(0, 300_000))
        pieces = []
        pos = 0
        while pos < len(buf):
            start = pos + rng.randint(0, 5000)
            length = rng.randint(0, 100_000)
            if start + length > len(buf):
                break
            pieces.append((start, length, zlib.crc32(buf[start : start + length])))
            pos = start + length
        assert crc32_of_pieces(buf, pieces, zlib.crc32, min_piece_bytes=rng.choice([1, 1000, 1 << 16])) == zlib.crc32(buf)


def test_file_url_is_the_same_as_a_path(run_root: Path) -> None:
    (run_root / "step_30" / ".metadata").unlink()
    loc = find_latest_complete(f"file://{run_root}")
    assert loc.checkpoint is not None and loc.checkpoint.name == "step_20"
    assert loc.checkpoint.path == str(run_root / "step_20")


def test_nested_layout_with_no_committed_dcp_dir_is_incomplete_not_unsupported(
    golden: dict[int, Path], tmp_path: Path
) -> None:
    ck = tmp_path / "out" / "checkpoint-500"
    shutil.copytree(golden[2] / "run" / "step_10", ck / "pytorch_model_fsdp_0")
    (ck / "pytorch_model_fsdp_0" / ".metadata").unlink()
    (ck / "trainer_state.json").write_text('{"global_step": 500}')
    r = verify_target(str(ck)).checkpoints[0]
    assert r.kind == "dcp-nested"
    assert r.status == "incomplete"
    assert r.problems == ["pytorch_model_fsdp_0/: no .metadata: the save never committed"]
    assert codes(r) == {"metadata-missing"}


def test_fp4_and_e8m0_checkpoints_are_complete_and_a_future_dtype_is_not_hostile(
    tmp_path: Path,
) -> None:
    """MXFP4/NVFP4 weights (torch.float4_e2m1fn_x2) and their e8m0 scales, as DCP writes them."""
    import torch
    import torch.distributed.checkpoint as dcp

    from ckptctl.training._dcp_io import parse_metadata_bytes
    from ckptctl.training.errors import UnsafeCheckpointError

    sd = {
        "w_fp4": torch.arange(64, dtype=torch.uint8).view(torch.float4_e2m1fn_x2),
        "scale": torch.full((8,), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu),
        "bias": torch.ones(4),
    }
    good = tmp_path / "step_1"
    dcp.save(sd, checkpoint_id=str(good))
    for deep in (False, True):
        r = verify_checkpoint(str(good), deep=deep)
        assert r.status == "complete", r.problems
    md = (good / ".metadata").read_bytes()
    assert parse_metadata_bytes(md, "step_1").state_dict_metadata["w_fp4"].properties.dtype == (
        torch.float4_e2m1fn_x2
    )

    # A dtype a newer torch may add (same-length rename keeps the pickle valid): verify accepts
    # it with an unknown element size; the training reader refuses it on this torch.
    assert b"float4_e2m1fn_x2" in md
    future = tmp_path / "future"
    shutil.copytree(good, future)
    (future / ".metadata").write_bytes(md.replace(b"float4_e2m1fn_x2", b"float4_e2m1fn_x9"))
    r = verify_checkpoint(str(future))
    assert r.status == "complete", r.problems
    with pytest.raises(UnsafeCheckpointError, match="not a dtype of this torch"):
        parse_metadata_bytes((future / ".metadata").read_bytes(), "future")

    # Any other torch attribute is still a refused global.
    hostile = tmp_path / "hostile"
    shutil.copytree(good, hostile)
    (hostile / ".metadata").write_bytes(md.replace(b"float4_e2m1fn_x2", b"set_default_type"))
    r = verify_checkpoint(str(hostile))
    assert r.status == "corrupt" and any("disallowed global torch.set_default_type" in p for p in r.problems)


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("float32", True),
        ("bfloat16", True),
        ("float4_e2m1fn_x2", True),
        ("float8_e8m0fnu", True),
        ("bits16", True),
        ("cfloat", True),
        ("float8_e3m4", True),  # dtype-shaped: a newer torch's
        ("BFloat16Storage", True),
        ("float_power", False),  # functions whose names start like a dtype
        ("int_repr", False),
        ("complex", False),
        ("bitwise_and", False),
        ("load", False),
    ],
)
def test_record_scan_admits_torch_dtypes_by_name_and_no_functions(name: str, allowed: bool) -> None:
    from ckptctl.core.verify.records import is_allowed_global

    assert is_allowed_global("torch", name) is allowed


def _zstd_checkpoint(path: Path) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._extension import ZStandard

    sd = {"w": torch.randn(128, 128, generator=torch.Generator().manual_seed(0)), "extra": {"epoch": 3}}
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(path), _extensions=[ZStandard()]))


def test_zstd_extension_records_are_decoded_and_checked_inside(tmp_path: Path) -> None:
    """DCP's ZStandard writer extension: deep verify looks inside the zstd frames (zip CRCs,
    pickle scan), catches a flipped bit there, and says so when it cannot decode."""
    good = tmp_path / "step_1"
    _zstd_checkpoint(good)
    r = verify_checkpoint(str(good), deep=True)
    assert r.status == "complete", r.problems
    assert r.members_crc_checked > 0
    assert any("written through stream.zstd/1 were decoded and checked inside" in n for n in r.notes)

    flipped = tmp_path / "flipped"
    shutil.copytree(good, flipped)
    shard = flipped / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x10  # inside the tensor record's compressed bytes
    shard.write_bytes(bytes(data))
    assert verify_checkpoint(str(flipped)).status == "complete"  # sizes still agree
    r = verify_checkpoint(str(flipped), deep=True)
    assert r.status == "corrupt", r.notes

    # an extension ckptctl does not know: complete by size (quick), but --deep never passes
    # bytes it did not check: the problem says what was not checked
    other = tmp_path / "other"
    shutil.copytree(good, other)
    md = (other / ".metadata").read_bytes()
    assert b"stream.zstd" in md
    (other / ".metadata").write_bytes(md.replace(b"stream.zstd", b"stream.zlib"))
    assert verify_checkpoint(str(other)).status == "complete"
    r = verify_checkpoint(str(other), deep=True)
    assert r.status == "unsupported"
    assert codes(r) == {"not-checked"}
    assert any("could not be checked inside: unknown writer extension 'stream.zlib/1'" in p for p in r.problems)


def test_records_saved_without_crcs_are_noted(tmp_path: Path) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.utils.serialization import config

    before = config.save.compute_crc32
    config.save.compute_crc32 = False
    try:
        dcp.save({"w": torch.ones(64, 64)}, checkpoint_id=str(tmp_path / "step_1"))
    finally:
        config.save.compute_crc32 = before
    r = verify_checkpoint(str(tmp_path / "step_1"), deep=True)
    assert r.status == "complete"
    assert any("carry no CRC-32 (saved with compute_crc32=False)" in n for n in r.notes), r.notes


@pytest.mark.parametrize("cls", [b"Metadata", b"TensorProperties", b"ChunkStorageMetadata"])
def test_metadata_object_with_a_non_dict_state_is_a_clear_error(cls: bytes) -> None:
    from ckptctl.adapters.dcp_metadata import MetadataError, unpickle_metadata

    # PROTO 2, GLOBAL, EMPTY_TUPLE, NEWOBJ, BININT1 5, BUILD, STOP: an object whose state is 5
    data = b"\x80\x02ctorch.distributed.checkpoint.metadata\n" + cls + b"\n)\x81K\x05b."
    with pytest.raises(MetadataError, match="not a DCP metadata pickle") as e:
        unpickle_metadata(data)
    assert not e.value.hostile


def test_every_problem_code_is_documented() -> None:
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    table = set(re.findall(r"^\| `([a-z-]+)` \| (?:incomplete|corrupt|unsupported) \|", doc, re.M))
    assert table == PROBLEM_CODES
