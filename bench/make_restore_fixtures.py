"""Write the restore-fault corpus: real resumes of examples/train.py, one made faulty on purpose.

Every log is one job log as a launcher appends it across restarts: a real run of the
example trainer (a tiny GPT, DDP on 2 gloo ranks under real ``torchrun``, CPU) killed
with ``--crash-at-step``, then one or two relaunches with ``--resume-from auto``, stdout
and stderr of each launch in order (what ``ckptctl.training`` logs at WARNING included:
the ``ckptctl: restored: N/M keys`` line of every load, the data-position lines).

A family is one pre-failure run (a seed, a save interval, a crash step), resumed
several ways from a copy of its run root. The label of every log (``labels.json``) is
the construction, written here before any tool reads the log:

* ``clean``: a correct resume (nothing left out);
* ``optimizer-dropped``: ``--drop-optimizer-on-resume``: the load leaves the optimizer
  out by an allowance (``allow_unexpected=("optimizer",)``), so its moments and step
  count start over, everything else restored;
* ``data-reset``: ``--reset-data-on-resume``: everything restored, then the data loader
  starts its epoch over;
* ``data-reset-second-resume``: two resumes, the data loader restored on the first and
  started over on the second (the resume judged).

``fault`` is null for a clean log; ``resumes`` counts the relaunches. Paths of the
temporary run roots are written as ``/runs/<name>``, the host as ``node-0``. Scored by
``bench/watch_accuracy.py`` ("restore faults"). Takes about 10 minutes on 2 cores.

    .venv/bin/python bench/make_restore_fixtures.py [--out DIR] [--only NAME] [--labels-only]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "examples" / "train.py"
OUT = REPO / "tests" / "fixtures" / "losslogs_restore"

CLEAN = "clean"
OPTIMIZER_DROPPED = "optimizer-dropped"
DATA_RESET = "data-reset"
DATA_RESET_SECOND = "data-reset-second-resume"


@dataclass(frozen=True)
class Launch:
    crash_at: int | None = None
    resume: bool = False
    reset_data: bool = False
    drop_optimizer: bool = False


@dataclass
class Family:
    name: str
    seed: int
    steps: int
    save_every: int
    shared: list[Launch]
    """The launches every log of the family begins with (run once, the run root copied)."""
    variants: dict[str, tuple[str, list[Launch]]] = field(default_factory=dict)
    """Log name -> (label, the launches after the shared ones)."""


def families() -> list[Family]:
    out: list[Family] = []
    # One resume: (seed, save every, crash at, steps); the resume loads the last save
    # before the crash and re-runs the steps in between (13..20 of them).
    for seed, save_every, crash, steps in ((20, 20, 56, 80), (21, 25, 71, 100), (22, 15, 59, 90), (23, 30, 79, 110)):
        fam = Family(f"s{seed}", seed, steps, save_every, [Launch(crash_at=crash)])
        fam.variants = {
            f"s{seed}_clean": (CLEAN, [Launch(resume=True)]),
            f"s{seed}_optimizer_dropped": (OPTIMIZER_DROPPED, [Launch(resume=True, drop_optimizer=True)]),
            f"s{seed}_data_reset": (DATA_RESET, [Launch(resume=True, reset_data=True)]),
        }
        out.append(fam)
    # Two resumes: the first correct; the second correct, or with the data loader started
    # over (restored on the first resume only), or with the optimizer dropped.
    for seed, save_every, crash1, crash2, steps in ((24, 20, 47, 99, 120), (25, 25, 58, 96, 120)):
        fam = Family(
            f"d{seed}", seed, steps, save_every, [Launch(crash_at=crash1), Launch(resume=True, crash_at=crash2)]
        )
        fam.variants = {
            f"d{seed}_clean_twice": (CLEAN, [Launch(resume=True)]),
            f"d{seed}_data_reset_second": (DATA_RESET_SECOND, [Launch(resume=True, reset_data=True)]),
            f"d{seed}_optimizer_dropped_second": (OPTIMIZER_DROPPED, [Launch(resume=True, drop_optimizer=True)]),
        }
        out.append(fam)
    return out


def labels_of(fams: list[Family]) -> dict[str, dict[str, object]]:
    labels: dict[str, dict[str, object]] = {}
    for fam in fams:
        for name, (label, rest) in fam.variants.items():
            launches = [*fam.shared, *rest]
            labels[f"{name}.log"] = {
                "fault": None if label == CLEAN else label,
                "resumes": sum(1 for x in launches if x.resume),
                "seed": fam.seed,
            }
    return labels


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(root: Path, fam: Family, launch: Launch) -> str:
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{_free_port()}", "--max-restarts=0",
        str(TRAIN), "--ckpt-root", str(root), "--steps", str(fam.steps),
        "--save-every", str(fam.save_every), "--seed", str(fam.seed),
    ]  # fmt: skip
    if launch.crash_at is not None:
        argv += ["--crash-at-step", str(launch.crash_at)]
    if launch.resume:
        argv += ["--resume-from", "auto"]
    if launch.reset_data:
        argv.append("--reset-data-on-resume")
    if launch.drop_optimizer:
        argv.append("--drop-optimizer-on-resume")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=600, cwd=REPO
    )
    if (proc.returncode != 0) != (launch.crash_at is not None):
        raise SystemExit(f"{fam.name}: launch {launch} exited {proc.returncode}\n{proc.stdout[-3000:]}")
    return proc.stdout


def _clean(text: str, work: Path, name: str) -> str:
    text = re.sub(re.escape(str(work)) + r"/[\w.-]+", f"/runs/{name}", text)
    return text.replace(socket.gethostname(), "node-0")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(OUT), help=f"where the logs and labels.json go (default {OUT})")
    ap.add_argument("--only", help="run the families whose name starts with this")
    ap.add_argument("--labels-only", action="store_true", help="write labels.json only")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fams = families()
    # The labels first: the construction, before any log exists.
    (out / "labels.json").write_text(json.dumps(labels_of(fams), indent=2, sort_keys=True) + "\n")
    if args.labels_only:
        return 0
    work = Path(tempfile.mkdtemp(prefix="restore-corpus-"))
    try:
        for fam in fams:
            if args.only and not fam.name.startswith(args.only):
                continue
            base = work / f"{fam.name}.shared"
            shared_out = [_launch(base, fam, launch) for launch in fam.shared]
            for name, (_, rest) in fam.variants.items():
                root = work / name
                shutil.copytree(base, root)
                outputs = list(shared_out) + [_launch(root, fam, launch) for launch in rest]
                text = _clean("".join(outputs), work, name)
                (out / f"{name}.log").write_text(text)
                print(f"wrote {name}.log ({text.count(chr(10))} lines)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
