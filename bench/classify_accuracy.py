"""Score `ckptctl classify` on the realistic corpus (tests/fixtures/logs_realistic/).

Each case is a directory of log excerpts in the exact formats real tools print,
labelled in labels.yaml (written before the tool was run on them). Prints, per
case, the verdict against its label, then:

* category accuracy: the category matches the label; on a *thin* case (only
  consequences, no cause: a bare SIGKILL, a bare NCCL timeout) `unknown` or a
  low-confidence verdict is the right answer;
* culprit recall: of the culprits the labels name (hosts, IPs, pods, "rank N",
  "gpu BUS-ID"), how many the verdict names (hosts, suspect_hosts, gpus,
  suspects, root cause);
* confident on thin evidence: thin cases given a medium/high-confidence verdict
  (the target is 0).

Usage: python bench/classify_accuracy.py [--corpus DIR] [--only PREFIX] [--verbose]

The cases named h_* are a held-out set: written and labelled after the tool was
tuned on the others, committed before it was run on them.
Exit 0 when the targets (category >= 90%, culprit >= 90%, none confident on thin)
are met, 3 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE.parent / "tests" / "fixtures" / "logs_realistic"
TARGET_CATEGORY = 0.90
TARGET_CULPRIT = 0.90


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


def is_correct(label: dict[str, Any], doc: dict[str, Any]) -> bool:
    if label.get("thin"):
        return doc["category"] == "unknown" or doc["confidence"] == "low"
    return bool(doc["category"] == label["category"])


def score(corpus: Path, *, verbose: bool, only: str | None = None) -> dict[str, Any]:
    """Score the cases of ``corpus`` (those whose name starts with ``only``, if given)."""
    from ckptctl.ops.classify import classify_logs

    labels = yaml.safe_load((corpus / "labels.yaml").read_text())["cases"]
    if only is not None:
        labels = {k: v for k, v in labels.items() if k.startswith(only)}
    rows = []
    for case, label in sorted(labels.items()):
        doc = classify_logs([str(corpus / case)], jobs=1).to_json()
        named = names_in(doc)
        culprits = [str(c) for c in label.get("culprit") or ()]
        found = [c for c in culprits if c in named]
        rows.append(
            {
                "case": case,
                "label": label,
                "doc": doc,
                "ok": is_correct(label, doc),
                "culprits": culprits,
                "found": found,
                "confident_thin": bool(label.get("thin")) and doc["category"] != "unknown"
                and doc["confidence"] != "low",
            }
        )
    for r in rows:
        mark = "ok " if r["ok"] else "BAD"
        missing = [c for c in r["culprits"] if c not in r["found"]]
        line = (
            f"{mark} {r['case']:<28} want {r['label']['category']:<10} got "
            f"{r['doc']['category']}/{r['doc']['confidence']}"
        )
        if missing:
            line += f"  culprit missing: {', '.join(missing)}"
        if r["confident_thin"]:
            line += "  CONFIDENT ON THIN EVIDENCE"
        if verbose or not r["ok"] or missing or r["confident_thin"]:
            print(line)
    n = len(rows)
    num_ok = sum(r["ok"] for r in rows)
    num_culprits = sum(len(r["culprits"]) for r in rows)
    num_found = sum(len(r["found"]) for r in rows)
    producers = {p for r in rows for p in r["label"].get("producers", ())}
    return {
        "cases": n,
        "producers": len(producers),
        "category_accuracy": num_ok / n if n else 0.0,
        "num_correct": num_ok,
        "culprit_recall": num_found / num_culprits if num_culprits else 1.0,
        "num_culprits": num_culprits,
        "num_culprits_named": num_found,
        "confident_on_thin": sum(r["confident_thin"] for r in rows),
        "num_thin": sum(bool(r["label"].get("thin")) for r in rows),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--verbose", action="store_true", help="print every case, not only misses")
    parser.add_argument("--only", metavar="PREFIX", help="score only the cases whose name starts with PREFIX (h_: the held-out set)")
    args = parser.parse_args()
    s = score(args.corpus, verbose=args.verbose, only=args.only)
    print(
        f"classify accuracy on {s['cases']} realistic cases ({s['producers']} log producers):\n"
        f"  category accuracy           {s['category_accuracy']:.1%} ({s['num_correct']}/{s['cases']})"
        f"   target >= {TARGET_CATEGORY:.0%}\n"
        f"  culprit recall              {s['culprit_recall']:.1%} ({s['num_culprits_named']}/{s['num_culprits']})"
        f"   target >= {TARGET_CULPRIT:.0%}\n"
        f"  confident on thin evidence  {s['confident_on_thin']} of {s['num_thin']} thin cases   target 0"
    )
    met = (
        s["category_accuracy"] >= TARGET_CATEGORY
        and s["culprit_recall"] >= TARGET_CULPRIT
        and s["confident_on_thin"] == 0
    )
    return 0 if met else 3


if __name__ == "__main__":
    sys.exit(main())
