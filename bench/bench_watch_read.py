"""Reading speed of ``ckptctl watch``'s log reader on large generated training logs.

One log per logger (Megatron-LM, torchtitan, HF Trainer, nanoGPT, Lightning), each
``--lines`` physical lines long, written in the shapes those tools print and mixed
the way real job logs are: NCCL INFO chatter, Python warnings, a traceback of a
retried data-loader worker, Megatron's timer and memory blocks, tqdm progress bars
redrawn with ``\\r`` (HF Trainer, Lightning), torchrun's ``[rankN]:`` tags on
interleaved ranks (torchtitan), evaluation and checkpoint lines. About a third of
the lines carry no metric at all.

For each log it prints lines/s of:

* ``ckptctl``  ``LossLogParser(auto).feed`` on every line (the reader ``watch`` and
  ``recover`` use), lines already in memory;
* ``general``  the same reader with no line templates (``LossLogParser(fast=False)``);
  ``same``: both give exactly the same events (the equality check; the bench fails otherwise);
* ``ckptctl e2e``  ``ckptctl.ops.watch.watch_log`` on the file (line splitting,
  parsing, the session, the final judgement): what ``ckptctl watch LOG`` costs;
* ``old``  the regex-per-format reader this one replaced (``git show 62bcdd0``),
  when git can show it;
* the anchor: a plain Python ``for line in f: "loss" in line`` loop over the file
  in the same run (``grep -c loss`` too when grep exists), and ckptctl's ratio to it.

Best of ``--repeat`` runs each, in CPU seconds of this process (``grep``: wall clock), as the
machine is shared. Run:
``PYTHONPATH=$PWD .venv/bin/python bench/bench_watch_read.py`` (about 60 s;
``--lines``/``--repeat`` to change, ``--profile FORMAT`` for a cProfile of the reader).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

from ckptctl.core.watch.losslog import LossLogParser
from ckptctl.ops.watch import watch_log

OLD_READER_COMMIT = "62bcdd0"
"""The last commit with the regex-per-format reader (``ckptctl/core/losslog.py``)."""

# -- noise every job log has -----------------------------------------------------------------


def _nccl(rng: random.Random, host: str, rank: int) -> str:
    pid = 41000 + rank
    kind = rng.randrange(5)
    if kind == 0:
        ring = "  ".join(str((rank + i) % 8) for i in range(8))
        return f"{host}:{pid}:{pid + 87} [{rank}] NCCL INFO Channel {rng.randrange(32):02d}/32 :    {ring}"
    if kind == 1:
        return f"{host}:{pid}:{pid + 87} [{rank}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1"
    if kind == 2:
        return (
            f"{host}:{pid}:{pid + 87} [{rank}] NCCL INFO comm 0x{rng.getrandbits(40):x} rank {rank} nRanks 64 "
            f"nNodes 8 localRanks 8 localRank {rank} MNNVL 0 - Init COMPLETE"
        )
    if kind == 3:
        return f"{host}:{pid}:{pid + 87} [{rank}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB eth0:10.1.{rank}.17<0>"
    return f"{host}:{pid}:{pid + 87} [{rank}] NCCL INFO {rng.randrange(1, 64)} coll channels, {rng.randrange(1, 32)} nvls channels, 32 p2p channels, 32 p2p channels per peer"


_WARNINGS = (
    "/opt/conda/lib/python3.11/site-packages/torch/distributed/fsdp/_state_dict_utils.py:827: UserWarning: "
    "When using ``NO_SHARD`` for ``ShardingStrategy``, full_state_dict will be returned.",
    "/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py:92: UserWarning: None of the inputs "
    "have requires_grad=True. Gradients will be None",
    "/opt/conda/lib/python3.11/site-packages/transformers/tokenization_utils_base.py:1617: FutureWarning: "
    "`clean_up_tokenization_spaces` was not set. It will be set to `True` by default in 4.45.",
    "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node-003]:29500 (errno: 111 - Connection refused).",
    "wandb: WARNING Step 1200 < current step 1210; dropping {'train/loss': 2.51}.",
)

_TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 308, in _worker_loop',
    "    data = fetcher.fetch(index)  # type: ignore[possibly-undefined]",
    '  File "/workspace/data/indexed_dataset.py", line 512, in __getitem__',
    "    ptr, size = self.index[idx]",
    "OSError: [Errno 5] Input/output error: '/lustre/data/shard-00417.bin' (retrying 1/3 in 2.0 s)",
)


def _noise(rng: random.Random, out: list[str], rank_tag: Callable[[int], str] = lambda r: "") -> None:
    """One to six lines of chatter with no metric in them."""
    r = rng.random()
    rank = rng.randrange(8)
    if r < 0.55:
        for _ in range(rng.randint(1, 4)):
            out.append(rank_tag(rank) + _nccl(rng, f"node-{rng.randrange(64):03d}", rank))
    elif r < 0.85:
        out.append(rank_tag(rank) + rng.choice(_WARNINGS))
        out.append(rank_tag(rank) + "  warnings.warn(")
    else:
        out.extend(rank_tag(rank) + line for line in _TRACEBACK)


# -- one generator per logger ----------------------------------------------------------------


def _loss(step: int, rng: random.Random) -> float:
    return 2.0 + 8.0 * (step + 50) ** -0.4 + rng.gauss(0, 0.02)


def megatron(num_lines: int, rng: random.Random) -> Iterator[str]:
    out: list[str] = [" > building GPT2BPETokenizer tokenizer ...", "[before the start of training step] datetime: 2026-11-21 10:00:00 "]
    step = 0
    t = 1_700_000_000
    while len(out) < num_lines:
        step += 1
        t += 5
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
        nan = 1 if rng.random() < 0.001 else 0
        out.append(
            f" [{stamp}] iteration {step:8d}/  500000 | consumed samples: {step * 512:12d} | "
            f"elapsed time per iteration (ms): {rng.gauss(505, 5):.1f} | throughput per GPU (TFLOP/s/GPU): "
            f"{rng.gauss(358, 3):.1f} | learning rate: {3e-4 * min(1, step / 2000):.6E} | global batch size:   512 | "
            f"lm loss: {_loss(step, rng):.6E} | loss scale: 1.0 | grad norm: {rng.gauss(0.95, 0.03):.3f} | "
            f"number of skipped iterations:   0 | number of nan iterations: {nan:3d} |"
        )
        if step % 10 == 0:
            out.append("(min, max) time across ranks (ms):")
            for name in ("forward-backward", "forward-compute", "backward-compute", "optimizer", "optimizer-copy-to-main-grad"):
                out.append(f"    {name} {'.' * (48 - len(name))}: ({rng.gauss(480, 5):.2f}, {rng.gauss(490, 5):.2f})")
        if step % 50 == 0:
            out.append(
                f"[Rank 0] (after {step} iterations) memory (MB) | allocated: {rng.gauss(12000, 50):.1f} | "
                f"max allocated: 23456.7 | reserved: 30000.0 | max reserved: 30000.0"
            )
        if rng.random() < 0.25:
            _noise(rng, out)
        if step % 1000 == 0:
            out.append(f"saving checkpoint at iteration {step:7d} to /ckpt/gpt-8b in torch_dist format")
            out.append(f"  successfully saved checkpoint from iteration {step:7d} to /ckpt/gpt-8b [ t 1/8, p 1/1 ]")
    yield from out[:num_lines]


_TITAN_COLOURS = ("\x1b[31m", "\x1b[32m", "\x1b[38;2;255;165;0m", "\x1b[38;2;64;224;208m", "\x1b[34m", "\x1b[36m", "\x1b[35m")


def torchtitan(num_lines: int, rng: random.Random) -> Iterator[str]:
    out: list[str] = []
    step = 0
    t = 1_700_000_000
    while len(out) < num_lines:
        step += 1
        t += 2
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f",{rng.randrange(1000):03d}"
        c = _TITAN_COLOURS
        for rank in rng.sample(range(8), 8):  # ranks print in whatever order they finish
            out.append(
                f"[rank{rank}]:[titan] {stamp} - root - INFO - {c[0]}step: {step:2d}  {c[1]}loss: {_loss(step, rng):7.4f}  "
                f"{c[2]}grad_norm: {rng.gauss(0.9, 0.05):7.4f}  {c[3]}memory: 61.33GiB(77.42%)  "
                f"{c[4]}tps: {rng.randrange(15000, 17000):,}  {c[5]}tflops: {rng.gauss(700, 5):.2f}  {c[6]}mfu: {rng.gauss(70, 1):.2f}%\x1b[39m"
            )
            if rng.random() < 0.08:
                _noise(rng, out, lambda r: f"[rank{r}]:")
        if step % 100 == 0:
            out.append(f"[rank0]:[titan] {stamp} - root - INFO - [GC] Peforming periodical GC collection 0.{rng.randrange(10, 99)} seconds")
        if step % 500 == 0:
            out.append(f"[rank0]:[titan] {stamp} - root - INFO - Saving the checkpoint (or staging if async is enabled).")
            out.append(f"[rank0]:[titan] {stamp} - root - INFO - [GC] GC collection invoked by checkpointer. 0.04 seconds")
            out.append(f"[rank0]:[titan] {stamp} - root - INFO - Finished saving the checkpoint (or staging if async is enabled)in 7.43 seconds.")
    yield from out[:num_lines]


def hf_trainer(num_lines: int, rng: random.Random) -> Iterator[str]:
    total = 300_000
    out = [
        "***** Running training *****",
        "  Num examples = 9,600,000",
        "  Num Epochs = 1",
        "  Instantaneous batch size per device = 8",
        f"  Total optimization steps = {total:,}",
        "  Number of trainable parameters = 124,439,808",
    ]
    step = 0
    while len(out) < num_lines:
        bars = []
        for _ in range(10):
            step += 1
            pct = 100 * step // total
            bars.append(f"{pct:3d}%|{'#' * (pct // 10):<10}| {step}/{total} [{step // 120:02d}:{step % 60:02d}<{(total - step) // 120}:00, {rng.gauss(2.0, 0.05):.2f}it/s]")
        tokens = step * 4096 * 32
        out.append(
            "\r".join(bars) + f"{{'loss': {_loss(step, rng):.4f}, 'grad_norm': {rng.gauss(0.95, 0.03):.6f}, "
            f"'learning_rate': {5e-5 * (1 - step / total):.6e}, 'epoch': {step / total:.2f}, 'num_input_tokens_seen': {tokens}}}"
        )
        if rng.random() < 0.4:
            _noise(rng, out)
        if step % 500 == 0:
            out.append("***** Running Evaluation *****")
            out.append("  Num examples = 2000")
            out.append("  Batch size = 8")
            out.append(f"{{'eval_loss': {_loss(step, rng) + 0.1:.4f}, 'eval_runtime': 12.31, 'eval_samples_per_second': 162.4, 'epoch': {step / total:.2f}}}")
        if step % 2000 == 0:
            out.append(f"Saving model checkpoint to out/checkpoint-{step}")
            out.append(f"Configuration saved in out/checkpoint-{step}/config.json")
            out.append(f"Model weights saved in out/checkpoint-{step}/model.safetensors")
    yield from out[:num_lines]


def nanogpt(num_lines: int, rng: random.Random) -> Iterator[str]:
    out = ["Initializing a new model from scratch", "tokens per iteration will be: 491,520", "number of parameters: 123.59M"]
    step = 0
    while len(out) < num_lines:
        out.append(f"iter {step}: loss {_loss(step, rng):.4f}, time {rng.gauss(500, 5):.2f}ms, mfu {rng.gauss(26, 0.3):.2f}%")
        if step % 250 == 0:
            out.append(f"step {step}: train loss {_loss(step, rng):.4f}, val loss {_loss(step, rng) + 0.06:.4f}")
            out.append("saving checkpoint to out")
        if rng.random() < 0.3:
            _noise(rng, out)
        step += 1
    yield from out[:num_lines]


def lightning(num_lines: int, rng: random.Random) -> Iterator[str]:
    out = ["GPU available: True (cuda), used: True", "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3]"]
    epoch, batch, per_epoch = 0, 0, 20_000
    while len(out) < num_lines:
        bars = []
        for _ in range(rng.randint(3, 8)):
            batch += 5
            if batch > per_epoch:
                epoch, batch = epoch + 1, 5
            pct = 100 * batch // per_epoch
            bars.append(
                f"Epoch {epoch}:  {pct:2d}%|{'#' * (pct // 10):<10}| {batch}/{per_epoch} [{batch // 6:02d}:{batch % 60:02d}<01:40,  "
                f"5.91it/s, v_num=3, train_loss_step={_loss(epoch * per_epoch + batch, rng):.3f}]"
            )
        out.append("\r".join(bars))
        if rng.random() < 0.3:
            _noise(rng, out)
    yield from out[:num_lines]


GENERATORS: dict[str, Callable[[int, random.Random], Iterator[str]]] = {
    "megatron": megatron,
    "torchtitan": torchtitan,
    "hf": hf_trainer,
    "nanogpt": nanogpt,
    "lightning": lightning,
}

# -- readers ---------------------------------------------------------------------------------


def _old_reader() -> types.ModuleType | None:
    """The regex-per-format reader of ``OLD_READER_COMMIT``, loaded from git (None if unavailable)."""
    root = Path(__file__).resolve().parent.parent
    try:
        source = subprocess.run(
            ["git", "show", f"{OLD_READER_COMMIT}:ckptctl/core/losslog.py"],
            cwd=root, capture_output=True, text=True, check=True, timeout=30,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    module = types.ModuleType("old_losslog")
    sys.modules["old_losslog"] = module  # dataclasses look their module up
    exec(compile(source, f"{OLD_READER_COMMIT}:ckptctl/core/losslog.py", "exec"), module.__dict__)
    return module


def _parse_all(parser_type: Callable[[], object], lines: list[str]) -> int:
    parser = parser_type()
    feed = parser.feed  # type: ignore[attr-defined]
    n = 0
    for line in lines:
        n += len(feed(line))
    flush = getattr(parser, "flush", None)  # the old reader has none
    return n + (len(flush()) if flush is not None else 0)


def _events(parser: LossLogParser, lines: list[str]) -> list[str]:
    out = [repr(e) for line in lines for e in parser.feed(line)]
    return out + [repr(e) for e in parser.flush()]


def _general() -> LossLogParser:
    return LossLogParser(fast=False)


def _anchor_loop(path: Path) -> int:
    n = 0
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        for line in f:
            if "loss" in line:
                n += 1
    return n


def _best(fn: Callable[[], object], repeat: int, clock: Callable[[], float] = time.process_time) -> float:
    """Best of ``repeat`` runs; CPU time of this process by default (the machine is shared).

    ``re``'s cache of compiled patterns is emptied before each run: a run pays the compiles a
    fresh ``ckptctl watch`` process pays (line templates, line plans), not the previous run's."""
    best = float("inf")
    for _ in range(repeat):
        re.purge()
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def _rate(num_lines: int, seconds: float) -> str:
    return f"{num_lines / seconds / 1000:8.1f}k" if seconds > 0 else "     inf"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=20_000, help="physical lines per log (default 20000; 200000 for a long run)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best counts")
    ap.add_argument("--formats", default=",".join(GENERATORS), help="comma-separated subset of " + ",".join(GENERATORS))
    ap.add_argument("--no-old", action="store_true", help="skip the old reader")
    ap.add_argument("--no-e2e", action="store_true", help="skip the end-to-end watch_log figure")
    ap.add_argument("--profile", metavar="FORMAT", help="cProfile the reader on one format's log and exit")
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    unknown = [f for f in formats if f not in GENERATORS]
    if unknown:
        ap.error(f"unknown format(s) {unknown}; choose from {list(GENERATORS)}")
    old = None if args.no_old else _old_reader()
    grep = shutil.which("grep")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ckptctl-bench-watch-read-") as tmp:
        logs: dict[str, tuple[Path, list[str]]] = {}
        for name in [args.profile] if args.profile else formats:
            lines = list(GENERATORS[name](args.lines, random.Random(name)))
            path = Path(tmp) / f"{name}.log"
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            logs[name] = (path, lines)
        if args.profile:
            _path, lines = logs[args.profile]
            prof = cProfile.Profile()
            prof.runcall(_parse_all, LossLogParser, lines)
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            return 0
        print(
            f"ckptctl watch reader: {args.lines} lines per log, best of {args.repeat}; "
            f"k lines/s, CPU time (ratio: ckptctl / plain Python loop over the same file)"
        )
        cols = ["ckptctl", "general", "e2e", "old", "py loop", "grep -c", "ratio", "vs old", "points", "same"]
        print(f"{'log':>10} | " + " | ".join(f"{c:>9}" for c in cols))
        print("-" * (13 + 12 * len(cols)))
        sums = {"new": 0.0, "old": 0.0, "loop": 0.0, "general": 0.0}
        all_same = True
        for name, (path, lines) in logs.items():
            n = len(lines)
            points = _parse_all(LossLogParser, lines)
            t_new = _best(lambda lines=lines: _parse_all(LossLogParser, lines), args.repeat)
            # the equality check: line templates give exactly the general reader's events
            same = _events(LossLogParser(), lines) == _events(_general(), lines)
            all_same = all_same and same
            t_general = _best(lambda lines=lines: _parse_all(_general, lines), 1)
            t_e2e = float("nan")
            if not args.no_e2e:
                t_e2e = _best(lambda path=path: watch_log(str(path)), args.repeat)
            t_old = float("nan")
            if old is not None:
                t_old = _best(lambda lines=lines: _parse_all(old.LossLogParser, lines), args.repeat)
            t_loop = _best(lambda path=path: _anchor_loop(path), args.repeat)
            t_grep = float("nan")
            if grep is not None:
                t_grep = _best(lambda path=path: subprocess.run([grep, "-c", "loss", str(path)], capture_output=True, check=False), args.repeat, time.perf_counter)
            sums["new"] += t_new
            sums["old"] += t_old
            sums["loop"] += t_loop
            sums["general"] += t_general
            cells = [
                _rate(n, t_new), _rate(n, t_general), _rate(n, t_e2e) if t_e2e == t_e2e else "-", _rate(n, t_old) if t_old == t_old else "-",
                _rate(n, t_loop), _rate(n, t_grep) if t_grep == t_grep else "-",
                f"1/{t_new / t_loop:.0f}", f"{t_old / t_new:.2f}x" if t_old == t_old else "-", str(points),
                "yes" if same else "NO",
            ]  # fmt: skip
            print(f"{name:>10} | " + " | ".join(f"{c:>9}" for c in cells), flush=True)
        total = args.lines * len(logs)
        old_total = _rate(total, sums["old"]) if old is not None else "-"
        vs_old = f"{sums['old'] / sums['new']:.2f}x" if old is not None else "-"
        cells = [_rate(total, sums["new"]), _rate(total, sums["general"]), "", old_total, _rate(total, sums["loop"]), "",
                 f"1/{sums['new'] / sums['loop']:.0f}", vs_old, "", "yes" if all_same else "NO"]  # fmt: skip
        print(f"{'all':>10} | " + " | ".join(f"{c:>9}" for c in cells))
    print(f"\n(vs old: >1 means ckptctl is faster than the old reader; general: the reader without line templates; "
          f"same: both give the same events; {time.perf_counter() - started:.0f} s)")
    return 0 if args.profile or all_same else 1


if __name__ == "__main__":
    sys.exit(main())
