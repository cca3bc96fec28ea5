"""Benchmarks for list/locate/verify (issue 2), each figure next to its anchor, in one run.

- quick verify of a many-shard checkpoint vs trying ``dcp.load`` on it (target >= 100x);
- deep verify throughput vs ``cat`` of the same files (target >= 0.7x);
- ``locate`` over 5,000 step dirs, local and on a local S3-compatible server, with the
  number of HTTP requests counted at the server;
- ``ckptctl --help`` wall time vs ``python -c "import torch"`` (target < 0.3 s).

Run: ``.venv/bin/python bench/bench_verify.py [--quick]``. Data goes to ``.bench-data/``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / ".bench-data"
sys.path.insert(0, str(REPO))


def _timeit(fn, repeat: int = 3) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_checkpoint(path: Path, *, num_tensors: int, numel: int, many_files: bool, threads: int = 1) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    if (path / ".metadata").exists():
        return
    g = torch.Generator().manual_seed(0)
    sd = {f"layer{i}.weight": torch.randn(numel, generator=g) for i in range(num_tensors)}
    sd["step"] = 100  # type: ignore[assignment]
    import warnings

    warnings.filterwarnings("ignore")
    writer = dcp.FileSystemWriter(str(path), single_file_per_rank=not many_files, thread_count=threads)
    dcp.save(sd, storage_writer=writer)


def bench_quick_verify_vs_dcp_load(quick: bool) -> dict[str, float]:
    import torch
    import torch.distributed.checkpoint as dcp

    from ckptctl.runroot.locate import verify_checkpoint

    # One file per tensor: as many shard files as a large job's ranks x threads. dcp.load's
    # cost grows with the bytes, verify's with the entries, so the ratio depends on bytes per
    # record: 4 MiB is what a 7B model + AdamW (~84 GB) sharded over 64 ranks (~19k records)
    # averages. The anchor reads every byte, as a resume does.
    n, numel = (500, 16384) if quick else (1024, 1 << 20)
    path = DATA / f"many_shards_{n}_{numel}"
    write_checkpoint(path, num_tensors=n, numel=numel, many_files=True)
    num_files = sum(1 for p in path.iterdir() if p.suffix == ".distcp")
    t_verify = _timeit(lambda: verify_checkpoint(str(path)), repeat=15)  # ms each: best of many
    target = {f"layer{i}.weight": torch.empty(numel) for i in range(n)}
    target["step"] = 0  # type: ignore[assignment]

    def load() -> None:
        dcp.load(target, checkpoint_id=str(path))

    t_load = _timeit(load, repeat=2)
    print(f"quick verify, {num_files} shard files ({sum(p.stat().st_size for p in path.iterdir()) / 1e6:.0f} MB):")
    print(f"  ckptctl verify      {t_verify * 1000:8.1f} ms")
    print(f"  dcp.load            {t_load * 1000:8.1f} ms")
    print(f"  ratio (load/verify) {t_load / t_verify:8.1f}x   (target >= 100x)")
    scan = bench_metadata_scan(path / ".metadata")
    return {"quick_verify_s": t_verify, "dcp_load_s": t_load, "ratio": t_load / t_verify, **scan}


def bench_metadata_scan(metadata: Path) -> dict[str, float]:
    """The opcode pre-scan (core/verify/pickle_shape.py) next to the restricted unpickling it guards."""
    import io

    from ckptctl.adapters.dcp_metadata import _RestrictedUnpickler
    from ckptctl.core.verify.pickle_shape import check_shape

    data = metadata.read_bytes()
    t_scan = _timeit(lambda: check_shape(data), repeat=15)
    t_load = _timeit(lambda: _RestrictedUnpickler(io.BytesIO(data)).load(), repeat=15)
    print(f"  .metadata ({len(data) / 1e3:.0f} kB): shape scan {t_scan * 1000:.2f} ms, "
          f"restricted unpickle {t_load * 1000:.2f} ms ({t_scan / t_load:.1f}x)")
    return {"metadata_scan_s": t_scan, "metadata_unpickle_s": t_load}


def _drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def bench_deep_vs_cat(quick: bool) -> dict[str, float]:
    from ckptctl.runroot.locate import verify_checkpoint

    mb = 256 if quick else 1024
    path = DATA / f"deep_{mb}mb"
    write_checkpoint(path, num_tensors=64, numel=mb * (1 << 20) // 4 // 64, many_files=False, threads=4)
    files = sorted(str(p) for p in path.iterdir() if p.is_file())
    size = sum(os.path.getsize(f) for f in files)

    def cat() -> None:
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)

    results: dict[str, float] = {}
    cat()  # warm the page cache
    t_cat = _timeit(cat)
    t_deep = _timeit(lambda: verify_checkpoint(str(path), deep=True))
    from ckptctl.adapters.fastcrc import CRC32_IMPLEMENTATION

    print(f"deep verify ({CRC32_IMPLEMENTATION} CRC-32), {len(files)} files, {size / 1e6:.0f} MB, page cache warm:")
    print(f"  cat                 {size / t_cat / 1e6:8.0f} MB/s")
    print(f"  ckptctl --deep      {size / t_deep / 1e6:8.0f} MB/s")
    print(f"  ratio (deep/cat)    {t_cat / t_deep:8.2f}x   (target >= 0.7x)")
    results.update(cat_hot_MBps=size / t_cat / 1e6, deep_hot_MBps=size / t_deep / 1e6, ratio_hot=t_cat / t_deep)
    if _drop_caches():
        t0 = time.perf_counter()
        cat()
        t_cat_cold = time.perf_counter() - t0
        _drop_caches()
        t0 = time.perf_counter()
        verify_checkpoint(str(path), deep=True)
        t_deep_cold = time.perf_counter() - t0
        print("  page cache dropped:")
        print(f"  cat                 {size / t_cat_cold / 1e6:8.0f} MB/s")
        print(f"  ckptctl --deep      {size / t_deep_cold / 1e6:8.0f} MB/s")
        print(f"  ratio (deep/cat)    {t_cat_cold / t_deep_cold:8.2f}x")
        results.update(ratio_cold=t_cat_cold / t_deep_cold)
    else:
        print("  (cannot drop the page cache here: cold-cache figures skipped)")
    return results


def _make_5000(root: Path, template: Path, num_steps: int) -> None:
    if (root / "DONE").exists():
        return
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    files = [p for p in template.iterdir() if p.is_file()]
    for step in range(1, num_steps + 1):
        d = root / f"step_{step * 10}"
        d.mkdir()
        for f in files:
            os.link(f, d / f.name)
    # the two newest are broken: no .metadata (crash before commit) and a missing shard
    (root / f"step_{num_steps * 10}" / ".metadata").unlink()
    shard = next((root / f"step_{(num_steps - 1) * 10}").glob("*.distcp"))
    shard.unlink()
    (root / "DONE").write_text("")


def bench_locate(quick: bool) -> dict[str, float]:
    from ckptctl.runroot.locate import find_latest_complete
    from ckptctl.runroot.reports import CheckOptions

    # The template holds weights only: accept model-only checkpoints, since this measures the
    # cost of probing newest first, not locate's resume policy (which passes over them).
    opts = CheckOptions(include_model_only=True)
    num = 1000 if quick else 5000
    template = DATA / "tiny_template"
    write_checkpoint(template, num_tensors=4, numel=256, many_files=False)
    root = DATA / f"root_{num}"
    _make_5000(root, template, num)
    (root / "DONE").unlink()
    t_local = _timeit(lambda: find_latest_complete(str(root), options=opts))
    (root / "DONE").write_text("")
    res = find_latest_complete(str(root), options=opts)
    assert res.checkpoint is not None
    print(f"locate over {num} step dirs (2 newest broken):")
    print(f"  local disk          {t_local * 1000:8.1f} ms  -> {res.checkpoint.name}")
    out: dict[str, float] = {"locate_local_s": t_local}

    try:
        import s3fs
        from moto.server import ThreadedMotoServer
    except ImportError:
        print("  (s3fs/moto not installed: S3 figures skipped)")
        return out
    port = _free_port()
    counter = {"n": 0}

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            counter["n"] += 1

    wlog = logging.getLogger("werkzeug")
    wlog.addHandler(Count())
    wlog.setLevel(logging.INFO)
    wlog.propagate = False
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        CKPTCTL_STORAGE_OPTIONS=json.dumps({"client_kwargs": {"endpoint_url": endpoint}}),
    )
    try:
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)
        fs.mkdir("bench")
        t_up = time.perf_counter()
        payload = {}
        for d in root.iterdir():
            if d.is_dir():
                for f in d.iterdir():
                    payload[f"bench/run/{d.name}/{f.name}"] = f.read_bytes()
        fs.pipe(payload)
        print(f"  (uploaded {len(payload)} objects in {time.perf_counter() - t_up:.0f} s)")
        counter["n"] = 0
        t0 = time.perf_counter()
        res = find_latest_complete("s3://bench/run", options=opts)
        t_s3 = time.perf_counter() - t0
        n_req = counter["n"]
        print(f"  S3 (moto, 127.0.0.1) {t_s3 * 1000:7.1f} ms, {n_req} HTTP requests -> {res.checkpoint.name if res.checkpoint else None}")
        print(f"  a per-directory scan would need >= {num + 1} requests (one listing per step dir)")
        out.update(locate_s3_s=t_s3, locate_s3_requests=n_req)
    finally:
        server.stop()
    return out


def bench_help(quick: bool) -> dict[str, float]:
    exe = [sys.executable, "-m", "ckptctl", "--help"]
    t_help = statistics.median(
        _timeit(lambda: subprocess.run(exe, capture_output=True, check=True), repeat=1) for _ in range(5)
    )
    t_torch = statistics.median(
        _timeit(lambda: subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, check=True), repeat=1)
        for _ in range(3)
    )
    print("startup:")
    print(f"  ckptctl --help      {t_help * 1000:8.0f} ms   (target < 300 ms)")
    print(f"  python -c 'import torch' {t_torch * 1000:5.0f} ms")
    print(f"  ratio (torch/help)  {t_torch / t_help:8.1f}x")
    return {"help_s": t_help, "import_torch_s": t_torch}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller data (CI smoke run)")
    benches = {
        "quick_verify": bench_quick_verify_vs_dcp_load,
        "deep_verify": bench_deep_vs_cat,
        "locate": bench_locate,
        "startup": bench_help,
    }
    ap.add_argument("--only", choices=sorted(benches), action="append", help="run only this benchmark (repeatable)")
    args = ap.parse_args()
    DATA.mkdir(exist_ok=True)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    results = {name: bench(args.quick) for name, bench in benches.items() if not args.only or name in args.only}
    (DATA / "bench_verify.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
