"""Framework checkpoints written by the frameworks' own save code, damaged as crashes and bad copies do.

HF Trainer, accelerate and Lightning (files, weights-only files, and ModelParallelStrategy
.ckpt/ directories) run on CPU in subprocesses (tests/framework_writers.py), once, cached
in tests/.golden-cache/ keyed by the writer's source and the libraries' versions. DeepSpeed's
own save_checkpoint runs too (slow: its first run JIT-builds a CPU op).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from ckptctl.core.verify.records import parse_directory
from ckptctl.runroot.locate import find_latest_complete, list_checkpoints, verify_target
from ckptctl.runroot.reports import CheckOptions, CheckpointReport
from tests.conftest import GOLDEN_CACHE, REPO, TESTS, cache_lock, free_port
from tests.damage import flip_bit, truncate
from tests.test_verify import codes

_PACKAGES = {"hf": "transformers", "accelerate": "accelerate", "lightning": "lightning", "deepspeed": "deepspeed"}


def _written(kind: str) -> Path:
    """The cached output of ``tests/framework_writers.py KIND``, written on first use."""
    pkg = _PACKAGES[kind]
    try:
        versions = f"{version(pkg)}-{version('torch')}"
    except PackageNotFoundError:
        pytest.skip(f"{pkg} is not installed (pip install -e '.[dev]')")
    key = hashlib.sha256((TESTS / "framework_writers.py").read_bytes() + versions.encode()).hexdigest()[:12]
    dest = GOLDEN_CACHE / f"fw-{kind}-{key}"
    with cache_lock(dest):
        return _write_framework(kind, dest)


def _write_framework(kind: str, dest: Path) -> Path:
    if (dest / "DONE").exists():
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO),
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    proc = subprocess.run([sys.executable, "-m", "tests.framework_writers", kind, str(dest)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} writer failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    (dest / "DONE").write_text("ok\n")
    return dest


@pytest.fixture(scope="session")
def written() -> dict[str, Path]:
    return {k: _written(k) for k in ("hf", "accelerate", "lightning")}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _middle_of_largest_member(path: Path) -> int:
    """Absolute offset of a byte in the middle of the largest member of a torch.save zip."""
    data = path.read_bytes()
    m = max(parse_directory(data[-65536:], len(data)), key=lambda m: m.compressed_size)
    name_len = int.from_bytes(data[m.local_header_offset + 26 : m.local_header_offset + 28], "little")
    extra_len = int.from_bytes(data[m.local_header_offset + 28 : m.local_header_offset + 30], "little")
    return m.local_header_offset + 30 + name_len + extra_len + m.compressed_size // 2


def _only(root: Path, name: str, **kw: object) -> CheckpointReport:
    return next(c for c in list_checkpoints(str(root), options=CheckOptions(**kw)).checkpoints  # type: ignore[arg-type]
                if c.name == name)


# -- HF Trainer --------------------------------------------------------------------------------


def test_hf_trainer_checkpoints_are_complete_with_their_contents(written: dict[str, Path]) -> None:
    root = written["hf"] / "run"
    res = list_checkpoints(str(root), options=CheckOptions(deep=True))
    assert [(c.name, c.status, c.framework) for c in res.checkpoints] == [
        ("checkpoint-4", "complete", "hf"), ("checkpoint-2", "complete", "hf")]
    c = res.checkpoints[0]
    assert c.contents == ["model", "optimizer", "rng_state", "scheduler", "trainer_state", "training_args"]
    assert c.model_only is False and c.members_crc_checked > 0
    assert c.to_json()["contents"] == c.contents and c.to_json()["model_only"] is False
    assert find_latest_complete(str(root)).checkpoint.name == "checkpoint-4"  # type: ignore[union-attr]


def test_hf_trainer_without_trainer_state_json_did_not_finish(written: dict[str, Path], tmp_path: Path) -> None:
    root = _copy(written["hf"] / "run", tmp_path / "run")
    (root / "checkpoint-4" / "trainer_state.json").unlink()
    r = _only(root, "checkpoint-4")
    assert r.status == "incomplete" and codes(r) == {"commit-missing"}
    assert r.problems == ["HF Trainer checkpoint without trainer_state.json (written last: the save did not finish)"]
    loc = find_latest_complete(str(root))
    assert loc.checkpoint is not None and loc.checkpoint.name == "checkpoint-2"
    assert [s.name for s in loc.skipped] == ["checkpoint-4"]


def test_hf_trainer_crash_after_the_model_save(written: dict[str, Path], tmp_path: Path) -> None:
    """What a crash between save_model and the rest leaves: weights only, no side files."""
    root = _copy(written["hf"] / "run", tmp_path / "run")
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"):
        (root / "checkpoint-4" / name).unlink()
    r = _only(root, "checkpoint-4")
    assert r.status == "incomplete" and "commit-missing" in codes(r)
    assert find_latest_complete(str(root)).checkpoint.name == "checkpoint-2"  # type: ignore[union-attr]


@pytest.mark.parametrize("victim", ["scheduler.pt", "optimizer.pt", "rng_state.pth", "training_args.bin"])
def test_hf_trainer_torn_side_file_is_corrupt(written: dict[str, Path], tmp_path: Path, victim: str) -> None:
    root = _copy(written["hf"] / "run", tmp_path / "run")
    truncate(root / "checkpoint-4" / victim, 0.5)
    r = _only(root, "checkpoint-4")
    assert r.status == "corrupt" and codes(r) == {"file-corrupt"}, r.problems
    assert r.problems[0].startswith(f"{victim}: ")
    assert find_latest_complete(str(root)).checkpoint.name == "checkpoint-2"  # type: ignore[union-attr]


def test_hf_trainer_flipped_byte_needs_deep(written: dict[str, Path], tmp_path: Path) -> None:
    root = _copy(written["hf"] / "run", tmp_path / "run")
    victim = root / "checkpoint-4" / "optimizer.pt"
    flip_bit(victim, _middle_of_largest_member(victim))
    assert _only(root, "checkpoint-4").status == "complete"  # sizes and tables are intact
    r = _only(root, "checkpoint-4", deep=True)
    assert r.status == "corrupt" and codes(r) == {"crc-mismatch"}
    assert "CRC-32 mismatch" in r.problems[0]
    assert find_latest_complete(str(root), deep=True).checkpoint.name == "checkpoint-2"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("victim", "damage", "code"),
    [
        ("trainer_state.json", "truncate", "file-corrupt"),
        ("model.safetensors", "truncate", "shard-truncated"),
        ("model.safetensors", "delete", "part-missing"),
    ],
)
def test_hf_trainer_damaged_model_or_state(
    written: dict[str, Path], tmp_path: Path, victim: str, damage: str, code: str
) -> None:
    root = _copy(written["hf"] / "run", tmp_path / "run")
    path = root / "checkpoint-4" / victim
    if damage == "delete":
        path.unlink()
    else:
        truncate(path, 0.9)
    r = _only(root, "checkpoint-4")
    assert r.status != "complete" and code in codes(r), r.problems
    assert find_latest_complete(str(root)).checkpoint.name == "checkpoint-2"  # type: ignore[union-attr]


def test_hf_trainer_save_only_model_is_a_model_only_export(written: dict[str, Path]) -> None:
    root = written["hf"] / "model_only"
    r = _only(root, "checkpoint-4")
    assert r.status == "complete" and r.model_only is True
    assert r.contents == ["model", "trainer_state", "training_args"]
    loc = find_latest_complete(str(root))
    assert loc.checkpoint is None and {s.name for s in loc.skipped} == {"checkpoint-4", "checkpoint-2"}
    assert all("model-only export" in s.problems[-1] for s in loc.skipped)
    assert all(codes(s) == {"required-missing"} for s in loc.skipped)
    loc = find_latest_complete(str(root), options=CheckOptions(include_model_only=True))
    assert loc.checkpoint is not None and loc.checkpoint.name == "checkpoint-4"
    r = verify_target(str(root / "checkpoint-4"), options=CheckOptions(require=frozenset({"optimizer"}))).checkpoints[0]
    assert r.status == "incomplete" and codes(r) == {"required-missing"}


def test_require_names_parts_by_any_writers_name(written: dict[str, Path]) -> None:
    ck = written["hf"] / "run" / "checkpoint-4"
    ok = verify_target(str(ck), options=CheckOptions(require=frozenset({"optimizer", "lr_scheduler", "rng"})))
    assert ok.ok
    bad = verify_target(str(ck), options=CheckOptions(require=frozenset({"dataloader"}))).checkpoints[0]
    assert bad.status == "incomplete" and "does not hold dataloader" in bad.problems[0]


# -- accelerate -------------------------------------------------------------------------------------


def test_accelerate_save_state(written: dict[str, Path], tmp_path: Path) -> None:
    root = _copy(written["accelerate"] / "checkpoints", tmp_path / "checkpoints")
    res = list_checkpoints(str(root))
    assert [(c.name, c.step, c.status, c.framework) for c in res.checkpoints] == [
        ("checkpoint_1", 1, "complete", "accelerate"), ("checkpoint_0", 0, "complete", "accelerate")]
    assert res.checkpoints[0].contents == ["model", "optimizer", "random_states", "scheduler"]
    (root / "checkpoint_1" / "random_states_0.pkl").unlink()
    r = _only(root, "checkpoint_1")
    assert codes(r) == {"commit-missing"}
    assert "accelerate checkpoint without random_states_0.pkl (written last" in r.problems[0]
    assert find_latest_complete(str(root)).checkpoint.name == "checkpoint_0"  # type: ignore[union-attr]


def test_accelerate_missing_optimizer_is_model_only_and_torn_optimizer_corrupt(
    written: dict[str, Path], tmp_path: Path
) -> None:
    root = _copy(written["accelerate"] / "checkpoints", tmp_path / "checkpoints")
    (root / "checkpoint_1" / "optimizer.bin").unlink()
    r = _only(root, "checkpoint_1")
    assert r.status == "complete" and r.model_only is True
    loc = find_latest_complete(str(root))
    assert loc.checkpoint.name == "checkpoint_0" and "model-only export" in loc.skipped[0].problems[-1]  # type: ignore[union-attr]
    truncate(root / "checkpoint_0" / "optimizer.bin", 0.5)
    assert _only(root, "checkpoint_0").status == "corrupt"


def test_accelerate_half_written_scheduler_bin_is_corrupt_even_quick(written: dict[str, Path], tmp_path: Path) -> None:
    root = _copy(written["accelerate"] / "checkpoints", tmp_path / "checkpoints")
    truncate(root / "checkpoint_1" / "scheduler.bin", 0.5)
    for deep in (False, True):
        r = _only(root, "checkpoint_1", deep=deep)
        assert r.status == "corrupt" and codes(r) == {"file-corrupt"} and r.problems[0].startswith("scheduler.bin: ")
    assert find_latest_complete(str(root), deep=True).checkpoint.name == "checkpoint_0"  # type: ignore[union-attr]


# -- Lightning ----------------------------------------------------------------------------------------


def test_lightning_ckpt_files_are_listed_with_their_step(written: dict[str, Path], tmp_path: Path) -> None:
    root = _copy(written["lightning"] / "run", tmp_path / "run")
    res = list_checkpoints(str(root), options=CheckOptions(deep=True))
    assert [(c.name, c.step, c.status, c.framework) for c in res.checkpoints] == [
        ("epoch=0-step=4.ckpt", 4, "complete", "lightning"), ("epoch=0-step=2.ckpt", 2, "complete", "lightning")]
    c = res.checkpoints[0]
    assert {"state_dict", "optimizer_states", "lr_schedulers", "loops"} <= set(c.contents or [])
    assert c.model_only is False and c.members_crc_checked > 0
    truncate(root / "epoch=0-step=4.ckpt", 0.7)
    loc = find_latest_complete(str(root))
    assert loc.checkpoint.name == "epoch=0-step=2.ckpt"  # type: ignore[union-attr]
    assert codes(loc.skipped[0]) == {"file-corrupt"}


def test_lightning_weights_only_files_are_model_only(written: dict[str, Path]) -> None:
    root = written["lightning"] / "weights"
    r = _only(root, "epoch=0-step=4.ckpt")
    assert r.status == "complete" and r.model_only is True and "optimizer_states" not in (r.contents or [])
    assert find_latest_complete(str(root)).checkpoint is None


def test_lightning_sharded_directory_needs_meta_pt(written: dict[str, Path], tmp_path: Path) -> None:
    root = _copy(written["lightning"] / "sharded", tmp_path / "sharded")
    r = _only(root, "epoch=0-step=4.ckpt", deep=True)
    assert r.status == "complete" and r.framework == "lightning" and r.kind == "dcp"
    assert {"state_dict", "optimizer_0", "loops"} <= set(r.contents or [])
    (root / "epoch=0-step=4.ckpt" / "meta.pt").unlink()
    r = _only(root, "epoch=0-step=4.ckpt")
    assert codes(r) == {"commit-missing"} and "without meta.pt" in r.problems[0]
    truncate(root / "epoch=0-step=2.ckpt" / "meta.pt", 0.5)
    assert codes(_only(root, "epoch=0-step=2.ckpt")) == {"file-corrupt"}
    assert find_latest_complete(str(root)).checkpoint is None


# -- single torch.save files (Horovod's rank-0 save) ---------------------------------------------------


def test_horovod_style_files(tmp_path: Path) -> None:
    import torch

    root = tmp_path / "run"
    root.mkdir()
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    for epoch in (2, 3):  # as Horovod's pytorch_imagenet_resnet50.py saves on rank 0
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, root / f"checkpoint-{epoch}.pth.tar")
    torch.save(model.state_dict(), root / "model_final.pt")  # no step in the name: not a candidate
    res = list_checkpoints(str(root))
    assert [(c.name, c.step, c.status, c.contents) for c in res.checkpoints] == [
        ("checkpoint-3.pth.tar", 3, "complete", ["model", "optimizer"]),
        ("checkpoint-2.pth.tar", 2, "complete", ["model", "optimizer"])]
    truncate(root / "checkpoint-3.pth.tar", 0.99)
    assert find_latest_complete(str(root)).checkpoint.name == "checkpoint-2.pth.tar"  # type: ignore[union-attr]
    (root / "checkpoint-4.pt").write_bytes(b"\x80\x02" + b"\x00" * 64)
    assert _only(root, "checkpoint-4.pt").status == "unsupported"


# -- CLI: verify --json on a file, locate says it skipped a model-only export --------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CKPTCTL_NO_PROGRESS="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ckptctl", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)


def test_cli_verify_json_on_a_file_and_locate_skip_message(written: dict[str, Path], tmp_path: Path) -> None:
    f = written["lightning"] / "run" / "epoch=0-step=4.ckpt"
    proc = _cli("verify", str(f), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True and doc["checkpoints"][0]["step"] == 4
    assert "optimizer_states" in doc["checkpoints"][0]["contents"]
    torn = tmp_path / "epoch=0-step=9.ckpt"
    torn.write_bytes(f.read_bytes()[:-100])
    proc = _cli("verify", str(torn), "--json")
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["checkpoints"][0]["problem_details"][0]["code"] == "file-corrupt"
    proc = _cli("locate", str(written["lightning"] / "weights"))
    assert proc.returncode == 3 and "model-only export" in proc.stderr
    proc = _cli("locate", str(written["lightning"] / "weights"), "--include-model-only")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("epoch=0-step=4.ckpt")
    proc = _cli("verify", str(written["hf"] / "run" / "checkpoint-4"), "--require", "optimizer,dataloader", "--json")
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["checkpoints"][0]["problem_details"][0]["code"] == "required-missing"


# -- DeepSpeed ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_deepspeed_save_checkpoint(tmp_path: Path) -> None:
    root = _copy(_written("deepspeed"), tmp_path / "ds")
    (root / "DONE").unlink()
    res = list_checkpoints(str(root), options=CheckOptions(deep=True))
    assert [(c.name, c.status, c.world_size) for c in res.checkpoints] == [
        ("global_step4", "complete", 1), ("global_step2", "complete", 1)]
    assert res.checkpoints[0].contents == ["global_steps", "module", "optimizer"]
    assert res.pointers[0].names == "global_step4"
    (root / "global_step4" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink()
    r = _only(root, "global_step4")
    assert codes(r) == {"part-missing"}
    assert "zero_pp_rank_0_mp_rank_00_optim_states.pt (dp_world_size 1 x mp_world_size 1" in r.problems[0]
    assert find_latest_complete(str(root)).checkpoint.name == "global_step2"  # type: ignore[union-attr]


@pytest.mark.slow
def test_hf_trainer_under_deepspeed_nests_the_tag_directory(written: dict[str, Path], tmp_path: Path) -> None:
    """Trainer under DeepSpeed: _save_optimizer_and_scheduler calls engine.save_checkpoint(output_dir),
    so checkpoint-N holds global_stepN/ and 'latest' instead of optimizer.pt (parts of two real saves)."""
    ds = _written("deepspeed")
    ck = _copy(written["hf"] / "run" / "checkpoint-4", tmp_path / "run" / "checkpoint-4")
    for name in ("optimizer.pt", "scheduler.pt", "model.safetensors"):  # ZeRO without a gathered model
        (ck / name).unlink()
    shutil.copytree(ds / "global_step4", ck / "global_step4")
    shutil.copy(ds / "latest", ck / "latest")
    r = verify_target(str(ck), options=CheckOptions(deep=True)).checkpoints[0]
    assert r.status == "complete", r.problems
    assert {"module", "optimizer", "trainer_state"} <= set(r.contents or []) and r.model_only is False
    (ck / "global_step4" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink()
    r = verify_target(str(ck)).checkpoints[0]
    assert codes(r) == {"part-missing"} and r.problems[0].startswith("global_step4/: DeepSpeed checkpoint without")


def test_framework_checkpoints_on_an_fsspec_filesystem(written: dict[str, Path]) -> None:
    """The same checks through fsspec (ranged reads, no local paths): HF dirs and Lightning files."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for kind, sub in (("hf", "run"), ("lightning", "run")):
        for p in (written[kind] / sub).rglob("*"):
            if p.is_file():
                fs.pipe_file(f"/fw-{kind}/{p.relative_to(written[kind] / sub).as_posix()}", p.read_bytes())
    fs.rm("/fw-hf/checkpoint-4/trainer_state.json")
    loc = find_latest_complete("memory://fw-hf", deep=True)
    assert loc.checkpoint is not None and loc.checkpoint.name == "checkpoint-2"
    assert codes(loc.skipped[0]) == {"commit-missing"}
    data = fs.cat_file("/fw-lightning/epoch=0-step=4.ckpt")
    fs.pipe_file("/fw-lightning/epoch=0-step=4.ckpt", data[: len(data) // 2])
    loc = find_latest_complete("memory://fw-lightning", deep=True)
    assert loc.checkpoint is not None and loc.checkpoint.name == "epoch=0-step=2.ckpt"
    doc = verify_target("memory://fw-lightning/epoch=0-step=2.ckpt").to_json()
    assert doc["ok"] is True and doc["checkpoints"][0]["model_only"] is False
