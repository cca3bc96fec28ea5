"""`make bench`: run every bench/bench_*.py in turn; each prints ckptctl's figure next to its anchor.

Usage: python bench/run_all.py [--quick] [NAME ...]   (NAME: verify, classify, watch, training)
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICK_FLAGS = {"classify": ["--size-mb", "200"], "verify": ["--quick"]}


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    quick = "--quick" in sys.argv[1:]
    scripts = sorted([*HERE.glob("bench_*.py"), *HERE.glob("*_accuracy.py")])
    if args:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in args]
    failed = []
    for script in scripts:
        name = script.stem.removeprefix("bench_")
        print(f"\n##### {name} ({script.name})", flush=True)
        t0 = time.monotonic()
        extra = QUICK_FLAGS.get(name, []) if quick else []
        rc = subprocess.call([sys.executable, str(script), *extra])
        print(f"##### {name}: exit {rc}, {time.monotonic() - t0:.0f} s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
