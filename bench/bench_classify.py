"""Throughput of ``ckptctl classify`` next to ``grep -E`` on the same multi-GB-style log.

Generates (once, cached in ``.bench-data/``) a realistic log of ``--size-mb`` MB:
what an on-call engineer concatenates after a crash of a 256-GPU job. Training
progress lines (including Megatron's "number of nan iterations: 0", which the NaN
prefilter must look at and reject), NCCL INFO chatter with ``host:pid:tid [dev]``
prefixes, journalctl kernel/systemd/kubelet lines, torch C++ warnings, Python
warnings, tqdm bars (non-ASCII), JSON metrics, W&B retries with "Error" in them;
and at the end the crash itself: an XID 79 on one host, then NCCL watchdog
timeouts on every rank and torchrun's ChildFailedError tables.

Then, in one run:

* ``grep -E -c -f PATTERNS`` where PATTERNS is the signature catalog's own
  regular expressions translated to POSIX ERE (the equivalent pattern set:
  a line matches for grep exactly when it could match a signature), with
  ``LC_ALL=C`` (grep's fastest mode; ``--utf8-grep`` adds a UTF-8 run, which
  is 20-30x slower with these patterns);
* ``grep -F -c -f KEYWORDS`` (the prefilter's literals alone, for reference);
* ``ckptctl classify --json`` as a subprocess (the real CLI, startup included),
  with the default prefilter engine (Hyperscan when installed; the engine used
  is printed) and again with ``CKPTCTL_CLASSIFY_ENGINE=re`` (the stdlib
  fallback; ``--no-re-engine`` skips it);

and prints MB/s (wall clock, and per CPU-second, which shared machines make the
fairer figure) for each and classify's ratio to grep. The verdict is checked
(infra, drain the XID 79 host) so a fast wrong answer cannot pass.

Run: ``.venv/bin/python bench/bench_classify.py`` (1 GB; ``--size-mb 200`` for a
quick run). Needs GNU grep on PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ckptctl.ops.classify_catalog import load_default_signatures  # noqa: E402

DATA_DIR = ROOT / ".bench-data"
GENERATOR_VERSION = 3
CULPRIT = "gpu-node-17"
HOSTS = [f"gpu-node-{i:02d}" for i in range(32)]


# --------------------------------------------------------------------------------------
# The log
# --------------------------------------------------------------------------------------

_MONTH_DAY = "Jan 14"
_KERNEL_NOISE = (
    "mlx5_core 0000:{b:02x}:00.0: mlx5_fw_tracer_handle_traces:735:(pid {p}): FW trace: event queue polled",
    "nvidia-nvlink: Nvlink Core is being initialized, major device number 511",
    "IPv6: ADDRCONF(NETDEV_CHANGE): ib{n}: link becomes ready",
    "EXT4-fs (nvme0n1p{n}): mounted filesystem with ordered data mode. Quota mode: none.",
    "audit: type=1400 audit({t}.{p}:{n}): apparmor=\"STATUS\" operation=\"profile_replace\" pid={p}",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024",
)
_DAEMON_NOISE = (
    "systemd[1]: Started Session {p} of User root.",
    "sshd[{p}]: Accepted publickey for svc-train from 10.1.{n}.{b} port {p} ssh2: ED25519 SHA256:q1w2e3r4",
    "kubelet[{p}]: I0114 03:{m:02d}:{s:02d}.{p} {p} kubelet_getters.go:182] \"Pod status updated\" pod=\"train/trainer-worker-{n}\"",
    "nvidia-persistenced[{p}]: device 0000:{b:02x}:00.0 - persistence mode enabled.",
    "CRON[{p}]: (root) CMD (/usr/local/bin/node-health-check --quiet)",
    "containerd[{p}]: time=\"2026-01-14T03:{m:02d}:{s:02d}Z\" level=info msg=\"ImageCreate event name:\\\"nvcr.io/nvidia/pytorch:24.05-py3\\\"\"",
)


def _lines(rng: random.Random) -> Iterator[str]:
    step = 40_000
    while True:
        r = rng.random()
        h = rng.choice(HOSTS)
        p = rng.randrange(1000, 99999)
        n = rng.randrange(0, 16)
        b = rng.randrange(0, 256)
        m, s = rng.randrange(60), rng.randrange(60)
        rank = rng.randrange(256)
        if r < 0.22:
            step += 1
            yield (
                f"[2026-01-14 03:{m:02d}:{s:02d},{p % 1000:03d}][train][INFO] [rank{rank}] step {step} | "
                f"loss {1.8 + rng.random():.4f} | lr 2.95e-04 | grad_norm {rng.random():.3f} | "
                f"tokens/s {rng.randrange(380_000, 420_000)} | tflops 402.1 | mem 61.2GiB\n"
            )
        elif r < 0.32:
            step += 1
            yield (
                f" iteration    {step}/  500000 | consumed samples:     {step * 512} | elapsed time per "
                f"iteration (ms): {1400 + rng.random() * 200:.1f} | learning rate: 2.950E-04 | global batch "
                f"size:   512 | lm loss: {1.8 + rng.random():.6E} | loss scale: 1.0 | grad norm: "
                f"{rng.random():.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
            )
        elif r < 0.52:
            kind = rng.random()
            prefix = f"{h}:{p}:{p + 41} [{n % 8}] NCCL INFO"
            if kind < 0.5:
                yield f"{prefix} Channel {n:02d}/0 : {rank}[{n % 8}] -> {(rank + 8) % 256}[{n % 8}] [send] via NET/IB/{n % 8}/GDRDMA\n"
            elif kind < 0.8:
                yield f"{prefix} comm 0x{p:x}{b:x} rank {rank} nRanks 256 nNodes 32 localRanks 8 localRank {n % 8} MNNVL 0\n"
            else:
                yield f"{prefix} NET/IB : Using [0]mlx5_{n % 8}:1/IB [1]mlx5_{(n + 1) % 8}:1/IB ; OOB ib0:10.1.{n}.{b}<0>\n"
        elif r < 0.68:
            if rng.random() < 0.5:
                body = rng.choice(_KERNEL_NOISE).format(b=b, p=p, n=n, t=1768360000 + p, m=m, s=s)
                yield f"{_MONTH_DAY} 03:{m:02d}:{s:02d} {h} kernel: [{p}.{b:06d}] {body}\n"
            else:
                body = rng.choice(_DAEMON_NOISE).format(b=b, p=p, n=n, m=m, s=s)
                yield f"{_MONTH_DAY} 03:{m:02d}:{s:02d} {h} {body}\n"
        elif r < 0.78:
            yield (
                f"[rank{rank}]:[W114 03:{m:02d}:{s:02d}.{p}{b:03d} ProcessGroupNCCL.cpp:4115] [PG ID 0 PG "
                f"GUID 0(default_pg) Rank {rank}] using GPU {n % 8} to perform barrier as devices used by "
                "this process are currently unknown. This can potentially cause a hang if this rank to GPU "
                "mapping is incorrect.\n"
            )
        elif r < 0.84:
            yield (
                "/usr/local/lib/python3.11/dist-packages/torch/utils/checkpoint.py:91: UserWarning: None of "
                "the inputs have requires_grad=True. Gradients will be None\n  warnings.warn(\n"
            )
        elif r < 0.90:
            pct = rng.randrange(100)
            bar = "\u2588" * (pct // 10) + "\u258c" + " " * (9 - pct // 10)
            yield f"Epoch 3:  {pct}%|{bar}| {pct * 100}/10000 [1:02:{s:02d}<1:15:20,  1.21it/s, loss=2.31, v_num=7]\n"
        elif r < 0.96:
            yield (
                f'{{"step": {step}, "loss": {1.8 + rng.random():.4f}, "lr": 0.000295, "tokens_seen": '
                f'{step * 2_097_152}, "time": "2026-01-14T03:{m:02d}:{s:02d}Z"}}\n'
            )
        elif r < 0.98:
            yield (
                f"wandb: Network error (ReadTimeout), entering retry loop. Error while calling W&B API: "
                f"context deadline exceeded (<Response [50{n % 4}]>)\n"
            )
        else:
            yield f"[2026-01-14 03:{m:02d}:{s:02d},{b:03d}][ckpt][INFO] saved /ckpt/run7/step_{step - step % 500} in {rng.random() * 30:.1f}s\n"


def _crash(rng: random.Random) -> str:
    out = [
        f"{_MONTH_DAY} 03:59:40 {CULPRIT} kernel: [881234.402114] NVRM: Xid (PCI:0000:3b:00): 79, "
        "pid=48211, name=python, GPU has fallen off the bus.\n",
        f"{_MONTH_DAY} 03:59:40 {CULPRIT} kernel: [881234.402300] NVRM: GPU 0000:3b:00.0: GPU has "
        "fallen off the bus.\n",
    ]
    for rank in range(256):
        out.append(
            f"[rank{rank}]:[E114 04:09:41.{rng.randrange(10**9):09d} ProcessGroupNCCL.cpp:616] [Rank {rank}] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, "
            "NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600013 milliseconds before "
            "timing out.\n"
        )
    for node, host in enumerate(HOSTS):
        out.append(
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "============================================================\ntrain.py FAILED\n"
            "------------------------------------------------------------\nFailures:\n  <NO_OTHER_FAILURES>\n"
            "------------------------------------------------------------\n"
            "Root Cause (first observed failure):\n[0]:\n"
            "  time      : 2026-01-14_04:09:42\n"
            f"  host      : {host}.cluster.local\n"
            f"  rank      : {node * 8} (local_rank: 0)\n"
            f"  exitcode  : -6 (pid: {40000 + node})\n"
            "  error_file: <N/A>\n"
            f"  traceback : Signal 6 (SIGABRT) received by PID {40000 + node}\n"
            "============================================================\n"
        )
    return "".join(out)


def generate(path: Path, size_mb: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    target = size_mb * 1_000_000
    crash = _crash(rng)
    written = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        buf: list[str] = []
        buf_len = 0
        for line in _lines(rng):
            buf.append(line)
            buf_len += len(line)
            if buf_len > 4_000_000:
                chunk = "".join(buf)
                f.write(chunk)
                written += len(chunk.encode())
                buf, buf_len = [], 0
                if written + len(crash) >= target:
                    break
        f.write("".join(buf))
        f.write(crash)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------
# Python regex -> POSIX ERE (for grep -E)
# --------------------------------------------------------------------------------------

_CLASS_ESCAPES = {"d": "0-9", "w": "[:alnum:]_", "s": "[:space:]"}
_ESCAPES = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": "[[:alnum:]_]",
    "W": "[^[:alnum:]_]",
    "s": "[[:space:]]",
    "S": "[^[:space:]]",
    "b": r"\b",
}


def to_ere(pattern: str) -> str:
    """Translate the subset of Python regex the catalog uses into POSIX ERE (GNU grep)."""
    ignore_case = pattern.startswith("(?i)")
    if ignore_case:
        pattern = pattern[4:]
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            e = pattern[i + 1]
            if e in _ESCAPES:
                out.append(_ESCAPES[e])
            elif e.isalnum():
                raise ValueError(f"unsupported escape \\{e} in {pattern!r}")
            else:
                out.append("\\" + e)
            i += 2
        elif c == "[":
            j = i + 1
            body = []
            if j < n and pattern[j] == "^":
                body.append("^")
                j += 1
            close_literal = j < n and pattern[j] == "]"
            if close_literal:
                body.append("]")
                j += 1
            while pattern[j] != "]":
                if pattern[j] == "\\":
                    e = pattern[j + 1]
                    if e in _CLASS_ESCAPES:
                        body.append(_CLASS_ESCAPES[e])
                    elif e == "]":
                        body.insert(1 if body[:1] == ["^"] else 0, "]")
                    else:
                        body.append(e if e != "-" else "-")
                    j += 2
                else:
                    ch = pattern[j]
                    if ignore_case and ch.isalpha():
                        body.append(ch.lower() + ch.upper())
                    else:
                        body.append(ch)
                    j += 1
            text = "".join(body)
            if "-" in text.strip("-") and not re.search(r"\w-\w|:\]-|-\[", text):
                text = text.replace("-", "") + "-"
            out.append("[" + text + "]")
            i = j + 1
        elif c == "(" and pattern.startswith("(?:", i):
            out.append("(")
            i += 3
        elif c == "(" and pattern.startswith("(?P<", i):
            out.append("(")
            i = pattern.index(">", i) + 1
        elif c == "(" and pattern.startswith("(?=", i):
            # a line matches A(?=X) exactly when it matches AX
            out.append("(")
            i += 3
        elif c == "(" and pattern.startswith("(?!", i):
            # dropped: grep then matches a superset of the lines (never fewer)
            i = _group_end(pattern, i)
        elif c == "(" and pattern.startswith("(?", i):
            raise ValueError(f"unsupported group in {pattern!r}")
        elif c in "*+?}" and i + 1 < n and pattern[i + 1] == "?":
            out.append(c)  # lazy quantifier: same set of matching lines
            i += 2
        elif ignore_case and c.isalpha():
            out.append(f"[{c.lower()}{c.upper()}]")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _group_end(pattern: str, i: int) -> int:
    """The index just past the group that opens at ``pattern[i]``."""
    depth = 0
    j = i
    while j < len(pattern):
        ch = pattern[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "[":
            j = pattern.index("]", j + 2 if pattern.startswith("[^]", j) or pattern.startswith("[]", j) else j + 1)
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise ValueError(f"unbalanced group in {pattern!r}")


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


def _time(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system of the child) and stdout of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1, 10, 11, 12, 13):
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr.strip()[:500]}")
    return elapsed, cpu, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1000, help="log size in MB (default 1000)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per tool; the fastest is kept")
    parser.add_argument(
        "--jobs", type=int, default=0, help="also time classify --jobs N (worker processes)"
    )
    parser.add_argument(
        "--no-re-engine",
        action="store_true",
        help="skip the run with the stdlib re prefilter (CKPTCTL_CLASSIFY_ENGINE=re)",
    )
    parser.add_argument(
        "--utf8-grep",
        action="store_true",
        help="also time grep -E in the caller's UTF-8 locale (very slow with these patterns)",
    )
    args = parser.parse_args()
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep not found on PATH")
    DATA_DIR.mkdir(exist_ok=True)
    log = DATA_DIR / f"classify-{args.size_mb}mb-v{GENERATOR_VERSION}.log"
    if not log.exists():
        print(f"generating {log.relative_to(ROOT)} ({args.size_mb} MB) ...", file=sys.stderr)
        generate(log, args.size_mb)
    size = log.stat().st_size
    # Warm the page cache so every tool reads from memory.
    with open(log, "rb") as f:
        while f.read(64 << 20):
            pass

    signatures = load_default_signatures()
    grep_c = "grep -E (catalog patterns, LC_ALL=C)"
    grep_utf8 = "grep -E (catalog patterns, C.UTF-8)"
    grep_kw = "grep -F (prefilter keywords, LC_ALL=C)"
    classify = "ckptctl classify --json --jobs 1"
    classify_re = "ckptctl classify --json --jobs 1 (re engine)"
    with tempfile.TemporaryDirectory() as tmp:
        patterns = Path(tmp, "patterns.ere")
        patterns.write_text("\n".join(to_ere(s.pattern) for s in signatures) + "\n")
        keywords = Path(tmp, "keywords.txt")
        # grep -F cannot say "Error<newline>": those keywords are left out.
        literals = {k for s in signatures for k in s.keywords if k == k.rstrip("\r\n")}
        keywords.write_text("\n".join(sorted(literals)) + "\n")
        cli = [str(ROOT / ".venv" / "bin" / "ckptctl")]
        if not Path(cli[0]).exists():
            cli = [sys.executable, "-m", "ckptctl"]
        commands: dict[str, tuple[list[str], dict[str, str]]] = {
            grep_c: ([grep, "-E", "-c", "-f", str(patterns), str(log)], {**os.environ, "LC_ALL": "C"}),
            grep_kw: ([grep, "-F", "-c", "-f", str(keywords), str(log)], {**os.environ, "LC_ALL": "C"}),
            classify: ([*cli, "classify", "--json", "--jobs", "1", str(log)], {**os.environ, "CKPTCTL_NO_PROGRESS": "1"}),
        }
        if not args.no_re_engine:
            commands[classify_re] = (
                [*cli, "classify", "--json", "--jobs", "1", str(log)],
                {**os.environ, "CKPTCTL_NO_PROGRESS": "1", "CKPTCTL_CLASSIFY_ENGINE": "re"},
            )
        if args.jobs > 1:
            commands[f"ckptctl classify --json --jobs {args.jobs}"] = (
                [*cli, "classify", "--json", "--jobs", str(args.jobs), str(log)],
                {**os.environ, "CKPTCTL_NO_PROGRESS": "1"},
            )
        if args.utf8_grep:
            commands[grep_utf8] = (
                [grep, "-E", "-c", "-f", str(patterns), str(log)], {**os.environ, "LC_ALL": "C.UTF-8"}
            )
        runs: dict[str, tuple[float, float, str]] = {}
        for name, (cmd, env) in commands.items():
            best: tuple[float, float, str] | None = None
            for _ in range(args.repeat):
                result = _time(cmd, env)
                if best is None or result[0] < best[0]:
                    best = result
            assert best is not None
            runs[name] = best

    doc = json.loads(runs[classify][2])
    ok = doc["category"] == "infra" and doc["hosts"] == [CULPRIT]
    mb = size / 1e6
    print(f"log: {log.relative_to(ROOT)}  {mb:,.0f} MB, {doc['inputs']['lines']:,} lines; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'tool':<42} {'wall s':>7} {'MB/s':>6} {'CPU s':>7} {'MB/CPU-s':>9}  matched lines")
    for name, (elapsed, cpu, stdout) in runs.items():
        matched = (
            json.loads(stdout)["inputs"]["matched_lines"] if name.startswith("ckptctl") else int(stdout.strip() or 0)
        )
        if name.startswith("ckptctl") and "--jobs 1" not in name:  # workers are the forkserver's children: their CPU is not ours to see
            print(f"{name:<42} {elapsed:7.2f} {mb / elapsed:6.0f} {'-':>7} {'-':>9}  {matched:,}")
            continue
        print(f"{name:<42} {elapsed:7.2f} {mb / elapsed:6.0f} {cpu:7.2f} {mb / max(cpu, 1e-9):9.0f}  {matched:,}")
    wall_ratio = runs[grep_c][0] / runs[classify][0]
    cpu_ratio = runs[grep_c][1] / max(runs[classify][1], 1e-9)
    print(f"classify engine: {doc['inputs'].get('engine', 're')}")
    print(f"classify / {grep_c}: {wall_ratio:.2f}x wall, {cpu_ratio:.2f}x CPU (target >= 0.5x)")
    for name in runs:
        if name.startswith("ckptctl") and name != classify:
            print(f"{name} / {grep_c}: {runs[grep_c][0] / runs[name][0]:.2f}x wall")
    if grep_utf8 in runs:
        print(f"classify / {grep_utf8}: {runs[grep_utf8][0] / runs[classify][0]:.2f}x wall")
    print(
        f"verdict: {doc['category']} ({doc['confidence']}), drain {doc['hosts']}"
        + ("  OK" if ok else f"  WRONG (expected infra, drain {CULPRIT})")
    )
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
