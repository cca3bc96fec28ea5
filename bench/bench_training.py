"""Benchmarks for ckptctl.training (issue 3), each figure next to its anchor, in one run.

- training stall per checkpoint with ``Checkpointer(async_save=True)`` vs a synchronous stock
  ``dcp.save`` of the same state (target: stall <= 0.2x sync);
- checksum overhead: the manifest's CRC-32s (computed by each rank as its bytes go out) vs the
  save itself (target: <= 10% of the sync save time). Measured in place: the same ckptctl save
  with the CRC replaced by a no-op, paired with the real one in the same round; the CRC of the
  same bytes from memory is shown as a floor. The rest of the commit protocol (manifest,
  marker, fsyncs, rename) is shown separately.

One process, CPU, a GPT-like state (weights + AdamW moments + LR scheduler + sampler + RNG).
The modes run interleaved, in a rotating order, with an idle gap before each save (the
training steps between two checkpoints). Ratios use each mode's best save (least disturbed:
on a shared machine other jobs only add time); medians are printed beside them. Run: ``.venv/bin/python bench/bench_training.py``
(``--tmpfs`` adds a second run on /dev/shm: no I/O, the worst case for relative overheads).
Data goes to ``.bench-data/training`` and is deleted afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / ".bench-data" / "training"
sys.path.insert(0, str(REPO))


def build_state(params_m: float) -> dict[str, Any]:
    import torch

    from ckptctl.training import ResumableBatchSampler

    dim = 512
    layers = max(1, round(params_m * 1e6 / (12 * dim * dim)))
    torch.manual_seed(0)
    blocks = [
        torch.nn.Sequential(
            torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim)
        )
        for _ in range(layers)
    ]
    attn = [torch.nn.Linear(dim, 4 * dim) for _ in range(layers)]
    model = torch.nn.ModuleDict(
        {"mlp": torch.nn.ModuleList(blocks), "attn": torch.nn.ModuleList(attn)}
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():  # materialise the AdamW moments
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    sched = torch.optim.lr_scheduler.LinearLR(opt)
    return {
        "model": model,
        "optimizer": opt,
        "scheduler": sched,
        "data": ResumableBatchSampler(1024, 64),
    }


def state_bytes(state: dict[str, Any]) -> int:
    return 3 * sum(p.numel() * p.element_size() for p in state["model"].parameters())


def stock_dcp_save(state: dict[str, Any], path: Path) -> float:
    """What a script without ckptctl does: get_state_dict + dcp.save of the same state, synchronous."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from ckptctl.training import capture_rng_state

    t = time.perf_counter()
    msd, osd = get_state_dict(state["model"], state["optimizer"])
    sd = {
        "model": msd,
        "optimizer": osd,
        "scheduler": state["scheduler"].state_dict(),
        "data": state["data"].state_dict(),
        "rng": capture_rng_state(),
    }
    dcp.save(sd, checkpoint_id=str(path))
    return time.perf_counter() - t


def crc_from_memory(path: Path) -> float:
    from ckptctl.adapters import fastcrc

    crc32 = fastcrc.crc32
    blobs = [p.read_bytes() for p in path.iterdir() if p.is_file()]
    t = time.perf_counter()
    for b in blobs:
        crc32(b, 0)
    return time.perf_counter() - t


def measure(state: dict[str, Any], base: Path, repeat: int, gap_s: float) -> list[dict[str, float]]:
    """One dict of timings per round (round 0 warms caches and staging buffers; dropped)."""
    from ckptctl.training import Checkpointer, _dcp_io

    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    sync_ck = Checkpointer(str(base / "sync"), preemption_signals=None)
    nocrc_ck = Checkpointer(str(base / "nocrc"), preemption_signals=None)
    async_ck = Checkpointer(str(base / "async"), async_save=True, preemption_signals=None)
    real_crc = _dcp_io.fast_crc32
    rounds: list[dict[str, float]] = []

    def run_stock(i: int, r: dict[str, float]) -> None:
        d = base / f"stock-{i}"
        r["stock"] = stock_dcp_save(state, d)
        r["crc_mem"] = crc_from_memory(d)
        shutil.rmtree(d)

    def run_sync(i: int, r: dict[str, float]) -> None:
        t = time.perf_counter()
        sync_ck.save(i + 1, state).result()
        r["ours"] = time.perf_counter() - t
        shutil.rmtree(base / "sync" / f"step_{i + 1}")

    def no_crc(data: Any, value: int = 0) -> int:
        return 0

    def run_nocrc(i: int, r: dict[str, float]) -> None:
        _dcp_io.fast_crc32 = no_crc  # the same save, minus the checksum work
        try:
            t = time.perf_counter()
            nocrc_ck.save(i + 1, state).result()
            r["nocrc"] = time.perf_counter() - t
        finally:
            _dcp_io.fast_crc32 = real_crc
        shutil.rmtree(base / "nocrc" / f"step_{i + 1}")

    def run_async(i: int, r: dict[str, float]) -> None:
        t = time.perf_counter()
        handle = async_ck.save(i + 1, state)
        r["stall"] = time.perf_counter() - t
        r["background"] = handle.result().save_duration_s  # training would run meanwhile
        shutil.rmtree(base / "async" / f"step_{i + 1}")

    modes: list[Callable[[int, dict[str, float]], None]] = [
        run_stock,
        run_sync,
        run_nocrc,
        run_async,
    ]
    for i in range(repeat + 1):
        r: dict[str, float] = {}
        k = i % len(modes)
        for fn in modes[k:] + modes[:k]:
            time.sleep(gap_s)
            fn(i, r)
        if i:
            rounds.append(r)
    for ck in (sync_ck, nocrc_ck, async_ck):
        ck.close()
    shutil.rmtree(base, ignore_errors=True)
    return rounds


def summarise(where: str, size: int, rounds: list[dict[str, float]]) -> dict[str, float]:
    """Print the table; return the two target ratios, computed from each mode's best save.

    Best-of-N (the least disturbed save of each mode) is the estimate: on a shared machine
    other jobs only ever add time, in bursts that pairing does not cancel. Medians are shown
    beside it for context."""
    best = {k: min(r[k] for r in rounds) for k in rounds[0]}
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    ratios = {
        "stall": best["stall"] / best["stock"],
        "crc": (best["ours"] - best["nocrc"]) / best["stock"],
        # the same figure from the saves of each round, paired (robust to a few disturbed saves)
        "crc_paired": statistics.median(r["ours"] - r["nocrc"] for r in rounds) / med["stock"],
        "crc_mem": best["crc_mem"] / best["stock"],
        "commit": (best["nocrc"] - best["stock"]) / best["stock"],
        "total": (best["ours"] - best["stock"]) / best["stock"],
    }
    print(f"\n[{where}] {len(rounds)} rounds, each mode saves once per round")
    print(f"  {'':48s} {'best':>9s} {'median':>9s}")
    rows = [
        ("stock dcp.save, synchronous (anchor)", "stock"),
        ("ckptctl sync save", "ours"),
        ("ckptctl sync save, CRC replaced by a no-op", "nocrc"),
        ("  CRC-32 of the same bytes, from memory", "crc_mem"),
        ("ckptctl async save: training stall", "stall"),
        ("ckptctl async save: background write + commit", "background"),
    ]
    for name, key in rows:
        print(f"  {name:48s} {best[key] * 1e3:7.1f}ms {med[key] * 1e3:7.1f}ms")
    print(f"  anchor throughput (best): {size / 2**20 / best['stock']:.0f} MiB/s")
    print(f"  async stall / anchor:                         {ratios['stall']:.3f}x")
    print(
        f"  checksum overhead (in place) / anchor:        {ratios['crc']:+.1%}  (floor, CRC from memory: {ratios['crc_mem']:.1%})"
    )
    print(
        f"  checksum overhead, median of per-round pairs:  {ratios['crc_paired']:+.1%}  (with the CRC overlapped with the write, both are noise around 0)"
    )
    print(f"  rest of the commit protocol / anchor:         {ratios['commit']:+.1%}")
    print(f"  ckptctl sync save, all in / anchor:           {ratios['total']:+.1%}")
    return ratios


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--params-m", type=float, default=16.0, help="model size in millions of parameters"
    )
    ap.add_argument(
        "--repeat", type=int, default=9, help="measured rounds (each saves once per mode)"
    )
    ap.add_argument("--gap-s", type=float, default=0.2, help="idle time before each save")
    ap.add_argument("--tmpfs", action="store_true", help="also run on /dev/shm")
    ap.add_argument(
        "--crc", choices=("fastest", "zlib"), default="fastest", help="force the stdlib CRC-32"
    )
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import torch

    from ckptctl.adapters import fastcrc
    from ckptctl.training import _dcp_io

    if args.crc == "zlib":
        import zlib

        fastcrc.crc32 = _dcp_io.fast_crc32 = zlib.crc32
        fastcrc.CRC32_IMPLEMENTATION = "zlib"
    CRC32_IMPLEMENTATION = fastcrc.CRC32_IMPLEMENTATION

    torch.set_num_threads(1)
    state = build_state(args.params_m)
    size = state_bytes(state)
    print(
        f"state: {size / 2**20:.0f} MiB (weights + AdamW moments; + scheduler, sampler, RNG); "
        f"1 process, CPU, {os.cpu_count()} cores; CRC-32: {CRC32_IMPLEMENTATION}"
    )
    results = {
        "disk": summarise("disk: .bench-data/", size, measure(state, DATA, args.repeat, args.gap_s))
    }
    if args.tmpfs and Path("/dev/shm").is_dir():
        base = Path("/dev/shm") / f"ckptctl-bench-{os.getpid()}"
        results["tmpfs"] = summarise(
            "tmpfs: /dev/shm", size, measure(state, base, args.repeat, args.gap_s)
        )
    print()
    for where, r in results.items():
        print(
            f"{where}: async stall <= 0.2x sync: {'PASS' if r['stall'] <= 0.2 else 'MISS'} ({r['stall']:.3f}x); "
            f"checksum overhead <= 10% of sync save: {'PASS' if r['crc'] <= 0.10 else 'MISS'} ({r['crc']:+.1%}; paired median {r['crc_paired']:+.1%})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
