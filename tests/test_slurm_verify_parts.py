"""``verify --deep --launch srun``: the parts as one job step on the real test Slurm (two slurmd).

``srun --nodes=2 --ntasks-per-node=1`` runs one part per node (``n1``, ``n2``: two slurmd on
this host, tests/slurm_cluster.py); each writes its part file, the launcher merges them.
The merged JSON must equal a one-node ``verify --deep`` on complete, truncated and
bit-flipped checkpoints. Skipped, with the reason, where Slurm or root is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm_cluster import SlurmCluster, unavailable_reason
from tests.test_checkpoints_cli import assert_one_line_error, run
from tests.test_verify_parts import DAMAGE, EXPECT, SMALL_SEGMENTS

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    try:
        c = SlurmCluster.start(tmp_path_factory.mktemp("slurm"))
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"the test Slurm cluster did not start: {e}")
    try:
        yield c
    finally:
        c.stop()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["complete", "truncated", "bit-flipped", "bit-flipped+manifest"])
def test_srun_parts_merge_to_the_one_node_verdict(
    golden: dict[int, Path], tmp_path: Path, cluster: SlurmCluster, damage: str
) -> None:
    ckpt = Path(shutil.copytree(golden[2] / "run" / "step_10", tmp_path / "step_10"))
    fn = DAMAGE[damage]
    if fn is not None:
        fn(ckpt)
    env = {**SMALL_SEGMENTS, "SLURM_CONF": str(cluster.conf)}
    one = run("verify", str(ckpt), "--deep", "--json", env=env)
    parts_dir = tmp_path / "parts"
    proc = run(
        "verify", str(ckpt), "--deep", "--json", "--launch", "srun", "--parts", "2", "--parts-dir", str(parts_dir),
        env=env,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr
    assert (proc.returncode, proc.stdout) == (one.returncode, one.stdout), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] == (damage == "complete")
    assert EXPECT[damage] <= {p["code"] for p in doc["checkpoints"][0]["problem_details"]}
    # one part per node, each read a share of the segments
    parts = [json.loads((parts_dir / f"part-{k}-of-2.json").read_text()) for k in (1, 2)]
    assert {p["part"]["node"] for p in parts} == set(cluster.nodes)
    shares = [len(p["checkpoints"][0]["deep_part"]["segments"]) for p in parts]
    assert min(shares) > 0 and sum(shares) == parts[0]["checkpoints"][0]["deep_part"]["num_segments"]


@pytest.mark.slow
def test_srun_default_parts_directory_is_temporary(golden: dict[int, Path], tmp_path: Path, cluster: SlurmCluster) -> None:
    ckpt = Path(shutil.copytree(golden[2] / "run" / "step_10", tmp_path / "step_10"))
    work = tmp_path / "work"
    work.mkdir()
    env = {**SMALL_SEGMENTS, "SLURM_CONF": str(cluster.conf)}
    proc = run("verify", str(ckpt), "--deep", "--launch", "srun", "--parts", "2", env=env, prefix=["env", f"--chdir={work}"])
    assert proc.returncode == 0, proc.stderr
    assert list(work.iterdir()) == []  # the part files' temporary directory is gone after the merge


@pytest.mark.slow
def test_srun_failure_is_one_line(golden: dict[int, Path], tmp_path: Path, cluster: SlurmCluster) -> None:
    """More nodes than the cluster has: srun refuses, no part file appears, ckptctl says so in one line."""
    env = {**SMALL_SEGMENTS, "SLURM_CONF": str(cluster.conf)}
    proc = run(
        "verify", str(golden[2] / "run" / "step_10"), "--deep", "--launch", "srun", "--parts", "3",
        "--parts-dir", str(tmp_path / "p"), "--launcher-arg=--immediate=5", env=env,
    )  # fmt: skip
    assert_one_line_error(proc, 1, "srun exited")
