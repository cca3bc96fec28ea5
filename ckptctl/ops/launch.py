"""`ckptctl launch` as a use case: read the config, plan the torchrun command, run it supervised.

Never prints. The steps are separate so ``ckptctl recover`` can drive them::

    config = load_config(None, ConfigOverrides(...))          # ./ckptctl.yaml + flags
    resume = resolve_resume_from(config, "auto")              # newest complete checkpoint
    cap = plan_capacity(config.launch.min_nodes, config.launch.max_nodes,
                        healthy_hosts, drained, config.recover.min_nodes_policy)
    plan = prepare_launch(config, resume_from=resume, nnodes=cap.nnodes,
                          exclude_hosts=drained)              # a value; --dry-run shows it
    result = run_launch(plan, on_output=console, on_line=watch.feed)   # LaunchResult

or, in one call, ``launch(config, resume_from=..., dry_run=...)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone

from ckptctl.adapters import config_file
from ckptctl.adapters.launch_result import LaunchResult, create_log_file
from ckptctl.adapters.launcher import LineFn, OutputFn, Supervisor
from ckptctl.adapters.netports import ephemeral_port_range
from ckptctl.backends import registry
from ckptctl.backends.base import JobPreview
from ckptctl.core.config.overrides import ConfigOverrides
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.plan import LaunchPlan, plan_launch
from ckptctl.errors import ConfigError, ProblemFound, UsageError

__all__ = [
    "RESUME_AUTO",
    "launch",
    "load_config",
    "prepare_launch",
    "preview_job",
    "resolve_resume_from",
    "run_launch",
]

#: ``--resume-from auto``: the newest complete checkpoint under the run root.
RESUME_AUTO = "auto"


def load_config(path: str | None = None, overrides: ConfigOverrides | None = None) -> CkptctlConfig:
    """The config a command runs under: ``path`` (else ``./ckptctl.yaml`` if present, else the
    defaults) with the command line's ``overrides`` applied. The CLI reads its config through
    this use case (it imports ``ops``, never ``adapters``)."""
    config = config_file.load_config(path, overrides)
    if config.launch.backend not in registry.names():  # the registry is the one list of names
        where = f"{config.source}: " if config.source else ""
        raise ConfigError(
            f"{where}launch.backend: {config.launch.backend!r} is not one of {', '.join(registry.names())}",
            hint="docs/launch.md lists every key of ckptctl.yaml",
        )
    return config


def preview_job(config: CkptctlConfig, plan: LaunchPlan) -> JobPreview:
    """What ``launch.backend`` would start for ``plan`` (``recover`` submits it; ``--dry-run`` shows it)."""
    return registry.get(config.launch.backend).preview(config, plan)


def resolve_resume_from(config: CkptctlConfig, value: str | None) -> str | None:
    """``auto`` -> the newest COMPLETE checkpoint under ``config.run_root`` (``ProblemFound``,
    exit 3, when there is none); a path is returned as given; ``None`` stays ``None``."""
    if value is None or value != RESUME_AUTO:
        if value is not None and not value:
            raise UsageError("--resume-from: empty path")
        return value
    if config.run_root is None:
        raise UsageError(
            "--resume-from auto needs the run root",
            hint="set run_root in ckptctl.yaml or pass --run-root",
        )
    from ckptctl.runroot.locate import find_latest_complete

    found = find_latest_complete(config.run_root)
    if found.checkpoint is None:
        raise ProblemFound(
            f"no complete checkpoint under {found.root} to resume from "
            f"({len(found.skipped)} candidate(s) failed verification)",
            hint="`ckptctl list ROOT` shows every checkpoint and why; omit --resume-from to start fresh",
        )
    return found.checkpoint.path


def prepare_launch(
    config: CkptctlConfig,
    *,
    resume_from: str | None,
    nnodes: str | None = None,
    exclude_hosts: Sequence[str] = (),
) -> LaunchPlan:
    """The launch as a value (reads only this node's ephemeral port range). ``resume_from``: a path (resolve ``auto`` first);
    ``nnodes``: a ``CapacityDecision.nnodes``; ``exclude_hosts``: drained hosts."""
    return plan_launch(config, resume_from=resume_from, nnodes=nnodes, exclude_hosts=exclude_hosts,
                       ephemeral_ports=ephemeral_port_range())


def run_launch(
    plan: LaunchPlan,
    *,
    on_output: OutputFn | None = None,
    on_line: LineFn | None = None,
    on_start: Callable[[Supervisor], None] | None = None,
    forward_signals: bool = True,
    cwd: str | None = None,
    now: datetime | None = None,
    extra_env: Mapping[str, str] | None = None,
    run_root: str | None = None,
    replace: bool = False,
    on_note: Callable[[str], None] | None = None,
) -> LaunchResult:
    """Execute ``plan``: create ``<log_dir>/launch-<UTC>.log``, start the argv, supervise to the end.

    * ``on_output(line)``: every output line (torchrun's and all workers'), for the console.
    * ``on_line(line) -> bool``: every line after that; return True to stop the job
      (SIGTERM, SIGKILL after ``plan.stop_grace_s``). ``result.stopped_by_callback`` then
      says so. It is not called again after it asked for the stop.
    * ``on_start(supervisor)``: once the child runs; keep it to call ``supervisor.stop()``
      from another thread, or to read ``supervisor.pid``.
    * ``forward_signals``: SIGINT/SIGTERM/SIGHUP to ckptctl stop the job (main thread only).
    * ``extra_env``: variables for the job on top of ``plan.env`` that are not part of the
      plan shown to people (recover's run-root lock token).

    * ``run_root``: one job per run root (``ops.recover_guard``): under the run-root lock,
      refuse (``LockHeldError``, exit 4) while the root's recorded job is alive, or stop it
      first with ``replace`` (audited); record this job in ``job.json`` once it runs (the lock
      is let go then) and close the record when it ends. ``on_note`` hears what was done.

    Returns when the job and every process it started are gone. Raises ``LaunchError``
    (exit 1) when the job cannot be started; a job that fails is a result, not an error.
    """
    from ckptctl.adapters.audit import current_actor
    from ckptctl.backends.local import LocalBackend
    from ckptctl.ops import recover_guard
    from ckptctl.runroot import lock
    from ckptctl.runroot.root import RunRoot
    from ckptctl.runroot.state import ActiveJob, clear_active_job, write_active_job

    held = contextlib.ExitStack()
    rr = RunRoot.for_url(run_root) if run_root else None
    recorded: list[str] = []
    if rr is not None:
        held.enter_context(lock.hold(rr, "launch"))
        try:
            for note in recover_guard.check_run_root_job(rr, replace=replace, grace_s=plan.stop_grace_s):
                if on_note is not None:
                    on_note(note)
        except BaseException:
            held.close()
            raise

    def started(sup: Supervisor) -> None:
        if rr is not None and sup.pid is not None:
            who = current_actor()
            write_active_job(rr, ActiveJob(
                backend=LocalBackend.name, job_id=str(sup.pid), script=None, owner=who, detached=False,
                started=who.time, resume_from=plan.resume_from, log=sup.log_path,
            ))
            recorded.append(str(sup.pid))
            held.close()
        if on_start is not None:
            on_start(sup)

    log_path = create_log_file(plan.log_dir, now or datetime.now(timezone.utc))
    supervisor = Supervisor(
        plan.argv,
        env={**plan.env, **(extra_env or {})},
        cwd=cwd,
        log_path=log_path,
        on_output=on_output,
        on_line=on_line,
        on_start=started,
        stop_grace_s=plan.stop_grace_s,
        forward_signals=forward_signals,
    )
    try:
        result = supervisor.run()
    finally:
        held.close()
    if rr is not None and recorded:
        clear_active_job(rr, ended=datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
                         reason=f"ended under ckptctl launch: exit {result.exit_code}", job_id=recorded[0])
    return result


def launch(
    config: CkptctlConfig,
    *,
    resume_from: str | None,
    dry_run: bool = False,
    nnodes: str | None = None,
    exclude_hosts: Sequence[str] = (),
    on_output: OutputFn | None = None,
    on_line: LineFn | None = None,
    on_start: Callable[[Supervisor], None] | None = None,
    forward_signals: bool = True,
) -> LaunchResult | LaunchPlan:
    """Resolve ``resume_from`` (``auto`` allowed), plan, and run -- or, with ``dry_run``,
    return the ``LaunchPlan`` without starting anything or writing anything."""
    plan = prepare_launch(
        config,
        resume_from=resolve_resume_from(config, resume_from),
        nnodes=nnodes,
        exclude_hosts=exclude_hosts,
    )
    if dry_run:
        return plan
    return run_launch(
        plan, on_output=on_output, on_line=on_line, on_start=on_start, forward_signals=forward_signals
    )
