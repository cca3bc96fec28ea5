"""Shared fixtures: real DCP checkpoints (torchrun, gloo, 1/2/4 ranks) and a real S3 server.

Golden checkpoints are written once per session by ``tests/dcp_writer.py`` under
real ``torchrun`` and cached in ``tests/.golden-cache/`` keyed by the writer's
source and the torch version; tests copy them and damage the copies.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
GOLDEN_CACHE = TESTS / ".golden-cache"


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free TCP port BELOW the kernel's ephemeral range, for a server that binds it later.

    A port the kernel hands out for ``bind(0)`` is an ephemeral one: by the time torchrun binds
    it (after sbatch, the scheduler, srun) another program's automatic bind may have taken it;
    srun did, and torchrun then joined srun's socket as its rendezvous store and waited forever.
    Each xdist worker draws from its own slice so two workers never pick the same port.
    """
    import random

    top = _ephemeral_low()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    slot = int(worker) % 4 if worker.isdigit() else 0
    lo = max(1024, top - 12000) + slot * 3000
    for _ in range(500):
        port = random.randrange(lo, lo + 3000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # the slice is full: an ephemeral port, as before
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun_cmd(nproc: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
    ]


def _torch_version() -> str:
    from importlib.metadata import version

    return version("torch")


@contextlib.contextmanager
def cache_lock(dest: Path) -> Iterator[None]:
    """Hold ``<dest>.lock`` (an flock): one test process (``pytest -n``: one worker) writes a
    cache entry while the others wait, then find it DONE."""
    GOLDEN_CACHE.mkdir(parents=True, exist_ok=True)
    with open(f"{dest}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _golden(world_size: int) -> Path:
    writer = TESTS / "dcp_writer.py"
    key = hashlib.sha256(writer.read_bytes() + _torch_version().encode()).hexdigest()[:12]
    dest = GOLDEN_CACHE / f"w{world_size}-{key}"
    with cache_lock(dest):
        return _write_golden(world_size, writer, dest)


def _write_golden(world_size: int, writer: Path, dest: Path) -> Path:
    if (dest / "DONE").exists():
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [*torchrun_cmd(world_size), str(writer), str(dest)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"dcp_writer failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    (dest / "DONE").write_text("ok\n")
    return dest


@pytest.fixture(scope="session")
def golden() -> dict[int, Path]:
    """Real DCP checkpoints written by 1, 2 and 4 ranks (read-only: copy before damaging)."""
    return {w: _golden(w) for w in (1, 2, 4)}


@pytest.fixture
def run_root(golden: dict[int, Path], tmp_path: Path) -> Path:
    """A private copy of the 2-rank run root (step_10, step_20, step_30)."""
    dst = tmp_path / "run"
    shutil.copytree(golden[2] / "run", dst)
    return dst


def copy_variant(golden: dict[int, Path], world: int, name: str, dest: Path) -> Path:
    src = golden[world] / "variants" / name
    shutil.copytree(src, dest)
    return dest


# -- a real S3-compatible server on 127.0.0.1 ---------------------------------------------


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto in server mode on a free local port; yields its endpoint URL."""
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment pointing s3fs (via CKPTCTL_STORAGE_OPTIONS) at the local server."""
    import json

    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "CKPTCTL_STORAGE_OPTIONS": json.dumps({"client_kwargs": {"endpoint_url": s3_server}}),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def s3_bucket(s3_env: dict[str, str], s3_server: str) -> Iterator[str]:
    """A fresh, empty bucket; yields its name."""
    import uuid

    import s3fs

    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, skip_instance_cache=True)
    name = f"ckpt-{uuid.uuid4().hex[:10]}"
    fs.mkdir(name)
    yield name


def upload_tree(s3_server: str, local: Path, url: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, skip_instance_cache=True)
    for p in sorted(local.rglob("*")):
        if p.is_file():
            fs.pipe_file(f"{url.removeprefix('s3://')}/{p.relative_to(local).as_posix()}", p.read_bytes())
