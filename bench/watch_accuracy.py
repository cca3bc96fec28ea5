"""Score ``ckptctl watch`` on labelled resume corpora, one folder at a time, and on the
replay corpus.

Default: the project's realistic corpus (tests/fixtures/losslogs_realistic/), its open-world
batch (tests/fixtures/losslogs_openworld/: line shapes met in real logs, written by us), its blind
held-out corpus (tests/fixtures/losslogs_holdout/) and the replay corpus
(tests/fixtures/losslogs_replay/). ``--corpus DIR`` (repeatable) names others in place
of the first three; ``--replay-corpus DIR`` another replay corpus. Two label formats are read:

* ``labels.json`` (the project's): ``{file: {"verdict": V, "notes": [codes]}}``; every
  log is read whole by ``ckptctl.ops.watch.watch_log`` (what ``ckptctl watch LOG``
  runs) with default thresholds and no hint: no ``--format``, no ``--resume-step``.
  The labels were written by each corpus generator before the tool ran.
* ``labels.yaml`` (a real-world corpus): ``entries`` with ``files`` (or ``file``),
  ``expected_verdict`` (else read from ``watch_expectation``: ``spike ...`` -> spike,
  ``no spike ...`` -> continuous, anything else -> no resume: any verdict but a problem
  is right), ``resume_step`` (given as ``--resume-step`` unless ``--no-hints``) and
  ``tool_note`` (the log is too short for a decision: ``insufficient-data`` is the
  honest answer). Two files are ``--baseline A B``.

Per folder it prints: logs read, false alarms on smooth resumes (a problem verdict;
``insufficient-data`` is counted apart as undecided), bad resumes missed
(``continuous`` or ``insufficient-data``; those the label's ``tool_note`` calls too
short are counted apart), the confusion of labels vs verdicts, expected notes found.
Targets: every log read; no false alarm on a smooth resume; at most 1 bad in 10 missed.

The replay corpus (``tests/fixtures/losslogs_replay/``, ``make_replay.py``): real resumes
of examples/train.py (torchrun, 2 gloo ranks, CPU), correct or with the data loader
reset on purpose. Faults caught (those in reach: enough re-run steps), false alarms
on the correct resumes, what the replay check said (``checks.replay.status``
against the label's), and the out-of-reach faults apart. Targets: every fault in
reach caught as ``data-stream-reset``, no false alarm.

The restore-fault corpus, ``tests/fixtures/losslogs_restore/`` (``bench/make_restore_fixtures.py``), "restore
faults": real resumes of examples/train.py made faulty on purpose (the optimizer
  dropped by an allowance, the data loader reset, reset on the second resume only)
  and clean ones. A fault is caught by a bad verdict (``data-position-mismatch``,
  ``data-stream-reset``, a loss verdict, ...) or reported by the coverage line (the
  ``partial-restore`` note: no verdict, an allowance is deliberate); a false alarm is
  a clean resume with a bad verdict or a ``partial-restore`` note. Scored with the
  default thresholds, then with ``--expect-identical`` (the trainer is deterministic
  on the same ranks). Targets: every fault caught or reported, no false alarm.

    .venv/bin/python bench/watch_accuracy.py [-v] [--corpus DIR ...] [--no-hints] [--replay-corpus DIR] [--restore-corpus DIR] [--only-restore]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptctl.core.watch.model import (
    NOTE_CODES,
    PARTIAL_RESTORE,
    PROBLEMS,
    WatchConfig,
    verdict_class,
)
from ckptctl.errors import CkptctlError
from ckptctl.ops.watch import WatchResult, watch_lines, watch_log

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
CORPORA = (FIXTURES / "losslogs_realistic", FIXTURES / "losslogs_openworld", FIXTURES / "losslogs_holdout")
REPLAY_CORPUS = FIXTURES / "losslogs_replay"
RESTORE_CORPUS = FIXTURES / "losslogs_restore"
MISSED = ("continuous", "insufficient-data")
NO_RESUME = "no-resume"
"""A label for a log with no resume in it (a negative control): any verdict but a problem is right."""


@dataclass
class Case:
    name: str
    files: list[Path]
    verdict: str
    notes: list[str] = field(default_factory=list)
    resume_step: int | None = None
    too_short: bool = False
    """The label says the log is too short for a decision (``tool_note``)."""


def _yaml_verdict(entry: dict[str, object]) -> str:
    if entry.get("expected_verdict"):
        return str(entry["expected_verdict"])
    expectation = str(entry.get("watch_expectation") or "").strip().lower()
    if expectation.startswith("spike"):
        return "spike"
    if expectation.startswith("no spike"):
        return "continuous"
    return NO_RESUME


def load_cases(corpus: Path) -> list[Case]:
    if (corpus / "labels.json").exists():
        labels = json.loads((corpus / "labels.json").read_text())
        return [Case(name, [corpus / name], v["verdict"], list(v.get("notes", []))) for name, v in sorted(labels.items())]
    import yaml  # a dependency of ckptctl (signatures)

    doc = yaml.safe_load((corpus / "labels.yaml").read_text())
    cases = []
    for entry in doc["entries"]:
        files = entry.get("files") or [entry["file"]]
        step = entry.get("resume_step")
        cases.append(
            Case(
                files[-1],
                [corpus / f for f in files],
                _yaml_verdict(entry),
                resume_step=step if isinstance(step, int) else None,
                too_short=bool(entry.get("tool_note")),
            )
        )
    return cases


def score(corpus: Path, *, hints: bool, verbose: bool) -> bool:
    cases = load_cases(corpus)
    confusion: Counter[tuple[str, str]] = Counter()
    unread: list[str] = []
    false_alarms: list[str] = []
    undecided: list[str] = []
    missed: list[str] = []
    missed_short: list[str] = []
    wrong_kind: list[str] = []
    notes_expected = notes_found = 0
    t0 = time.perf_counter()
    for case in cases:
        want = case.verdict
        log = case.files[-1]
        baseline = str(case.files[0]) if len(case.files) > 1 else None
        resume_step = case.resume_step if hints else None
        try:
            result = watch_log(str(log), baseline_path=baseline, resume_step=resume_step)
        except CkptctlError as e:
            unread.append(case.name)
            confusion[(want, "unread")] += 1
            if verbose:
                print(f"  UNREAD {case.name[:56]:56s} {want:16s} {e.message}")
            continue
        got = result.verdict
        confusion[(want, got)] += 1
        codes = set(result.report.note_codes)
        for note in case.notes:
            if note not in NOTE_CODES:
                continue  # a free-text remark, not a note code
            notes_expected += 1
            notes_found += note in codes
        smooth = want in ("continuous", NO_RESUME)
        if smooth and got in PROBLEMS:
            false_alarms.append(case.name)
        elif smooth and got != "continuous" and want == "continuous":
            undecided.append(case.name)
        elif not smooth and got in MISSED:
            (missed_short if case.too_short else missed).append(case.name)
        elif not smooth and got != want:
            wrong_kind.append(case.name)
        if verbose:
            ok = got == want or (want == NO_RESUME and got not in PROBLEMS)
            hint = f" R={resume_step}" if resume_step is not None else ""
            print(
                f"  {'ok' if ok else 'XX'} {case.name[:56]:56s} label {want:16s} verdict {got:18s}"
                f" fmt {result.log_format}{hint} axis {getattr(result.report, 'step_axis', result.report.step_kind)} notes {sorted(codes)}"
            )
    elapsed = time.perf_counter() - t0
    smooth_n = sum(1 for c in cases if c.verdict in ("continuous", NO_RESUME))
    bad = len(cases) - smooth_n
    all_missed = len(missed) + len(missed_short)

    def names(xs: list[str]) -> str:
        return f"  ({', '.join(xs)})" if xs else ""

    print(f"{corpus}: {len(cases)} cases ({smooth_n} smooth or no resume, {bad} bad), read in {elapsed:.2f} s"
          + ("" if hints else " [no hints]"))
    print(f"  logs read:                {len(cases) - len(unread)}/{len(cases)}{names(unread)}")
    print(f"  false alarms on smooth:   {len(false_alarms)}/{smooth_n}{names(false_alarms)}")
    print(f"  undecided on smooth:      {len(undecided)}/{smooth_n}{names(undecided)}")
    print(f"  bad resumes missed:       {all_missed}/{bad}{names(missed)}"
          + (f"  + too short per label: {', '.join(missed_short)}" if missed_short else ""))
    print(f"  bad, caught as another problem: {len(wrong_kind)}/{bad}{names(wrong_kind)}")
    if notes_expected:
        print(f"  expected notes found:     {notes_found}/{notes_expected}")
    if verbose:
        print("  confusion (label -> verdict: count):")
        for (want, got), n in sorted(confusion.items()):
            print(f"    {want:18s} -> {got:18s} {n}")
    ok = not unread and not false_alarms and len(missed) * 10 <= bad
    print("  targets (all read, 0 false alarms, <= 1 in 10 missed, too-short logs aside): " + ("met" if ok else "NOT met"))
    return ok


def _read(
    corpus: Path, labels: dict[str, Any], verbose: bool, config: WatchConfig | None = None
) -> tuple[dict[str, WatchResult], list[str], float]:
    results: dict[str, WatchResult] = {}
    unread: list[str] = []
    t0 = time.perf_counter()
    for name in sorted(labels):
        try:
            results[name] = watch_log(str(corpus / name), config=config)
        except CkptctlError as e:
            unread.append(name)
            if verbose:
                print(f"  {name:40s} {labels[name].get('verdict', labels[name].get('fault'))!s:16s} UNREAD: {e.message}")
    return results, unread, time.perf_counter() - t0


def score_replay(corpus: Path, verbose: bool) -> bool:
    labels = json.loads((corpus / "labels.json").read_text())
    results, unread, elapsed = _read(corpus, labels, verbose)
    clean = [n for n, v in labels.items() if v["verdict"] == "continuous"]
    faults = [n for n in labels if n not in clean]
    in_reach = [n for n in faults if not labels[n].get("out_of_reach")]
    out_of_reach = [n for n in faults if labels[n].get("out_of_reach")]
    false_alarms = [n for n in clean if n in results and results[n].verdict != "continuous"]
    caught = [n for n in in_reach if n in results and results[n].verdict == labels[n]["verdict"]]
    status_want = [n for n in clean if labels[n].get("replay")]
    status_ok = [
        n for n in status_want
        if n in results and (results[n].report.checks.get("replay") or {}).get("status") == labels[n]["replay"]
    ]  # fmt: skip
    for name in sorted(labels) if verbose else ():
        if name not in results:
            continue
        r = results[name]
        replay = r.report.checks.get("replay") or {}
        corr = replay.get("correlation")
        mark = "ok" if r.verdict == labels[name]["verdict"] else "--" if labels[name].get("out_of_reach") else "XX"
        print(
            f"  {mark} {name:34s} label {labels[name]['verdict']:18s} verdict {r.verdict:18s} replay "
            f"{replay.get('status', '-'):13s} pairs {replay.get('num_compared', '-')!s:>3s} "
            f"r {'-' if corr is None else f'{corr:+.2f}'}"
        )
    print(f"corpus: {len(labels)} logs ({len(clean)} correct resumes, {len(faults)} faulty) in {corpus.name}/, read in {elapsed:.2f} s")
    print(f"logs read:                {len(labels) - len(unread)}/{len(labels)}" + (f"  unread: {', '.join(unread)}" if unread else ""))
    print(f"false alarms on correct:  {len(false_alarms)}/{len(clean)}" + (f"  ({', '.join(false_alarms)})" if false_alarms else ""))
    print(f"faults caught (in reach): {len(caught)}/{len(in_reach)}" + (
        f"  missed: {', '.join(sorted(set(in_reach) - set(caught)))}" if len(caught) < len(in_reach) else ""))
    print(f"replay status as labelled on correct resumes: {len(status_ok)}/{len(status_want)}")
    for name in out_of_reach:
        got = results[name].verdict if name in results else "unread"
        print(f"out of reach: {name} -> {got} ({labels[name]['out_of_reach']})")
    ok = not unread and not false_alarms and len(caught) == len(in_reach)
    print("targets (all read, 0 false alarms, every fault in reach caught): " + ("met" if ok else "NOT met"))
    return ok


def _caught_by(result: WatchResult) -> list[str]:
    """What said the resume was wrong: every bad finding (the verdict first), the coverage line's
    partial-restore note."""
    out = [result.verdict] if verdict_class(result.verdict) == "bad" else []
    out += [f.verdict for f in result.report.findings if f.verdict not in out and verdict_class(f.verdict) == "bad"]
    if PARTIAL_RESTORE in result.report.note_codes:
        out.append("coverage")
    return out


#: ckptctl.training's own lines (the coverage and data-position lines): left out, the log is
#: any trainer's, judged on its losses alone.
TRAINING_LINES = ("ckptctl: restored:", "ckptctl: data position ")


def _read_without_training_lines(
    corpus: Path, labels: dict[str, Any]
) -> tuple[dict[str, WatchResult], list[str], float]:
    results: dict[str, WatchResult] = {}
    t0 = time.perf_counter()
    for name in sorted(labels):
        lines = [ln for ln in (corpus / name).read_text().splitlines() if not any(t in ln for t in TRAINING_LINES)]
        results[name] = watch_lines(lines, stop_when_decided=False, source=name)
    return results, [], time.perf_counter() - t0


def score_restore(corpus: Path, verbose: bool) -> bool:
    labels = json.loads((corpus / "labels.json").read_text())
    ok = True
    passes = (
        ("default thresholds", WatchConfig()),
        ("--expect-identical", WatchConfig(expect_identical=True)),
        ("losses alone: ckptctl.training's lines removed, default thresholds", None),
    )
    for title, config in passes:
        if config is None:
            results, unread, elapsed = _read_without_training_lines(corpus, labels)
        else:
            results, unread, elapsed = _read(corpus, labels, verbose, config)
        clean = [n for n, v in labels.items() if v["fault"] is None]
        faults = [n for n in labels if n not in clean]
        by: dict[str, list[str]] = {n: _caught_by(r) for n, r in results.items()}
        false_alarms = [n for n in clean if by.get(n)]
        by_verdict = [n for n in faults if n in by and any(c != "coverage" for c in by[n])]
        by_coverage_only = [n for n in faults if n in by and by[n] == ["coverage"]]
        missed = [n for n in faults if n not in by or not by[n]]
        print(f"restore faults ({title}): {len(labels)} logs ({len(clean)} clean resumes, {len(faults)} faulty) "
              f"in {corpus.name}/, read in {elapsed:.2f} s")  # fmt: skip
        for name in sorted(labels) if verbose else ():
            if name in results:
                r = results[name]
                replay = (r.report.checks.get("replay") or {}).get("status", "-")
                want = labels[name]["fault"] or "clean"
                print(f"  {name:36s} label {want:26s} verdict {r.verdict:24s} replay {replay:12s} "
                      f"caught by {','.join(by[name]) or '-'}")  # fmt: skip
        print(f"logs read:                     {len(labels) - len(unread)}/{len(labels)}")
        print(f"false alarms on clean resumes: {len(false_alarms)}/{len(clean)}"
              + (f"  ({', '.join(false_alarms)})" if false_alarms else ""))  # fmt: skip
        print(f"faults caught by a bad verdict: {len(by_verdict)}/{len(faults)}")
        print(f"faults reported by the coverage line only (partial-restore note, no verdict): "
              f"{len(by_coverage_only)}/{len(faults)}" + (f"  ({', '.join(by_coverage_only)})" if by_coverage_only else ""))  # fmt: skip
        print(f"faults missed:                 {len(missed)}/{len(faults)}" + (f"  ({', '.join(missed)})" if missed else ""))
        kinds = sorted({str(labels[n]["fault"]) for n in faults})
        for kind in kinds:
            names = [n for n in faults if labels[n]["fault"] == kind]
            how = Counter(",".join(by.get(n, [])) or "missed" for n in names)
            print(f"  {kind:26s} {len(names)}: " + ", ".join(f"{k} {v}" for k, v in sorted(how.items())))
        met = not unread and not false_alarms and not missed
        if config is not None:
            print(f"targets (all read, 0 false alarms, every fault caught or reported): {'met' if met else 'NOT met'}")
            ok = ok and met
        else:
            print("(no target: what the loss-based checks catch with no help from the training library)")
        print()
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per log, and the confusion table")
    ap.add_argument("--corpus", action="append", metavar="DIR", help="a labelled folder (repeatable); default: the project's two")
    ap.add_argument("--replay-corpus", default=str(REPLAY_CORPUS), help="a corpus labelled like losslogs_replay/")
    ap.add_argument("--no-hints", action="store_true", help="never pass a labelled resume_step as --resume-step")
    ap.add_argument("--restore-corpus", default=str(RESTORE_CORPUS), help="a corpus labelled like losslogs_restore/")
    ap.add_argument("--only-restore", action="store_true", help="score the restore-fault corpus only")
    args = ap.parse_args()
    if not args.only_restore:
        corpora = [Path(c) for c in args.corpus] if args.corpus else list(CORPORA)
        for corpus in corpora:
            if not (corpus / "labels.json").exists() and not (corpus / "labels.yaml").exists():
                ap.error(f"{corpus}: no labels.json or labels.yaml")
        for corpus in corpora:
            score(corpus, hints=not args.no_hints, verbose=args.verbose)
        if Path(args.replay_corpus).is_dir():
            print()
            score_replay(Path(args.replay_corpus), args.verbose)
        print()
    if (Path(args.restore_corpus) / "labels.json").is_file():
        score_restore(Path(args.restore_corpus), args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
