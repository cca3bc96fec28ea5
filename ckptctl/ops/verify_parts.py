"""``verify --deep`` across processes and nodes: one part, the merge, and a launcher for both.

- ``run_part``: check part K of N of every checkpoint's segments (``core.verify.segments``)
  and, with ``part_out``, write the result to ``DIR/part-K-of-N.json``.
- ``merge_parts``: verify the target again (the quick check: milliseconds) taking every
  segment's deep result from the part files: the report is the one a one-node
  ``verify --deep`` gives, by construction (the same code merges the same segment results
  in the same order). The part files must come from the same checkpoint with the same
  result-changing options (their plan digest says so) and cover every segment once.
- ``launch_parts``: run the N parts as one Slurm job step (``srun``, one task per node)
  or as N processes under ``torchrun``, then merge them.

Part files are input: a malformed one is refused with one line naming the file and the
field. Nothing here writes outside the parts directory; nothing is written to a run root.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from ckptctl.adapters.storage import MAX_WHOLE_READ_BYTES, Storage
from ckptctl.core.verify import jsonsafe
from ckptctl.core.verify.segments import CheckpointParts, SegmentFormatError, SegmentResult
from ckptctl.errors import InputError, StorageError, UsageError
from ckptctl.runroot.locate import verify_target
from ckptctl.runroot.reports import CheckOptions, DeepSplit, ProgressFn, VerifyResult, noop

#: How a part file is named in a parts directory.
PART_FILE = re.compile(r"^part-(?P<index>\d+)-of-(?P<count>\d+)\.json$")
#: The most parts a run may have (a sanity bound on part files, not a cluster limit).
MAX_PARTS = 100_000
#: The launchers ``launch_parts`` knows.
LAUNCHERS = ("srun", "torchrun")
#: Environment variables that say which part a process is, in the order they are read:
#: torchrun's (RANK/WORLD_SIZE, set per worker), then Slurm's (SLURM_PROCID/SLURM_NTASKS, per task).
_PART_ENV = (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))


def part_file_name(index: int, count: int) -> str:
    return f"part-{index}-of-{count}.json"


def parse_part(spec: str, env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``K/N`` (1-based), or ``env``: the process's rank and world size under torchrun or srun."""
    if spec == "env":
        env = os.environ if env is None else env
        for rank_var, size_var in _PART_ENV:
            if rank_var in env and size_var in env:
                try:
                    rank, size = int(env[rank_var]), int(env[size_var])
                except ValueError:
                    raise UsageError(f"--part env: {rank_var}/{size_var} are not integers") from None
                return _checked(rank + 1, size, f"--part env ({rank_var}={rank}, {size_var}={size})")
        raise UsageError(
            "--part env: neither RANK/WORLD_SIZE (torchrun) nor SLURM_PROCID/SLURM_NTASKS (srun) is set",
            hint="run under torchrun or srun, or give --part K/N",
        )
    m = re.fullmatch(r"(\d{1,9})/(\d{1,9})", spec.strip())
    if m is None:
        raise UsageError(f"--part {spec!r}: expected K/N (e.g. 2/8) or env")
    return _checked(int(m.group(1)), int(m.group(2)), f"--part {spec}")


def _checked(index: int, count: int, what: str) -> tuple[int, int]:
    if not 1 <= count <= MAX_PARTS or not 1 <= index <= count:
        raise UsageError(f"{what}: need 1 <= K <= N <= {MAX_PARTS}")
    return index, count


# ---------------------------------------------------------------------------------------
# One part, and the merge
# ---------------------------------------------------------------------------------------


def run_part(
    target: str,
    options: CheckOptions,
    index: int,
    count: int,
    *,
    part_out: str | None = None,
    progress: ProgressFn = noop,
) -> VerifyResult:
    """Deep-check part ``index`` of ``count`` of ``target``; write it to ``part_out`` if given."""
    result = verify_target(
        target, options=replace(options, deep=True, split=DeepSplit(part=index, count=count)), progress=progress
    )
    result.part = (index, count)
    result.part_node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if part_out is not None:
        storage, where = Storage.for_url(part_out)
        doc = json.dumps(result.to_json(), separators=(",", ":"), ensure_ascii=True).encode()
        storage.write_bytes(storage.join(where, part_file_name(index, count)), doc)
    return result


def merge_parts(
    target: str, options: CheckOptions, paths: Sequence[str], *, progress: ProgressFn = noop
) -> VerifyResult:
    """The one-node ``verify --deep`` result of ``target``, its segments read from part files."""
    merged = load_parts(paths)
    return verify_target(target, options=replace(options, deep=True, split=DeepSplit(merged=merged)), progress=progress)


@dataclass(frozen=True, slots=True)
class _Part:
    file: str
    index: int
    count: int
    checkpoints: list[dict[str, Any]]


def load_parts(paths: Sequence[str]) -> dict[str, CheckpointParts]:
    """Read part files (or directories of them) into each checkpoint's segment results.

    Every part 1..N of one run must be there once; parts that saw a checkpoint must agree
    on its plan; a segment is given by one part only.
    """
    parts = [_read_part(f) for f in _part_files(paths)]
    if not parts:
        raise InputError("no part files given", hint="pass the part-K-of-N.json files, or their directory")
    counts = {p.count for p in parts}
    if len(counts) > 1:
        raise InputError(f"part files of runs with different N ({', '.join(map(str, sorted(counts)))}) given together")
    count = counts.pop()
    seen: dict[int, str] = {}
    for p in parts:
        if p.index in seen:
            raise InputError(f"part {p.index} of {count} given twice ({seen[p.index]} and {p.file})")
        seen[p.index] = p.file
    missing = [k for k in range(1, count + 1) if k not in seen]
    if missing:
        raise InputError(
            f"part {missing[0]} of {count} is missing ({len(missing)} of {count} parts missing)",
            hint="give every part-K-of-N.json of the run",
        )
    out: dict[str, tuple[str, int, dict[int, SegmentResult]]] = {}
    for p in parts:
        for c in p.checkpoints:
            _gather(p, c, out)
    return {name: CheckpointParts(plan, n, segs) for name, (plan, n, segs) in out.items()}


def _gather(p: _Part, c: dict[str, Any], out: dict[str, tuple[str, int, dict[int, SegmentResult]]]) -> None:
    name = c.get("name")
    deep = c.get("deep_part")
    if deep is None:
        return
    if not isinstance(name, str) or not isinstance(deep, dict):
        raise InputError(f"{p.file}: not a ckptctl part file (a checkpoint without a name or deep_part)")
    plan, num, segs = deep.get("plan"), deep.get("num_segments"), deep.get("segments")
    if not isinstance(plan, str) or not isinstance(num, int) or isinstance(num, bool) or not isinstance(segs, list):
        raise InputError(f"{p.file}: not a ckptctl part file (deep_part of {name[:80]!r} malformed)")
    have = out.setdefault(name, (plan, num, {}))
    if (have[0], have[1]) != (plan, num):
        raise InputError(
            f"{p.file}: its plan for {name[:80]!r} differs from another part's: the parts saw different "
            "checkpoints (changed between them) or ran with different options",
            hint="run the parts again",
        )
    for seg in segs:
        i = seg.get("i") if isinstance(seg, dict) else None
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < num:
            raise InputError(f"{p.file}: a segment of {name[:80]!r} has no valid index")
        if i in have[2]:
            raise InputError(f"{p.file}: segment {i} of {name[:80]!r} is given by two parts")
        try:
            have[2][i] = SegmentResult.from_json(seg)
        except SegmentFormatError as e:
            raise InputError(f"{p.file}: segment {i} of {name[:80]!r}: {e}") from None


def _part_files(paths: Sequence[str]) -> list[str]:
    files: list[str] = []
    for path in paths:
        storage, where = Storage.for_url(path)
        info = storage.info(where)
        if info is None:
            raise InputError(f"{path}: no such file or directory")
        if info.is_dir:
            names = sorted(e.name for e in storage.list_dir(where) if not e.is_dir and PART_FILE.match(e.name))
            if not names:
                raise InputError(f"{path}: no part-K-of-N.json files in this directory")
            files.extend(storage.url(storage.join(where, n)) for n in names)
        else:
            files.append(path)
    return files


def _read_part(path: str) -> _Part:
    storage, where = Storage.for_url(path)
    try:
        raw = storage.read_bytes(where)
        doc = jsonsafe.loads(raw, max_bytes=MAX_WHOLE_READ_BYTES, allow_nan=False)
    except StorageError as e:
        raise InputError(f"cannot read part file {path}: {e.message}") from None
    except jsonsafe.JsonError as e:
        raise InputError(f"{path}: not a ckptctl part file (not JSON: {str(e)[:80]})") from None
    part = doc.get("part") if isinstance(doc, dict) else None
    checkpoints = doc.get("checkpoints") if isinstance(doc, dict) else None
    if not isinstance(part, dict) or not isinstance(checkpoints, list):
        raise InputError(f"{path}: not a ckptctl part file (no part object and checkpoints list)")
    index, count = part.get("index"), part.get("count")
    if not isinstance(index, int) or not isinstance(count, int) or isinstance(index, bool) or isinstance(count, bool):
        raise InputError(f"{path}: not a ckptctl part file (part index/count are not integers)")
    if not 1 <= count <= MAX_PARTS or not 1 <= index <= count:
        raise InputError(f"{path}: part {index} of {count} is out of range")
    if not all(isinstance(c, dict) for c in checkpoints):
        raise InputError(f"{path}: not a ckptctl part file (a checkpoint is not an object)")
    return _Part(path, index, count, checkpoints)


# ---------------------------------------------------------------------------------------
# Launcher: N parts as one srun step or under torchrun, then the merge
# ---------------------------------------------------------------------------------------


def option_argv(options: CheckOptions) -> list[str]:
    """The ``verify`` flags that reproduce ``options`` in a part process."""
    argv = ["--deep"]
    if options.world_size is not None:
        argv += ["--world-size", str(options.world_size)]
    if options.check_finite:
        argv.append("--check-finite")
    for g in sorted(options.allowed_globals):
        argv += ["--allow-global", g]
    if options.require:
        argv += ["--require", ",".join(sorted(options.require))]
    return argv


def launcher_argv(
    launcher: str, count: int, target: str, options: CheckOptions, parts_dir: str, launcher_args: Sequence[str] = ()
) -> list[str]:
    """The command that runs the ``count`` parts: each process finds its part in its environment."""
    verify = ["verify", target, *option_argv(options), "--part", "env", "--part-out", parts_dir]
    if launcher == "srun":
        # one task per node: each node reads its own stretch of the checkpoint
        return [
            "srun", f"--nodes={count}", f"--ntasks={count}", "--ntasks-per-node=1", "--job-name=ckptctl-verify",
            *launcher_args, sys.executable, "-m", "ckptctl", *verify,
        ]  # fmt: skip
    if launcher == "torchrun":
        return [
            sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={count}",
            *launcher_args, "-m", "ckptctl", *verify,
        ]  # fmt: skip
    raise UsageError(f"--launch {launcher!r}: expected one of {', '.join(LAUNCHERS)}")


@contextmanager
def _parts_directory(parts_dir: str | None, launcher: str, target: str) -> Iterator[str]:
    if parts_dir is not None:
        yield parts_dir
        return
    # srun's tasks run on other nodes: the default lies in the working directory (shared, by
    # Slurm convention); torchrun's run here
    base = os.getcwd() if launcher == "srun" else None
    if base is not None and "://" not in target:
        t = os.path.realpath(target)
        if os.path.realpath(base) == t or os.path.realpath(base).startswith(t + os.sep):
            raise UsageError(
                "the working directory is inside the checkpoint: the part files would be written there",
                hint="give --parts-dir DIR (a directory every node can write), or run from elsewhere",
            )
    with tempfile.TemporaryDirectory(prefix=".ckptctl-verify-parts-", dir=base) as d:
        yield d


def launch_parts(
    target: str,
    options: CheckOptions,
    *,
    launcher: str,
    count: int,
    parts_dir: str | None = None,
    launcher_args: Sequence[str] = (),
    progress: ProgressFn = noop,
) -> VerifyResult:
    """Run the ``count`` parts under ``launcher``, wait, and merge their part files."""
    _checked(1, count, f"--parts {count}")
    with _parts_directory(parts_dir, launcher, target) as where:
        storage, dpath = Storage.for_url(where)
        files = [storage.join(dpath, part_file_name(k, count)) for k in range(1, count + 1)]
        stale = [f for f in files if storage.exists(f)]
        if stale:
            raise UsageError(
                f"{storage.url(stale[0])} already exists: the parts directory holds an earlier run's files",
                hint="give an empty --parts-dir",
            )
        argv = launcher_argv(launcher, count, target, options, where, launcher_args)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
        except FileNotFoundError:
            raise UsageError(f"--launch {launcher}: {argv[0]} is not installed here") from None
        absent = [k for k, f in enumerate(files, 1) if not storage.exists(f)]
        if absent:
            said = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            raise InputError(
                f"{launcher} exited {proc.returncode} and part {absent[0]} of {count} wrote no part file"
                + (f": {said[-1][:300]}" if said else ""),
                hint="run one part by hand (verify --deep --part K/N) to see why",
            )
        return merge_parts(target, options, [storage.url(f) for f in files], progress=progress)
