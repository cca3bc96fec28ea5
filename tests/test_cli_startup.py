"""What a ``ckptctl`` start costs: a run builds only its command, rich only when it draws.

``cli.app.COMMANDS`` names the module of every command; a run imports that module alone
(``--help``, no command or an unknown word: every module, so the listing and the errors
are those of the whole app). ``--json`` and plain lines never import rich.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckptctl.cli.app import COMMANDS, build_app, command_of
from tests.conftest import REPO


def _names(app: object) -> list[str]:
    return [str(c.name) for c in app.registered_commands]  # type: ignore[attr-defined]


def test_command_table_matches_what_the_modules_register() -> None:
    assert _names(build_app()) == list(COMMANDS)
    for command, module in COMMANDS.items():
        assert _names(build_app(command)) == [n for n, m in COMMANDS.items() if m == module], command


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["verify", "x", "--deep"], "verify"),
        (["--version"], None),
        (["-h"], None),
        ([], None),
        (["verfy", "x"], None),
        (["--help", "watch"], "watch"),
    ],
)
def test_command_of(argv: list[str], command: str | None) -> None:
    assert command_of(argv) == command


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CKPTCTL_NO_PROGRESS="1")
    return subprocess.run(
        [sys.executable, "-m", "ckptctl", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )


def test_help_lists_every_command_in_order_with_its_help() -> None:
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    listed = [line.split(None, 1) for line in proc.stdout.split("Commands:", 1)[1].splitlines() if line.strip()]
    assert [words[0] for words in listed] == list(COMMANDS)
    assert all(len(words) == 2 and len(words[1]) > 10 for words in listed), listed


def test_unknown_command_is_a_usage_error_naming_it() -> None:
    proc = _run("verfy", "/nowhere")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "verfy" in proc.stderr and "Traceback" not in proc.stderr


def test_a_run_imports_its_command_only_and_json_no_rich(run_root: Path) -> None:
    code = (
        "import sys\n"
        "from ckptctl.cli.app import main\n"
        "try:\n"
        "    main(['verify', sys.argv[1], '--json'])\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "mods = sorted(m for m in sys.modules if m.startswith(('ckptctl.cli.', 'rich')))\n"
        "print('MODULES', ' '.join(mods), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(run_root / "step_30")], capture_output=True, text=True, cwd=REPO, timeout=120,
        env=dict(os.environ, CKPTCTL_NO_PROGRESS="1"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] is True
    mods = proc.stderr.split("MODULES", 1)[1].split()
    assert not [m for m in mods if m.startswith("rich")], mods
    commands = {m.rsplit(".", 1)[1] for m in mods} & set(COMMANDS.values())
    assert commands == {"checkpoints"}, mods
