"""The schema of ``ckptctl.yaml``: frozen dataclasses that validate themselves on construction.

Every dataclass checks its fields in ``__post_init__`` (so a config built in
code, or changed with ``dataclasses.replace``, is checked the same way as one
read from YAML by ``ckptctl.core.config.parse``). Every message names the field
(``launch.nnodes: ...``). Stdlib only.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ckptctl.core.config.checks import (
    DRAIN_KINDS,
    MIN_NODES_POLICIES,
    DrainKind,
    MinNodesPolicy,
    _fail,
    check_endpoint,
    check_hosts,
    check_int,
    check_local_dir,
    check_nproc_per_node,
    check_seconds,
    check_str_map,
    check_str_tuple,
    check_word,
    parse_nnodes,
)

__all__ = [
    "CkptctlConfig",
    "ClassifyConfig",
    "DrainConfig",
    "LaunchConfig",
    "RecoverConfig",
    "SlurmConfig",
]


def _default_torchrun() -> tuple[str, ...]:
    # The interpreter running ckptctl, so the launcher is the torch of the same
    # environment (a bare `torchrun` on PATH may belong to another venv).
    return (sys.executable, "-m", "torch.distributed.run")


# -- the config ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class SlurmConfig:
    """``launch.slurm:`` -- the batch job of the ``slurm`` backend (docs/launch.md, "Slurm")."""

    partition: str | None = None
    """``#SBATCH --partition``; the cluster's default partition when unset."""
    time_limit: str | None = None
    """``#SBATCH --time`` (Slurm's formats: ``4:00:00``, ``2-00:00:00``); the partition's limit when unset."""
    job_name: str = "ckptctl"
    """``#SBATCH --job-name``."""
    cpus_per_task: int | None = None
    """CPUs for each node's torchrun task; default: ``nproc_per_node`` when it is a number."""
    signal_grace_s: int = 120
    """``#SBATCH --signal=USR1@<s>``: Slurm sends SIGUSR1 this long before the time limit, and
    ``ckptctl.training`` writes an emergency checkpoint on it."""
    requeue: bool = True
    """``#SBATCH --requeue``: Slurm may requeue the job after a node failure or preemption."""
    sbatch_args: tuple[str, ...] = ()
    """Further ``#SBATCH`` options, one per item (e.g. ``[--account=ml, --qos=high]``)."""
    poll_s: float = 1.0
    """Seconds between looks at the job's state and output file while recover watches it."""

    def __post_init__(self) -> None:
        if isinstance(self.sbatch_args, list):
            object.__setattr__(self, "sbatch_args", tuple(self.sbatch_args))
        for name in ("partition", "time_limit"):
            value = getattr(self, name)
            if value is not None:
                check_word(value, f"launch.slurm.{name}")
        check_word(self.job_name, "launch.slurm.job_name")
        if self.cpus_per_task is not None:
            check_int(self.cpus_per_task, "launch.slurm.cpus_per_task", minimum=1)
        check_int(self.signal_grace_s, "launch.slurm.signal_grace_s", minimum=1)
        if not isinstance(self.requeue, bool):
            raise _fail("launch.slurm.requeue", f"{self.requeue!r} is not true or false")
        check_str_tuple(self.sbatch_args, "launch.slurm.sbatch_args")
        for i, a in enumerate(self.sbatch_args):
            if not a.startswith("-") or "\n" in a:
                raise _fail(f"launch.slurm.sbatch_args[{i}]", f"{a!r} is not one sbatch option")
        check_seconds(self.poll_s, "launch.slurm.poll_s")


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchConfig:
    """``launch:`` -- how ``ckptctl launch`` builds and supervises the torchrun command."""

    nnodes: str = "1"
    """Node count, ``"N"`` or elastic ``"MIN:MAX"`` (torchrun ``--nnodes``). Quote it in YAML."""
    nproc_per_node: int | str = 1
    """Workers per node: a number or ``auto``/``gpu``/``cpu``/``xpu`` (torchrun ``--nproc-per-node``)."""
    rdzv_backend: str = "c10d"
    """Rendezvous backend (torchrun ``--rdzv-backend``)."""
    rdzv_endpoint: str | None = None
    """Rendezvous ``host:port`` every node's torchrun reaches; required when more than one node may join."""
    rdzv_id: str | None = None
    """Rendezvous (job) id shared by the nodes of one job (torchrun ``--rdzv-id``); omitted when unset."""
    rdzv_conf: Mapping[str, str] = field(default_factory=dict)
    """Extra rendezvous settings, e.g. ``{join_timeout: "600"}`` (torchrun ``--rdzv-conf k=v,...``)."""
    max_restarts: int = 0
    """Worker-group restarts torchrun attempts before failing (torchrun ``--max-restarts``)."""
    monitor_interval_s: float | None = None
    """Seconds between torchrun's worker health checks (``--monitor-interval``); torchrun's default when unset."""
    torchrun_args: tuple[str, ...] = ()
    """Further torchrun options, placed after the ones above and before the script (e.g. ``[--log-dir, /x]``)."""
    script: str | None = None
    """The training script torchrun starts on every worker (or a module with ``torchrun_args: [-m]``)."""
    script_args: tuple[str, ...] = ()
    """Arguments for the script (numbers in YAML are turned into strings)."""
    resume_flag: str = "--resume-from"
    """The script's option that takes the checkpoint path; ckptctl appends ``<resume_flag> PATH``."""
    torchrun: tuple[str, ...] = field(default_factory=_default_torchrun)
    """The launcher argv prefix. Default: this Python with ``-m torch.distributed.run``. An ``srun``
    prefix (e.g. ``[srun, --nodes=4, --ntasks-per-node=1, torchrun]``) gets ``--exclude=`` for drained hosts."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables set for the job on top of ckptctl's own environment."""
    log_dir: str | None = None
    """Local directory for ``launch-<UTC>.log``. Default ``<run_root>/.ckptctl/logs`` for a local run
    root, else ``./.ckptctl-logs``."""
    hosts: tuple[str, ...] | None = None
    """Candidate hosts for recover's capacity check; unset means capacity is left to the rendezvous."""
    exclude_hosts: tuple[str, ...] = ()
    """Hosts never to run on (added to the hosts recover drains)."""
    stop_grace_s: float = 60.0
    """Seconds between the SIGTERM ckptctl forwards and SIGKILL of the whole job (torchrun and workers)."""
    backend: str = "local"
    """How ``recover`` starts the job, a name in ``ckptctl.backends.registry``: ``local`` (supervised
    torchrun in its own session) or ``slurm`` (a batch script submitted with ``sbatch``)."""
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    """The batch job of the ``slurm`` backend."""

    def __post_init__(self) -> None:
        # Lists given in code (``replace(launch, exclude_hosts=[...])``) become tuples,
        # so the value stays immutable; everything else is checked as given.
        for name in ("torchrun_args", "script_args", "torchrun", "hosts", "exclude_hosts"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        _, max_nodes = parse_nnodes(self.nnodes)
        check_nproc_per_node(self.nproc_per_node)
        check_word(self.rdzv_backend, "launch.rdzv_backend")
        if self.rdzv_endpoint is not None:
            check_endpoint(self.rdzv_endpoint)
        if self.rdzv_id is not None:
            check_word(self.rdzv_id, "launch.rdzv_id")
        check_str_map(self.rdzv_conf, "launch.rdzv_conf")
        for k, v in self.rdzv_conf.items():
            if any(c in k + v for c in ",="):
                raise _fail(f"launch.rdzv_conf.{k}", "names and values must not contain ',' or '='")
        check_int(self.max_restarts, "launch.max_restarts", minimum=0)
        if self.monitor_interval_s is not None:
            check_seconds(self.monitor_interval_s, "launch.monitor_interval_s")
        check_str_tuple(self.torchrun_args, "launch.torchrun_args")
        if self.script is not None and (not isinstance(self.script, str) or not self.script):
            raise _fail("launch.script", f"{self.script!r} must be a non-empty path")
        check_str_tuple(self.script_args, "launch.script_args")
        check_word(self.resume_flag, "launch.resume_flag")
        if not self.resume_flag.startswith("-"):
            raise _fail("launch.resume_flag", f"{self.resume_flag!r} must be an option (start with '-')")
        check_str_tuple(self.torchrun, "launch.torchrun", non_empty=True)
        check_str_map(self.env, "launch.env", env_names=True)
        if self.log_dir is not None:
            check_local_dir(self.log_dir, "launch.log_dir")
        if self.hosts is not None:
            check_hosts(self.hosts, "launch.hosts")
        check_hosts(self.exclude_hosts, "launch.exclude_hosts")
        check_seconds(self.stop_grace_s, "launch.stop_grace_s")
        # Which names exist is the backend registry's (``ckptctl.backends.registry``, checked
        # when the config is loaded): a new backend touches no core module.
        check_word(self.backend, "launch.backend")
        if not isinstance(self.slurm, SlurmConfig):
            raise _fail("launch.slurm", "must be a mapping")
        if max_nodes > 1 and self.rdzv_backend != "static" and self.rdzv_endpoint is None:
            raise _fail(
                "launch.rdzv_endpoint",
                f"required when launch.nnodes ({self.nnodes!r}) lets more than one node join: "
                "every node's torchrun must reach the same rendezvous",
            )

    @property
    def min_nodes(self) -> int:
        return parse_nnodes(self.nnodes)[0]

    @property
    def max_nodes(self) -> int:
        return parse_nnodes(self.nnodes)[1]

    @property
    def is_elastic(self) -> bool:
        return self.min_nodes != self.max_nodes


@dataclass(frozen=True, kw_only=True, slots=True)
class DrainConfig:
    """``recover.drain:`` -- how recover takes a faulty host out of the pool."""

    kind: DrainKind = "none"
    """``slurm`` (scontrol update State=DRAIN), ``kubernetes`` (kubectl cordon) or ``none`` (report only)."""
    reason: str = "ckptctl: infra fault (RB-7)"
    """Reason recorded with the drain (Slurm's ``Reason=``, a node annotation on Kubernetes)."""

    def __post_init__(self) -> None:
        if self.kind not in DRAIN_KINDS:
            raise _fail("recover.drain.kind", f"{self.kind!r} is not one of {', '.join(DRAIN_KINDS)}")
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise _fail("recover.drain.reason", "must be a non-empty string")


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoverConfig:
    """``recover:`` -- the bounds and policies of ``ckptctl recover``."""

    max_attempts: int = 3
    """Relaunches recover makes before it stops and reports."""
    watch_steps: int = 50
    """Logged training steps after a resume that the loss watch reads before it calls the resume good."""
    min_nodes_policy: MinNodesPolicy = "wait"
    """Fewer healthy hosts than the minimum node count: ``wait`` for capacity, or ``shrink`` (relaunch
    elastic at the hosts there are; DCP reshards on load)."""
    capacity_timeout_s: float = 3600.0
    """With ``wait``: how long to wait for enough healthy hosts before giving up."""
    capacity_poll_s: float = 30.0
    """With ``wait``: seconds between capacity checks."""
    hosts_command: tuple[str, ...] = ()
    """An argv (no shell) that prints the healthy candidate hosts, one per line (or separated by
    spaces/commas). Asked at each
    capacity check, instead of ``launch.hosts``; the only way ``wait`` can see capacity return
    (the slurm backend asks ``sinfo`` itself when unset; ``sinfo -t idle`` also lists drained nodes)."""
    drain: DrainConfig = field(default_factory=DrainConfig)
    """How a faulty host is drained."""
    watch: Mapping[str, Any] = field(default_factory=dict)
    """Loss-watch thresholds, passed to the watch operation as they are (its docs list the keys)."""

    def __post_init__(self) -> None:
        check_int(self.max_attempts, "recover.max_attempts", minimum=1)
        check_int(self.watch_steps, "recover.watch_steps", minimum=1)
        if self.min_nodes_policy not in MIN_NODES_POLICIES:
            raise _fail(
                "recover.min_nodes_policy",
                f"{self.min_nodes_policy!r} is not one of {', '.join(MIN_NODES_POLICIES)}",
            )
        check_seconds(self.capacity_timeout_s, "recover.capacity_timeout_s", allow_zero=True)
        check_seconds(self.capacity_poll_s, "recover.capacity_poll_s")
        if isinstance(self.hosts_command, list):
            object.__setattr__(self, "hosts_command", tuple(self.hosts_command))
        if not all(isinstance(a, str) and a for a in self.hosts_command):
            raise _fail("recover.hosts_command", "must be a list of non-empty strings (an argv)")
        if not isinstance(self.drain, DrainConfig):
            raise _fail("recover.drain", "must be a mapping")
        if not isinstance(self.watch, Mapping) or not all(isinstance(k, str) for k in self.watch):
            raise _fail("recover.watch", "must be a mapping with string keys")


@dataclass(frozen=True, kw_only=True, slots=True)
class ClassifyConfig:
    """``classify:`` -- failure classification (``ckptctl classify`` and recover's first step)."""

    signatures: tuple[str, ...] = ()
    """Extra signature catalogs (YAML paths or fsspec URLs); their entries take precedence over the
    built-in catalog, and ``--signatures`` files given on the command line over these."""

    def __post_init__(self) -> None:
        if not isinstance(self.signatures, tuple) or not all(isinstance(x, str) and x for x in self.signatures):
            raise _fail("classify.signatures", "must be a list of file paths or URLs")


@dataclass(frozen=True, kw_only=True, slots=True)
class CkptctlConfig:
    """The whole ``ckptctl.yaml``."""

    run_root: str | None = None
    """Checkpoint root: a local path or fsspec URL (``s3://bucket/run``); needed by ``--resume-from auto``."""
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    """How to launch the job."""
    recover: RecoverConfig = field(default_factory=RecoverConfig)
    """How recover behaves."""
    classify: ClassifyConfig = field(default_factory=ClassifyConfig)
    """Failure classification (extra signature catalogs)."""
    source: str | None = None
    """The file this config was read from (not a YAML key; for messages)."""

    def __post_init__(self) -> None:
        if self.run_root is not None and (not isinstance(self.run_root, str) or not self.run_root.strip()):
            raise _fail("run_root", f"{self.run_root!r} must be a non-empty path or URL")
        if not isinstance(self.launch, LaunchConfig):
            raise _fail("launch", "must be a mapping")
        if not isinstance(self.recover, RecoverConfig):
            raise _fail("recover", "must be a mapping")
