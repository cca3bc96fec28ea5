"""Score ``ckptctl watch`` on the realistic resume corpus (tests/fixtures/losslogs_realistic/).

Every log is read whole by ``ckptctl.ops.watch.watch_log`` (what ``ckptctl watch LOG``
runs) with default thresholds and no hint: no ``--format``, no ``--resume-step``.
The labels (``labels.json``) were written by the corpus generator before the tool
ran. Prints: logs read, false alarms on smooth resumes (any verdict but
``continuous``), bad resumes missed (``continuous`` or ``insufficient-data``),
the confusion of labels vs verdicts, and the expected notes found.

Targets: every log read; no false alarm on a smooth resume; at most 1 bad in 10 missed.

    .venv/bin/python bench/watch_accuracy.py [-v]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from ckptctl.errors import CkptctlError
from ckptctl.ops.watch import watch_log

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "losslogs_realistic"
MISSED = ("continuous", "insufficient-data")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per log")
    ap.add_argument("--corpus", default=str(CORPUS))
    args = ap.parse_args()
    corpus = Path(args.corpus)
    labels = json.loads((corpus / "labels.json").read_text())
    confusion: Counter[tuple[str, str]] = Counter()
    unread: list[str] = []
    false_alarms: list[str] = []
    missed: list[str] = []
    wrong_kind: list[str] = []
    notes_expected = notes_found = 0
    t0 = time.perf_counter()
    for name in sorted(labels):
        want = labels[name]["verdict"]
        try:
            result = watch_log(str(corpus / name))
        except CkptctlError as e:
            unread.append(name)
            confusion[(want, "unread")] += 1
            if args.verbose:
                print(f"  {name:40s} {want:16s} UNREAD: {e.message}")
            continue
        got = result.verdict
        confusion[(want, got)] += 1
        codes = set(result.report.note_codes)
        for note in labels[name]["notes"]:
            notes_expected += 1
            notes_found += note in codes
        if want == "continuous" and got != "continuous":
            false_alarms.append(name)
        elif want != "continuous" and got in MISSED:
            missed.append(name)
        elif want != "continuous" and got != want:
            wrong_kind.append(name)
        if args.verbose:
            mark = "ok" if got == want else "XX"
            print(f"  {mark} {name:40s} label {want:16s} verdict {got:18s} fmt {result.log_format} notes {sorted(codes)}")
    elapsed = time.perf_counter() - t0
    smooth = sum(1 for v in labels.values() if v["verdict"] == "continuous")
    bad = len(labels) - smooth
    print(f"corpus: {len(labels)} logs ({smooth} smooth, {bad} bad) in {corpus.name}/, read in {elapsed:.2f} s")
    print(f"logs read:                {len(labels) - len(unread)}/{len(labels)}" + (f"  unread: {', '.join(unread)}" if unread else ""))
    print(f"false alarms on smooth:   {len(false_alarms)}/{smooth}" + (f"  ({', '.join(false_alarms)})" if false_alarms else ""))
    print(f"bad resumes missed:       {len(missed)}/{bad}" + (f"  ({', '.join(missed)})" if missed else ""))
    print(f"bad, caught as another problem: {len(wrong_kind)}/{bad}" + (f"  ({', '.join(wrong_kind)})" if wrong_kind else ""))
    print(f"expected notes found:     {notes_found}/{notes_expected}")
    print("confusion (label -> verdict: count):")
    for (want, got), n in sorted(confusion.items()):
        print(f"  {want:18s} -> {got:18s} {n}")
    ok = not unread and not false_alarms and len(missed) * 10 <= bad
    print("targets (all read, 0 false alarms, <= 1 in 10 missed): " + ("met" if ok else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
