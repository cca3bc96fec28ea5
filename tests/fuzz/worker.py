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


TARGETS: dict[str, Callable[[str], str]] = {
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
        from ckptctl.core.verify.records import RecordFormatError

        own = (*own, MetadataError, RecordFormatError)
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
