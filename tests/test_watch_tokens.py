"""The token reader of ``ckptctl watch``: number shapes, key meanings, markers, records (tables)."""

from __future__ import annotations

import gzip
import math
import random
import re
import resource
import time
from pathlib import Path

import pytest

from ckptctl.adapters.follow import LineReader
from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.logevents import LossPoint, ResumeMarker
from ckptctl.core.watch.logtokens import MAX_LINE_CHARS
from ckptctl.core.watch.losslog import LossLogParser, parse_lines

# (text, key, value, total)
FIELDS = [
    ("Step 2,350/120,000 | loss 3.41", "step", 2350.0, 120000.0),
    ("Step 2,350/120,000 | loss 3.41", "loss", 3.41, None),
    ("iter120 | loss 3.41 | 12.3 ms/it", "iter", 120.0, None),
    ("iter120 | loss 3.41 | 12.3 ms/it", "ms_per_it", 12.3, None),
    ("iter: 39  total_loss: 0.71  loss_cls: 0.2", "total_loss", 0.71, None),
    ("epoch 3 batch 120/500 train_si_snr_loss -12.34", "train_si_snr_loss", -12.34, None),
    ("batch 120/500 train_si_snr_loss -12.34", "batch", 120.0, 500.0),  # no epoch: a field (beside one: a counter)
    (" iteration 30/ 100 | lm loss: 2.345678E+00 |", "lm_loss", 2.345678, None),
    ("step=9 loss=nan lr=[0.00015]", "loss", math.nan, None),
    ("step=9 loss=-inf lr=[0.00015]", "loss", -math.inf, None),
    ("step=9 loss=nan lr=[0.00015]", "lr", 0.00015, None),
    ("step: 10  loss:  3.4  memory: 61.33GiB(77.42%)  tps: 7,412", "tps", 7412.0, None),
    ("| elapsed time per iteration (ms): 1432.8 |", "elapsed_time_per_iteration_ms", 1432.8, None),
    ("Resumed from step 2,500, loss 2.38", "resumed_from_step", 2500.0, None),
    ("num_updates=100, lr=1.25e-05, gnorm=1.234", "num_updates", 100.0, None),
]


@pytest.mark.parametrize(("text", "key", "value", "total"), FIELDS)
def test_number_shapes_and_keys(text: str, key: str, value: float, total: float | None) -> None:
    fields = {f.key: f for f in lt.tokenize(text).fields}
    assert key in fields, fields
    f = fields[key]
    assert f.value == value or (math.isnan(value) and math.isnan(f.value))
    assert f.total == total


@pytest.mark.parametrize(
    "text",
    ["number of nan iterations: 0", "post_steps[0]", "f\"{step:2d}\"", "version 2.5.1", "eta: 1:23:45"],
)
def test_no_value_where_there_is_none(text: str) -> None:
    fields = {f.key: f.value for f in lt.tokenize(text).fields}
    assert "number_of" not in fields and "post_steps" not in fields and "step" not in fields and "version" not in fields


MEANINGS = [
    ("loss", ("loss", 0)),
    ("train_loss", ("loss", 1)),
    ("lm_loss", ("loss", 1)),
    ("loss_0", ("loss", 2)),
    ("loss_cls", ("loss", 3)),
    ("val_loss", ("eval", 0)),
    ("eval/loss", ("eval", 0)),
    ("aux_loss", None),
    ("loss_scale", ("loss_scale", 0)),
    ("train_loss_epoch", None),
    ("global_step", ("step", 0)),
    ("num_updates", ("step", 0)),
    ("iteration", ("step", 3)),
    ("step", ("step", 2)),
    ("loss_train", ("loss", 1)),
    ("train_loss/train/total", ("loss", 1)),
    ("train_time/token", ("tokens", 0)),
    ("train_time/sample", ("samples", 0)),
    ("train_time/batch", None),
    ("train_lr_adamw/group0", ("lr", 0)),
    ("gradient_accumulation_steps", ("step", 2)),
    ("learning_rate", ("lr", 0)),
    ("train/lr", ("lr", 0)),
    ("current_lr", ("lr", 0)),
    ("num_input_tokens_seen", ("tokens", 0)),
    ("consumed_samples", ("samples", 0)),
    ("tok/s", ("tokens_per_s", 0)),
    ("samples_per_second", ("samples_per_s", 0)),
    ("mfu", ("mfu", 0)),
    ("gnorm", ("grad_norm", 0)),
    ("data_time", None),
    ("number_of_nan_iterations", ("nan_count", 0)),
    ("number_of_skipped_iterations", None),
]


@pytest.mark.parametrize(("key", "meaning"), MEANINGS)
def test_key_meanings(key: str, meaning: tuple[str, int] | None) -> None:
    assert lk.classify_key(key) == meaning


MARKERS = [
    ("Loaded checkpoint checkpoints/checkpoint_last.pt (epoch 1 @ 5000 updates)", 5000, "restore"),
    ("[Torch] Loading checkpoint from /ckpt/global_step1000/mp_rank_00_model_states.pt...", 1000, "restore"),
    (" > Model restored from step 3000", 3000, "restore"),
    ("=> loaded checkpoint 'ckpt/last.pth' (iter 200)", 200, "restore"),
    ("2024-12-24 00:56:05,000 INFO train: Resumed from step 2,500, loss 2.34", 2500, "restore"),
    ("Saved checkpoint at step 4,000 (loss 3.12)", 4000, "save"),
    ("  successfully saved checkpoint from iteration    4000 to /ckpt/gpt [ t 1/4, p 1/2 ]", 4000, "save"),
    ('{"event": "resume", "restored_step": 1000, "tokens_seen": 524288000}', 1000, "restore"),
    ("RESUME: global_step=800 from checkpoint", 800, "restore"),
    # the step in the checkpoint's path
    ("Restoring states from the checkpoint path at /scratch/ckpt/epoch=4-step=7100.ckpt", 7100, "restore"),
    ("Loading model from /out/checkpoint-7100 to resume training", 7100, "restore"),
    ("Resuming training from out/pretrain/run/step-00007100/lit_model.pth", 7100, "restore"),
    ("2025/01/07 02:11:40 - mmengine - INFO - Load checkpoint from work_dirs/seg/iter_7100.pth", 7100, "restore"),
]


# A step-like word and a bracketed or parenthesised counter; a loss key and a qualifier word;
# both "iter" and "step" (the optimizer step wins); records under a "[batch=N/T]:" header.
STEP_SHAPES = [
    (["2025/03/02 08:14:51 - mmengine - INFO - Iter(train) [ 8200/40000]  base_lr: 9.1e-03 lr: 9.1e-03"
      "  eta: 2:51:07  time: 0.2971  data_time: 0.0061  memory: 10112  loss: 0.5123  decode.loss_ce: 0.3710"],
     [(8200, 0.5123)]),
    (["train step (120/4800) | loss 2.5012"], [(120, 2.5012)]),
    (["Epoch 2 | iter 9208 step 2302 | loss train: 2.345, val: n/a | iter time: 412.30 ms (step)",
      "Epoch 2 | iter 9212 step 2303 | loss (train): 2.341, val: n/a | iter time: 410.10 ms"],
     [(2302, 2.345), (2303, 2.341)]),
    (["Epoch 3 | iter 12004 step 3001 | loss train: 2.210, val: 2.251 | iter time: 409.00 ms (step)",
      "iter 12004: val loss 2.2488, val time: 21003.10 ms",
      "Validation: loss 2.25", "step 3002 | loss 2.205"],
     [(3001, 2.21), (3002, 2.205)]),
    (["[batch=120/4800]:", "\t Train time/batch: 119", "\t Train time/token: 62914560",
      "\t Train loss/train/total: 2.3456", "\t Train lr-DecoupledAdamW/group0: 1.8e-04",
      "[batch=130/4800]:", "\t Train time/token: 68157440", "\t Train loss/train/total: 2.3301"],
     [(120, 2.3456), (130, 2.3301)]),
]


@pytest.mark.parametrize(("lines", "expected"), STEP_SHAPES)
def test_step_shapes(lines: list[str], expected: list[tuple[int, float]]) -> None:
    points = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert [(p.step, p.loss) for p in points] == expected


def test_path_metrics_have_their_meaning() -> None:
    lines = ["[batch=120/4800]:", "\t Train time/token: 62914560", "\t Train loss/train/total: 2.3456",
             "\t Train lr-DecoupledAdamW/group0: 1.8e-04"]
    (p,) = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert p.metrics["tokens"] == 62914560 and p.metrics["lr"] == 1.8e-04


@pytest.mark.parametrize(("line", "step", "kind"), MARKERS)
def test_checkpoint_lines_are_markers_never_samples(line: str, step: int, kind: str) -> None:
    events = LossLogParser().feed(line)
    assert len(events) == 1 and isinstance(events[0], ResumeMarker), events
    assert (events[0].step, events[0].kind) == (step, kind)


def test_marker_carries_tokens() -> None:
    (m,) = LossLogParser().feed('{"event": "resume", "restored_step": 1000, "tokens_seen": 524288000}')
    assert isinstance(m, ResumeMarker) and m.tokens == 524288000


def test_multi_line_records_take_the_header_step() -> None:
    lines = [
        "   --> TIME: 2024-12-24 00:26:52 -- STEP: 24/406 -- GLOBAL_STEP: 25",
        "     | > decoder_loss: 0.53  (0.55)",
        "     | > loss: 1.02  (1.05)",
        "     | > current_lr: 2.5e-05 ",
        "   --> TIME: 2024-12-24 00:27:02 -- STEP: 25/406 -- GLOBAL_STEP: 26",
        "     | > loss: 0.98  (1.04)",
        " > EVALUATION ",
        "     | > avg_loss: 1.7 (+0.02)",
    ]
    points = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert [(p.step, p.loss, p.fmt) for p in points] == [(25, 1.02, "coqui"), (26, 0.98, "coqui")]
    assert points[0].metrics["lr"] == 2.5e-05
    assert points[0].wall is not None and points[1].wall == points[0].wall + 10


def test_a_step_line_and_its_loss_line_merge() -> None:
    lines = [
        "[2024-01-01 10:00:00,000] [INFO] [logging.py:128:log_dist] [Rank 0] step=10, skipped=0, lr=[0.00015], mom=[(0.9, 0.95)]",
        "steps: 10 loss: 3.4522 iter time (s): 0.501 samples/sec: 511.269",
    ]
    (p,) = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert (p.step, p.loss, p.fmt, p.rank) == (10, 3.4522, "deepspeed", 0)
    assert p.metrics["lr"] == 0.00015 and p.metrics["sec_per_step"] == 0.501


@pytest.mark.parametrize(("gap", "merged"), [(30, True), (60, False)])
def test_a_step_line_waits_for_its_loss_line_only_within_the_record_span(gap: int, merged: bool) -> None:
    """A step line with no loss opens a record; its loss line merges into it within
    ``_RECORD_SPAN_LINES`` lines, not later (a banner's ``Total optimization steps = 300,000``
    is no header of a loss line 10,000 lines on), read the same with and without templates."""
    lines = [
        "[2024-01-01 10:00:00,000] [INFO] [logging.py:128:log_dist] [Rank 0] step=10, skipped=0, lr=[0.00015], mom=[(0.9, 0.95)]",
        *(f"NCCL INFO Channel {i:02d}/32 :    0   1   2   3" for i in range(gap)),
        "steps: 10 loss: 3.4522 iter time (s): 0.501 samples/sec: 511.269",
    ]
    for fast in (True, False):
        points = [e for e in parse_lines(lines, fast=fast) if isinstance(e, LossPoint)]
        assert [(p.step, "lr" in p.metrics) for p in points] == [(10, merged)]


def test_columns_under_a_header() -> None:
    lines = ["    step       loss         lr   sec/it", "      25     3.2670  3.900e-05    0.501", "      50     3.2490  7.650e-05    0.506"]
    points = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert [(p.step, p.loss, p.fmt) for p in points] == [(25, 3.267, "columns"), (50, 3.249, "columns")]
    assert points[1].metrics["lr"] == 7.65e-05


def test_keras_bar_steps_come_from_the_epoch_line() -> None:
    lines = ["Epoch 2/20", "\r 10/500 \u2501\u2501\u2501 1:23 509ms/step - accuracy: 0.61 - loss: 3.39\r 20/500 \u2501\u2501\u2501 1:23 500ms/step - accuracy: 0.62 - loss: 3.35"]
    points = [e for e in parse_lines(lines) if isinstance(e, LossPoint)]
    assert [(p.step, p.loss, p.fmt) for p in points] == [(510, 3.39, "keras"), (520, 3.35, "keras")]


def test_evaluation_lines_and_blocks_are_skipped() -> None:
    lines = [
        "2021-03-01 12:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 5.2 | num_updates 4000",
        "step 250: val loss 2.2345",
    ]
    assert not [e for e in parse_lines(lines) if isinstance(e, LossPoint)]


def test_unread_lines_are_named() -> None:
    parser = LossLogParser()
    for line in ["loss: 2.5", "loss: 2.4"]:
        parser.feed(line)
    assert parser.unread_samples and "a loss without a step" in parser.unread_samples[0]


def test_gzip_logs_are_read(tmp_path: Path) -> None:
    text = "".join(f"step {i} | loss {3 - i / 100:.3f}\n" for i in range(1, 200))
    path = tmp_path / "train.log.gz"
    with gzip.open(path, "wt") as f:
        f.write(text[: len(text) // 2])
    with gzip.open(path, "at") as f:  # a second gzip member (appended rotation)
        f.write(text[len(text) // 2 :])
    lines = [x for x in LineReader(str(path)) if x is not None]
    assert lines == text.splitlines()


def test_a_huge_single_line_is_cut_and_cheap(tmp_path: Path) -> None:
    path = tmp_path / "huge.log"
    with path.open("w") as f:
        f.write("step 1 | loss 2.0\n")
        chunk = "x" * (1 << 20)
        for _ in range(200):  # a 200 MB line
            f.write(chunk)
        f.write("\nstep 2 | loss 1.9\n")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    parser = LossLogParser()
    events = []
    for line in LineReader(str(path)):
        assert line is not None and len(line) <= MAX_LINE_CHARS
        events += parser.feed(line)
    elapsed = time.perf_counter() - t0
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    assert [e.step for e in events if isinstance(e, LossPoint)] == [1, 2]
    assert elapsed < 15, elapsed
    assert grew_kib < 100 * 1024, grew_kib  # well under the 640 MB it used to take


CORPUS = Path(__file__).resolve().parent / "fixtures" / "losslogs_realistic"


@pytest.mark.parametrize("seed", range(3))
def test_mangled_lines_never_raise(seed: int) -> None:
    """Corpus lines with random characters and huge digit runs: points or nothing, never an exception."""
    import random
    import string

    from ckptctl.core.watch.analyze import analyze

    rng = random.Random(seed)
    alphabet = string.printable + "\x1b\r{}[]()|:=/,.-+eE nanif" + "".join(chr(i) for i in range(0x2500, 0x2508))
    lines = [x for f in sorted(CORPUS.glob("*.log"))[::4] for x in f.read_text().split("\n")[:100]]
    for _ in range(150):
        parser = LossLogParser()
        events = []
        for _ in range(rng.randint(1, 30)):
            chars = list(rng.choice(lines))
            for _ in range(rng.randint(0, 6)):
                if chars:
                    chars[rng.randrange(len(chars))] = rng.choice(alphabet)
            if rng.random() < 0.15:
                chars.insert(rng.randrange(len(chars) + 1), rng.choice(["9", "1,000", "e9", "nan"]) * rng.choice([20, 5000]))
            events += parser.feed("".join(chars))
        events += parser.flush()
        analyze(events, final=True)


# -- the fast paths read exactly what the slow path reads ------------------------------------


def _corpus_lines() -> list[str]:
    out = []
    for path in sorted(CORPUS.glob("*.log")) + sorted((CORPUS.parent / "losslogs").glob("*")):
        if path.is_file():
            for raw in path.read_text(errors="replace").split("\n"):
                for part in raw.split("\r"):
                    text, _rank = lt.clean_line(part)
                    if text:
                        out.append(text)
    return out


def _renumber(rng: random.Random, text: str) -> str:
    """The line with each digit run replaced by one of another width (what the next step prints)."""
    return re.sub(r"\d+", lambda m: str(rng.randrange(10 ** rng.randint(1, 7))).zfill(rng.choice((1, len(m.group())))), text)


def _slow(text: str) -> tuple[list[lt.Field], int]:
    found = lt._fields_slow(text)
    return [f for f, _, _ in found], (len(lt._NUM_RE.findall(text)) if not found else -1)


def _same_fields(a: list[lt.Field], b: list[lt.Field]) -> bool:
    def norm(fs: list[lt.Field]) -> list[tuple[object, ...]]:
        return [(f.key, "nan" if math.isnan(f.value) else f.value, f.total, f.unit) for f in fs]

    return norm(a) == norm(b)


def test_vocabulary_prefilter_keeps_every_meaningful_line() -> None:
    """A line the prefilter drops has no field with a meaning and no counter (the corpus, renumbered too)."""
    rng = random.Random(7)
    dropped = 0
    for text in _corpus_lines() + [_renumber(rng, t) for t in _corpus_lines()[::3]]:
        if lt.tokenize_meaningful(text) is None:
            dropped += 1
            fields, _ = _slow(text)
            assert not [f for f in fields if lk.classify_key(f.key, f.unit)], text
            assert lt.tokenize(text).counter is None, text
    assert dropped > 50  # chatter lines are in the corpus


@pytest.mark.parametrize(
    "body",
    [
        "{'loss': 3.4833, 'grad_norm': 0.976377, 'learning_rate': 1.65e-05, 'epoch': 0.01, 'num_input_tokens_seen': 5242880}",
        "{'loss': nan, 'grad_norm': -inf, 'epoch': 2.0}",
        "{'train/loss': 0, 'step': 10, 'x': 1e+16}",
        "{'a': 0123}",  # not Python: no dict
        "{'a': 1,}",  # Python, but not the simple shape: the full reader
        "{'a': 1e400, 'b': 123456789012345678901234567890}",
    ],
)
def test_simple_dicts_read_as_literal_eval_reads_them(body: str) -> None:
    import ast

    fast = lt._simple_py_dict(body)
    try:
        slow = ast.literal_eval(lt._BARE_NONFINITE_RE.sub(lambda m: repr(m.group(1)), body))
    except (ValueError, SyntaxError):
        slow = None
    if fast is not None:
        assert fast == slow and [type(v) for v in fast.values()] == [type(v) for v in slow.values()]
    assert lt.read_dict(body) == ((slow, "hf") if isinstance(slow, dict) else None)


def _corpus_logs() -> list[list[str]]:
    """Every watch corpus log (the files of case folders too), as physical lines."""
    out = []
    for folder in ("losslogs", "losslogs_holdout", "losslogs_realistic", "losslogs_openworld"):
        for path in sorted((CORPUS.parent / folder).rglob("*")):
            if path.is_file() and path.suffix not in (".json", ".py", ".yaml", ".md"):
                out.append(path.read_text(errors="replace").split("\n"))
    return out


def _points(events: list[object]) -> list[str]:
    return [repr(e) for e in events]


@pytest.mark.parametrize("seed", range(2))
def test_fast_path_gives_the_general_readers_events(seed: int) -> None:
    """Every corpus log, and a copy with renumbered lines interleaved: the compiled line templates
    give exactly the events of the general reader (no template), and most lines take them."""
    rng = random.Random(seed)
    hits = lines_read = 0
    for lines in _corpus_logs():
        mixed = [x for line in lines for x in ([line, _renumber(rng, line)] if rng.random() < 0.3 else [line])]
        for variant in (lines, mixed):
            fast = LossLogParser()
            got = fast.feed_lines(variant) + fast.flush()
            slow = LossLogParser(fast=False)
            want = slow.feed_lines(variant) + slow.flush()
            assert _points(got) == _points(want)
            assert fast.unread_samples == slow.unread_samples
            assert fast.format == slow.format
            assert fast._fast is not None
            hits += fast._fast.hits
            lines_read += len(variant)
    assert hits > lines_read // 3  # the fast path was taken, not only the general one


def test_fast_path_one_line_at_a_time_is_the_same() -> None:
    """``feed(line)`` (a live follow) and ``feed_lines`` read alike."""
    for lines in _corpus_logs()[::4]:
        one = LossLogParser()
        got = [e for line in lines for e in one.feed(line)] + one.flush()
        assert _points(got) == _points(parse_lines(lines, fast=False))


def test_a_dict_line_with_a_bad_escape_is_read_and_warns_nothing() -> None:
    """``'\\i'`` in a string of a logged dict: Python warns when it parses it (a SyntaxWarning on the
    user's stderr from 3.12); the reader reads the dict and lets no warning out."""
    import warnings

    line = "{'loss': 2.31, 'learning_rate': 3e-05, 'epoch': 1.0, 'run': 'C:\\input\\images'}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        doc = lt.read_dict(line)
    assert doc is not None and doc[0]["loss"] == 2.31 and doc[0]["run"] == "C:\\input\\images"
