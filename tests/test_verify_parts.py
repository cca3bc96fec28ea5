"""``verify --deep --part K/N``, ``--merge`` and ``--launch torchrun`` on real DCP checkpoints.

The property: however the deep check is split (N parts, in this process or in others,
on a local disk or a real S3 server), the merge gives the JSON a one-node ``verify
--deep`` gives, on complete and damaged checkpoints. ``CKPTCTL_SEGMENT_BYTES`` is set
small so the small test checkpoints are cut into tens of segments (files split across
parts). The Slurm launcher is tested in tests/test_slurm_verify_parts.py.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ckptctl.core.verify.manifest import MANIFEST_NAME
from ckptctl.ops.verify_parts import load_parts, merge_parts, parse_part, run_part
from ckptctl.runroot.locate import verify_target
from ckptctl.runroot.reports import CheckOptions, VerifyResult
from tests.conftest import upload_tree
from tests.damage import flip_bit, tensor_data_offset, truncate, write_manifest
from tests.test_checkpoints_cli import assert_one_line_error, run

SMALL_SEGMENTS = {"CKPTCTL_SEGMENT_BYTES": "4096"}
DEEP = CheckOptions(deep=True)


@pytest.fixture(autouse=True)
def _small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, val in SMALL_SEGMENTS.items():
        monkeypatch.setenv(k, val)


def _flip(ckpt: Path) -> None:
    shard, off = tensor_data_offset(ckpt)
    flip_bit(ckpt / shard, off)


def _truncate(ckpt: Path) -> None:
    truncate(ckpt / "__1_0.distcp", 0.6)


def _flip_with_manifest(ckpt: Path) -> None:
    write_manifest(ckpt, step=10, world_size=2)
    shard, off = tensor_data_offset(ckpt, "__1_0.distcp")
    flip_bit(ckpt / shard, off)  # also a whole-file CRC mismatch, assembled across segments


def _gap_with_manifest(ckpt: Path) -> None:
    """A bit flipped where no record lies (after the last one): only the whole-file CRC sees it."""
    with open(ckpt / "__0_0.distcp", "ab") as f:
        f.write(b"\0" * 5000)
    write_manifest(ckpt, step=10, world_size=2)
    size = (ckpt / "__0_0.distcp").stat().st_size
    flip_bit(ckpt / "__0_0.distcp", size - 100)


DAMAGE: dict[str, Callable[[Path], None] | None] = {
    "complete": None,
    "truncated": _truncate,
    "bit-flipped": _flip,
    "bit-flipped+manifest": _flip_with_manifest,
    "gap-flipped+manifest": _gap_with_manifest,
}
EXPECT = {
    "complete": set(),
    "truncated": {"shard-truncated"},
    "bit-flipped": {"crc-mismatch"},
    "bit-flipped+manifest": {"crc-mismatch", "checksum-mismatch"},
    "gap-flipped+manifest": {"checksum-mismatch"},
}


def _codes(result: VerifyResult) -> set[str]:
    return {p.code for c in result.checkpoints for p in c.problem_details}


def _ckpt(golden: dict[int, Path], tmp_path: Path, damage: str) -> Path:
    ckpt = Path(shutil.copytree(golden[2] / "run" / "step_10", tmp_path / "step_10"))
    fn = DAMAGE[damage]
    if fn is not None:
        fn(ckpt)
    return ckpt


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_merged_parts_equal_the_one_node_run(golden: dict[int, Path], tmp_path: Path, damage: str, count: int) -> None:
    ckpt = _ckpt(golden, tmp_path, damage)
    one = verify_target(str(ckpt), options=DEEP)
    if EXPECT[damage]:
        assert EXPECT[damage] <= _codes(one), one.checkpoints[0].problems
    else:
        assert one.ok, one.checkpoints[0].problems
    parts_dir = tmp_path / "parts"
    parts = [run_part(str(ckpt), DEEP, k, count, part_out=str(parts_dir)) for k in range(1, count + 1)]
    merged = merge_parts(str(ckpt), DEEP, [str(parts_dir)])
    assert merged.to_json() == one.to_json()
    # every segment was read by exactly one part, and together they read what one node reads
    deep = [p.checkpoints[0].deep_part for p in parts]
    assert all(d is not None for d in deep)
    seen = [s["i"] for d in deep if d for s in d["segments"]]
    assert sorted(seen) == list(range(deep[0]["num_segments"])) and deep[0]["num_segments"] > 10  # type: ignore[index]
    assert sum(p.checkpoints[0].bytes_read for p in parts) == one.checkpoints[0].bytes_read
    # a part reports only what lies in its own bytes (plus the quick check, which every part makes)
    part_codes = set().union(*(_codes(p) for p in parts))
    assert part_codes <= _codes(one)
    if damage == "bit-flipped" and count > 1:
        assert sum("crc-mismatch" in _codes(p) for p in parts) == 1


def test_a_run_root_is_split_checkpoint_by_checkpoint(run_root: Path, tmp_path: Path) -> None:
    _flip(run_root / "step_20")
    one = verify_target(str(run_root), options=DEEP)
    assert [c.status for c in one.checkpoints] == ["complete", "corrupt", "complete"]
    files = []
    for k in (1, 2):
        run_part(str(run_root), DEEP, k, 2, part_out=str(tmp_path / "p"))
        files.append(str(tmp_path / "p" / f"part-{k}-of-2.json"))
    assert merge_parts(str(run_root), DEEP, files).to_json() == one.to_json()


def test_check_finite_and_allow_global_must_match_between_parts_and_merge(
    golden: dict[int, Path], tmp_path: Path
) -> None:
    ckpt = _ckpt(golden, tmp_path, "complete")
    for k in (1, 2):
        run_part(str(ckpt), DEEP, k, 2, part_out=str(tmp_path / "p"))
    with pytest.raises(Exception, match="ran with other --check-finite/--allow-global"):
        merge_parts(str(ckpt), CheckOptions(deep=True, allowed_globals=frozenset({"a.b"})), [str(tmp_path / "p")])


def test_a_checkpoint_changed_after_its_parts_ran_is_refused(golden: dict[int, Path], tmp_path: Path) -> None:
    ckpt = _ckpt(golden, tmp_path, "complete")
    for k in (1, 2):
        run_part(str(ckpt), DEEP, k, 2, part_out=str(tmp_path / "p"))
    truncate(ckpt / "__0_0.distcp", 0.9)
    proc = run("verify", str(ckpt), "--deep", "--merge", str(tmp_path / "p"), env=SMALL_SEGMENTS)
    assert_one_line_error(proc, 1, "changed since the parts ran")


def test_the_segment_size_is_part_of_the_plan(golden: dict[int, Path], tmp_path: Path) -> None:
    ckpt = _ckpt(golden, tmp_path, "complete")
    for k in (1, 2):
        run_part(str(ckpt), DEEP, k, 2, part_out=str(tmp_path / "p"))
    proc = run("verify", str(ckpt), "--deep", "--merge", str(tmp_path / "p"), env={"CKPTCTL_SEGMENT_BYTES": "8192"})
    assert_one_line_error(proc, 1, "do not match")


# -- the CLI -----------------------------------------------------------------------------------


def test_cli_part_json_and_exit_codes(golden: dict[int, Path], tmp_path: Path) -> None:
    ckpt = _ckpt(golden, tmp_path, "bit-flipped")
    docs = []
    codes = []
    for k in (1, 2, 3):
        proc = run("verify", str(ckpt), "--deep", "--part", f"{k}/3", "--json", env=SMALL_SEGMENTS)
        assert "Traceback" not in proc.stderr
        codes.append(proc.returncode)
        doc = json.loads(proc.stdout)
        assert doc["part"]["index"] == k and doc["part"]["count"] == 3 and doc["part"]["node"]
        docs.append(doc)
        (tmp_path / f"mine-{k}.json").write_text(proc.stdout)
    # the part holding the flipped bit says corrupt (exit 3), the others complete (exit 0)
    assert sorted(codes) == [0, 0, 3]
    assert [d["ok"] for d in docs].count(False) == 1
    one = run("verify", str(ckpt), "--deep", "--json", env=SMALL_SEGMENTS)
    merged = run(
        "verify", str(ckpt), "--deep", "--json", *(a for k in (1, 2, 3) for a in ("--merge", str(tmp_path / f"mine-{k}.json"))),
        env=SMALL_SEGMENTS,
    )  # fmt: skip
    assert (merged.returncode, merged.stdout) == (one.returncode, one.stdout) == (3, one.stdout)
    # --part-out: the file holds the verdict, the exit code says it was written
    out = run("verify", str(ckpt), "--deep", "--part", "2/3", "--part-out", str(tmp_path / "d"), env=SMALL_SEGMENTS)
    assert out.returncode == 0, out.stderr
    written = json.loads((tmp_path / "d" / "part-2-of-3.json").read_text())
    assert written["checkpoints"][0]["deep_part"] == docs[1]["checkpoints"][0]["deep_part"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--part", "1/2"], "add --deep"),
        (["--deep", "--part", "3/2"], "1 <= K <= N"),
        (["--deep", "--part", "0/2"], "1 <= K <= N"),
        (["--deep", "--part", "x"], "expected K/N"),
        (["--deep", "--part", "env"], "neither RANK/WORLD_SIZE"),
        (["--deep", "--part", "1/2", "--merge", "x"], "cannot be combined"),
        (["--deep", "--part-out", "d"], "--part-out needs --part"),
        (["--deep", "--launch", "srun"], "--launch needs --parts"),
        (["--deep", "--launch", "mpirun", "--parts", "2"], "expected one of srun, torchrun"),
        (["--deep", "--parts", "2"], "--parts needs --launch"),
    ],
)
def test_cli_usage_errors(golden: dict[int, Path], args: list[str], needle: str) -> None:
    env = {"RANK": "", "WORLD_SIZE": "", "SLURM_PROCID": "", "SLURM_NTASKS": ""}
    proc = run("verify", str(golden[2] / "run" / "step_10"), *args, env=env, prefix=["env", *(f"-u{k}" for k in env)])
    assert_one_line_error(proc, 2, needle)


def test_part_env_reads_torchrun_then_slurm() -> None:
    assert parse_part("env", {"RANK": "2", "WORLD_SIZE": "4", "SLURM_PROCID": "0", "SLURM_NTASKS": "9"}) == (3, 4)
    assert parse_part("env", {"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}) == (2, 2)
    assert parse_part(" 5/8 ") == (5, 8)


def _write(path: Path, doc: Any) -> str:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return str(path)


@pytest.mark.parametrize(
    ("docs", "needle"),
    [
        (["{not json"], "not JSON"),
        ([[1, 2]], "no part object"),
        ([{"part": {"index": "1", "count": 1}, "checkpoints": []}], "not integers"),
        ([{"part": {"index": 2, "count": 1}, "checkpoints": []}], "out of range"),
        ([{"part": {"index": 1, "count": 2}, "checkpoints": []}], "part 2 of 2 is missing"),
        ([{"part": {"index": 1, "count": 2}, "checkpoints": []}, {"part": {"index": 1, "count": 3}, "checkpoints": []}],
         "different N"),
        ([{"part": {"index": 1, "count": 1}, "checkpoints": [{"name": "a", "deep_part": {"plan": "p"}}]}],
         "malformed"),
        ([{"part": {"index": 1, "count": 1}, "checkpoints": [
            {"name": "a", "deep_part": {"plan": "p", "num_segments": 1, "segments": [{"i": 5, "crc32": "00000000"}]}}]}],
         "no valid index"),
        ([{"part": {"index": 1, "count": 2}, "checkpoints": [
            {"name": "a", "deep_part": {"plan": "p", "num_segments": 1, "segments": [{"i": 0, "crc32": "00000000"}]}}]},
          {"part": {"index": 2, "count": 2}, "checkpoints": [
            {"name": "a", "deep_part": {"plan": "q", "num_segments": 1, "segments": []}}]}],
         "plan for 'a' differs"),
        ([{"part": {"index": 1, "count": 2}, "checkpoints": [
            {"name": "a", "deep_part": {"plan": "p", "num_segments": 1, "segments": [{"i": 0, "crc32": "00000000"}]}}]},
          {"part": {"index": 2, "count": 2}, "checkpoints": [
            {"name": "a", "deep_part": {"plan": "p", "num_segments": 1, "segments": [{"i": 0, "crc32": "00000000"}]}}]}],
         "given by two parts"),
    ],
)  # fmt: skip
def test_malformed_part_files_are_refused_in_one_line(
    golden: dict[int, Path], tmp_path: Path, docs: list[Any], needle: str
) -> None:
    files = [_write(tmp_path / f"x{i}.json", d) for i, d in enumerate(docs)]
    with pytest.raises(Exception, match=needle):
        load_parts(files)
    args = [a for f in files for a in ("--merge", f)]
    proc = run("verify", str(golden[2] / "run" / "step_10"), "--deep", *args)
    assert_one_line_error(proc, 1, needle.split("'")[0])


def test_merge_of_a_directory_without_part_files(golden: dict[int, Path], tmp_path: Path) -> None:
    proc = run("verify", str(golden[2] / "run" / "step_10"), "--deep", "--merge", str(tmp_path))
    assert_one_line_error(proc, 1, "no part-K-of-N.json files")


def test_parts_never_write_to_the_checkpoint(golden: dict[int, Path], tmp_path: Path) -> None:
    ckpt = _ckpt(golden, tmp_path, "complete")
    before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in ckpt.iterdir())
    run("verify", str(ckpt), "--deep", "--part", "1/2", "--part-out", str(tmp_path / "p"), env=SMALL_SEGMENTS)
    run("verify", str(ckpt), "--deep", "--part", "2/2", "--part-out", str(tmp_path / "p"), env=SMALL_SEGMENTS)
    run("verify", str(ckpt), "--deep", "--merge", str(tmp_path / "p"), env=SMALL_SEGMENTS)
    assert sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in ckpt.iterdir()) == before
    # run from inside the checkpoint, srun's default parts directory would land there: refused
    proc = run("verify", str(ckpt), "--deep", "--launch", "srun", "--parts", "2", prefix=["env", f"--chdir={ckpt}"])
    assert_one_line_error(proc, 2, "inside the checkpoint")


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["complete", "truncated", "bit-flipped"])
def test_launch_torchrun_merges_to_the_one_node_json(golden: dict[int, Path], tmp_path: Path, damage: str) -> None:
    ckpt = _ckpt(golden, tmp_path, damage)
    one = run("verify", str(ckpt), "--deep", "--json", env=SMALL_SEGMENTS)
    proc = run(
        "verify", str(ckpt), "--deep", "--json", "--launch", "torchrun", "--parts", "3",
        "--parts-dir", str(tmp_path / "parts"), env=SMALL_SEGMENTS,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (one.returncode, one.stdout), proc.stderr
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == [f"part-{k}-of-3.json" for k in (1, 2, 3)]
    # a second run into the same directory would merge stale files: refused
    again = run("verify", str(ckpt), "--deep", "--launch", "torchrun", "--parts", "3", "--parts-dir",
                str(tmp_path / "parts"), env=SMALL_SEGMENTS)  # fmt: skip
    assert_one_line_error(again, 2, "already exists")


# -- object stores: the parts read their segments with ranged GETs -------------------------------


@pytest.fixture
def ranged_gets() -> Iterator[list[str]]:
    """The request lines the in-process moto server answered with 206 (Partial Content)."""
    seen: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if "GET /" in msg and '" 206 ' in msg:  # werkzeug may colour the request line
                seen.append(msg)

    handler = Grab()
    log = logging.getLogger("werkzeug")
    old_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield seen
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)


@pytest.mark.parametrize("damage", ["complete", "truncated", "bit-flipped+manifest"])
def test_s3_parts_merge_to_the_one_node_json(
    golden: dict[int, Path], tmp_path: Path, s3_server: str, s3_env: dict[str, str], s3_bucket: str,
    ranged_gets: list[str], damage: str,
) -> None:  # fmt: skip
    ckpt = _ckpt(golden, tmp_path, damage)
    url = f"s3://{s3_bucket}/run/step_10"
    upload_tree(s3_server, ckpt, url)
    one = verify_target(url, options=DEEP)
    assert _codes(one) == (EXPECT[damage] | ({"shard-truncated"} if damage == "truncated" else set())), _codes(one)
    ranged_gets.clear()
    parts = [run_part(url, DEEP, k, 3, part_out=str(tmp_path / "p")) for k in (1, 2, 3)]
    merged = merge_parts(url, DEEP, [str(tmp_path / "p")])
    assert merged.to_json() == one.to_json()
    # the shard bytes came as ranged GETs, at least one per segment read
    num_segments = parts[0].checkpoints[0].deep_part["num_segments"]  # type: ignore[index]
    shard_gets = [g for g in ranged_gets if ".distcp" in g]
    assert len(shard_gets) >= num_segments > 10
    if damage == "bit-flipped+manifest":
        assert MANIFEST_NAME in {p.name for p in ckpt.iterdir()}  # the whole-file CRC was assembled from parts
