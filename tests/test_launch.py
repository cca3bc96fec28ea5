"""`ckptctl launch` end to end: real torchrun jobs (gloo, CPU), real signals, real log files.

Jobs run ``tests/scripts/rank_job.py`` (see its docstring), which starts in
milliseconds; only one test joins a gloo process group. Tests that start
torchrun are marked slow.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from ckptctl.adapters.launch_result import LaunchResult, create_log_file
from ckptctl.adapters.launcher import Supervisor
from ckptctl.cli import output
from ckptctl.cli.app import main
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.ops import launch as ops
from tests.conftest import REPO, free_port

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "rank_job.py")
CKPTCTL = str(Path(sys.executable).parent / "ckptctl")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
PID_LINE = re.compile(r"rank=(\d+) world=(\d+) pid=(\d+) ppid=(\d+) resume_from=(\S+)")


def _env() -> dict[str, str]:
    env = dict(os.environ, CKPTCTL_NO_PROGRESS="1", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("CKPTCTL_DEBUG", None)
    return env


def write_config(tmp_path: Path, *, run_root: Path | None = None, **launch: Any) -> Path:
    """A ckptctl.yaml for a 2-rank job of rank_job.py on a free local port."""
    doc: dict[str, Any] = {
        "run_root": str(run_root or tmp_path / "run"),
        "launch": {
            "nnodes": "1",
            "nproc_per_node": 2,
            "rdzv_endpoint": f"127.0.0.1:{free_port()}",
            "script": SCRIPT,
            "stop_grace_s": 20,
            **launch,
        },
    }
    path = tmp_path / "ckptctl.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run_cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # this interpreter, so the default launcher in the argv is the one TORCHRUN names
        [sys.executable, "-m", "ckptctl", "launch", *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
        timeout=timeout,
    )


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., tuple[int, str, str]]:
    """``ckptctl launch ARGS`` in-process through ``main`` (its error handler included):
    ``cli(*args, cwd=DIR)`` -> (exit code, stdout, stderr)."""
    monkeypatch.delenv("CKPTCTL_DEBUG", raising=False)

    def invoke(*args: str, cwd: Path) -> tuple[int, str, str]:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        output.reset()
        try:
            main(["launch", *args])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            output.reset()
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


def is_alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by init is not running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # pragma: no cover - no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    alive = [p for p in pids if is_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if is_alive(p)]
    return alive


def config_for(tmp_path: Path, **launch: Any) -> CkptctlConfig:
    return ops.load_config(str(write_config(tmp_path, **launch)))


def job_pids(lines: list[str]) -> tuple[list[int], set[int]]:
    """Worker pids and their parents (torchrun) from the rank lines."""
    found = [PID_LINE.search(line) for line in lines]
    matches = [m for m in found if m]
    return [int(m.group(3)) for m in matches], {int(m.group(4)) for m in matches}


# -- no process started ------------------------------------------------------------------------


def test_dry_run_prints_the_exact_argv_and_starts_nothing(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, script_args=["--mode", "ok"], env={"NCCL_DEBUG": "WARN"})
    marker = tmp_path / "ran"
    port = yaml.safe_load(cfg.read_text())["launch"]["rdzv_endpoint"]
    expected = [
        *TORCHRUN,
        "--nnodes=1:2",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={port}",
        "--rdzv-id=job-7",
        "--max-restarts=2",
        SCRIPT,
        "--touch",
        str(marker),
        "--resume-from",
        "/ckpt/run 1/step_30",
    ]
    flags = ["--config", str(cfg), "--dry-run", "--nnodes", "1:2", "--rdzv-id", "job-7", "--max-restarts", "2"]
    tail = ["--resume-from", "/ckpt/run 1/step_30", "--", SCRIPT, "--touch", str(marker)]

    proc = run_cli(*flags, "--json", *tail, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["dry_run"] is True
    assert doc["argv"] == expected
    assert doc["env"] == {"PYTHONUNBUFFERED": "1", "NCCL_DEBUG": "WARN"}
    assert doc["log_dir"] == str(tmp_path / "run" / ".ckptctl" / "logs")
    assert doc["resume_from"] == "/ckpt/run 1/step_30"

    human = run_cli(*flags, *tail, cwd=tmp_path)
    assert human.returncode == 0, human.stderr
    assert human.stdout == shlex.join(expected) + "\n"
    assert shlex.split(human.stdout) == expected
    assert "env: NCCL_DEBUG=WARN" in human.stderr

    assert not marker.exists(), "dry run started the job"
    assert not (tmp_path / "run").exists(), "dry run wrote a log"


def test_script_words_after_the_script_belong_to_it(tmp_path: Path, cli: Any) -> None:
    # like torchrun: options after the script are the script's, even ckptctl's own names
    code, out, err = cli("--dry-run", "--json", "--rdzv-endpoint", "h:1", SCRIPT, "--json", "--nnodes", "9", cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["argv"][-3:] == ["--json", "--nnodes", "9"]


def test_no_torch_import_for_launch_help_and_dry_run(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    code = (
        "import sys\n"
        "from ckptctl.cli.app import main\n"
        f"for argv in (['launch', '--help'], ['launch', '--config', {str(cfg)!r}, '--dry-run', '--json']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), (argv, e.code)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=_env())
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "yaml_text, flags, needle",
    [
        ("launch: {nnode: 2}\n", [], "unknown key 'launch.nnode'"),
        ("launch:\n  max_restarts: many\n", [], "launch.max_restarts: 'many' is not an integer"),
        ("launch: {script: x.py}\nrecover: {min_nodes_policy: maybe}\n", [], "recover.min_nodes_policy"),
        ("launch: [oops\n", [], "not valid YAML (line 2"),
        ("launch: {script: x.py}\n", ["--nnodes", "0:2"], "--nnodes: '0:2'"),
        ("launch: {script: x.py}\n", ["--nproc-per-node", "lots"], "--nproc-per-node: 'lots'"),
        ("launch: {}\n", [], "launch.script: no training script"),
    ],
)
def test_config_errors_exit_2_and_name_the_field(
    tmp_path: Path, cli: Any, yaml_text: str, flags: list[str], needle: str
) -> None:
    (tmp_path / "ckptctl.yaml").write_text(yaml_text)  # found in the working directory
    code, out, err = cli(*flags, "--dry-run", cwd=tmp_path)
    assert code == 2, (out, err)
    assert needle in err, err
    assert out == ""


def test_config_error_through_the_real_entry_point(tmp_path: Path) -> None:
    (tmp_path / "ckptctl.yaml").write_text("launch:\n  nproc_per_node: 8\n  nnode: 2\n")
    proc = run_cli("--dry-run", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ckptctl.yaml: unknown key 'launch.nnode'"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_config_file_is_a_usage_error(tmp_path: Path, cli: Any) -> None:
    code, _, err = cli("--config", str(tmp_path / "nope.yaml"), "--dry-run", cwd=tmp_path)
    assert code == 2 and "nope.yaml: no such config file" in err


def test_resume_from_auto_picks_the_newest_complete_checkpoint(tmp_path: Path, run_root: Path, cli: Any) -> None:
    (run_root / "step_30" / ".metadata").unlink()  # the newest is incomplete: skip it
    cfg = write_config(tmp_path, run_root=run_root)
    code, out, err = cli("--config", str(cfg), "--dry-run", "--json", "--resume-from", "auto", cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["argv"][-2:] == ["--resume-from", str(run_root / "step_20")]


def test_resume_from_auto_without_a_complete_checkpoint_exits_3(tmp_path: Path, cli: Any) -> None:
    (tmp_path / "empty").mkdir()
    cfg = write_config(tmp_path, run_root=tmp_path / "empty")
    code, out, err = cli("--config", str(cfg), "--dry-run", "--resume-from", "auto", cwd=tmp_path)
    assert code == 3 and out == "", err
    assert "no complete checkpoint" in err
    # no config in this directory, so no run root at all
    code, _, err = cli("--dry-run", "--resume-from", "auto", "--", SCRIPT, cwd=tmp_path / "empty")
    assert code == 2 and "needs the run root" in err


def test_a_launcher_that_does_not_exist_is_a_tool_failure(tmp_path: Path, cli: Any) -> None:
    cfg = write_config(tmp_path, torchrun=[str(tmp_path / "no-such-torchrun")])
    code, _, err = cli("--config", str(cfg), cwd=tmp_path)
    assert code == 1, err
    assert "cannot start" in err


def test_log_file_names_never_collide(tmp_path: Path) -> None:
    now = datetime(2026, 11, 21, 3, 12, 0, tzinfo=timezone.utc)
    first = create_log_file(str(tmp_path / "logs"), now)
    second = create_log_file(str(tmp_path / "logs"), now)
    assert Path(first).name == "launch-20261121T031200Z.log"
    assert Path(second).name == "launch-20261121T031200Z-2.log"


# -- the supervisor on plain processes (fast) -------------------------------------------------------


def test_leftover_descendants_are_ended(tmp_path: Path) -> None:
    # The child starts a grandchild in its own session (as torchrun does with workers)
    # and exits without waiting: the supervisor must not leave it running.
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],"
        " start_new_session=True, stdout=subprocess.DEVNULL)\n"
        "print(f'grandchild={p.pid}', flush=True)\n"
        "import time; time.sleep(0.8)\n"  # the supervisor's table sees the grandchild
    )
    lines: list[str] = []
    result = Supervisor(
        [sys.executable, "-c", code], on_output=lines.append, stop_grace_s=5, forward_signals=False
    ).run()
    grandchild = int(lines[0].split("=")[1])
    assert result.returncode == 0
    assert result.orphans_killed == (grandchild,)
    assert not is_alive(grandchild)


def test_a_detached_daemon_holding_the_pipe_does_not_hang_ckptctl() -> None:
    # Classic double fork: the daemon is re-parented to init at once and may escape
    # the process table; it keeps the output pipe open. ckptctl must still return.
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        print(f'daemon={os.getpid()}', flush=True)\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n"
    )
    lines: list[str] = []
    t0 = time.monotonic()
    result = Supervisor(
        [sys.executable, "-c", code], on_output=lines.append, stop_grace_s=2, forward_signals=False
    ).run()
    daemon = int(next(x for x in lines if x.startswith("daemon=")).split("=")[1])
    try:
        assert time.monotonic() - t0 < 15
        assert result.returncode == 0
        # found through the pipe it holds, if not through the process table
        assert result.orphans_killed == (daemon,)
        assert not is_alive(daemon)
    finally:
        if is_alive(daemon):
            os.kill(daemon, signal.SIGKILL)


def test_a_broken_console_does_not_stop_the_job(tmp_path: Path) -> None:
    def broken(line: str) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    log = create_log_file(str(tmp_path), datetime.now(timezone.utc))
    result = Supervisor(
        [sys.executable, "-c", "print('one'); print('two')"],
        on_output=broken,
        log_path=log,
        forward_signals=False,
    ).run()
    assert result.returncode == 0 and result.stop_reason is None
    assert any("console output stopped" in n for n in result.notes)
    assert "one\ntwo\n" in Path(log).read_text()


def test_a_raising_callback_stops_the_job_then_propagates() -> None:
    def bad(line: str) -> bool:
        raise RuntimeError("watch bug")

    sup = Supervisor(
        [sys.executable, "-c", "import time\nprint('x', flush=True)\ntime.sleep(60)"],
        on_line=bad,
        stop_grace_s=5,
        forward_signals=False,
    )
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="watch bug"):
        sup.run()
    assert time.monotonic() - t0 < 30
    assert sup.pid is not None and not is_alive(sup.pid)


# -- real torchrun jobs ------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_job_streams_output_to_console_and_log(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, script_args=["--gloo"])
    proc = run_cli("--config", str(cfg), "--resume-from", "/ckpt/run/step_30", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        assert re.search(rf"rank={rank} world=2 pid=\d+ ppid=\d+ resume_from=/ckpt/run/step_30", proc.stdout)
        assert f"rank={rank} allreduce=1" in proc.stdout  # 0 + 1 over gloo
    logs = list((tmp_path / "run" / ".ckptctl" / "logs").glob("launch-*.log"))
    assert len(logs) == 1
    text = logs[0].read_text()
    assert "rank=0 allreduce=1" in text and "rank=1 allreduce=1" in text
    assert text.startswith("# ckptctl launch: started ")
    assert '"--resume-from", "/ckpt/run/step_30"' in text.splitlines()[1]
    assert text.rstrip().splitlines()[-1].endswith("returncode 0")
    assert f"log {logs[0]}" in proc.stderr


@pytest.mark.slow
def test_a_failing_rank_makes_the_launch_fail(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, script_args=["--mode", "fail", "--fail-rank", "1", "--fail-code", "3"])
    proc = run_cli("--config", str(cfg), "--json", cwd=tmp_path)
    # torchrun reports a failed worker group as 1 (the rank's own code is in its report)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["result"]["returncode"] == 1 and doc["result"]["exit_code"] == 1
    assert doc["result"]["stop_reason"] is None
    # with --json the job's output goes to stderr, and all of it to the log
    assert "rank=1 failing with 3" in proc.stderr
    log_text = Path(doc["result"]["log_path"]).read_text()
    assert "rank=1 failing with 3" in log_text and "exitcode  : 3" in log_text


def _start_cli(cfg: Path, tmp_path: Path, *script_args: str) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    proc = subprocess.Popen(
        [CKPTCTL, "launch", "--config", str(cfg), "--", SCRIPT, *script_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
        cwd=tmp_path,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def _read_until(lines: queue.Queue[str], done: Callable[[list[str]], bool], timeout_s: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while not done(seen):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("timed out; output so far:\n" + "".join(seen))
        try:
            seen.append(lines.get(timeout=remaining))
        except queue.Empty:
            continue
    return seen


@pytest.mark.slow
def test_sigterm_to_ckptctl_stops_torchrun_and_every_worker(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    proc, lines = _start_cli(cfg, tmp_path, "--mode", "sleep")
    try:
        seen = _read_until(lines, lambda s: sum("ready" in x for x in s) == 2, 60)
        workers, torchrun = job_pids(seen)
        assert len(workers) == 2 and len(torchrun) == 1
        assert all(is_alive(p) for p in [*workers, *torchrun])
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 128 + signal.SIGTERM
    assert wait_gone([*workers, *torchrun], 5) == []
    rest = "".join(seen) + "".join(lines.get() for _ in range(lines.qsize()))
    assert "ckptctl received SIGTERM" in rest


@pytest.mark.slow
def test_on_line_callback_stops_the_job(tmp_path: Path) -> None:
    seen: list[str] = []
    calls_after_stop: list[str] = []

    def watch(line: str) -> bool:
        # the way recover's loss watch works: read the first steps, then decide
        if sum("ready" in s for s in seen) == 2:
            calls_after_stop.append(line)
        seen.append(line)
        return sum("ready" in s for s in seen) == 2

    config = config_for(tmp_path, script_args=["--mode", "sleep", "--steps", "3"])
    result = ops.launch(config, resume_from=None, on_line=watch, forward_signals=False)
    assert isinstance(result, LaunchResult)
    assert result.stopped_by_callback and result.stop_reason == "stop requested by the line callback"
    assert not result.killed and result.interrupted_by is None
    assert result.returncode != 0 and not result.ok
    assert calls_after_stop == [], "on_line was called after it asked to stop"
    assert sum("step=" in s for s in seen) == 6
    workers, torchrun = job_pids(seen)
    assert len(workers) == 2
    assert wait_gone([*workers, *torchrun], 5) == []
    assert result.log_path is not None and "rank=0 step=2" in Path(result.log_path).read_text()


@pytest.mark.slow
def test_workers_that_ignore_sigterm_are_killed_after_the_grace(tmp_path: Path) -> None:
    # torchrun would wait 30 s for these; the supervisor's grace is 2 s.
    config = config_for(tmp_path, script_args=["--mode", "ignore-term"], stop_grace_s=2)
    seen: list[str] = []

    def both_ready(line: str) -> bool:
        seen.append(line)
        return sum("ready" in s for s in seen) == 2

    t0 = time.monotonic()
    result = ops.launch(config, resume_from=None, on_line=both_ready, forward_signals=False)
    assert isinstance(result, LaunchResult)
    assert result.killed and result.stopped_by_callback
    assert result.returncode == -signal.SIGKILL and result.exit_code == 128 + signal.SIGKILL
    workers, torchrun = job_pids(seen)
    assert len(workers) == 2
    assert wait_gone([*workers, *torchrun], 5) == []
    assert time.monotonic() - t0 < 25
