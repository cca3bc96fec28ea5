"""Benchmarks for list/locate/verify (issue 2), each figure next to its anchor, in one run.

- quick verify of a many-shard checkpoint vs trying ``dcp.load`` on it (target >= 100x);
- deep verify vs ``cat`` of the same files, whole process, page cache warm and dropped, on
  three checkpoint shapes (target >= 0.9x), each figure the median of several runs;
- ``locate`` over 5,000 step dirs, local and on a local S3-compatible server, with the
  number of HTTP requests counted at the server;
- ``ckptctl --help`` wall time vs ``python -c "import torch"`` (target < 0.3 s), and the fixed
  start of ``ckptctl --version`` and ``verify --deep --json`` of a tiny checkpoint.

The timed ckptctl processes run with bytecode cached (``compileall`` first, and without
``PYTHONDONTWRITEBYTECODE``), as an installed package has it: compiling ckptctl's sources at
every start would add ~0.2 s that no user pays.

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


def child_env() -> dict[str, str]:
    """The environment of a timed ckptctl process: this tree first, no progress bar, bytecode cached."""
    env = dict(os.environ, CKPTCTL_NO_PROGRESS="1", PYTHONPATH=str(REPO))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_bytecode() -> None:
    """Write ckptctl's bytecode (``__pycache__``, git-ignored), as ``pip install`` does."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO / "ckptctl")],
        env=child_env(), stdout=subprocess.DEVNULL, check=True,
    )  # fmt: skip


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
    """Quick verify phase by phase: the listing, the opcode pre-scan (core/verify/pickle_shape.py,
    with and without replaying repeated units), the restricted unpickling it guards, the
    conversion to an index and the contract checks (each the best of 15 runs)."""
    import io

    from ckptctl.adapters.dcp_metadata import _RestrictedUnpickler, to_index
    from ckptctl.adapters.storage import Storage
    from ckptctl.core.verify.contract import check_index
    from ckptctl.core.verify.pickle_shape import check_shape

    data = metadata.read_bytes()
    storage, root = Storage.open_directory(str(metadata.parent))
    files = {e.name: e.size_bytes for e in storage.list_dir(root) if not e.is_dir}
    unpickled = _RestrictedUnpickler(io.BytesIO(data)).load()
    index = to_index(unpickled)
    t_list = _timeit(lambda: storage.list_dir(root), repeat=15)
    t_scan = _timeit(lambda: check_shape(data), repeat=15)
    t_walk = _timeit(lambda: check_shape(data, replay=False), repeat=15)
    t_load = _timeit(lambda: _RestrictedUnpickler(io.BytesIO(data)).load(), repeat=15)
    t_index = _timeit(lambda: to_index(unpickled), repeat=15)
    t_check = _timeit(lambda: check_index(index, files), repeat=15)
    print(f"  .metadata ({len(data) / 1e3:.0f} kB): shape scan {t_scan * 1000:.2f} ms "
          f"(every opcode walked: {t_walk * 1000:.2f} ms), restricted unpickle {t_load * 1000:.2f} ms")
    print(f"  phases: listing {t_list * 1000:.2f} ms, shape scan {t_scan * 1000:.2f} ms, unpickle "
          f"{t_load * 1000:.2f} ms, index {t_index * 1000:.2f} ms, contract checks {t_check * 1000:.2f} ms")
    return {"metadata_scan_s": t_scan, "metadata_scan_walk_s": t_walk, "metadata_unpickle_s": t_load,
            "listing_s": t_list, "to_index_s": t_index, "check_index_s": t_check}


def _drop_caches() -> bool:
    """Drop the page cache (root only): the next read of a file comes from the disk."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


#: Checkpoint shapes for the deep-verify bench: (description, tensors, files). The bytes are
#: split evenly over the tensors (one DCP record each).
DEEP_SHAPES: dict[str, tuple[str, int, str]] = {
    "few-large": ("4 files (4 writer threads), 64 records each 1/64 of the size", 64, "threads4"),
    "file-per-rank": ("1 file (one rank, one writer thread), 256 records", 256, "one"),
    "many-small": ("one file per record, 1,024 files", 1024, "per-tensor"),
}


def _deep_shape(name: str, total_mb: int) -> Path:
    _what, num_tensors, files = DEEP_SHAPES[name]
    path = DATA / f"deep_{name}_{total_mb}mb"
    numel = total_mb * (1 << 20) // 4 // num_tensors
    write_checkpoint(
        path, num_tensors=num_tensors, numel=numel, many_files=files == "per-tensor",
        threads=4 if files == "threads4" else 1,
    )  # fmt: skip
    return path


def _run_timed(argv: list[str], env: dict[str, str] | None = None, cpu: list[float] | None = None) -> float:
    """Wall seconds of one process; its CPU seconds (user + system, all threads) appended to ``cpu``."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall


def bench_deep_vs_cat(quick: bool, repeat: int = 5, size_mb: int | None = None) -> dict[str, object]:
    """Whole-process ``ckptctl verify --deep`` vs ``cat`` of the same files, warm and cold, per shape.

    Each figure is the median of ``repeat`` runs, ``cat`` and ckptctl alternating so that a
    change in the machine's load hits both. Cold: the page cache is dropped before each run
    (root only; said so otherwise). Also: the same deep check in-process (no interpreter
    start, no imports), to separate the per-byte cost from the fixed one.
    """
    from ckptctl.adapters.fastcrc import CRC32_IMPLEMENTATION
    from ckptctl.runroot.locate import verify_checkpoint

    total_mb = size_mb or (256 if quick else 2048)
    env = child_env()
    exe = [sys.executable, "-m", "ckptctl", "verify", "--deep"]
    can_drop = _drop_caches()
    print(
        f"deep verify vs cat ({CRC32_IMPLEMENTATION} CRC-32, {os.cpu_count()} cores), median of {repeat}, "
        f"load average before: {loadavg()}"
    )
    if not can_drop:
        print("  (not root: cannot drop the page cache, cold figures skipped)")
    results: dict[str, object] = {"loadavg_before": loadavg(), "cold_measured": can_drop}
    print(
        f"  {'shape':<14} {'cache':<5} {'cat MB/s':>9} {'deep MB/s':>10} {'ratio':>6}   {'in-process MB/s':>15} "
        f"{'ratio':>6}   {'CPU s: cat':>10} {'deep':>5}"
    )
    for name in DEEP_SHAPES:
        path = _deep_shape(name, total_mb)
        files = sorted(str(p) for p in path.iterdir() if p.is_file())
        size = sum(os.path.getsize(f) for f in files)
        cat = ["cat", *files]
        deep = [*exe, str(path)]
        shape: dict[str, float] = {"bytes": size, "files": len(files)}
        for cache in ("warm", "cold"):
            if cache == "cold" and not can_drop:
                continue
            t_cat: list[float] = []
            t_deep: list[float] = []
            t_inproc: list[float] = []
            c_cat: list[float] = []
            c_deep: list[float] = []
            if cache == "warm":
                _run_timed(cat)
            for _ in range(repeat):
                if cache == "cold":
                    _drop_caches()
                t_cat.append(_run_timed(cat, cpu=c_cat))
                if cache == "cold":
                    _drop_caches()
                t_deep.append(_run_timed(deep, env, cpu=c_deep))
                if cache == "cold":
                    _drop_caches()
                t0 = time.perf_counter()
                verify_checkpoint(str(path), deep=True)
                t_inproc.append(time.perf_counter() - t0)
            m_cat, m_deep, m_in = (statistics.median(t) for t in (t_cat, t_deep, t_inproc))
            cpu_cat, cpu_deep = statistics.median(c_cat), statistics.median(c_deep)
            ratio = m_cat / m_deep
            print(
                f"  {name:<14} {cache:<5} {size / m_cat / 1e6:9.0f} {size / m_deep / 1e6:10.0f} {ratio:5.2f}x"
                f"   {size / m_in / 1e6:15.0f} {m_cat / m_in:6.2f}x   {cpu_cat:5.2f} {cpu_deep:5.2f}"
            )
            shape.update({
                f"cat_{cache}_s": m_cat, f"deep_{cache}_s": m_deep, f"deep_inprocess_{cache}_s": m_in,
                f"ratio_{cache}": ratio, f"ratio_inprocess_{cache}": m_cat / m_in,
                f"cat_{cache}_cpu_s": cpu_cat, f"deep_{cache}_cpu_s": cpu_deep,
            })  # fmt: skip
        results[name] = shape
    print(
        f"  ({total_mb} MB per shape; whole process; 'in-process': the same check without the interpreter "
        f"start and imports; CPU s: user + system of the whole process, all threads; target >= 0.9x; "
        f"load average after: {loadavg()})"
    )
    results["loadavg_after"] = loadavg()
    return results


def bench_parts(quick: bool, repeat: int = 3, size_mb: int | None = None) -> dict[str, object]:
    """``verify --deep`` as one process vs ``--launch torchrun --parts N`` (N processes here, then
    the merge), page cache warm, on the few-large shape. On one machine the parts share its
    cores and disk: this measures the cost of splitting (process starts, torchrun, the merge),
    not the gain of more nodes."""
    total_mb = size_mb or (256 if quick else 2048)
    path = _deep_shape("few-large", total_mb)
    env = child_env()
    one = [sys.executable, "-m", "ckptctl", "verify", "--deep", str(path)]
    files = [str(p) for p in path.iterdir() if p.is_file()]
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    print(f"deep verify split into parts ({total_mb} MB, few-large, warm), median of {repeat}, load {loadavg()}:")
    runs: dict[str, list[float]] = {"one process": []}
    counts = (1, 2, 4)
    for n in counts:
        runs[f"torchrun --parts {n}"] = []
    for _ in range(repeat):
        runs["one process"].append(_run_timed(one, env))
        for n in counts:
            runs[f"torchrun --parts {n}"].append(_run_timed([*one, "--launch", "torchrun", "--parts", str(n)], env))
    base = statistics.median(runs["one process"])
    out: dict[str, object] = {"loadavg": loadavg()}
    for name, ts in runs.items():
        m = statistics.median(ts)
        print(f"  {name:<20} {m:6.2f} s  ({base / m:4.2f}x one process)")
        out[name] = m
    return out


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


def bench_help(quick: bool, repeat: int = 7) -> dict[str, float]:
    """The fixed start: ``--help``, ``--version`` and ``verify --deep --json`` of a tiny checkpoint
    (whole processes, bytecode cached), next to Python's own start and ``import torch``."""
    env = child_env()
    tiny = DATA / "tiny_template"
    write_checkpoint(tiny, num_tensors=4, numel=256, many_files=False)
    exe = [sys.executable, "-m", "ckptctl"]
    runs = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "ckptctl --version": [*exe, "--version"],
        "ckptctl --help": [*exe, "--help"],
        "verify --deep --json (tiny)": [*exe, "verify", "--deep", "--json", str(tiny)],
    }
    print(f"startup (whole process, median of {repeat}, load {loadavg()}):")
    out: dict[str, float] = {}
    for name, argv in runs.items():
        _run_timed(argv, env)
        cpu: list[float] = []
        wall = statistics.median(_run_timed(argv, env, cpu=cpu) for _ in range(repeat))
        print(f"  {name:<28} {wall * 1000:6.0f} ms wall, {statistics.median(cpu) * 1000:4.0f} ms CPU")
        out[name.replace(" ", "_") + "_s"] = wall
        out[name.replace(" ", "_") + "_cpu_s"] = statistics.median(cpu)
    t_help = out["ckptctl_--help_s"]
    t_torch = statistics.median(
        _timeit(lambda: subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, check=True), repeat=1)
        for _ in range(3)
    )
    print(f"  python -c 'import torch'     {t_torch * 1000:6.0f} ms   (--help target < 300 ms; torch/help {t_torch / t_help:.1f}x)")
    return {"help_s": t_help, "import_torch_s": t_torch, **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller data (CI smoke run)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure (the median is shown)")
    ap.add_argument(
        "--size-mb", type=int, default=None,
        help="deep verify and parts: MB per checkpoint shape (default 2048, --quick 256; made once, kept)",
    )  # fmt: skip
    ap.add_argument("--out", type=Path, default=DATA / "bench_verify.json", help="where the JSON figures go")
    benches = {
        "quick_verify": bench_quick_verify_vs_dcp_load,
        "deep_verify": bench_deep_vs_cat,
        "parts": bench_parts,
        "locate": bench_locate,
        "startup": bench_help,
    }
    ap.add_argument("--only", choices=sorted(benches), action="append", help="run only this benchmark (repeatable)")
    args = ap.parse_args()
    DATA.mkdir(exist_ok=True)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    compile_bytecode()
    results: dict[str, object] = {}
    for name, bench in benches.items():
        if args.only and name not in args.only:
            continue
        if name == "deep_verify":
            results[name] = bench_deep_vs_cat(args.quick, repeat=args.repeat, size_mb=args.size_mb)
        elif name == "parts":
            results[name] = bench_parts(args.quick, repeat=min(args.repeat, 3), size_mb=args.size_mb)
        else:
            results[name] = bench(args.quick)
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
