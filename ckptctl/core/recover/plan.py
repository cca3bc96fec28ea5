"""``ckptctl recover`` as a plan value: the steps it will take, each with its inputs.

``build_recovery_plan`` is pure. ``--dry-run`` prints the plan (and walks its
read-only steps: classify, capacity once, locate); a real run executes the same
steps in order (``ckptctl.ops.recover``). A plan also says what a safe real run
still lacks (``missing``): recover refuses to act on a plan with gaps and prints
it instead (exit 2).

One run root: the root on the command line, ``run_root`` in the config and a
``--ckpt-root``-like value in the script's arguments must name the same place
(``run_root_conflicts``); a job that resumes from one root and saves into another
makes every later ``locate`` wrong.
"""

from __future__ import annotations

import itertools
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Stage = Literal["classify", "triage", "drain", "capacity", "locate", "launch", "watch", "fallback"]

#: Script options that name where the job saves its checkpoints (``--ckpt-root``,
#: ``--checkpoint-dir``, ``--save_dir``, HF's ``--output_dir``, ``--run-root`` ...).
CKPT_ROOT_OPTION = re.compile(
    r"^--?(?:ckpt|checkpoint|checkpoints|save|output|run)[-_]?(?:root|dir|directory|path)$", re.I
)


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanStep:
    stage: Stage
    action: str
    """One line: what this step does."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """Everything the step acts on (JSON-ready)."""

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "action": self.action, "inputs": dict(self.inputs)}


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryPlan:
    root: str | None
    """The run root (None: none given)."""
    root_source: str | None
    """Where the root came from: ``argument``, ``config``."""
    config_file: str | None
    """The config file read (None: built-in defaults)."""
    backend: str
    """``local`` or ``slurm``."""
    detach: bool
    steps: tuple[PlanStep, ...]
    missing: tuple[str, ...] = ()
    """What a real run needs and the invocation lacks; non-empty means: print, exit 2."""

    @property
    def is_complete(self) -> bool:
        return not self.missing

    def step(self, stage: Stage) -> PlanStep | None:
        return next((s for s in self.steps if s.stage == stage), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "root_source": self.root_source,
            "config_file": self.config_file,
            "backend": self.backend,
            "detach": self.detach,
            "missing": list(self.missing),
            "steps": [s.to_json() for s in self.steps],
        }

    def lines(self) -> list[str]:
        """The plan for people, one line per step."""
        out = [
            f"run root: {self.root or '(none)'}" + (f" (from the {self.root_source})" if self.root_source else ""),
            f"config: {self.config_file or '(none read: built-in defaults)'}",
            f"backend: {self.backend}{' (detached)' if self.detach else ''}",
        ]
        out += [f"{i}. {s.stage}: {s.action}" for i, s in enumerate(self.steps, 1)]
        out += [f"missing: {m}" for m in self.missing]
        return out


def _norm(path: str, cwd: str) -> str:
    if "://" in path and not path.startswith("file://"):
        return path.rstrip("/")
    p = path[len("file://") :] if path.startswith("file://") else path
    return posixpath.normpath(posixpath.join(cwd, p))


def script_ckpt_roots(script_args: Sequence[str]) -> list[tuple[str, str]]:
    """``(option, value)`` for every checkpoint-root-like option in the script's arguments."""
    found: list[tuple[str, str]] = []
    args = list(script_args)
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if not CKPT_ROOT_OPTION.match(name):
            continue
        if eq:
            found.append((name, value))
        elif i + 1 < len(args):
            found.append((name, args[i + 1]))
    return found


def run_root_conflicts(
    *, cli_root: str | None, config_root: str | None, script_args: Sequence[str], cwd: str
) -> str | None:
    """A one-line message naming two disagreeing run roots, or None when they agree."""
    named: list[tuple[str, str]] = []
    if cli_root:
        named.append(("the ROOT argument", cli_root))
    if config_root:
        named.append(("run_root in the config", config_root))
    named += [(f"{opt} in launch.script_args", v) for opt, v in script_ckpt_roots(script_args)]
    for (a_name, a), (b_name, b) in itertools.pairwise(named):
        if _norm(a, cwd) != _norm(b, cwd):
            return f"two run roots: {a_name} is {a!r} but {b_name} is {b!r}; they must name the same place"
    return None


def build_recovery_plan(
    *,
    root: str | None,
    root_source: str | None,
    config_file: str | None,
    logs: Sequence[str],
    no_logs: bool,
    backend: str,
    detach: bool,
    drain_kind: str,
    execute_drain: bool,
    min_nodes_policy: str,
    hosts_command: Sequence[str],
    deep: bool,
    max_attempts: int,
    watch_steps: int,
    watch_settings: Mapping[str, Any],
    baseline: str | None,
) -> RecoveryPlan:
    """The steps of RB-7 for this invocation (pure)."""
    missing: list[str] = []
    if not root:
        missing.append("a run root: pass ROOT or set run_root in the config")
    if not logs and not no_logs:
        missing.append("--logs FILE (what failed) or an explicit --no-logs (resume without classifying)")
    steps = [
        PlanStep(
            stage="classify",
            action=f"classify {len(logs)} log(s)" if logs else "no logs (--no-logs): the cause stays unknown",
            inputs={"logs": list(logs)},
        ),
        PlanStep(stage="triage", action="infra: drain + resume; job: stop (unless --force); preemption: resume"),
        PlanStep(
            stage="drain",
            action=(
                f"drain the culprit hosts ({drain_kind})"
                + ("" if execute_drain else ", shown only (pass --execute-drain to run it)")
            ),
            inputs={"kind": drain_kind, "execute": execute_drain},
        ),
        PlanStep(
            stage="capacity",
            action=f"check healthy hosts; policy {min_nodes_policy}",
            inputs={"policy": min_nodes_policy, "hosts_command": list(hosts_command)},
        ),
        PlanStep(
            stage="locate",
            action="newest complete checkpoint" + (" (deep verify)" if deep else ""),
            inputs={"root": root, "deep": deep},
        ),
        PlanStep(
            stage="launch",
            action=f"relaunch through the {backend} backend with --resume-from the located checkpoint"
            + ("; recover returns after the watch verdict and the job runs on" if detach else ""),
            inputs={"backend": backend, "detach": detach, "max_attempts": max_attempts},
        ),
        PlanStep(
            stage="watch",
            action=f"read up to {watch_steps} logged steps after the resume; only 'continuous' is recovered",
            inputs={"watch_steps": watch_steps, "settings": dict(watch_settings), "baseline": baseline},
        ),
        PlanStep(
            stage="fallback",
            action="on a bad verdict: quarantine that checkpoint and every one the attempt wrote, resume earlier",
            inputs={},
        ),
    ]
    return RecoveryPlan(
        root=root,
        root_source=root_source,
        config_file=config_file,
        backend=backend,
        detach=detach,
        steps=tuple(steps),
        missing=tuple(missing),
    )
