"""ckptctl.yaml as hostile input: every section validated, one clear line, exit 2 (issue 9 point 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckptctl.adapters.config_file import MAX_DEPTH, load_config, parse_config_yaml
from ckptctl.errors import ConfigError


@pytest.mark.parametrize(
    "text, needle",
    [
        ("launch:\n  stop_grace_s: .inf\n", "launch.stop_grace_s: inf is not a finite number"),
        ("launch:\n  stop_grace_s: .nan\n", "launch.stop_grace_s: nan is not a finite number"),
        ("recover:\n  capacity_timeout_s: .inf\n", "recover.capacity_timeout_s: inf is not a finite"),
        ("run_root: 5\n", "run_root: 5 must be a non-empty path"),
        ("run_root: [a, b]\n", "run_root: ['a', 'b'] must be a non-empty path"),
        ("run_root: a\nrun_root: b\n", "key 'run_root' is given twice (line 1 and line 2)"),
        ("launch:\n  nnodes: '1'\n  nnodes: '2'\n", "key 'nnodes' is given twice"),
        ("recover:\n  watch: {k: abc}\n", "recover.watch.k: 'abc' is not a finite number"),
        ("recover:\n  watch: {k: .inf}\n", "recover.watch.k: inf is not a finite number"),
        ("recover:\n  watch: {window: 2.5}\n", "recover.watch.window: 2.5 is not an integer"),
        ("recover:\n  watch: {window: 1}\n", "recover.watch: window must be at least 3"),
        ("recover:\n  watch: {spike_factor: 3}\n", "unknown key 'recover.watch.spike_factor'"),
        ("recover:\n  watch: {expect_identical: 1}\n", "recover.watch.expect_identical: 1 is not true or false"),
        ("recover:\n  watch: [1]\n", "recover.watch: must be a mapping"),
        ("launch:\n  slurm: {signal_grace_s: 0}\n", "launch.slurm.signal_grace_s: 0 must be at least 1"),
        ("launch:\n  slurm: {partiton: x}\n", "did you mean 'launch.slurm.partition'"),
        ("launch:\n  slurm: {sbatch_args: [account=x]}\n", "launch.slurm.sbatch_args[0]"),
        ("a: " + "[" * 100_000, f"nested more than {MAX_DEPTH} levels deep"),
        ("a:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 200)), f"nested more than {MAX_DEPTH} levels"),
    ],
)
def test_bad_config_is_one_error_naming_the_field(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config_yaml(text, source="c.yaml")
    assert e.value.message.startswith("c.yaml: ") and needle in e.value.message, e.value.message
    assert "\n" not in e.value.message and e.value.exit_code == 2


def test_good_slurm_and_watch_sections() -> None:
    c = parse_config_yaml(
        "launch:\n  backend: slurm\n  slurm: {partition: gpu, time_limit: '4:00:00', sbatch_args: [--account=ml]}\n"
        "recover:\n  watch: {k: 5, window: 40, expect_identical: true}\n"
    )
    assert c.launch.backend == "slurm" and c.launch.slurm.partition == "gpu"
    assert c.launch.slurm.sbatch_args == ("--account=ml",) and c.launch.slurm.time_limit == "4:00:00"
    assert c.recover.watch == {"k": 5, "window": 40, "expect_identical": True}


@pytest.mark.parametrize("kind", ["missing", "directory", "unreadable", "fifo", "binary"])
def test_unreadable_config_exits_2_with_one_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "c.yaml"
    if kind == "directory":
        path.mkdir()
    elif kind == "unreadable":
        path.write_text("run_root: x\n")
        path.chmod(0)
        if os.geteuid() == 0:
            # root reads anything: an unreadable file is one whose read fails, so use a dangling symlink loop
            path.unlink()
            path.symlink_to(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "binary":
        path.write_bytes(b"run_root: \xff\xfe\n")
    with pytest.raises(ConfigError):
        load_config(str(path))
    env = dict(os.environ, CKPTCTL_NO_PROGRESS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "ckptctl", "recover", str(tmp_path), "--config", str(path), "--no-logs", "--dry-run"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(path) in errors[0] and "Traceback" not in proc.stderr


def test_recover_dry_run_refuses_a_bad_watch_section_and_launch_dry_run_shows_the_batch_script(tmp_path: Path) -> None:
    env = dict(os.environ, CKPTCTL_NO_PROGRESS="1")
    (tmp_path / "run").mkdir()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"run_root: {tmp_path / 'run'}\nrecover:\n  watch: {{k: .inf}}\n")
    bad = subprocess.run([sys.executable, "-m", "ckptctl", "recover", "--config", str(cfg), "--no-logs", "--dry-run"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "recover.watch.k: inf is not a finite number" in bad.stderr, bad.stderr
    cfg.write_text(
        f"run_root: {tmp_path / 'run'}\nlaunch:\n  backend: slurm\n  script: train.py\n"
        "  exclude_hosts: [gpu-9]\n  slurm: {partition: gpu}\n"
    )
    dry = subprocess.run([sys.executable, "-m", "ckptctl", "launch", "--config", str(cfg), "--dry-run", "--json"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert dry.returncode == 0, dry.stderr
    import json

    doc = json.loads(dry.stdout)
    assert "#SBATCH --exclude=gpu-9" in doc["slurm"]["script"] and "#SBATCH --partition=gpu" in doc["slurm"]["script"]


def test_an_unknown_backend_is_refused_when_the_config_is_loaded(tmp_path: Path) -> None:
    """The backends' registry is the one list of names; a command's config load checks it."""
    from ckptctl.ops.launch import load_config as load_for_a_command

    path = tmp_path / "c.yaml"
    path.write_text("launch:\n  backend: kubernetes\n")
    with pytest.raises(ConfigError) as e:
        load_for_a_command(str(path))
    assert e.value.message == f"{path}: launch.backend: 'kubernetes' is not one of local, slurm"
    assert e.value.exit_code == 2
