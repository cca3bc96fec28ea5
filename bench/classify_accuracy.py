"""Score `ckptctl classify` on labelled corpora of crash logs, per folder.

Reads two label formats (detected from ``labels.yaml``):

* the project's own (tests/fixtures/logs_realistic/, logs_holdout/): ``cases:``
  maps a case directory to ``{category, culprit: [...], thin, producers}``;
  every culprit listed must be named;
* the real-world format (a list of ``{file, expected_category, expected_culprit,
  culprit_ids, ambiguous, confidence, ...}``, one case per log file): a case's
  culprit is named when any one of its ``culprit_ids`` is; where the entries
  carry no ``culprit_ids``, the README next to the folder (or above it) may list
  them in a paragraph "Culprit identifiers for FOLDER/ ...: NN `id` / `id`; ...".
  ``rank:N`` stands for "rank N", a PCI bus id (``0000:dc:00``) for that GPU.

For each case the verdict is compared with its label, then per folder:

* category accuracy: the category matches the label; on a *thin* case (the
  project's ``thin: true``, or ``expected_category: unknown``: only consequences,
  no cause) ``unknown`` or a low-confidence verdict is the right answer;
* culprit recall: of the culprits the labels name (hosts, IPs, pods, "rank N",
  "gpu BUS-ID"), how many the verdict names (hosts, suspect_hosts, gpus,
  suspects, root cause);
* confident on thin evidence: thin cases given a medium/high-confidence verdict
  (the target is 0).

Usage: python bench/classify_accuracy.py [--corpus DIR ...] [--only PREFIX] [--verbose]
(default: tests/fixtures/logs_realistic, logs_holdout and logs_openworld).

The project's cases named h_* are a held-out set: written and labelled after the
tool was tuned on the others, committed before it was run on them (``--only h_``).
Exit 0 when every folder meets the targets (category >= 90%, culprit >= 90%, none
confident on thin), 3 otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures"
DEFAULT_CORPUS = FIXTURES / "logs_realistic"
DEFAULT_CORPORA = (DEFAULT_CORPUS, FIXTURES / "logs_holdout", FIXTURES / "logs_openworld")
TARGET_CATEGORY = 0.90
TARGET_CULPRIT = 0.90

_PCI = re.compile(r"^(?:gpu )?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?$")
_RANK = re.compile(r"^rank[: ]\s*(\d+)$")


@dataclass
class Case:
    """One labelled case: the paths to classify and what the verdict should say."""

    name: str
    paths: list[str]
    category: str
    thin: bool
    culprits: list[list[str]] = field(default_factory=list)
    """Each culprit is a list of identifiers, any one of which names it."""
    ambiguous: bool = False
    producers: tuple[str, ...] = ()


def culprit_key(ident: str) -> str:
    """The name ``names_in`` uses for a label's identifier ("rank:3" -> "rank 3")."""
    ident = str(ident).strip()
    m = _RANK.match(ident)
    if m:
        return f"rank {m.group(1)}"
    m = _PCI.match(ident)
    if m:
        domain, bus, dev = m.groups()
        return f"gpu {domain[-4:].rjust(4, '0').lower()}:{bus.lower()}:{dev.lower()}"
    return ident


def _readme_culprits(corpus: Path) -> dict[str, list[str]]:
    """``{"06": ["11.214.147.122"], ...}`` from a README paragraph "Culprit identifiers for <corpus>/"."""
    for readme in (corpus / "README.md", corpus.parent / "README.md"):
        if not readme.is_file():
            continue
        text = readme.read_text(errors="replace")
        m = re.search(r"Culprit identifiers for " + re.escape(corpus.name) + r"/[^\n]*\n((?:[^\n]+\n)+)", text)
        if m is None:
            continue
        out: dict[str, list[str]] = {}
        for num, ids in re.findall(r"(?:^|[;:]\s*)(\d+) ((?:`[^`]+`(?: / )?)+)", m.group(1).replace("\n", " ")):
            out[num] = re.findall(r"`([^`]+)`", ids)
        return out
    return {}


def load_cases(corpus: Path) -> list[Case]:
    """The labelled cases of ``corpus``, in either label format."""
    doc = yaml.safe_load((corpus / "labels.yaml").read_text())
    if isinstance(doc, dict) and "cases" in doc:
        return [
            Case(
                name=name,
                paths=[str(corpus / name)],
                category=label["category"],
                thin=bool(label.get("thin")),
                culprits=[[culprit_key(c)] for c in label.get("culprit") or ()],
                producers=tuple(label.get("producers", ())),
            )
            for name, label in sorted(doc["cases"].items())
        ]
    readme_ids = _readme_culprits(corpus)
    cases = []
    for entry in doc:
        name = entry["file"]
        ids = entry.get("culprit_ids")
        if ids is None:
            ids = readme_ids.get(name.split("_", 1)[0], [])
        category = entry["expected_category"]
        cases.append(
            Case(
                name=name,
                paths=[str(corpus / name)],
                category=category,
                thin=category == "unknown",
                culprits=[[culprit_key(i) for i in ids]] if ids else [],
                ambiguous=bool(entry.get("ambiguous")),
            )
        )
    return sorted(cases, key=lambda c: c.name)


def names_in(doc: dict[str, Any]) -> set[str]:
    """Everything a verdict names: hosts, IPs, pods, "rank N", "gpu BUS-ID"."""
    names: set[str] = set(doc.get("hosts") or ()) | set(doc.get("suspect_hosts") or ())
    for g in doc.get("gpus") or ():
        if g.get("host"):
            names.add(g["host"])
        if g.get("pci_bus_id"):
            names.add(f"gpu {g['pci_bus_id']}")
    items = list(doc.get("suspects") or ())
    if doc.get("root_cause"):
        items.append(doc["root_cause"])
    for s in items:
        for key in ("host", "peer", "pod"):
            if s.get(key):
                names.add(str(s[key]))
        if s.get("rank") is not None:
            names.add(f"rank {s['rank']}")
        gpu = s.get("gpu")
        if isinstance(gpu, str) and ":" in gpu:
            names.add(f"gpu {gpu}")
    return names


def is_correct(case: Case | dict[str, Any], doc: dict[str, Any]) -> bool:
    thin, category = (
        (case.thin, case.category) if isinstance(case, Case) else (bool(case.get("thin")), case["category"])
    )
    if thin:
        return doc["category"] == "unknown" or doc["confidence"] == "low"
    return bool(doc["category"] == category)


def score(corpus: Path, *, verbose: bool, only: str | None = None) -> dict[str, Any]:
    """Score the cases of ``corpus`` (those whose name starts with ``only``, if given)."""
    from ckptctl.ops.classify import classify_logs

    cases = [c for c in load_cases(corpus) if only is None or c.name.startswith(only)]
    rows = []
    for case in cases:
        doc = classify_logs(case.paths, jobs=1).to_json()
        named = names_in(doc)
        found = [c for c in case.culprits if any(i in named for i in c)]
        rows.append(
            {
                "case": case,
                "doc": doc,
                "ok": is_correct(case, doc),
                "found": found,
                "confident_thin": case.thin and doc["category"] != "unknown" and doc["confidence"] != "low",
            }
        )
    for r in rows:
        case = r["case"]
        mark = "ok " if r["ok"] else "BAD"
        missing = [" / ".join(c) for c in case.culprits if c not in r["found"]]
        want = case.category + ("?" if case.ambiguous else "")
        line = f"{mark} {case.name[:44]:<44} want {want:<11} got {r['doc']['category']}/{r['doc']['confidence']}"
        if missing:
            line += f"  culprit missing: {', '.join(missing)}"
        if r["confident_thin"]:
            line += "  CONFIDENT ON THIN EVIDENCE"
        if verbose or not r["ok"] or missing or r["confident_thin"]:
            print(line)
    n = len(rows)
    num_ok = sum(r["ok"] for r in rows)
    clear = [r for r in rows if not r["case"].ambiguous]
    num_culprits = sum(len(r["case"].culprits) for r in rows)
    num_found = sum(len(r["found"]) for r in rows)
    producers = {p for r in rows for p in r["case"].producers}
    return {
        "corpus": str(corpus),
        "cases": n,
        "producers": len(producers),
        "category_accuracy": num_ok / n if n else 0.0,
        "num_correct": num_ok,
        "num_clear": len(clear),
        "num_clear_correct": sum(r["ok"] for r in clear),
        "culprit_recall": num_found / num_culprits if num_culprits else 1.0,
        "num_culprits": num_culprits,
        "num_culprits_named": num_found,
        "confident_on_thin": sum(r["confident_thin"] for r in rows),
        "num_thin": sum(r["case"].thin for r in rows),
    }


def meets_targets(s: dict[str, Any]) -> bool:
    return (
        s["category_accuracy"] >= TARGET_CATEGORY
        and s["culprit_recall"] >= TARGET_CULPRIT
        and s["confident_on_thin"] == 0
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus", type=Path, action="append",
        help="a labelled folder (repeatable; default: the project's realistic and held-out corpora)",
    )  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="print every case, not only misses")
    parser.add_argument(
        "--only", metavar="PREFIX", help="score only the cases whose name starts with PREFIX (h_: the held-out set)"
    )
    args = parser.parse_args()
    results = []
    for corpus in args.corpus or DEFAULT_CORPORA:
        print(f"== {corpus}")
        s = score(corpus, verbose=args.verbose, only=args.only)
        results.append(s)
        print(
            f"classify accuracy on {s['cases']} cases"
            + (f" ({s['producers']} log producers)" if s["producers"] else "")
            + ":\n"
            f"  category accuracy           {s['category_accuracy']:.1%} ({s['num_correct']}/{s['cases']})"
            f"   target >= {TARGET_CATEGORY:.0%}"
            + (
                f"; not ambiguous {s['num_clear_correct']}/{s['num_clear']}"
                if s["num_clear"] != s["cases"]
                else ""
            )
            + "\n"
            f"  culprit recall              {s['culprit_recall']:.1%} ({s['num_culprits_named']}/{s['num_culprits']})"
            f"   target >= {TARGET_CULPRIT:.0%}\n"
            f"  confident on thin evidence  {s['confident_on_thin']} of {s['num_thin']} thin cases   target 0"
        )
    if len(results) > 1:
        print("\nfolder                          category            culprits    confident-on-thin")
        for s in results:
            print(
                f"{Path(s['corpus']).name:<30}  {s['category_accuracy']:6.1%} ({s['num_correct']:>3}/{s['cases']:<3})"
                f"  {s['num_culprits_named']:>3}/{s['num_culprits']:<3}     {s['confident_on_thin']} of {s['num_thin']}"
            )
    return 0 if all(meets_targets(s) for s in results) else 3


if __name__ == "__main__":
    sys.exit(main())
