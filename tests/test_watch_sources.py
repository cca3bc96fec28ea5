"""Structured sources read directly (TensorBoard event files written by torch's SummaryWriter,
MLflow run folders), ``--checkpoint`` (ckptctl's manifest), exit codes, and the realistic corpus."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckptctl.adapters import metric_sources
from ckptctl.core.verify.manifest import Manifest
from ckptctl.errors import InputError, UsageError
from ckptctl.ops import watch as ops

CORPUS = Path(__file__).resolve().parent / "fixtures" / "losslogs_realistic"


def curve(step: int) -> float:
    return 2.0 + 8.0 * (step + 50) ** -0.4


def _batch_noise(rng: random.Random) -> Callable[[int], float]:
    """1% noise per step; a re-run step trains on the same batch (a faithful resume): its
    noise, give or take a tenth for non-deterministic kernels."""
    batches: dict[int, float] = {}

    def noise(step: int) -> float:
        z = rng.gauss(0, 0.01)
        return batches[step] + 0.1 * z if step in batches else batches.setdefault(step, z)

    return noise


def _tb_run(logdir: Path, *, jump: float, restart_from: int = 400) -> None:
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    rng = random.Random(3)
    noise = _batch_noise(rng)
    w = SummaryWriter(str(logdir))
    for s in range(10, 501, 10):
        w.add_scalar("train/loss", curve(s) * (1 + noise(s)), s)
        w.add_scalar("train/lr", 3e-4, s)
        w.add_scalar("eval/loss", curve(s) + 0.2, s)
    w.close()
    w = SummaryWriter(str(logdir))  # the relaunched job: a new event file
    for s in range(restart_from + 10, 701, 10):
        w.add_scalar("train/loss", curve(s) * (1 + jump) * (1 + noise(s)), s)
        w.add_scalar("train/lr", 3e-4, s)
    w.close()


@pytest.mark.parametrize(("jump", "verdict"), [(0.0, "continuous"), (0.4, "spike")])
def test_tensorboard_log_dir(tmp_path: Path, jump: float, verdict: str) -> None:
    _tb_run(tmp_path / "tb", jump=jump)
    assert metric_sources.detect(str(tmp_path / "tb")) == "tensorboard"
    r = ops.watch_log(str(tmp_path / "tb"))
    assert r.verdict == verdict
    assert r.report.first_resumed_step == 410 and r.report.resume_detected_by in ("log-marker", "step-counter-restart")
    named = ops.watch_log(str(tmp_path / "tb"), metric="train/loss")
    assert named.verdict == verdict


def test_tensorboard_unknown_metric_is_a_usage_error(tmp_path: Path) -> None:
    _tb_run(tmp_path / "tb", jump=0.0)
    with pytest.raises(UsageError, match="train/lr"):
        ops.watch_log(str(tmp_path / "tb"), metric="loss/total")


def _mlflow_run(run: Path, *, jump: float) -> None:
    metrics = run / "metrics" / "train"
    metrics.mkdir(parents=True)
    noise = _batch_noise(random.Random(5))
    rows: list[str] = []
    lr_rows: list[str] = []
    t = 1_760_000_000_000
    for s in [*range(10, 501, 10), *range(410, 701, 10)]:  # a resumed run logs its steps again
        t += 1000
        bump = 1 + jump if s > 400 and t > 1_760_000_050_000 else 1.0
        rows.append(f"{t} {curve(s) * bump * (1 + noise(s))!r} {s}")
        lr_rows.append(f"{t} 0.0003 {s}")
    (metrics / "loss").write_text("\n".join(rows) + "\n")
    (metrics / "lr").write_text("\n".join(lr_rows) + "\n")


@pytest.mark.parametrize(("jump", "verdict"), [(0.0, "continuous"), (0.4, "spike")])
def test_mlflow_run(tmp_path: Path, jump: float, verdict: str) -> None:
    run = tmp_path / "mlruns" / "1" / "abc123"
    _mlflow_run(run, jump=jump)
    assert metric_sources.detect(str(run)) == "mlflow"
    r = ops.watch_log(str(run))
    assert r.verdict == verdict and r.report.first_resumed_step == 410


def test_no_loss_scalar_says_so(tmp_path: Path) -> None:
    run = tmp_path / "mlruns" / "1" / "r"
    (run / "metrics").mkdir(parents=True)
    (run / "metrics" / "accuracy").write_text("1760000000000 0.5 10\n")
    with pytest.raises(InputError, match="no training-loss scalar"):
        ops.watch_log(str(run))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptctl", "watch", *args], capture_output=True, text=True, timeout=120, check=False)


def test_checkpoint_manifest_gives_step_and_tokens(tmp_path: Path) -> None:
    log = CORPUS / "jsonl_ok.log"
    ckpt = tmp_path / "step_1000"
    ckpt.mkdir()
    good = Manifest(step=1000, world_size=2, files=(), tokens_seen=1000 * 524288)
    (ckpt / "ckptctl.json").write_bytes(good.to_json_bytes())
    proc = run_cli(str(log), "--checkpoint", str(ckpt), "--json")
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["verdict"] == "continuous" and doc["resume_step"] == 1000
    assert doc["checks"]["tokens"]["ok"] is True
    bad = Manifest(step=1000, world_size=2, files=(), tokens_seen=900 * 524288)  # the checkpoint says 100 steps fewer
    (ckpt / "ckptctl.json").write_bytes(bad.to_json_bytes())
    proc = run_cli(str(log), "--checkpoint", str(ckpt), "--json")
    assert proc.returncode == 3 and json.loads(proc.stdout)["verdict"] == "tokens-mismatch"
    missing = run_cli(str(log), "--checkpoint", str(tmp_path))
    assert missing.returncode == 1 and "no ckptctl.json" in missing.stderr


def test_insufficient_data_exits_5(tmp_path: Path) -> None:
    lines = [f"step {s} | loss {curve(s):.4f}" for s in range(10, 301, 10)]
    lines += ["Resumed from step 300 (checkpoint)", "step 310 | loss 2.9", "step 320 | loss 2.9"]
    log = tmp_path / "short.log"
    log.write_text("\n".join(lines) + "\n")
    proc = run_cli(str(log), "--json")
    assert proc.returncode == 5 and json.loads(proc.stdout)["verdict"] == "insufficient-data"


def test_unreadable_log_names_the_lines_tried(tmp_path: Path) -> None:
    log = tmp_path / "odd.log"
    log.write_text("loss: 2.5\nloss: 2.4\nnothing else\n")
    proc = run_cli(str(log))
    assert proc.returncode == 1 and "a loss without a step" in proc.stderr and "--pattern" in proc.stderr


def test_realistic_corpus_meets_its_targets() -> None:
    """Every log read, no false alarm on a smooth resume, at most 1 bad in 10 missed."""
    labels = json.loads((CORPUS / "labels.json").read_text())
    assert len(labels) >= 30
    smooth = [n for n, v in labels.items() if v["verdict"] == "continuous"]
    bad = [n for n in labels if n not in smooth]
    assert len(smooth) >= 12 and len(bad) >= 12
    got = {name: ops.watch_log(str(CORPUS / name)).verdict for name in labels}  # raises if one is unread
    false_alarms = [n for n in smooth if got[n] != "continuous"]
    missed = [n for n in bad if got[n] in ("continuous", "insufficient-data")]
    assert not false_alarms
    assert len(missed) * 10 <= len(bad), missed


OPENWORLD = Path(__file__).resolve().parent / "fixtures" / "losslogs_openworld"


def test_openworld_corpus_meets_its_targets() -> None:
    """The open-world batch (line shapes met in real logs, written by us, labelled first): every log
    read, no false alarm on a smooth resume, every bad one caught with the verdict its label names."""
    labels = json.loads((OPENWORLD / "labels.json").read_text())
    assert len(labels) >= 12
    got = {name: ops.watch_log(str(OPENWORLD / name)).verdict for name in labels}  # raises if one is unread
    assert got == {name: v["verdict"] for name, v in labels.items()}


def test_openworld_corpus_is_what_its_generator_writes(tmp_path: Path) -> None:
    """The committed logs are the generator's (deterministic): a change to one shows here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_openworld", OPENWORLD / "make_openworld.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, write, label in module.CASES:
        assert (OPENWORLD / name).read_text(encoding="utf-8") == "\n".join(write()) + "\n", name
        assert json.loads((OPENWORLD / "labels.json").read_text())[name]["verdict"] == label
