"""The batch script of the ``slurm`` launch backend, rendered from a ``LaunchPlan`` (pure).

``ckptctl recover`` (``launch.backend: slurm``) writes it next to the job logs and
submits it with ``sbatch --parsable``; ``--dry-run`` prints it. See docs/launch.md,
"The slurm backend".
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from typing import Any

from ckptctl.core.config.checks import parse_nnodes
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.plan import LaunchPlan, is_srun

#: The variable a batch script sets so ``ckptctl.training`` takes these signals as a preemption
#: notice (an emergency checkpoint at the next step boundary), e.g. ``USR1``.
PREEMPTION_SIGNALS_ENV = "CKPTCTL_PREEMPTION_SIGNALS"


@dataclass(frozen=True, kw_only=True, slots=True)
class SlurmBatch:
    """The batch script the ``slurm`` backend submits; ``--dry-run`` prints ``script``."""

    script: str
    """The whole script text (``#SBATCH`` header, environment, ``srun ... torchrun ...``)."""
    sbatch_argv: tuple[str, ...]
    """The submission command, without the script path (``sbatch --parsable --output=...``)."""
    output_pattern: str
    """Slurm's ``--output`` path (``%j`` is the job id)."""
    exclude_hosts: tuple[str, ...]
    nodes: str

    def output_path(self, job_id: str) -> str:
        return self.output_pattern.replace("%j", job_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "script": self.script,
            "sbatch_argv": list(self.sbatch_argv),
            "output": self.output_pattern,
            "exclude_hosts": list(self.exclude_hosts),
            "nodes": self.nodes,
        }


def plan_slurm_batch(config: CkptctlConfig, plan: LaunchPlan, *, log_dir: str) -> SlurmBatch:
    """A batch script that runs ``plan``'s torchrun once per node with ``srun``.

    * ``--nodes`` from the (capacity-decided) ``nnodes``; one task per node (one
      torchrun each), ``--cpus-per-task`` = workers per node unless configured;
    * ``--exclude`` of every drained/excluded host (``scontrol`` drains keep them
      out too; the exclude also covers hosts only named in the config);
    * ``--requeue`` and ``--signal=USR1@<grace>``: before the time limit Slurm sends
      SIGUSR1 to the job's processes. torchrun would die of it, so the srun task
      ignores USR1 (an ignored signal is inherited across exec) and the workers,
      told by ``CKPTCTL_PREEMPTION_SIGNALS=USR1``, install their own handler:
      ``ckptctl.training`` writes an emergency checkpoint and exits 75.
    """
    launch, slurm = config.launch, config.launch.slurm
    lo, hi = parse_nnodes(plan.nnodes, "nnodes")
    nodes = str(lo) if lo == hi else f"{lo}-{hi}"
    cpus = slurm.cpus_per_task
    if cpus is None and isinstance(launch.nproc_per_node, int):
        cpus = launch.nproc_per_node
    header = [
        "#!/bin/bash",
        "# Written by ckptctl (slurm backend). Resubmit with `ckptctl recover`, not by hand:",
        "# it re-checks the checkpoint and the drained hosts first.",
        f"#SBATCH --job-name={slurm.job_name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
    ]
    if cpus is not None:
        header.append(f"#SBATCH --cpus-per-task={cpus}")
    if slurm.partition:
        header.append(f"#SBATCH --partition={slurm.partition}")
    if slurm.time_limit:
        header.append(f"#SBATCH --time={slurm.time_limit}")
    if plan.exclude_hosts:
        header.append(f"#SBATCH --exclude={','.join(plan.exclude_hosts)}")
    if slurm.requeue:
        header.append("#SBATCH --requeue")
    header.append(f"#SBATCH --signal=USR1@{slurm.signal_grace_s}")
    header += [f"#SBATCH {a}" for a in slurm.sbatch_args]
    env = {**plan.env, PREEMPTION_SIGNALS_ENV: "USR1"}
    body = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    # torchrun is started by the launcher prefix when it is not srun already.
    argv = list(plan.argv)
    if is_srun(argv):
        argv = argv[1:]  # the batch script runs srun itself, with the exclude in the header
        argv = [a for a in argv if not a.startswith("--exclude=")]
    body += [
        'echo "ckptctl: slurm job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST}"',
        # srun's task ignores USR1 (inherited by torchrun); the workers install a handler.
        "srun --kill-on-bad-exit=1 bash -c 'trap \"\" USR1; exec \"$@\"' ckptctl-task " + shlex.join(argv),
    ]
    output = posixpath.join(log_dir, f"slurm-{slurm.job_name}-%j.out")
    return SlurmBatch(
        script="\n".join(header + body) + "\n",
        sbatch_argv=("sbatch", "--parsable", f"--output={output}"),
        output_pattern=output,
        exclude_hosts=plan.exclude_hosts,
        nodes=nodes,
    )
