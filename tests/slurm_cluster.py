"""A real single-machine Slurm cluster for the tests (Debian's slurm-wlm + munge, run as root).

``SlurmCluster.start(tmp)`` writes a ``slurm.conf`` into a scratch directory
(state, spool, logs and pid files there; non-default ports so a test cluster never
meets another one), starts ``munged`` if it is not running, then ``slurmctld`` and
``slurmd``, and waits until ``sinfo`` shows the node idle. ``stop()`` ends the
daemons it started by the pids in their pid files. ``unavailable_reason()`` says
why a cluster cannot be had here (no packages, not root), for ``pytest.skip``.

Facts checked on Debian 12 (Slurm 22.05.8): no cgroups, no systemd; proctrack
linuxproc and task/none work; a node's ``State=DRAIN`` shows as ``drained`` in
``sinfo`` and ``State=RESUME`` returns it. Several slurmd on one host work: one
``NodeName`` line per node, all with ``NodeHostname=<this host>`` and
``NodeAddr=127.0.0.1`` but each its own ``Port``, ``%n`` in the spool/pid/log
paths, and ``slurmd -N <name>`` per node; so the cluster has two nodes (``n1``,
``n2``) and a drained node really is avoided by the next job.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo", "munged")


def unavailable_reason() -> str | None:
    """Why no test cluster can be started here, or None."""
    missing = [d for d in DAEMONS if shutil.which(d) is None and not os.path.exists(f"/usr/sbin/{d}")]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing; `apt-get install slurm-wlm munge`)"
    if os.geteuid() != 0:
        return "the test Slurm cluster runs its daemons as root (SlurmUser=root)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmCluster:
    dir: Path
    conf: Path
    nodes: tuple[str, ...]
    cpus: int
    """CPUs configured per node (the host's count: the nodes share the host)."""
    pids: list[int] = field(default_factory=list)

    @property
    def node(self) -> str:
        return self.nodes[0]

    @property
    def env(self) -> dict[str, str]:
        """Environment for client commands (and for ckptctl): ``SLURM_CONF`` points at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=60, check=check)

    @classmethod
    def start(
        cls, base: Path, *, nodes: tuple[str, ...] = ("n1", "n2"), timeout_s: float = 60, cred_expire_s: int | None = None
    ) -> SlurmCluster:
        """``cred_expire_s``: ``AuthInfo=cred_expire`` (Slurm's default 120 s): also how long a
        requeued job waits before it may start again, so the requeue tests shorten it."""
        base.mkdir(parents=True, exist_ok=True)
        for sub in ("state", "spool", "log", "run"):
            (base / sub).mkdir(exist_ok=True)
        for n in nodes:
            (base / "spool" / n).mkdir(exist_ok=True)
        host = socket.gethostname().split(".")[0]
        cpus = os.cpu_count() or 1
        conf = base / "slurm.conf"
        conf.write_text(
            "\n".join(
                [
                    "ClusterName=ckptctltest",
                    f"SlurmctldHost={host}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"SlurmctldPort={_free_port()}",
                    "AuthType=auth/munge",
                    *([f"AuthInfo=cred_expire={cred_expire_s}"] if cred_expire_s is not None else []),
                    f"StateSaveLocation={base / 'state'}",
                    f"SlurmdSpoolDir={base / 'spool' / '%n'}",
                    f"SlurmctldPidFile={base / 'run' / 'slurmctld.pid'}",
                    f"SlurmdPidFile={base / 'run' / 'slurmd-%n.pid'}",
                    f"SlurmctldLogFile={base / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={base / 'log' / 'slurmd-%n.log'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "ReturnToService=2",
                    "MpiDefault=none",
                    "SchedulerType=sched/backfill",
                    "KillWait=10",
                    "InactiveLimit=0",
                    "MinJobAge=300",
                    *(
                        f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={_free_port()} "
                        f"CPUs={cpus} State=UNKNOWN"
                        for n in nodes
                    ),
                    f"PartitionName=debug Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP "
                    "OverSubscribe=YES",
                    "",
                ]
            )
        )
        cluster = cls(dir=base, conf=conf, nodes=tuple(nodes), cpus=cpus)
        cluster._start_munge()
        try:
            subprocess.run(
                [_sbin("slurmctld"), "-f", str(conf)], env=cluster.env, check=True, capture_output=True, timeout=30
            )
            cluster._remember(base / "run" / "slurmctld.pid")
            for n in nodes:
                subprocess.run(
                    [_sbin("slurmd"), "-f", str(conf), "-N", n],
                    env=cluster.env, check=True, capture_output=True, timeout=30,
                )
                cluster._remember(base / "run" / f"slurmd-{n}.pid")
            for n in nodes:
                cluster.wait_for_state("idle", node=n, timeout_s=timeout_s)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start_munge(self) -> None:
        probe = subprocess.run("munge -n | unmunge", shell=True, capture_output=True, text=True)
        if "Success" in probe.stdout:
            return
        run = Path("/run/munge")
        run.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(KeyError, OSError):
            shutil.chown(run, "munge", "munge")
        subprocess.run([_sbin("munged"), "--force"], capture_output=True, timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            probe = subprocess.run("munge -n | unmunge", shell=True, capture_output=True, text=True)
            if "Success" in probe.stdout:
                return
            time.sleep(0.2)
        raise RuntimeError(f"munged did not come up: {probe.stdout}{probe.stderr}")

    def _remember(self, pidfile: Path) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                self.pids.append(int(pidfile.read_text().strip()))
                return
            time.sleep(0.1)
        raise RuntimeError(f"{pidfile} never appeared; see {self.dir / 'log'}")

    def node_state(self, node: str | None = None) -> str:
        out = self.run("sinfo", "-h", "-N", "-n", node or self.node, "-o", "%T").stdout.strip()
        return out.splitlines()[0] if out else ""

    def wait_for_state(self, prefix: str, *, node: str | None = None, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            state = self.node_state(node)
            if state.startswith(prefix):
                return
            time.sleep(0.3)
        raise RuntimeError(f"node {node or self.node} is {state!r}, not {prefix!r}, after {timeout_s:g} s")

    def resume_node(self, node: str | None = None) -> None:
        self.run("scontrol", "update", f"NodeName={node or self.node}", "State=RESUME", check=False)

    def stop(self) -> None:
        """End every job, then the daemons this cluster started (by pid, SIGTERM then SIGKILL)."""
        with contextlib.suppress(Exception):
            self.run("scancel", "--full", "-u", "root", check=False)
        for pid in reversed(self.pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for pid in self.pids:
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.pids.clear()
        for pid in self._stepds():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # a job step's daemon outlives slurmd: no process is left behind

    def _stepds(self) -> list[int]:
        """The slurmstepd processes this cluster's slurmd started (their SLURM_CONF is this cluster's)."""
        mine = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if (entry / "comm").read_bytes().strip() == b"slurmstepd" and mine in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
        return found
