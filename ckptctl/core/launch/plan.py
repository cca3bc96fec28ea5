"""The torchrun command ckptctl launches, on how many nodes, and with which hosts left out.

Pure (decide, then act): ``plan_launch`` turns a config and the checkpoint to
resume from into a ``LaunchPlan`` value -- the exact argv (a list, never a
shell string), the extra environment, the log directory. ``ckptctl launch
--dry-run`` prints that value; the launcher adapter executes the same value.
``plan_capacity`` decides, from the healthy and drained hosts, whether recover
relaunches at full size, shrinks the elastic minimum, or waits.

Excluding drained hosts: torchrun has no host exclude list -- every node runs
its own torchrun, and which nodes exist is the scheduler's business. So:

* launcher ``srun ...`` (``launch.torchrun`` starts with srun): the plan adds
  ``--exclude=h1,h2`` to the srun options, so Slurm does not place tasks there;
* plain torchrun under Slurm: a drained node (``State=DRAIN``) is not allocated
  to the next job step or allocation, so draining is what keeps it out;
* Kubernetes: a cordoned node gets no new pods; the relaunched pods land elsewhere;
* otherwise the hosts are only recorded in the plan (and a warning says so).
"""

from __future__ import annotations

import posixpath
import shlex
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ckptctl.core.config.checks import DrainKind, MinNodesPolicy, is_local_url, local_path
from ckptctl.core.config.schema import CkptctlConfig, LaunchConfig
from ckptctl.errors import ConfigError, UsageError

#: Log directory (relative to the working directory) when the run root is not local.
LOCAL_LOG_DIR = ".ckptctl-logs"
#: Log directory inside a local run root.
RUN_ROOT_LOG_SUBDIR = ".ckptctl/logs"
#: Set for the job unless the config sets it: worker output is a pipe, and a
#: block-buffered Python would hold loss lines back from the live watch.
DEFAULT_JOB_ENV: Mapping[str, str] = {"PYTHONUNBUFFERED": "1"}

CapacityAction = Literal["run", "shrink", "wait"]


def nnodes_arg(min_nodes: int, max_nodes: int) -> str:
    """torchrun's ``--nnodes`` value: ``"4"`` or ``"1:4"``."""
    return str(min_nodes) if min_nodes == max_nodes else f"{min_nodes}:{max_nodes}"


def _dedup(*groups: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(h for group in groups for h in group))


# -- capacity -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class CapacityDecision:
    """Whether and at what size to relaunch, given the hosts that are healthy now."""

    action: CapacityAction
    """``run`` at the configured size, ``shrink`` (lower the elastic minimum to the hosts there
    are), or ``wait`` for capacity."""
    nnodes: str | None
    """The ``--nnodes`` value to relaunch with; ``None`` when waiting."""
    num_nodes: int | None
    """Nodes expected to join the rendezvous; ``None`` when no host list is known."""
    available_hosts: tuple[str, ...] | None
    """Healthy hosts minus drained ones, in the given order; ``None`` when unknown."""
    excluded_hosts: tuple[str, ...]
    """Hosts left out (drained / excluded)."""
    reason: str
    """One sentence for the operator."""

    @property
    def should_launch(self) -> bool:
        return self.action != "wait"

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "nnodes": self.nnodes,
            "num_nodes": self.num_nodes,
            "available_hosts": list(self.available_hosts) if self.available_hosts is not None else None,
            "excluded_hosts": list(self.excluded_hosts),
            "reason": self.reason,
        }


def plan_capacity(
    min_nodes: int,
    max_nodes: int,
    healthy_hosts: Sequence[str] | None,
    drained_hosts: Sequence[str] = (),
    policy: MinNodesPolicy = "wait",
) -> CapacityDecision:
    """Decide the relaunch size (RB-7 pre-check "capacity available").

    ``healthy_hosts`` ``None`` means the host list is unknown: torchrun's
    rendezvous waits for ``min_nodes`` by itself, so the answer is ``run``.
    One node is one host (one torchrun per host).
    """
    if min_nodes < 1 or max_nodes < min_nodes:
        raise ValueError(f"bad node range {min_nodes}:{max_nodes}")
    excluded = _dedup(drained_hosts)
    configured = nnodes_arg(min_nodes, max_nodes)
    if healthy_hosts is None:
        return CapacityDecision(
            action="run",
            nnodes=configured,
            num_nodes=None,
            available_hosts=None,
            excluded_hosts=excluded,
            reason=f"no host list configured: the rendezvous waits for at least {min_nodes} node(s)",
        )
    available = tuple(h for h in _dedup(healthy_hosts) if h not in excluded)
    n = len(available)
    if n >= min_nodes:
        joining = min(n, max_nodes)
        more = f" (elastic {configured}: {joining} of up to {max_nodes})" if min_nodes != max_nodes else ""
        return CapacityDecision(
            action="run",
            nnodes=configured,
            num_nodes=joining,
            available_hosts=available,
            excluded_hosts=excluded,
            reason=f"{n} healthy host(s) meet the minimum of {min_nodes}{more}",
        )
    short = f"{n} healthy host(s), fewer than the minimum of {min_nodes}"
    if n == 0:
        return CapacityDecision(
            action="wait",
            nnodes=None,
            num_nodes=0,
            available_hosts=available,
            excluded_hosts=excluded,
            reason=f"no healthy host left; wait for capacity (policy {policy!r} cannot run on zero)",
        )
    if policy == "shrink":
        return CapacityDecision(
            action="shrink",
            nnodes=nnodes_arg(n, max_nodes),
            num_nodes=n,
            available_hosts=available,
            excluded_hosts=excluded,
            reason=f"{short}: policy 'shrink' relaunches elastic at {n} node(s) "
            f"(--nnodes {nnodes_arg(n, max_nodes)}; DCP reshards on load)",
        )
    return CapacityDecision(
        action="wait",
        nnodes=None,
        num_nodes=n,
        available_hosts=available,
        excluded_hosts=excluded,
        reason=f"{short}: policy 'wait' waits for capacity",
    )


# -- argv ---------------------------------------------------------------------------------------


def is_srun(launcher: Sequence[str]) -> bool:
    """Is the launcher prefix an ``srun`` command (which can exclude hosts itself)?"""
    return bool(launcher) and posixpath.basename(launcher[0]) == "srun"


def _launcher_prefix(launcher: Sequence[str], exclude_hosts: Sequence[str]) -> list[str]:
    prefix = list(launcher)
    if not exclude_hosts or not is_srun(prefix):
        return prefix
    for token in prefix[1:]:
        if token in ("-x", "--exclude") or token.startswith(("--exclude=", "-x")):
            raise ConfigError(
                f"launch.torchrun: {token!r}: list the hosts to exclude in launch.exclude_hosts, "
                "ckptctl adds srun's --exclude itself"
            )
    # srun's own options go before the program it runs.
    return [prefix[0], f"--exclude={','.join(exclude_hosts)}", *prefix[1:]]


def _has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def build_torchrun_argv(
    launch: LaunchConfig,
    *,
    resume_from: str | None,
    nnodes: str | None = None,
    exclude_hosts: Sequence[str] = (),
) -> list[str]:
    """The exact argv: launcher, torchrun options, script, script args, ``<resume_flag> PATH``.

    ``nnodes`` overrides ``launch.nnodes`` (a ``CapacityDecision``'s value);
    ``exclude_hosts`` are added to ``launch.exclude_hosts`` (they only reach the
    argv through an ``srun`` launcher, see the module docstring).
    """
    if launch.script is None:
        raise ConfigError(
            "launch.script: no training script; set it in ckptctl.yaml or give it after `--`",
            hint="ckptctl launch [OPTIONS] -- train.py [ARGS]...",
        )
    if resume_from is not None and _has_flag(launch.script_args, launch.resume_flag):
        raise UsageError(
            f"the script arguments already contain {launch.resume_flag}, and a checkpoint to resume "
            f"from was given too ({resume_from})",
            hint=f"drop {launch.resume_flag} from the script arguments; ckptctl appends it",
        )
    argv = _launcher_prefix(launch.torchrun, _dedup(launch.exclude_hosts, exclude_hosts))
    argv += [
        f"--nnodes={nnodes if nnodes is not None else launch.nnodes}",
        f"--nproc-per-node={launch.nproc_per_node}",
        f"--rdzv-backend={launch.rdzv_backend}",
    ]
    if launch.rdzv_endpoint is not None:
        argv.append(f"--rdzv-endpoint={launch.rdzv_endpoint}")
    if launch.rdzv_id is not None:
        argv.append(f"--rdzv-id={launch.rdzv_id}")
    if launch.rdzv_conf:
        argv.append("--rdzv-conf=" + ",".join(f"{k}={v}" for k, v in launch.rdzv_conf.items()))
    argv.append(f"--max-restarts={launch.max_restarts}")
    if launch.monitor_interval_s is not None:
        argv.append(f"--monitor-interval={launch.monitor_interval_s:g}")
    argv += launch.torchrun_args
    argv.append(launch.script)
    argv += launch.script_args
    if resume_from is not None:
        argv += [launch.resume_flag, resume_from]
    return argv


# -- logs -----------------------------------------------------------------------------------------


def resolve_log_dir(run_root: str | None, log_dir: str | None) -> tuple[str, str | None]:
    """Where ``launch-<UTC>.log`` goes, and a note when it is not where one would look first."""
    if log_dir is not None:
        return local_path(log_dir), None
    if run_root is None:
        return LOCAL_LOG_DIR, f"no run_root configured: the job log goes to ./{LOCAL_LOG_DIR}/"
    if is_local_url(run_root):
        return posixpath.join(local_path(run_root).rstrip("/") or "/", RUN_ROOT_LOG_SUBDIR), None
    return (
        LOCAL_LOG_DIR,
        f"run root {run_root} is an object store: the job log is written locally to "
        f"./{LOCAL_LOG_DIR}/ (set launch.log_dir to choose another local directory)",
    )


# -- the plan ---------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchPlan:
    """Everything ``ckptctl launch`` will do; ``--dry-run`` shows exactly this."""

    argv: tuple[str, ...]
    """The exact command, started without a shell."""
    env: Mapping[str, str]
    """Variables set for the job on top of the inherited environment."""
    log_dir: str
    """Local directory of the job log."""
    resume_from: str | None
    """The checkpoint passed with ``resume_flag``; ``None`` starts from scratch."""
    nnodes: str
    """The ``--nnodes`` value used."""
    exclude_hosts: tuple[str, ...]
    """Hosts the job must not run on (config + drained)."""
    exclude_via: Literal["srun", "scheduler", "none"]
    """How ``exclude_hosts`` is enforced: ``srun`` (``--exclude=`` in argv), ``scheduler`` (drained /
    cordoned hosts get no work), ``none`` (recorded only)."""
    stop_grace_s: float
    """SIGTERM-to-SIGKILL grace when the job is stopped."""
    notes: tuple[str, ...] = ()
    """Facts worth telling the operator."""
    warnings: tuple[str, ...] = field(default=())
    """Things that may be wrong."""

    def display(self) -> str:
        """The argv shell-quoted, for people and tickets (never executed as a string)."""
        return shlex.join(self.argv)

    def to_json(self) -> dict[str, Any]:
        return {
            "argv": list(self.argv),
            "command": self.display(),
            "env": dict(self.env),
            "log_dir": self.log_dir,
            "resume_from": self.resume_from,
            "nnodes": self.nnodes,
            "exclude_hosts": list(self.exclude_hosts),
            "exclude_via": self.exclude_via,
            "stop_grace_s": self.stop_grace_s,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }


def _endpoint_host(endpoint: str) -> str:
    if endpoint.startswith("["):
        return endpoint[1 : endpoint.find("]")]
    return endpoint.split(":", 1)[0]


def _endpoint_port(endpoint: str | None) -> int | None:
    """The port of ``HOST:PORT`` / ``[V6]:PORT``; ``None`` without one."""
    if endpoint is None:
        return None
    tail = endpoint[endpoint.find("]") + 1 :] if endpoint.startswith("[") else endpoint
    _, sep, port = tail.rpartition(":")
    return int(port) if sep and port.isdigit() else None


#: How a drained host stays out of the job when torchrun itself has no exclude list, for each
#: ``recover.drain.kind`` that keeps it out (``none`` does not).
DRAIN_KEEPS_OFF: dict[str, str] = {
    "slurm": "drained Slurm nodes ({hosts}) are not allocated",
    "kubernetes": "cordoned nodes ({hosts}) get no new pods",
}


def plan_launch(
    config: CkptctlConfig,
    *,
    resume_from: str | None,
    nnodes: str | None = None,
    exclude_hosts: Sequence[str] = (),
    ephemeral_ports: tuple[int, int] | None = None,
) -> LaunchPlan:
    """The launch as a value. ``resume_from`` is a resolved path (``auto`` is resolved by ops);
    ``ephemeral_ports``: this node's ephemeral port range, read by the caller (a rendezvous
    port inside it gets a warning: ``adapters.netports``)."""
    launch = config.launch
    excluded = _dedup(launch.exclude_hosts, exclude_hosts)
    argv = build_torchrun_argv(launch, resume_from=resume_from, nnodes=nnodes, exclude_hosts=exclude_hosts)
    log_dir, log_note = resolve_log_dir(config.run_root, launch.log_dir)
    notes: list[str] = [log_note] if log_note else []
    warnings: list[str] = []
    drain_kind: DrainKind = config.recover.drain.kind
    exclude_via: Literal["srun", "scheduler", "none"] = "none"
    if excluded:
        hosts = ", ".join(excluded)
        if is_srun(launch.torchrun):
            exclude_via = "srun"
            notes.append(f"srun --exclude keeps the job off {hosts}")
        elif drain_kind in DRAIN_KEEPS_OFF:
            exclude_via = "scheduler"
            notes.append(f"torchrun has no exclude list: {DRAIN_KEEPS_OFF[drain_kind].format(hosts=hosts)}")
        else:
            warnings.append(
                f"torchrun has no exclude list and recover.drain.kind is 'none': nothing keeps the job "
                f"off {hosts} (start the nodes' torchrun elsewhere, or use an srun launcher)"
            )
        if launch.rdzv_endpoint is not None and _endpoint_host(launch.rdzv_endpoint) in excluded:
            warnings.append(
                f"the rendezvous endpoint {launch.rdzv_endpoint} is on an excluded host: "
                "point launch.rdzv_endpoint at a healthy node"
            )
    port = _endpoint_port(launch.rdzv_endpoint)
    if port is not None and ephemeral_ports is not None and ephemeral_ports[0] <= port <= ephemeral_ports[1]:
        low, high = ephemeral_ports
        warnings.append(
            f"the rendezvous port {port} is in this node's ephemeral port range ({low}-{high}): an "
            "automatic bind or outgoing connection can take it before torchrun binds it, and torchrun "
            f"then waits on that socket for good; pick a port below {low} (torchrun's default is 29400)"
        )
    if resume_from is None:
        notes.append("no checkpoint to resume from: the job starts from scratch")
    env = {**DEFAULT_JOB_ENV, **launch.env}
    return LaunchPlan(
        argv=tuple(argv),
        env=env,
        log_dir=log_dir,
        resume_from=resume_from,
        nnodes=nnodes if nnodes is not None else launch.nnodes,
        exclude_hosts=excluded,
        exclude_via=exclude_via,
        stop_grace_s=launch.stop_grace_s,
        notes=tuple(notes),
        warnings=tuple(warnings),
    )


# -- exit status -------------------------------------------------------------------------------------


def signal_of(returncode: int) -> int | None:
    """The signal that killed a child (``Popen.returncode`` is ``-N``), else ``None``."""
    return -returncode if returncode < 0 else None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_code_for(returncode: int, interrupted_by: int | None = None) -> int:
    """ckptctl's exit code for a finished job.

    * ckptctl itself got SIGINT/SIGTERM (and stopped the job): ``128 + that signal``
      (130, 143), as a shell reports a command killed by it;
    * the job was killed by signal N: ``128 + N``;
    * otherwise the job's own exit code.
    """
    if interrupted_by is not None:
        return 128 + interrupted_by
    sig = signal_of(returncode)
    return 128 + sig if sig is not None else returncode
