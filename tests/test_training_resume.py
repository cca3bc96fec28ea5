"""End to end: examples/train.py under real torchrun (2 ranks, gloo, CPU), killed and resumed.

The reference is one uninterrupted 2-rank run of 30 steps, saving every 5. Every
other run is compared with it line by line: after a resume, each logged loss
must equal the reference's bit for bit (the log prints ``repr(float)``), and
the steps must run on from the checkpoint's step with none replayed or skipped.
Random choices use a seed printed in the test output (set CKPTCTL_TEST_SEED to
replay one).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.training_helpers import (
    TrainLog,
    child_env,
    ckptctl_cli,
    describe,
    independently_complete,
    parse_log,
    run_train,
    torchrun_argv,
)

pytestmark = pytest.mark.slow

STEPS = 30
COMMON = ("--steps", str(STEPS), "--save-every", "5", "--seed", "0")


def pick_seed() -> int:
    seed = int(os.environ.get("CKPTCTL_TEST_SEED") or time.time_ns() % 1_000_000)
    print(f"CKPTCTL_TEST_SEED={seed}")
    return seed


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TrainLog]:
    root = tmp_path_factory.mktemp("reference") / "run"
    proc = run_train(2, "--ckpt-root", str(root), *COMMON)
    assert proc.returncode == 0, describe(proc)
    log = parse_log(proc.stdout)
    assert log.steps == list(range(1, STEPS + 1))
    return root, log


def locate(root: Path) -> str:
    proc = ckptctl_cli("locate", str(root))
    assert proc.returncode == 0, describe(proc)
    return proc.stdout.strip()


def assert_continues_exactly(log: TrainLog, ref: TrainLog, from_step: int) -> None:
    assert log.resumed is not None and int(log.resumed["step"]) == from_step
    # no step replayed or skipped
    assert log.steps == list(range(from_step + 1, STEPS + 1))
    for step in log.steps:
        assert log.losses[step] == ref.losses[step], (
            f"step {step}: {log.losses[step]} != {ref.losses[step]}"
        )
        assert log.tokens[step] == ref.tokens[step]


def assert_prefix_matches(log: TrainLog, ref: TrainLog) -> None:
    """A crashed run agrees with the reference for every step it logged (the runs are deterministic)."""
    assert log.steps == list(range(1, len(log.steps) + 1))
    for step in log.steps:
        assert log.losses[step] == ref.losses[step]


def test_sigkill_at_a_random_step_then_resume_is_bit_identical(
    reference: tuple[Path, TrainLog], tmp_path: Path
) -> None:
    _, ref = reference
    rng = random.Random(pick_seed())
    crash_at = rng.randint(7, STEPS - 1)
    crash_rank = rng.randint(0, 1)
    root = tmp_path / "run"
    crashed = run_train(
        2,
        "--ckpt-root",
        str(root),
        *COMMON,
        "--crash-at-step",
        str(crash_at),
        "--crash-rank",
        str(crash_rank),
    )
    assert crashed.returncode != 0, describe(crashed)
    assert_prefix_matches(parse_log(crashed.stdout), ref)

    path = locate(root)
    expected = 5 * ((crash_at - 1) // 5)  # the last save that finished before the kill
    assert Path(path).name == f"step_{expected}"
    assert independently_complete(Path(path)) is None

    resumed = run_train(2, "--ckpt-root", str(root), "--resume-from", path, *COMMON)
    assert resumed.returncode == 0, describe(resumed)
    assert_continues_exactly(parse_log(resumed.stdout), ref, expected)


@pytest.mark.parametrize(
    ("phase", "crash_rank", "mode"),
    [
        pytest.param("shards_written", 1, "sync", id="rank1-after-shards-sync"),
        pytest.param("marker_written", 0, "async", id="rank0-after-marker-async"),
    ],
)
def test_sigkill_in_the_middle_of_a_save_then_resume_is_bit_identical(
    reference: tuple[Path, TrainLog], tmp_path: Path, phase: str, crash_rank: int, mode: str
) -> None:
    """Killed with shards (and, for the second case, manifest and commit marker) on disk, before
    the rename that commits: the half-written step_15 is never located, step_10 is."""
    _, ref = reference
    root = tmp_path / "run"
    extra = ("--async-save",) if mode == "async" else ()
    crashed = run_train(
        2,
        "--ckpt-root",
        str(root),
        *COMMON,
        *extra,
        "--crash-during-save-at-step",
        "15",
        "--crash-save-phase",
        phase,
        "--crash-rank",
        str(crash_rank),
    )
    assert crashed.returncode != 0, describe(crashed)
    assert_prefix_matches(parse_log(crashed.stdout), ref)
    leftovers = [p.name for p in root.iterdir() if p.name.startswith("step_15")]
    assert len(leftovers) == 1 and ".tmp-" in leftovers[0], leftovers

    path = locate(root)
    assert Path(path).name == "step_10"
    verify = ckptctl_cli("verify", str(root / leftovers[0]))
    assert verify.returncode == 3, describe(verify)

    resumed = run_train(2, "--ckpt-root", str(root), "--resume-from", path, *COMMON, *extra)
    assert resumed.returncode == 0, describe(resumed)
    assert_continues_exactly(parse_log(resumed.stdout), ref, 10)


def test_a_two_rank_checkpoint_resumes_on_one_rank(
    reference: tuple[Path, TrainLog], tmp_path: Path
) -> None:
    """DCP resharding: the 1-rank run takes the same global batches, so the loss continues the
    2-rank curve. Not bit-identical: rank 1's dropout/augmentation RNG stream has no home on
    one rank, and the reduction order changes."""
    ref_root, ref = reference
    root = tmp_path / "run"
    shutil.copytree(ref_root, root)
    proc = run_train(1, "--ckpt-root", str(root), "--resume-from", str(root / "step_20"), *COMMON)
    assert proc.returncode == 0, describe(proc)
    log = parse_log(proc.stdout)
    assert log.resumed is not None
    assert (log.resumed["step"], log.resumed["w"], log.resumed["w0"]) == ("20", "1", "2")
    assert log.steps == list(range(21, STEPS + 1))
    assert [log.tokens[s] for s in log.steps] == [ref.tokens[s] for s in log.steps]
    ours = [float(log.losses[s]) for s in log.steps]
    theirs = [float(ref.losses[s]) for s in log.steps]
    first_loss = float(ref.losses[1])
    # continues the curve: close to the reference at every step, far below where training began
    for a, b in zip(ours, theirs, strict=True):
        assert abs(a - b) <= 0.05 * b, (ours, theirs)
    assert max(ours) < first_loss - 0.2, (ours, first_loss)


def children_of(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (from /proc, so no procps needed)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # the command name (field 2) may hold spaces: the fields after it follow the last ')'
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            out.append(int(entry))
    return sorted(out)


def worker_pids(torchrun_pid: int, expected: int, timeout_s: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = children_of(torchrun_pid)
        if len(pids) >= expected:
            return pids
        time.sleep(0.2)
    raise AssertionError("torchrun workers did not start")


def wait_for_step(
    proc: subprocess.Popen[str], lines: list[str], step: int, timeout_s: float = 120
) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"training ended early:\n{''.join(lines)}")
        lines.append(line)
        if line.startswith(f"ckptctl-train step={step} "):
            return
    raise AssertionError("training too slow")


def test_sigterm_writes_an_emergency_checkpoint_and_exits_75(tmp_path: Path) -> None:
    """SIGTERM delivered to one rank only: every rank agrees at the next step boundary, the
    emergency checkpoint verifies complete (deep), and the workers exit with code 75."""
    root = tmp_path / "run"
    argv = torchrun_argv(
        2,
        "--ckpt-root",
        str(root),
        "--steps",
        "100000",
        "--save-every",
        "1000",
        "--step-sleep-s",
        "0.02",
    )
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env()
    )
    lines: list[str] = []
    try:
        wait_for_step(proc, lines, 3)
        os.kill(max(worker_pids(proc.pid, 2)), signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines.extend(out.splitlines(keepends=True))
    preempted = [ln for ln in lines if ln.startswith("ckptctl-train preempted ")]
    assert len(preempted) == 1, "".join(lines) + err
    fields = dict(kv.split("=", 1) for kv in preempted[0].split()[2:])
    assert fields["signal"] == "SIGTERM" and fields["exit_code"] == "75"
    step = int(fields["step"])
    assert Path(fields["checkpoint"]) == root / f"step_{step}"
    last_logged = max(
        int(ln.split()[1].split("=")[1]) for ln in lines if ln.startswith("ckptctl-train step=")
    )
    assert last_logged == step  # the emergency checkpoint holds the last completed step
    # torchrun's failure report: the workers exit 75. (Once the first one has exited, torchrun
    # SIGTERMs the rest; one still tidying up after the committed save may show -15 instead.)
    assert err.count("exitcode  : 75") >= 1, err[-3000:]
    verify = ckptctl_cli("verify", "--deep", fields["checkpoint"])
    assert verify.returncode == 0, describe(verify)
    assert ckptctl_cli("locate", str(root)).stdout.strip() == fields["checkpoint"]


def test_sigterm_single_process_exit_code(tmp_path: Path) -> None:
    """Without torchrun the process's own exit status is the documented code."""
    root = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent.parent / "examples" / "train.py"), "--ckpt-root", str(root),
         "--steps", "100000", "--save-every", "1000", "--step-sleep-s", "0.02"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
    )  # fmt: skip
    lines: list[str] = []
    try:
        wait_for_step(proc, lines, 2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 75, out + err
    assert "ckptctl-train preempted signal=SIGTERM" in out


def flip_one_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_bit_flip_is_reported_by_verify_deep_and_skipped_by_resume_auto(
    reference: tuple[Path, TrainLog], tmp_path: Path
) -> None:
    ref_root, _ = reference
    root = tmp_path / "run"
    shutil.copytree(ref_root, root)
    flip_one_bit(root / "step_30" / "__1_0.distcp")

    deep = ckptctl_cli("verify", "--deep", str(root / "step_30"))
    assert deep.returncode == 3, describe(deep)
    assert "crc" in (deep.stdout + deep.stderr).lower()

    # one plain process (no torchrun): --resume-from auto falls back to step_25 and says why
    proc = run_train(0, "--ckpt-root", str(root), "--resume-from", "auto", *COMMON)
    assert proc.returncode == 0, describe(proc)
    log = parse_log(proc.stdout)
    assert log.resumed is not None and log.resumed["path"] == str(root / "step_25")
    assert "step_30" in proc.stderr and "checksum mismatch" in proc.stderr
    # the run saved step_30 again; the corrupt one was moved aside, not deleted
    assert independently_complete(root / "step_30") is None
    assert any(p.name.startswith("step_30.quarantined-") for p in root.iterdir())


def test_fsdp2_async_resume_is_bit_identical_and_reshards_to_one_rank(tmp_path: Path) -> None:
    """FSDP2: parameters and AdamW moments are DTensor shards (one chunk per rank), saved
    asynchronously. Resumed on 2 ranks the losses match bit for bit; resumed on 1 rank DCP
    reassembles the shards and the curve continues."""
    args = (
        "--steps",
        "12",
        "--save-every",
        "6",
        "--seed",
        "1",
        "--parallel",
        "fsdp",
        "--async-save",
    )
    ref_root = tmp_path / "ref"
    ref_proc = run_train(2, "--ckpt-root", str(ref_root), *args)
    assert ref_proc.returncode == 0, describe(ref_proc)
    ref = parse_log(ref_proc.stdout)
    assert ref.steps == list(range(1, 13))
    manifest = (ref_root / "step_6" / "ckptctl.json").read_text()
    assert '"world_size": 2' in manifest

    two = tmp_path / "two"
    shutil.copytree(ref_root, two)
    proc = run_train(2, "--ckpt-root", str(two), "--resume-from", str(two / "step_6"), *args)
    assert proc.returncode == 0, describe(proc)
    log = parse_log(proc.stdout)
    assert log.steps == list(range(7, 13))
    assert [log.losses[s] for s in log.steps] == [ref.losses[s] for s in log.steps]

    one = tmp_path / "one"
    shutil.copytree(ref_root, one)
    proc = run_train(1, "--ckpt-root", str(one), "--resume-from", str(one / "step_6"), *args)
    assert proc.returncode == 0, describe(proc)
    log = parse_log(proc.stdout)
    assert log.resumed is not None and (log.resumed["w"], log.resumed["w0"]) == ("1", "2")
    assert log.steps == list(range(7, 13))
    for s in log.steps:
        assert abs(float(log.losses[s]) - float(ref.losses[s])) <= 0.05 * float(ref.losses[s])
