"""Issue 9: special files and oversized files in a run root never hang or exhaust a command.

Each command runs in a subprocess with a timeout, so a regression fails here instead of
hanging the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ckptctl.adapters.localfile import SpecialFileError
from ckptctl.adapters.storage import FileTooLargeError, Storage
from tests.fuzz.corpus import write_small_checkpoint

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def real_step(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("real") / "step_10")


@pytest.fixture
def run(real_step: Path, tmp_path: Path) -> Path:
    root = tmp_path / "run"
    shutil.copytree(real_step, root / "step_10")
    shutil.copytree(real_step, root / "step_20")
    return root


def ckptctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "ckptctl", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_fifo_named_latest_does_not_hang_list_or_locate(run: Path) -> None:
    os.mkfifo(run / "latest")
    for cmd in ("list", "locate"):
        r = ckptctl(cmd, str(run), "--json")
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
    doc = json.loads(ckptctl("locate", str(run), "--json").stdout)
    assert doc["checkpoint"]["path"].endswith("step_20")


def test_fifo_manifest_is_refused_not_read(run: Path) -> None:
    os.mkfifo(run / "step_20" / "ckptctl.json")
    r = ckptctl("verify", str(run / "step_20"), "--json")
    assert r.returncode == 3, r.stderr
    problems = json.loads(r.stdout)["checkpoints"][0]["problems"]
    assert any("FIFO" in p for p in problems), problems
    # locate falls back to the older complete checkpoint instead of hanging
    doc = json.loads(ckptctl("locate", str(run), "--json").stdout)
    assert doc["checkpoint"]["path"].endswith("step_10")


@pytest.mark.parametrize("name", [".metadata", "__0_0.distcp"])
def test_fifo_metadata_or_shard_under_deep_verify(run: Path, name: str) -> None:
    target = run / "step_20" / name
    target.unlink()
    os.mkfifo(target)
    r = ckptctl("verify", "--deep", str(run / "step_20"), "--json")
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    assert json.loads(r.stdout)["checkpoints"][0]["status"] != "complete"


def test_sparse_terabyte_metadata_is_not_read_whole(run: Path) -> None:
    with open(run / "step_20" / ".metadata", "r+b") as f:
        f.truncate(1 << 40)
    r = ckptctl("verify", str(run / "step_20"), "--json", timeout=30)
    assert r.returncode == 3, r.stderr
    problems = json.loads(r.stdout)["checkpoints"][0]["problems"]
    assert any("MiB" in p for p in problems), problems


def test_sparse_terabyte_manifest_is_not_read_whole(run: Path) -> None:
    with open(run / "step_20" / "ckptctl.json", "wb") as f:
        f.truncate(1 << 40)
    r = ckptctl("verify", str(run / "step_20"), "--json", timeout=30)
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr


def test_storage_refuses_special_files_before_opening(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    storage, _ = Storage.for_url(str(tmp_path))
    with pytest.raises(SpecialFileError, match="FIFO"):
        storage.read_bytes(str(fifo))
    with pytest.raises(SpecialFileError), storage.open_read(str(fifo)):
        pass
    with pytest.raises(SpecialFileError, match="device"):
        storage.read_bytes("/dev/zero")


def test_whole_file_reads_are_capped(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2000)
    storage, _ = Storage.for_url(str(tmp_path))
    assert storage.read_bytes(str(big), max_bytes=2000) == b"x" * 2000
    with pytest.raises(FileTooLargeError):
        storage.read_bytes(str(big), max_bytes=1999)
    assert storage.read_bytes(str(big), 10, 20) == b"x" * 10  # ranged reads are the caller's bound
