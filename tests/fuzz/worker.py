"""The fuzz worker: runs one target per input line under RLIMIT_AS, reports one JSON line each.

Run by ``tests/fuzz/harness.py`` as ``python -m tests.fuzz.worker MEM_MB``: its address
space is capped, so a reader that tries to allocate gigabytes fails here (a MemoryError
anywhere in the error chain is a finding) instead of taking the machine down.
The calls into ckptctl are in ``TARGETS``, one small function each.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _metadata(path: str) -> str:
    from ckptctl.adapters.dcp_metadata import read_index

    read_index(Path(path).read_bytes())
    return "parsed"


def _verify(path: str, deep: bool = False) -> str:
    from ckptctl.runroot.locate import verify_checkpoint

    return verify_checkpoint(path, deep=deep).status


def _record(path: str) -> str:
    from ckptctl.core.verify.records import check_record

    findings, _ = check_record(Path(path).read_bytes())
    return "problems" if findings.problems or findings.hostile else "clean"


def _config(path: str) -> str:
    from ckptctl.ops.launch import load_config  # the config loader (moves with the recover branch)

    load_config(path)
    return "loaded"


def _losslog(path: str) -> str:
    from ckptctl.adapters.follow import LineReader  # watch's reader: file -> lines -> events
    from ckptctl.core.watch.losslog import LossLogParser

    parser = LossLogParser()
    events = 0
    for line in LineReader(path):
        if line is not None:
            events += len(parser.feed(line))
    return f"{events} events"


def _classify(path: str) -> str:
    from ckptctl.ops.classify import classify_logs  # classify's reader (adapters/logs.py)

    return str(classify_logs([path], jobs=1).category)


def _verify_any(path: str) -> str:
    """Deep verify of a checkpoint directory or a single framework file: status and problem codes."""
    from ckptctl.runroot.locate import verify_target
    from ckptctl.runroot.reports import CheckOptions

    doc = verify_target(path, options=CheckOptions(deep=True)).to_json()
    first = doc["checkpoints"][0] if doc["checkpoints"] else {}
    codes = sorted({p["code"] for p in first.get("problem_details", [])})
    return f"{first.get('status')} {','.join(codes)}"


def _watch(path: str) -> str:
    """watch on a text log, a TensorBoard event file or an MLflow run, as if resumed at step 300."""
    from ckptctl.ops.watch import watch_log

    result = watch_log(path, resume_step=300)
    return f"{result.verdict} {','.join(sorted(result.report.note_codes))}"


def _root(path: str) -> str:
    """Every read-only command over a run root: list, locate, a rollback dry run, audit, lock, status."""
    from ckptctl.adapters.runlock import read_lock
    from ckptctl.ops.rollback import rollback
    from ckptctl.ops.status import run_incidents, run_status
    from ckptctl.runroot import audit
    from ckptctl.runroot.locate import find_latest_complete, list_checkpoints
    from ckptctl.runroot.root import RunRoot

    list_checkpoints(path)
    located = find_latest_complete(path).checkpoint
    out = "none" if located is None else located.path
    plan = rollback(path, dry_run=True)
    rr = RunRoot.open(path)
    audit.read(rr)
    read_lock(rr.storage, rr.path)
    run_status(rr)
    run_incidents(rr)
    return f"{out} rollback={plan.refusal is None}"


def _json(path: str) -> str:
    from ckptctl.core.verify import jsonsafe

    return type(jsonsafe.loads(Path(path).read_bytes())).__name__


TARGETS: dict[str, Callable[[str], str]] = {
    "verify_any": _verify_any,
    "watch": _watch,
    "root": _root,
    "json": _json,
    "metadata": _metadata,
    "verify": _verify,
    "verify_deep": lambda p: _verify(p, deep=True),
    "record": _record,
    "config": _config,
    "losslog": _losslog,
    "classify": _classify,
}


def _memory_error_in(e: BaseException | None) -> bool:
    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, MemoryError):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def run_one(target: str, path: str) -> dict[str, Any]:
    from ckptctl.errors import CkptctlError

    own: tuple[type[BaseException], ...] = (CkptctlError,)
    try:
        from ckptctl.adapters.dcp_metadata import MetadataError
        from ckptctl.core.verify.jsonsafe import JsonError
        from ckptctl.core.verify.records import RecordFormatError

        own = (*own, MetadataError, RecordFormatError, JsonError)
    except ImportError:
        pass
    start = time.perf_counter()
    result: dict[str, Any] = {"target": target}
    try:
        result["outcome"] = TARGETS[target](path)
        result["ok"] = True
    except own as e:
        result["ok"] = True
        result["outcome"] = f"error: {type(e).__name__}"
        result["message_len"] = len(str(e))
        if _memory_error_in(e):
            result["ok"] = False
            result["violation"] = f"MemoryError under the cap, wrapped in {type(e).__name__}"
    except BaseException as e:  # any other exception is the finding
        result["ok"] = False
        result["violation"] = f"{type(e).__name__}: {str(e)[:300]}"
    result["seconds"] = time.perf_counter() - start
    return result


def main() -> None:
    mem_mb = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.write(json.dumps(run_one(req["target"], req["path"])) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
