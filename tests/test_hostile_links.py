"""Issue 27, names and links are data: control characters in names, symbolic links in a run
root, and ckptctl's own files under ``.ckptctl/`` (audit log, lock) as links or FIFOs.

Every command runs in a subprocess with a timeout: a regression fails here, it never hangs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.corpus import write_small_checkpoint

REPO = Path(__file__).resolve().parent.parent
#: A pickle that would run ``os.system`` if anything unpickled it (nothing does).
HOSTILE_METADATA = b"cos\nsystem\n(S'echo pwned'\ntR."


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
    env = dict(os.environ, PYTHONPATH=str(REPO), CKPTCTL_NO_PROGRESS="1")
    env.pop("CKPTCTL_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "ckptctl", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)  # fmt: skip


def codes(report: dict[str, object]) -> set[str]:
    return {p["code"] for p in report["problem_details"]}  # type: ignore[attr-defined,index]


def by_name(doc: dict[str, object]) -> dict[str, dict[str, object]]:
    return {c["name"]: c for c in doc["checkpoints"]}  # type: ignore[attr-defined,index]


# -- names --------------------------------------------------------------------------------------


def test_newline_name_beside_a_hostile_step_is_never_located(run: Path, real_step: Path) -> None:
    """Finding (a): `step_99` + newline beside a refused hostile `step_99`: `$` matched before the
    newline, locate printed the name with it, and `$(...)` stripped it: the hostile one resumed."""
    hostile = run / "step_99"
    shutil.copytree(real_step, hostile)
    (hostile / ".metadata").write_bytes(HOSTILE_METADATA)
    shutil.copytree(real_step, run / "step_99\n")
    r = ckptctl("locate", str(run))
    assert r.returncode == 0, r.stderr
    # what `--resume-from "$(ckptctl locate ROOT)"` receives: command substitution strips newlines
    assert r.stdout.rstrip("\n") == str(run / "step_20")
    assert r.stdout.count("\n") == 1
    doc = json.loads(ckptctl("list", str(run), "--json").stdout)
    assert codes(by_name(doc)["step_99\n"]) == {"name-unsafe"}
    assert by_name(doc)["step_99\n"]["status"] == "corrupt"
    assert "hostile-pickle" in codes(by_name(doc)["step_99"])
    human = ckptctl("list", str(run))
    assert "step_99\\x0a" in human.stdout and "step_99\n" not in human.stdout


@pytest.mark.parametrize("name", ["step_50\x1b[2J", "step_50\t", "step\u202e_50", "epoch=0-step=50\n.ckpt"])
def test_control_characters_in_a_name_are_refused_and_escaped(run: Path, real_step: Path, name: str) -> None:
    shutil.copytree(real_step, run / name)
    r = ckptctl("locate", str(run))
    assert r.stdout == f"{run / 'step_20'}\n", r.stdout
    assert "\x1b" not in r.stderr and "\u202e" not in r.stderr
    listed = ckptctl("list", str(run))
    assert "\x1b" not in listed.stdout and "\u202e" not in listed.stdout and "\t" not in listed.stdout


def test_locate_refuses_to_print_a_path_with_control_characters(real_step: Path, tmp_path: Path) -> None:
    """The root itself (the user's own path) with a newline: never printed raw for `$(...)`."""
    root = tmp_path / "runs\n"
    shutil.copytree(real_step, root / "step_10")
    r = ckptctl("locate", str(root))
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    assert "control characters" in r.stderr and "--json" in r.stderr
    doc = json.loads(ckptctl("locate", str(root), "--json").stdout)  # JSON carries it escaped
    assert doc["checkpoint"]["path"] == str(root / "step_10")


# -- links in the run root ---------------------------------------------------------------------


def test_self_referencing_link_is_one_problem_not_a_failed_root(run: Path) -> None:
    os.symlink("step_30", run / "step_30")
    doc = json.loads(ckptctl("list", str(run), "--json").stdout)
    assert codes(by_name(doc)["step_30"]) == {"link-refused"}
    assert by_name(doc)["step_20"]["status"] == "complete"
    r = ckptctl("locate", str(run))
    assert r.returncode == 0 and r.stdout == f"{run / 'step_20'}\n", r.stderr
    v = ckptctl("verify", str(run), "--json")
    assert v.returncode == 3 and "Traceback" not in v.stderr  # one checkpoint refused, the rest verified
    assert by_name(json.loads(v.stdout))["step_10"]["status"] == "complete"
    rb = ckptctl("rollback", str(run), "--reason", "loop test")
    assert rb.returncode == 0, rb.stderr
    assert (run / "step_10").is_dir() and not (run / "step_20").exists()


@pytest.mark.parametrize("target", [".", "..", "/"])
def test_link_to_a_folder_that_holds_it_is_a_loop(run: Path, target: str) -> None:
    """Found by the fuzzer: ``step_30 -> .`` (the run root itself) was read as a checkpoint that
    nests the root's own step directories, and located as step 30."""
    os.symlink(target, run / "step_30")
    doc = json.loads(ckptctl("list", str(run), "--json").stdout)
    assert codes(by_name(doc)["step_30"]) == {"link-refused"}
    r = ckptctl("locate", str(run))
    assert r.returncode == 0 and r.stdout == f"{run / 'step_20'}\n", r.stderr


def test_checkpoint_linked_from_outside_the_root_is_never_followed(real_step: Path, run: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "step_90"
    shutil.copytree(real_step, outside)
    os.symlink(outside, run / "step_90")
    r = ckptctl("locate", str(run))
    assert r.stdout == f"{run / 'step_20'}\n", r.stdout
    doc = json.loads(ckptctl("list", str(run), "--json").stdout)
    assert codes(by_name(doc)["step_90"]) == {"link-refused"}
    # a link inside the root to a sibling is followed as before
    os.symlink("step_10", run / "step_95")
    assert ckptctl("locate", str(run)).stdout == f"{run / 'step_95'}\n"


def test_file_in_a_checkpoint_linked_out_of_the_root_is_refused(run: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes((run / "step_20" / ".metadata").read_bytes())
    (run / "step_20" / ".metadata").unlink()
    os.symlink(secret, run / "step_20" / ".metadata")
    doc = json.loads(ckptctl("verify", str(run / "step_20"), "--json").stdout)
    assert "link-refused" in codes(doc["checkpoints"][0]) and doc["checkpoints"][0]["status"] == "corrupt"
    assert ckptctl("locate", str(run)).stdout == f"{run / 'step_10'}\n"


def test_latest_pointer_linked_out_of_the_root_is_never_read(run: Path, tmp_path: Path) -> None:
    """Finding: a `latest` pointer linked to a file outside had its first line printed."""
    secret = tmp_path / "credentials"
    secret.write_text("AKIA-SECRET-TOKEN\n")
    os.symlink(secret, run / "latest")
    for args in (("list", str(run)), ("list", str(run), "--json"), ("locate", str(run)),
                 ("locate", str(run), "--json")):  # fmt: skip
        r = ckptctl(*args)
        assert "SECRET" not in r.stdout + r.stderr, args


# -- ckptctl's own files: the audit log and the lock -----------------------------------------------


def test_audit_log_linked_outside_is_never_written_through(run: Path, tmp_path: Path) -> None:
    """Finding: rollback appended its record to the file `.ckptctl/audit.jsonl` links to."""
    target = tmp_path / "bashrc"
    target.write_text("# a shell start-up file\n")
    (run / ".ckptctl").mkdir()
    os.symlink(target, run / ".ckptctl" / "audit.jsonl")
    r = ckptctl("rollback", str(run), "--reason", "x")
    assert r.returncode == 1, r.stderr
    assert "symbolic link" in r.stderr and "Traceback" not in r.stderr
    assert target.read_text() == "# a shell start-up file\n"
    assert sorted(p.name for p in run.iterdir()) == [".ckptctl", "step_10", "step_20"]  # nothing renamed
    assert not (run / ".ckptctl" / "lock").exists()


def test_state_folder_linked_outside_is_never_written_through(run: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, run / ".ckptctl")
    r = ckptctl("rollback", str(run), "--reason", "x")
    assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr
    assert list(outside.iterdir()) == []
    assert (run / "step_20").is_dir()


def test_fifo_audit_log_fails_fast_and_renames_nothing(run: Path) -> None:
    """Finding: an audit log that is a FIFO blocked rollback forever, holding the lock, after the
    rename. Now: a clear error within seconds, the checkpoint not renamed, the lock released."""
    (run / ".ckptctl").mkdir()
    os.mkfifo(run / ".ckptctl" / "audit.jsonl")
    r = ckptctl("rollback", str(run), "--reason", "x", timeout=30)
    assert r.returncode == 1, r.stderr
    assert "FIFO" in r.stderr and "nothing was renamed" in r.stderr
    assert (run / "step_20").is_dir() and not (run / ".ckptctl" / "lock").exists()
    assert ckptctl("locate", str(run)).stdout == f"{run / 'step_20'}\n"


def test_lock_linked_outside_is_not_read_or_shown(run: Path, tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN PRIVATE KEY----- SECRET\n")
    (run / ".ckptctl").mkdir()
    os.symlink(secret, run / ".ckptctl" / "lock")
    r = ckptctl("rollback", str(run), "--reason", "x")
    assert r.returncode in (1, 4), r.stderr
    assert "SECRET" not in r.stdout + r.stderr
    assert secret.read_text().endswith("SECRET\n") and (run / "step_20").is_dir()


@pytest.mark.parametrize("content", ['{"pid": 1' + "0" * 30 + ', "host": "h"}', '{"pid": Infinity, "host": "h"}',
                                     "[" * 100_000, '{"pid": "12", "host": 5}'])  # fmt: skip
def test_lock_with_a_huge_or_infinite_pid_is_a_clean_refusal(run: Path, content: str) -> None:
    (run / ".ckptctl").mkdir()
    (run / ".ckptctl" / "lock").write_text(content)
    r = ckptctl("rollback", str(run), "--reason", "x")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert "not a ckptctl lock file" in r.stderr


@pytest.mark.parametrize("line", ["[" * 100_000, '{"action": "quarantine", "time": 5}'])
def test_audit_log_with_deep_or_mistyped_lines_reads_cleanly(run: Path, line: str) -> None:
    (run / ".ckptctl").mkdir()
    (run / ".ckptctl" / "audit.jsonl").write_text(line + "\n")
    r = ckptctl("audit", str(run), "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert ckptctl("rollback", str(run), "--reason", "x").returncode == 0


# -- Lightning sharded directories and single files: rollback and undo ----------------------------


def test_two_lightning_sharded_directories_roll_back_and_undo(tmp_path: Path) -> None:
    """Finding: two honest Lightning sharded checkpoint directories made rollback raise."""
    pytest.importorskip("lightning")
    from tests.test_frameworks import _written

    root = tmp_path / "sharded"
    shutil.copytree(_written("lightning") / "sharded", root)
    r = ckptctl("rollback", str(root), "--reason", "spike")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert ckptctl("locate", str(root)).stdout == f"{root / 'epoch=0-step=2.ckpt'}\n"
    u = ckptctl("rollback", "--undo", str(root))
    assert u.returncode == 0, u.stderr
    assert ckptctl("locate", str(root)).stdout == f"{root / 'epoch=0-step=4.ckpt'}\n"
    files = tmp_path / "files"
    shutil.copytree(_written("lightning") / "run", files)
    assert ckptctl("rollback", str(files), "--reason", "spike").returncode == 0
    u = ckptctl("rollback", "--undo", str(files))
    assert u.returncode == 0, u.stderr
    assert sorted(p.name for p in files.iterdir() if not p.name.startswith(".")) == [
        "epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"]  # fmt: skip


def test_realpath_below_the_root_is_realpath(tmp_path: Path) -> None:
    """check_confined resolves only the components below the run root (``_realpath_below``): the
    same path as ``os.path.realpath`` through links in, out, to files, in loops, dangling, with
    ``..``, and for missing names, with the run root itself reached through a link."""
    import os

    from ckptctl.adapters.localfile import _realpath_below

    real_root = tmp_path / "real" / "run"
    (real_root / "step_10").mkdir(parents=True)
    (real_root / "step_10" / "a.distcp").write_bytes(b"x")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "b.distcp").write_bytes(b"y")
    os.symlink(real_root, tmp_path / "root_link")
    os.symlink(real_root / "step_10", real_root / "step_20")
    os.symlink(tmp_path / "outside", real_root / "step_30")
    os.symlink(real_root / "step_10" / "a.distcp", real_root / "step_10" / "c.distcp")
    os.symlink("loop", real_root / "loop")
    os.symlink("nowhere", real_root / "dangling")
    base = str(tmp_path / "root_link")
    base_real = os.path.realpath(base)
    rels = ["", "step_10", "step_10/a.distcp", "step_20/a.distcp", "step_30/b.distcp", "step_10/c.distcp",
            "loop", "loop/x", "dangling", "missing/x", "step_10/../step_30/b.distcp", "./step_10", "step_10//a.distcp"]  # fmt: skip
    for rel in rels:
        path = base + ("/" + rel if rel else "")
        assert _realpath_below(path, base, base_real) == os.path.realpath(path), rel
