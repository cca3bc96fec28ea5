"""The list/locate/verify CLI: exit codes, JSON on stdout, one-line errors on stderr."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, upload_tree
from tests.damage import flip_bit, tensor_data_offset

CKPTCTL = [sys.executable, "-m", "ckptctl"]


def run(*args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, CKPTCTL_NO_PROGRESS="1")
    full_env.pop("CKPTCTL_DEBUG", None)
    if env:
        full_env.update(env)
    return subprocess.run(
        [*(prefix or []), *CKPTCTL, *args], capture_output=True, text=True, env=full_env, cwd=REPO, timeout=120
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert needle in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr


def test_help_lists_every_command_and_each_has_help() -> None:
    top = run("--help")
    assert top.returncode == 0
    for cmd in ("list", "locate", "verify", "classify", "watch", "rollback", "launch", "recover"):
        assert cmd in top.stdout
    for cmd in ("list", "locate", "verify"):
        sub = run(cmd, "--help")
        assert sub.returncode == 0 and "Usage" in sub.stdout


def test_no_torch_import_for_help_list_locate_quick_verify(run_root: Path) -> None:
    code = (
        "import sys\n"
        "from ckptctl.cli.app import main\n"
        "for argv in (['--help'], ['list', ROOT], ['locate', ROOT], ['verify', ROOT + '/step_30'], ['verify', ROOT, '--json']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code in (0, None), (argv, e.code)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    ).replace("ROOT", repr(str(run_root)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


def test_locate_prints_only_the_path(run_root: Path) -> None:
    (run_root / "step_30" / "__0_0.distcp").unlink()
    proc = run("locate", str(run_root))
    assert proc.returncode == 0
    assert proc.stdout == f"{run_root / 'step_20'}\n"
    assert "skipped step_30 (incomplete)" in proc.stderr


def test_locate_none_complete_exits_3(run_root: Path) -> None:
    for d in run_root.iterdir():
        (d / ".metadata").unlink()
    proc = run("locate", str(run_root))
    assert proc.stdout == ""
    assert_one_line_error(proc, 3, "no complete checkpoint")


def test_locate_before_and_json(run_root: Path) -> None:
    proc = run("locate", str(run_root), "--before", "30", "--json")
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert doc["path"] == str(run_root / "step_20")
    assert doc["checkpoint"]["status"] == "complete"
    assert doc["before_step"] == 30


def test_list_json_schema(run_root: Path) -> None:
    shutil.copytree(run_root / "step_30", run_root / "step_40.tmp-x1")
    proc = run("list", str(run_root), "--json")
    assert proc.returncode == 3  # the temp dir is not complete
    doc = json.loads(proc.stdout)
    assert [c["name"] for c in doc["checkpoints"]] == ["step_40.tmp-x1", "step_30", "step_20", "step_10"]
    for c in doc["checkpoints"]:
        for key in ("path", "step", "status", "problems", "world_size", "size_bytes", "mtime", "kind"):
            assert key in c
    assert doc["checkpoints"][0]["status"] == "incomplete"
    assert doc["checkpoints"][1]["world_size"] == 2


def test_list_human_table(run_root: Path) -> None:
    truncate_to = run_root / "step_20" / "__1_0.distcp"
    truncate_to.write_bytes(truncate_to.read_bytes()[:100])
    proc = run("list", str(run_root))
    assert proc.returncode == 3
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["STEP", "NAME", "STATUS"]
    assert "step_20" in lines[2] and "corrupt" in lines[2] and "shard truncated" in lines[2]


def test_verify_exit_codes_and_json(run_root: Path) -> None:
    ok = run("verify", str(run_root / "step_30"), "--json")
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["ok"] is True
    shard, off = tensor_data_offset(run_root / "step_30")
    flip_bit(run_root / "step_30" / shard, off)
    assert run("verify", str(run_root / "step_30")).returncode == 0
    deep = run("verify", str(run_root / "step_30"), "--deep", "--json")
    assert deep.returncode == 3
    doc = json.loads(deep.stdout)
    assert doc["checkpoints"][0]["status"] == "corrupt"
    assert any("CRC-32 mismatch" in p for p in doc["checkpoints"][0]["problems"])
    details = doc["checkpoints"][0]["problem_details"]
    assert [d["code"] for d in details] == ["crc-mismatch"] * len(details)
    assert set(details[0]) >= {"code", "severity", "message"} and details[0]["severity"] == "corrupt"
    whole = run("verify", str(run_root), "--json")
    assert whole.returncode == 0 and json.loads(whole.stdout)["run_root"] is True
    bad_ws = run("verify", str(run_root / "step_30"), "--world-size", "8")
    assert bad_ws.returncode == 3 and "expected 8" in bad_ws.stdout


def test_usage_errors_exit_2(run_root: Path) -> None:
    assert run("verify").returncode == 2
    assert run("locate", str(run_root), "--before", "-1").returncode == 2
    assert run("list", str(run_root), "--bogus").returncode == 2


def test_missing_root(tmp_path: Path) -> None:
    assert_one_line_error(run("list", str(tmp_path / "nope")), 1, "no such directory")
    assert_one_line_error(run("locate", str(tmp_path / "nope")), 1, "no such directory")


def test_file_given_as_root(tmp_path: Path) -> None:
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert_one_line_error(run("verify", str(f)), 1, "is a file")


def test_symlink_loop(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert_one_line_error(run("list", str(tmp_path / "a")), 1, "symbolic links")


def test_unknown_protocol() -> None:
    assert_one_line_error(run("list", "nosuchproto://x/y"), 1, "unknown storage protocol")


def test_debug_variable_shows_the_traceback(tmp_path: Path) -> None:
    proc = run("list", str(tmp_path / "nope"), env={"CKPTCTL_DEBUG": "1"})
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr


def _as_nobody() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot drop privileges to test EACCES")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def world_readable_copy(run_root: Path) -> Iterator[Path]:
    """A copy of the run root outside pytest's private (0700) temp tree."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="ckptctl-perm-"))
    base.chmod(0o755)
    dst = base / "run"
    shutil.copytree(run_root, dst)
    try:
        yield dst
    finally:
        for p in dst.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(base)


def test_permission_denied_root(world_readable_copy: Path) -> None:
    world_readable_copy.chmod(0o700)
    proc = run("list", str(world_readable_copy), prefix=_as_nobody(), env={"HOME": "/tmp"})
    world_readable_copy.chmod(0o755)
    assert_one_line_error(proc, 1, "permission denied")


def test_unreadable_shard_is_reported_not_a_traceback(world_readable_copy: Path) -> None:
    (world_readable_copy / "step_30" / "__1_0.distcp").chmod(0o000)
    proc = run(
        "verify", str(world_readable_copy / "step_30"), "--deep", "--json", prefix=_as_nobody(), env={"HOME": "/tmp"}
    )
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    problems = doc["checkpoints"][0]["problems"]
    assert any("unreadable shard __1_0.distcp" in p and "permission denied" in p for p in problems), problems


# -- object storage through a real S3-compatible server ------------------------------------


def test_s3_list_locate_verify(run_root: Path, s3_server: str, s3_env: dict[str, str], s3_bucket: str) -> None:
    (run_root / "step_30" / "__1_0.distcp").unlink()
    shard, off = tensor_data_offset(run_root / "step_20")
    flip_bit(run_root / "step_20" / shard, off)
    url = f"s3://{s3_bucket}/runs/r1"
    upload_tree(s3_server, run_root, url)
    loc = run("locate", url, env=s3_env)
    assert loc.returncode == 0, loc.stderr
    assert loc.stdout.strip() == f"{url}/step_20"
    deep = run("locate", url, "--deep", env=s3_env)
    assert deep.stdout.strip() == f"{url}/step_10"
    lst = run("list", url, "--json", env=s3_env)
    statuses = {c["name"]: c["status"] for c in json.loads(lst.stdout)["checkpoints"]}
    assert statuses == {"step_30": "incomplete", "step_20": "complete", "step_10": "complete"}
    ver = run("verify", f"{url}/step_20", "--deep", "--json", env=s3_env)
    assert ver.returncode == 3
    assert any("CRC-32 mismatch" in p for p in json.loads(ver.stdout)["checkpoints"][0]["problems"])


def test_s3_endpoint_down(s3_env: dict[str, str]) -> None:
    from tests.conftest import free_port

    env = dict(s3_env, CKPTCTL_STORAGE_OPTIONS=json.dumps({"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{free_port()}"}}))
    proc = run("locate", "s3://nobucket-here/run", env=env)
    assert_one_line_error(proc, 1, "unreachable")


def test_s3_missing_root(s3_env: dict[str, str], s3_bucket: str) -> None:
    assert_one_line_error(run("list", f"s3://{s3_bucket}/absent", env=s3_env), 1, "no such directory")
