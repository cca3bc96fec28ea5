"""The run-root lock (ckptctl.adapters.runlock): local O_EXCL, S3 conditional PUT, stale locks, races."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ckptctl.adapters.runlock import (
    CONDITIONAL_PUT,
    EXCLUSIVE_CREATE,
    WRITE_READ_BACK,
    LockInfo,
    lock_path,
    read_lock,
    run_lock,
)
from ckptctl.adapters.storage import Storage
from ckptctl.errors import LockHeldError
from tests.conftest import REPO

# A contender: import everything, meet the others at a file barrier, try the lock.
# A winner keeps the lock until every contender has made its attempt, so the
# result does not depend on scheduling: two winners can only mean two holders.
RACE = """
import os, sys, time
from ckptctl.adapters.runlock import run_lock
from ckptctl.adapters.storage import Storage
from ckptctl.errors import LockHeldError
url, ready, attempted, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
storage, root = Storage.for_url(url)
me = str(os.getpid())
open(os.path.join(ready, me), "w").close()
deadline = time.time() + 60
while len(os.listdir(ready)) < n and time.time() < deadline:
    time.sleep(0.001)
try:
    with run_lock(storage, root, operation="race") as held:
        open(os.path.join(attempted, me), "w").close()
        while len(os.listdir(attempted)) < n and time.time() < deadline:
            time.sleep(0.01)
        print("won", held.method)
except LockHeldError as e:
    open(os.path.join(attempted, me), "w").close()
    print("held", e.message)
"""


def race(url: str, n: int, scratch: Path, env: dict[str, str] | None = None) -> list[str]:
    ready, attempted = scratch / "ready", scratch / "attempted"
    ready.mkdir()
    attempted.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, url, str(ready), str(attempted), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, **(env or {})},
        )
        for _ in range(n)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def write_lock(storage: Storage, root: str, **fields: object) -> None:
    doc = {"pid": 1, "host": "elsewhere", "user": "bob", "started": "2026-11-20T01:00:00Z",
           "operation": "recover", "token": "theirs"}
    doc.update(fields)
    storage.write_bytes(lock_path(storage, root), json.dumps(doc).encode())


def test_local_lock_file_refusal_and_release(tmp_path: Path) -> None:
    storage, root = Storage.for_url(str(tmp_path))
    with run_lock(storage, root, operation="rollback") as held:
        assert held.method == EXCLUSIVE_CREATE
        on_disk = json.loads((tmp_path / ".ckptctl" / "lock").read_text())
        assert on_disk["pid"] == os.getpid() and on_disk["host"] == socket.gethostname()
        assert on_disk["operation"] == "rollback" and on_disk["user"] and on_disk["started"].endswith("Z")
        assert read_lock(storage, root) == held.info
        with pytest.raises(LockHeldError) as exc, run_lock(storage, root, operation="recover"):
            pytest.fail("a second holder got in")
        msg = exc.value.message
        assert f"rollback by {held.info.user} on {socket.gethostname()} (pid {os.getpid()})" in msg
        assert f"since {held.info.started}" in msg and "still running" in msg
        assert exc.value.hint and "rm " in exc.value.hint
        assert exc.value.exit_code == 4
        assert (tmp_path / ".ckptctl" / "lock").exists(), "the refused attempt left the lock alone"
    assert not (tmp_path / ".ckptctl" / "lock").exists()
    assert read_lock(storage, root) is None


def test_released_on_exception(tmp_path: Path) -> None:
    storage, root = Storage.for_url(str(tmp_path))
    with pytest.raises(RuntimeError), run_lock(storage, root, operation="rollback"):
        raise RuntimeError("boom")
    assert not (tmp_path / ".ckptctl" / "lock").exists()


def test_release_leaves_a_lock_that_is_not_ours(tmp_path: Path) -> None:
    storage, root = Storage.for_url(str(tmp_path))
    with run_lock(storage, root, operation="rollback"):
        write_lock(storage, root, host="other", token="someone-elses")  # broken by hand, re-taken
    assert read_lock(storage, root) is not None and read_lock(storage, root).token == "someone-elses"  # type: ignore[union-attr]


def test_stale_lock_same_host_dead_pid_is_broken(tmp_path: Path) -> None:
    storage, root = Storage.for_url(str(tmp_path))
    pid = dead_pid()
    write_lock(storage, root, pid=pid, host=socket.gethostname())
    with run_lock(storage, root, operation="rollback") as held:
        assert held.broke_stale is not None and held.broke_stale.pid == pid
        assert held.broke_stale.operation == "recover"
        assert read_lock(storage, root) == held.info
    assert not (tmp_path / ".ckptctl" / "lock.break").exists()


def test_stale_lock_pid_reused_by_another_process_is_broken(tmp_path: Path) -> None:
    storage, root = Storage.for_url(str(tmp_path))
    # our own pid is alive, but the recorded start time says it was another process
    write_lock(storage, root, pid=os.getpid(), host=socket.gethostname(), proc_start="1")
    if not Path(f"/proc/{os.getpid()}/stat").exists():
        pytest.skip("needs /proc")
    with run_lock(storage, root, operation="rollback") as held:
        assert held.broke_stale is not None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"host": "node-17", "pid": 99999999}, "on another host"),  # cannot check a pid elsewhere
        ({"host": "__HOST__", "pid": "__ALIVE__"}, "still running"),
    ],
)
def test_live_or_foreign_lock_is_never_broken(tmp_path: Path, fields: dict[str, object], words: str) -> None:
    storage, root = Storage.for_url(str(tmp_path))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        resolved = {
            k: (socket.gethostname() if v == "__HOST__" else sleeper.pid if v == "__ALIVE__" else v)
            for k, v in fields.items()
        }
        write_lock(storage, root, **resolved)
        before = (tmp_path / ".ckptctl" / "lock").read_bytes()
        with pytest.raises(LockHeldError, match=words), run_lock(storage, root, operation="rollback"):
            pytest.fail("took a live lock")
        assert (tmp_path / ".ckptctl" / "lock").read_bytes() == before
    finally:
        sleeper.kill()
        sleeper.wait()


def test_unparseable_lock_is_refused_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / ".ckptctl").mkdir()
    (tmp_path / ".ckptctl" / "lock").write_bytes(b"")  # a crash between create and write
    storage, root = Storage.for_url(str(tmp_path))
    with pytest.raises(LockHeldError, match="not a ckptctl lock file") as exc, run_lock(storage, root, operation="rollback"):
        pytest.fail("took an unknown lock")
    assert exc.value.hint and str(tmp_path / ".ckptctl" / "lock") in exc.value.hint


def test_lock_info_parse_round_trip() -> None:
    info = LockInfo(pid=7, host="h", user="u", started="2026-11-21T00:00:00Z", operation="recover", token="t")
    assert LockInfo.parse(json.dumps(info.to_json()).encode()) == info
    assert LockInfo.parse(b"{}") is None and LockInfo.parse(b"\xff") is None and LockInfo.parse(b"[1]") is None


def test_local_race_between_processes_has_exactly_one_winner(tmp_path: Path) -> None:
    outs = race(str(tmp_path / "root"), 6, tmp_path)
    assert sum(o.startswith("won exclusive-create") for o in outs) == 1, outs
    assert sum(o.startswith("held run root is locked: race by") for o in outs) == 5, outs
    assert not (tmp_path / "root" / ".ckptctl" / "lock").exists()


def test_s3_conditional_put_lock(s3_env: dict[str, str], s3_bucket: str) -> None:
    storage, root = Storage.for_url(f"s3://{s3_bucket}/run")
    with run_lock(storage, root, operation="rollback") as held:
        assert held.method == CONDITIONAL_PUT
        assert held.url == f"s3://{s3_bucket}/run/.ckptctl/lock"
        assert read_lock(storage, root) == held.info
        with pytest.raises(LockHeldError, match="rollback by"), run_lock(storage, root, operation="recover"):
            pytest.fail("a second holder got in on S3")
        # the raw store refuses a second create too (HTTP 412 from If-None-Match: *)
        with pytest.raises(FileExistsError):
            storage.fs.pipe_file(lock_path(storage, root), b"x", mode="create")
    assert read_lock(storage, root) is None
    assert not storage.exists(lock_path(storage, root))


def test_s3_stale_lock_is_broken(s3_env: dict[str, str], s3_bucket: str) -> None:
    storage, root = Storage.for_url(f"s3://{s3_bucket}/run")
    pid = dead_pid()
    write_lock(storage, root, pid=pid, host=socket.gethostname())
    with run_lock(storage, root, operation="rollback") as held:
        assert held.broke_stale is not None and held.broke_stale.pid == pid
        assert held.method == CONDITIONAL_PUT
    assert read_lock(storage, root) is None


def test_s3_race_between_processes_has_exactly_one_winner(
    s3_env: dict[str, str], s3_bucket: str, tmp_path: Path
) -> None:
    outs = race(f"s3://{s3_bucket}/run", 3, tmp_path, env=s3_env)
    assert sum(o.startswith("won conditional-put") for o in outs) == 1, outs
    assert sum(o.startswith("held run root is locked: race by") for o in outs) == 2, outs


def test_memory_store_uses_the_weaker_write_read_back() -> None:
    storage, root = Storage.for_url("memory://lock-test/run")
    storage.makedirs(root)
    with run_lock(storage, root, operation="rollback") as held:
        assert held.method == WRITE_READ_BACK
        with pytest.raises(LockHeldError), run_lock(storage, root, operation="rollback"):
            pytest.fail("a second holder got in")
    assert read_lock(storage, root) is None


def test_local_lock_file_appears_whole_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name appears by link(2) of a finished file: a contender never reads it empty
    (with O_EXCL then write, one of six racing processes once took the empty file for a
    foreign lock)."""
    seen: list[bytes] = []
    real_link = os.link

    def link(src: str, dst: str) -> None:
        seen.append(Path(src).read_bytes())
        real_link(src, dst)

    monkeypatch.setattr(os, "link", link)
    storage, root = Storage.for_url(str(tmp_path / "root"))
    with run_lock(storage, root, operation="rollback") as held:
        assert held.method == "exclusive-create"
        [content] = seen
        parsed = LockInfo.parse(content)
        assert parsed is not None and parsed.token == held.info.token
        assert sorted(os.listdir(tmp_path / "root" / ".ckptctl")) == ["lock"]
    assert os.listdir(tmp_path / "root" / ".ckptctl") == []


def test_store_errors_are_told_apart_by_code_and_status_not_text() -> None:
    from botocore.exceptions import ClientError

    from ckptctl.adapters.runlock import store_error

    def s3fs_style(code: str, status: int) -> OSError:
        cause = ClientError({"Error": {"Code": code, "Message": "whatever the text"},
                             "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")
        wrapped = OSError(5, "an unrelated message")
        wrapped.__cause__ = cause
        return wrapped

    assert store_error(s3fs_style("ConditionalRequestConflict", 409)) == ("ConditionalRequestConflict", 409)
    assert store_error(s3fs_style("NotImplemented", 501)) == ("NotImplemented", 501)
    # text that merely mentions a code is not a code
    assert store_error(OSError("NotImplemented (409) ConditionalRequestConflict")) == (None, None)
