"""The Hyperscan prefilter engine gives exactly what the stdlib ``re`` engine gives.

Skipped as a whole when the ``hyperscan`` package (``ckptctl[fast]``) is missing:
the stdlib engine is then the only one, and the other classify tests cover it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "hyperscan", reason="hyperscan not installed (ckptctl[fast]): only the stdlib re engine exists"
)

from ckptctl.adapters import hsscan
from ckptctl.core.classify.catalog import parse_catalog
from ckptctl.errors import UsageError
from ckptctl.ops import classify as ops
from ckptctl.ops.classify_catalog import load_default_signatures
from ckptctl.ops.classify_result import ClassifyResult
from ckptctl.ops.classify_scan import ENGINE_ENV, make_matcher, pick_engine

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
CATALOG = load_default_signatures()
KEYWORDS = sorted({k for s in CATALOG for k in s.keywords})
# Keyword-less signatures (user catalogs may have them): their own pattern is the
# prefilter, one re pass each, on both engines.
KEYWORDLESS = parse_catalog(
    {
        "signatures": [
            {"id": "lustre-evict", "pattern": r"LustreError: .* evicted", "category": "infra"},
            {"id": "rank-dead", "pattern": r"rank (?P<rank>\d+) is dead", "category": "job"},
            {"id": "non-ascii", "pattern": "\u00e9chec \\w+", "category": "job", "role": "symptom"},
        ]
    },
    source="test",
)


def _comparable(result: ClassifyResult) -> dict[str, Any]:
    doc = result.to_json()
    doc.pop("elapsed_s")
    doc["inputs"].pop("engine")
    return doc


@pytest.mark.parametrize("scenario", sorted(p.name for p in LOGS.iterdir() if p.is_dir()))
def test_every_corpus_scenario_gets_the_same_result_on_both_engines(scenario: str) -> None:
    fast = ops.classify_logs([str(LOGS / scenario)], engine="hyperscan", jobs=1)
    slow = ops.classify_logs([str(LOGS / scenario)], engine="re", jobs=1)
    assert (fast.engine, slow.engine) == ("hyperscan", "re")
    assert _comparable(fast) == _comparable(slow)
    assert fast.num_matched_lines > 0


def test_the_whole_corpus_at_once_gets_the_same_result_on_both_engines() -> None:
    fast = ops.classify_logs([str(LOGS)], engine="hyperscan", jobs=1)
    slow = ops.classify_logs([str(LOGS)], engine="re", jobs=1)
    assert _comparable(fast) == _comparable(slow)


def _random_block(rng: random.Random, num_lines: int) -> bytes:
    filler = [
        "step 12 | loss 2.31",
        "host-3:1:2 [0] NCCL INFO Channel 00/0",
        "level=info msg=ok",
        "number of nan iterations:   0 | Error while calling",  # near misses of keywords
        "Epoch 3: 40%|\u2588\u2588\u2588\u2588\u258c     | \u00e9chec d\u00e9tect\u00e9",
        "x" * 300,
        "",
    ]
    lines = []
    for _ in range(num_lines):
        text = rng.choice(filler)
        for _ in range(rng.choice((0, 0, 0, 1, 2))):
            kw = rng.choice(KEYWORDS)
            at = rng.randrange(len(text) + 1)
            text = text[:at] + kw + text[at:]
        if rng.random() < 0.01:
            text = "y" * 70_000 + text + "z" * 1_000  # overlong: matched in a window
        if rng.random() < 0.05:
            text = "Jan 14 03:59:40 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, " + text
        if rng.random() < 0.05:
            text += rng.choice(("LustreError: 11-0: evicted", " rank 7 is dead", "\r"))
        lines.append(text)
    block = "\n".join(lines)
    if rng.random() < 0.5:
        block += "\n"
    return block.encode()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("catalog", ["default", "with keyword-less signatures"])
def test_random_blocks_scan_the_same_on_both_engines(seed: int, catalog: str) -> None:
    sigs = CATALOG if catalog == "default" else (*KEYWORDLESS, *CATALOG)
    fast = make_matcher(sigs, "hyperscan")
    slow = make_matcher(sigs, "re")
    block = _random_block(random.Random(seed), 1500)
    fast_scan = fast.scan_block(block)
    assert fast_scan == slow.scan_block(block)
    assert fast_scan[0], "the block should have matching lines"


def test_hyperscan_candidates_hold_every_line_with_a_keyword_and_hint_it() -> None:
    rng = random.Random(5)
    block = _random_block(rng, 3000)
    scanner = hsscan.HyperscanBlockScanner([kw.encode() for kw in KEYWORDS])
    hints = dict(scanner.candidate_lines(block))
    offset = 0
    for line in block.split(b"\n"):
        whole = line + b"\n"
        present = {k for k, kw in enumerate(KEYWORDS) if kw.encode() in whole}
        if present:
            assert present <= set(scanner.keywords_in(whole, hints[offset])), line[:80]
        offset += len(whole)


def test_a_keyword_at_the_end_of_a_block_without_newline_and_one_spanning_it() -> None:
    for sigs in (CATALOG, (*KEYWORDLESS, *CATALOG)):
        fast = make_matcher(sigs, "hyperscan")
        slow = make_matcher(sigs, "re")
        for block in (
            b"ok\nRuntimeError",
            b"ok\nTraceback\nRuntimeError\n",
            b"torch.OutOfMemoryError\r\nok\n",
            b"",
            b"\n\n",
            b"LustreError: x evicted",
        ):
            assert fast.scan_block(block) == slow.scan_block(block), block


def test_an_empty_catalog_scans_nothing() -> None:
    assert make_matcher((), "hyperscan").scan_block(b"Xid 79\n") == ([], 1)


def test_engine_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    assert pick_engine() == "hyperscan"
    assert pick_engine("re") == "re"
    monkeypatch.setenv(ENGINE_ENV, "re")
    assert pick_engine() == "re"
    assert pick_engine("hyperscan") == "hyperscan"
    with pytest.raises(UsageError, match="unknown classify engine"):
        pick_engine("grep")
    monkeypatch.setattr(hsscan, "available", lambda: False)
    monkeypatch.delenv(ENGINE_ENV)
    assert pick_engine() == "re"
    with pytest.raises(UsageError, match="not installed"):
        pick_engine("hyperscan")


def test_workers_use_the_same_engine_and_result(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_bytes(_random_block(random.Random(9), 4000) * 3)
    one = ops.classify_logs([str(log)], engine="hyperscan", jobs=1, block_bytes=1 << 16)
    two = ops.classify_logs([str(log)], engine="hyperscan", jobs=2, block_bytes=1 << 16)
    slow = ops.classify_logs([str(log)], engine="re", jobs=2, block_bytes=1 << 16)
    for result in (two, slow):
        doc = _comparable(result)
        doc["inputs"].pop("jobs")
        ref = _comparable(one)
        ref["inputs"].pop("jobs")
        assert doc == ref
