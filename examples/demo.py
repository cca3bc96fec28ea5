"""`make demo`: the whole RB-7 recovery on CPU, end to end, with real processes.

1. Train a tiny GPT under `torchrun` with 2 CPU processes (gloo), checkpointing every
   5 steps with `ckptctl.training`.
2. Inject an infra fault: rank 1 is SIGKILLed at step 18, and a kernel log for the
   host it "ran on" (gpu-node-2: this machine stands in for a cluster) records
   `NVRM: Xid 79, GPU has fallen off the bus`.
3. `ckptctl list` shows the checkpoints; `ckptctl recover` classifies the failure
   (infra, drain gpu-node-2), prints the Slurm drain command, locates and verifies
   the newest complete checkpoint, relaunches torchrun elastic with `--resume-from`,
   watches the first losses continue, and writes a recovery report.
4. The demo checks the outcome: the job finished, every checkpoint verifies deeply,
   and the losses after the resume equal the pre-crash losses at the re-run steps.

Everything lands in ./demo-run (removed at the start of each run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "demo-run"
ROOT = DEMO / "ckpt"
LOGS = DEMO / "logs"
STEPS, SAVE_EVERY, CRASH_AT = 40, 5, 18
CKPTCTL = [sys.executable, "-m", "ckptctl"]
LOSS = re.compile(r"ckptctl-train step=(\d+) loss=(\S+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print("$ " + " ".join(str(a) for a in argv), flush=True)
    return subprocess.run(argv, text=True, **kw)  # type: ignore[call-overload, no-any-return]


def losses(text: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2) for m in LOSS.finditer(text)}


def fail(msg: str) -> None:
    print(f"\nDEMO FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def main() -> None:
    t0 = time.monotonic()
    shutil.rmtree(DEMO, ignore_errors=True)
    LOGS.mkdir(parents=True)
    env = dict(os.environ, PYTHONWARNINGS="ignore", CKPTCTL_NO_PROGRESS="1")

    banner(f"1. train under torchrun (2 CPU ranks), checkpoint every {SAVE_EVERY} steps, rank 1 dies at step {CRASH_AT}")
    train_log = LOGS / "train-attempt-1.log"
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        str(REPO / "examples" / "train.py"), "--ckpt-root", str(ROOT), "--steps", str(STEPS),
        "--save-every", str(SAVE_EVERY), "--crash-at-step", str(CRASH_AT), "--crash-rank", "1",
    ]  # fmt: skip
    with open(train_log, "w") as f:
        proc = run(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
    pre = losses(train_log.read_text())
    print(f"torchrun exited {proc.returncode}; last logged step {max(pre) if pre else None}; log: {train_log}")
    if proc.returncode == 0 or not pre:
        fail("the injected crash did not happen")

    # The kernel log of the host rank 1 ran on: journalctl format, host name in the prefix.
    stamp = time.strftime("%b %d %H:%M:%S")
    (LOGS / "kern-gpu-node-2.log").write_text(
        f"{stamp} gpu-node-2 kernel: NVRM: GPU at PCI:0000:3b:00: GPU-5e3c9a11-8f2d-4c1e-9b7a-1d2e3f4a5b6c\n"
        f"{stamp} gpu-node-2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=31337, name=python, "
        "GPU has fallen off the bus.\n"
        f"{stamp} gpu-node-2 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
    )

    banner("2. what is on disk now")
    run([*CKPTCTL, "list", str(ROOT)], env=env)

    banner("3. ckptctl recover: classify -> drain -> locate -> verify -> resume -> watch")
    config = DEMO / "ckptctl.yaml"
    config.write_text(
        "# written by examples/demo.py\n"
        f"run_root: {ROOT}\n"
        "launch:\n"
        '  nnodes: "1"\n'
        "  nproc_per_node: 2\n"
        "  rdzv_backend: c10d\n"
        f"  rdzv_endpoint: 127.0.0.1:{free_port()}\n"
        f"  script: {REPO / 'examples' / 'train.py'}\n"
        f'  script_args: [--ckpt-root, {ROOT}, --steps, "{STEPS}", --save-every, "{SAVE_EVERY}"]\n'
        "  stop_grace_s: 15\n"
        "recover:\n"
        "  max_attempts: 3\n"
        "  watch_steps: 10\n"
        "  drain: {kind: slurm, reason: 'ckptctl: XID 79 (RB-7)'}\n"
    )
    rec = run(
        [
            *CKPTCTL, "recover", "--config", str(config),
            "--logs", str(LOGS / "kern-gpu-node-2.log"), "--logs", str(train_log),
        ],
        env=env,
    )
    if rec.returncode != 0:
        fail(f"ckptctl recover exited {rec.returncode}")

    banner("4. check the outcome")
    reports = sorted((ROOT / ".ckptctl").glob("recovery-*.json"))
    if not reports:
        fail("no recovery report written")
    report = json.loads(reports[-1].read_text())
    attempt = report["attempts"][-1]
    post = losses(Path(attempt["log"]).read_text())
    resumed_from = attempt["checkpoint_step"]
    rerun = sorted(set(pre) & set(post))
    same = all(pre[s] == post[s] for s in rerun)
    print(f"classified: {report['classify']['category']}, hosts to drain: {report['classify']['hosts']}")
    print(f"resumed from step {resumed_from}; first step after resume: {min(post)}; last: {max(post)}")
    print(f"re-run steps {rerun[0]}..{rerun[-1]}: losses bit-identical to the pre-crash run: {same}")
    if report["classify"]["category"] != "infra" or "gpu-node-2" not in report["classify"]["hosts"]:
        fail("the failure was not classified as infra on gpu-node-2")
    if min(post) != resumed_from + 1 or max(post) != STEPS or not same:
        fail("the resume did not continue the run exactly")
    ver = run([*CKPTCTL, "verify", str(ROOT), "--deep"], env=env, capture_output=True)
    print(ver.stdout.strip().splitlines()[0] if ver.stdout else "", "...")
    print(ver.stderr.strip())
    if ver.returncode != 0:
        fail("a checkpoint does not verify")
    print(f"\nrecovery report: {reports[-1]}")
    print(f"demo finished in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
