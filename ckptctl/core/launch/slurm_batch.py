"""The batch script of the ``slurm`` launch backend, rendered from a ``LaunchPlan`` (pure).

``ckptctl recover`` (``launch.backend: slurm``) writes it next to the job logs and
submits it with ``sbatch --parsable``; ``--dry-run`` prints it. See docs/launch.md,
"The slurm backend".
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ckptctl.core.config.checks import parse_nnodes
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.core.launch.job import FROM_SCRATCH, JOB_START_TAG
from ckptctl.core.launch.plan import LaunchPlan, is_srun

#: The variable a batch script sets so ``ckptctl.training`` takes these signals as a preemption
#: notice (an emergency checkpoint at the next step boundary), e.g. ``USR1``.
PREEMPTION_SIGNALS_ENV = "CKPTCTL_PREEMPTION_SIGNALS"
#: The batch script's exit status when a restart finds no complete checkpoint to resume from.
MISSING_CHECKPOINT_EXIT = 3


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


def plan_slurm_batch(
    config: CkptctlConfig,
    plan: LaunchPlan,
    *,
    log_dir: str,
    ckptctl_argv: Sequence[str] = ("ckptctl",),
) -> SlurmBatch:
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
    * requeue-safe: ``--open-mode=append`` (a restart appends to the output file,
      never truncates the log of the run before it); at every start the script
      prints a ``JOB_START_TAG`` line (``core.launch.job``) with Slurm's
      ``SLURM_RESTART_COUNT``, so the watch, ``status`` and the ledger see each
      restart. The first start resumes from the checkpoint ``recover`` verified
      (``plan.resume_from``); a restart resolves the checkpoint again, when it
      starts: ``<ckptctl_argv> locate <run root>`` (the newest complete one, with
      the checks ``locate`` makes by default), and ends with exit 3 and one
      ``ckptctl:`` line when there is none, instead of replaying a stale step.
      ``ckptctl_argv`` is how the job's host runs this ckptctl (the backend passes
      the absolute path of the running interpreter and ``-m ckptctl``).
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
    # a restart (requeue) appends to the output: the log of the run before it is never truncated
    header.append("#SBATCH --open-mode=append")
    header.append(f"#SBATCH --signal=USR1@{slurm.signal_grace_s}")
    header += [f"#SBATCH {a}" for a in slurm.sbatch_args]
    env = {**plan.env, PREEMPTION_SIGNALS_ENV: "USR1"}
    body = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    # torchrun is started by the launcher prefix when it is not srun already.
    argv = list(plan.argv)
    if is_srun(argv):
        argv = argv[1:]  # the batch script runs srun itself, with the exclude in the header
        argv = [a for a in argv if not a.startswith("--exclude=")]
    flag = config.launch.resume_flag
    if plan.resume_from is not None and argv[-2:] == [flag, plan.resume_from]:
        argv = argv[:-2]  # resolved below, at each start
    body += [
        'echo "ckptctl: slurm job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST}"',
        *_resume_lines(config, plan, ckptctl_argv),
        # srun's task ignores USR1 (inherited by torchrun); the workers install a handler.
        "srun --kill-on-bad-exit=1 bash -c 'trap \"\" USR1; exec \"$@\"' ckptctl-task "
        + shlex.join(argv)
        + ' "${ckptctl_resume[@]}"',
    ]
    output = posixpath.join(log_dir, f"slurm-{slurm.job_name}-%j.out")
    return SlurmBatch(
        script="\n".join(header + body) + "\n",
        sbatch_argv=("sbatch", "--parsable", f"--output={output}"),
        output_pattern=output,
        exclude_hosts=plan.exclude_hosts,
        nodes=nodes,
    )


def run_root_of(config: CkptctlConfig, plan: LaunchPlan) -> str | None:
    """The run root a restart locates in: the folder of the checkpoint resumed from (``locate``
    walks a run root's entries), else ``run_root``; None when neither is known."""
    if plan.resume_from is not None:
        return posixpath.dirname(plan.resume_from.rstrip("/")) or "/"
    return config.run_root


def _resume_lines(config: CkptctlConfig, plan: LaunchPlan, ckptctl_argv: Sequence[str]) -> list[str]:
    """Bash that sets ``ckptctl_resume`` (the resume flag and path, or nothing) at each start and
    prints the ``JOB_START_TAG`` line (``core.launch.job``)."""
    flag = config.launch.resume_flag
    root = run_root_of(config, plan)
    start = f'echo "{JOB_START_TAG} job_id=${{SLURM_JOB_ID}} restart=${{SLURM_RESTART_COUNT:-0}} time=$(date -u +%Y-%m-%dT%H:%M:%SZ)'
    if plan.resume_from is not None:
        lines = [f"ckptctl_resume=({shlex.quote(flag)} {shlex.quote(plan.resume_from)})  # verified by recover"]
    else:
        lines = ["ckptctl_resume=()  # the first start begins from scratch"]
    if root is not None:
        locate = shlex.join([*ckptctl_argv, "locate", root])
        missing = (
            "printf 'ckptctl: job %s restart %s: no complete checkpoint under %s (ckptctl locate exit %s): "
            "not starting; run ckptctl recover\\n' \"$SLURM_JOB_ID\" \"$SLURM_RESTART_COUNT\" "
            f'{shlex.quote(root)} "$rc" >&2'
        )
        lines += [
            "# A restart (Slurm requeue) resumes from the newest complete checkpoint now, never from the",
            "# one of the first start: the run before it may have saved newer ones.",
            'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then',
            f"  if ckptctl_found=$({locate}); then",
            f'    ckptctl_resume=({shlex.quote(flag)} "$ckptctl_found")',
        ]
        if plan.resume_from is not None:
            lines += ["  else", "    rc=$?", f"    {missing}", f"    exit {MISSING_CHECKPOINT_EXIT}"]
        lines += ["  fi", "fi"]
    lines += [
        'if [ "${#ckptctl_resume[@]}" -gt 0 ]; then',
        f'  {start} resuming from checkpoint=${{ckptctl_resume[1]}}"',
        "else",
        f'  {start} {FROM_SCRATCH}"',
        "fi",
    ]
    return lines
