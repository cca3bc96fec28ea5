"""Run fuzz inputs through the capped worker and check the invariants of issue 9.

- no exception other than ckptctl's own errors (the worker reports any other);
- bounded memory: the worker runs under ``RLIMIT_AS`` (``MEM_MB``); a MemoryError is a finding;
- bounded time: each input gets ``SECONDS_PER_INPUT``, then the worker is killed (a finding);
- no file created outside the scratch dir: the worker's cwd, HOME and TMPDIR are in it, and
  the input's directory tree must be unchanged after a read-only target ran on it.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
MEM_MB = 1536
SECONDS_PER_INPUT = 20.0


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and mtime (for the no-write invariant)."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[p] = (st.st_size, st.st_mtime_ns)
    return out


@dataclass
class Harness:
    scratch: Path
    mem_mb: int = MEM_MB
    runs: int = 0
    busy_s: float = 0.0
    findings: list[str] = field(default_factory=list)
    started_s: float = field(default_factory=time.perf_counter)
    _proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        home = self.scratch / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(REPO), HOME=str(home), TMPDIR=str(home),
                   CKPTCTL_NO_PROGRESS="1")  # fmt: skip
        return subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker", str(self.mem_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=home, env=env,
        )  # fmt: skip

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def run(self, target: str, path: Path, *, read_only_tree: Path | None = None) -> dict[str, Any]:
        """Run one input; record a finding for any broken invariant; return the worker's report."""
        if self._proc is None:
            self._proc = self._start()
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        before = tree_state(read_only_tree) if read_only_tree else None
        start = time.perf_counter()
        proc.stdin.write(json.dumps({"target": target, "path": str(path)}) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], SECONDS_PER_INPUT)
        line = proc.stdout.readline() if ready else ""
        self.busy_s += time.perf_counter() - start
        self.runs += 1
        if not line:
            self.close()
            why = "timed out" if not ready else "worker died"
            report: dict[str, Any] = {"ok": False, "violation": f"{why} after {time.perf_counter() - start:.1f} s"}
        else:
            report = json.loads(line)
        if not report.get("ok"):
            self.findings.append(f"{target} {path}: {report.get('violation')}")
        if report.get("message_len", 0) > 20_000:
            self.findings.append(f"{target} {path}: a {report['message_len']}-character message")
        if before is not None and read_only_tree is not None and tree_state(read_only_tree) != before:
            self.findings.append(f"{target} {path}: the input tree changed under a read-only target")
        return report

    def runs_per_s(self) -> float:
        """Inputs per second of worker time (the readers' own speed)."""
        return self.runs / self.busy_s if self.busy_s else 0.0

    def wall_runs_per_s(self) -> float:
        """Inputs per second of wall time, input generation and copying included."""
        return self.runs / (time.perf_counter() - self.started_s)
