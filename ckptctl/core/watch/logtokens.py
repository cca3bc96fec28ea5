"""Training-log lines as tokens: ``key -> number`` fields, whatever the logger.

Pure, stdlib only. One tokenizer reads every shape trainers print a metric in:
``key=value``, ``key: value``, ``key value``, ``key N/T``, glued ``iter120``,
``| lm loss: 2.3E+00 |``, ``123.4ms``, ``2,350``, ``-12.5``, ``nan``; a number
with no key before it takes a unit word after it (``503.0 ms/it``, ``5.9it/s``),
and a bare ``N/T`` counter (a progress bar's batch, ``[ 120/500]`` after an epoch)
is kept aside. Dict lines (JSON, Python ``str(dict)``) are read as dicts.
``classify_key`` (``ckptctl.core.watch.logkeys``) then says what a key means from its
words, so a new logger with familiar words needs no new code. Lines that repeat a
known shape are read without this module (``ckptctl.core.watch.logfast``).
"""

from __future__ import annotations

import ast
import calendar
import functools
import math
import re
import warnings
from typing import Any, NamedTuple

from ckptctl.core.verify import jsonsafe
from ckptctl.core.watch.logbracket import unglue
from ckptctl.core.watch.logkeys import (
    EPOCH,
    EVAL,
    EVAL_LINE_WORDS,
    EVAL_NO_VALUE_RE,
    LOSS,
    NAN_COUNT,
    NUM,
    RATE_UNIT_RE,
    STEP,
    classify_key,
    is_meaningless,
    key_words,
    without_logger,
)

__all__ = [
    "MAX_LINE_CHARS",
    "Field",
    "Tokens",
    "clean_line",
    "counter_spans",
    "dict_fields",
    "fields_with_positions",
    "is_count",
    "is_eval_line",
    "is_metrics_only",
    "meanings",
    "parse_float",
    "parse_int",
    "read_dict",
    "taken_starts",
    "timestamp_s",
    "tokenize",
    "tokenize_meaningful",
]  # fmt: skip

#: Longest line read; the rest of a longer line is ignored (a 200 MB line cannot cost more).
MAX_LINE_CHARS = 65536

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b")
_TORCHRUN_TAG_RE = re.compile(r"^\[([A-Za-z_]*?)(\d{1,9})\]:\s?")
_NUM = NUM
#: Units a number may carry glued (``123.4ms``, ``61.3GiB``, ``5.9it/s``); any other
#: letters glued to a number make it no number (``{step:2d}``, ``0x1F``, ``8.5f``).
_UNITS = r"ms|us|s|sec|m|h|min|it|tok|samples|GiB|GB|MiB|MB|KiB|KB|G|M|K|B|k|x|TFLOP|TFLOPs"
#: Words a key never ends with: a "nan" after them is a word ("number of nan iterations").
_STOPWORDS = frozenset({"of", "the", "a", "an", "for", "to", "at", "in", "on", "is", "no", "any"})
_TIMESTAMP_RES = (
    re.compile(r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[ T](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d{1,6}))?"),
    re.compile(r"\[(?P<mo>\d\d)/(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"),
)
#: Either of them (``timestamp_s`` then asks them in order).
_ANY_TIMESTAMP_RE = re.compile(r"\d\d[-/]\d\d[ T]\d\d:\d\d:\d\d")


class Field(NamedTuple):
    """One ``key -> number`` read from a line (a tuple: millions are made)."""

    key: str
    """Lower-case words joined by ``_`` (``lm_loss``, ``elapsed_time_per_iteration_ms``)."""
    value: float
    total: float | None = None
    """The ``T`` of ``key N/T``."""
    unit: str = ""


class Tokens(NamedTuple):
    fields: tuple[Field, ...]
    counter: tuple[int, int] | None
    """The first bare ``N/T`` (no key before it): a progress bar's batch of an epoch."""
    is_eval: bool
    """A word of the line names an evaluation (``EVAL_LINE_WORDS``: ``val``, ``eval``, ...)."""
    num_numbers: int
    """Numbers on the line when it has no field (-1 when it has)."""
    counter_epoch: int | None = None
    """The number just before a bracketed counter (timm's ``Train: 3 [ 120/500``, ``[3][120/500]``):
    the epoch the counter counts within, when the line names no epoch."""


#: Typographic quotes a log gets when pasted through a rich-text editor (an issue, a wiki, a
#: chat): ``{‘loss’: 1.45}`` reads as ``{'loss': 1.45}``.
_TYPOGRAPHIC_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'",
                                     "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"'})


def clean_line(raw: str) -> tuple[str, int | None]:
    """Strip ANSI codes and up to two torchrun tags, straighten typographic quotes; return (text,
    rank from the tag)."""
    text = _ANSI_RE.sub("", raw) if "\x1b" in raw else raw
    if not text.isascii():
        text = text.translate(_TYPOGRAPHIC_QUOTES)
    text = text.strip("\n")
    rank: int | None = None
    for _ in range(2 if text.startswith("[") else 0):
        m = _TORCHRUN_TAG_RE.match(text)
        if m is None:
            break
        if rank is None:
            rank = int(m.group(2))
        text = text[m.end() :]
    return text.strip(), rank


def parse_float(text: str) -> float | None:
    """A float from a log token ('2.34', '2,350', '2.3E+00', 'nan', "'2.34'", '12%'), else None."""
    try:
        return float(text)
    except ValueError:
        pass
    token = text.strip().strip("'\"").rstrip(",;|%")
    if not token:
        return None
    if re.fullmatch(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d*)?", token):
        token = token.replace(",", "")
    try:
        return float(token)
    except ValueError:
        return None


def is_count(value: float) -> bool:
    """A whole number a step or rank can be (finite, non-negative, exact in a float)."""
    return math.isfinite(value) and value >= 0 and value == int(value) and value < 2**53


def parse_int(text: str) -> int | None:
    """A non-negative integer ('120', '2,350', '120.0'), else None."""
    value = parse_float(text)
    if value is None or not is_count(value):
        return None
    return int(value)


#: Three lower-case letters then a capitalised word of three letters or more inside a key
#: (``CrossEntropyLoss``, ``avgLoss``): a word boundary (``cross_entropy_loss``). All-capital
#: runs (``GIoU``, ``MB``) and odd casing of one word (LitGPT's ``stEp 1``) are left whole.
_CAMEL_RE = re.compile(r"(?<=[a-z]{3})(?=[A-Z][a-z]{2})")


def _key(words: list[str]) -> str:
    # a rate's unit ends a key, as a tab does (Sockeye's "6.25 updates/sec perplexity=29.69")
    cut = max((i + 1 for i, w in enumerate(words[:-1]) if RATE_UNIT_RE.search(w)), default=0)
    return "_".join(_CAMEL_RE.sub("_", w).lower().strip("./()") for w in words[cut:][-6:] if w.strip("./()"))



# Each part of a key word is at most 128 characters and a word at most 8 parts: a start inside a
# long run of word characters ("a/a/a/...", "a-a-a-...") then costs a bounded scan, so the
# field regex stays linear in the line (unbounded, a 64 KiB such line took minutes).
_WORD = r"\(?[A-Za-z_][\w./]{0,127}(?:-[A-Za-z][\w./]{0,127}){0,7}\)?"
#: The key a bracketed step counter is read under (a step key; see ``_BRACKET_STEP``).
_BRACKET_KEY = "iter"
# One pass of the regex engine finds every field (Python only sees the matches):
#   key words (separated by spaces only: a tab, "|", ",", ";", " - ", "]" end a key: MXNet's
#   "Speed: 3.22 samples/sec<TAB>CrossEntropy=4.20"), an
#   optional ":"/"=" (then "[" or "(" may open a value: lr=[3e-4]), the number, a
#   glued unit, an optional "/ T";  or a word with a number glued to it (iter120);
#   or a number followed by a unit word (503 ms/it, 5000 updates); or a count glued before its
#   word, alone or ending a range (espnet2's "8epoch:train:376-750batch:", "8/20epoch"); a
#   number followed by "-<digit>" starts such a range and is no value of its own.
#   Before those: a step-like word and a bracketed counter (mmengine's "Iter(train) [ 8200/40000]",
#   Composer's "[batch=120/4800]", "step (120/4800)"): the counter is that step; an epoch with a
#   bracketed number ("Epoch [3/90]", mmengine's "Epoch(train)  [3][120/500]").
#   ("batch" only as Composer's "[batch=N/T]": a bare "Batch (12/300)" next to an epoch counts
#   within the epoch, which the progress-bar rule reads).
_BRACKET_STEP = r"iter|iteration|step"
_FIELD_RE = re.compile(
    r"(?i:(?<![\w.])(?P<bkey>" + _BRACKET_STEP + r")(?:\([A-Za-z_]+\))?[ \t]*[\[(]"
    r"|\[[ \t]*(?P<bkey2>" + _BRACKET_STEP + r"|batch)[ \t]*[=:])"
    r"[ \t]*(?P<bnum>\d{1,15})[ \t]*/[ \t]*(?P<btotal>\d{1,15})[ \t]*[\])]"
    r"|(?i:(?<![\w.])batch)[ \t]*\[[ \t]*(?:\d{1,15}-)?(?P<xnum>\d{1,15})[ \t]*\]"  # MXNet's "Batch [100]", "Batch [80-100]" (a range's end)
    r"|(?i:(?<![\w.])epoch(?:\([A-Za-z_]+\))?[ \t]*:?[ \t]*[\[(])[ \t]*(?P<enum>\d{1,9})"
    r"(?:[ \t]*/[ \t]*(?P<etotal>\d{1,9}))?[ \t]*[\])]"
    r"|(?=[(A-Za-z_\d+.-])(?<![\w.])(?<![A-Za-z_./-][/-])(?P<key>" + _WORD + r"(?: +" + _WORD + r"){0,7})"
    r"[ \t]*(?:[:=][ \t]*[\[(]?[ \t]*)?"
    r"(?P<num>" + _NUM + r"|(?i:[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z]))"
    r"(?:(?P<unit>%|(?:" + _UNITS + r")(?:/(?:step|it|iter|s|sec|batch|gpu|GPU))?(?![A-Za-z0-9]))|(?![A-Za-z]))(?!-\d)"
    r"(?:[ \t]*/[ \t]*(?P<total>\d[\d,]*)(?![\d.]))?"
    r"|(?<![\w.])(?P<gkey>iter|it|step|steps|iteration|epoch|global_step)(?P<gnum>\d+)(?![\w.])"
    r"|(?<![\w.-])(?:\d{1,15}-)?(?P<cnum>\d{1,15})(?:/(?P<ctotal>\d{1,9}))?(?P<cword>(?i:epoch|batch|iter))(?![A-Za-z])"
    r"|(?<![\w.])(?P<pnum>" + _NUM + r")[ \t]*(?P<punit>" + "ms/it|s/it|it/s|ms/step|s/step|tok/s|tokens/s|samples/s|updates|steps"
    + r")(?![A-Za-z])"
    # darknet's "  99: 469.803864, 848.945251 avg loss, 0.000000 rate, 20.45 seconds, 6336 images": a value
    # before its loss (or rate) key, ended by a comma; the line's leading "N:" is then its iteration
    r"|(?<![\w.])(?P<vnum>" + _NUM + r")[ \t]+(?P<vkey>(?i:avg[ \t]+loss|loss|rate))(?=[ \t]*(?:,|$))"
    r"|^(?:>[ \t]*)?(?P<lnum>\d{1,12}):[ \t]+(?=[-+]?\d)"  # (a pasted log may keep its Markdown quote "> ")
)
#: Words before ``N steps`` that make it a length, not a position ("for another 50 steps").
_DURATION_WORDS = frozenset({"for", "another", "more", "additional", "extra", "remaining", "next", "first", "last", "every"})
#: A bare ``N/T`` (a progress bar's; blanks around the slash too: ``2000 / 8223``, ``200/ 2983
#: batches``), or one in brackets (``[ 120/500]``, ``(12/300)``) with the number just before it
#: (``Train: 3 [ 120/500``, ``[3][120/500]``: the epoch it counts within). A date before a time
#: of day (``08/18 11:56:34``: a logger's prefix) is no counter; a time and ``•`` after it is
#: Lightning's RichProgressBar (``CustomTimeColumn``: ``21/1250 0:02:02 • 1:18:06``).
_NOT_A_DATE = r"(?![ \t]*\d{1,2}:\d\d(?::\d\d)?(?![:\d])(?![ \t]*\u2022))"
_COUNTER_RE = re.compile(
    r"(?:^|(?<=[|\s]))(?P<n>\d{1,15})[ \t]*/[ \t]*(?P<t>\d{1,15}|\?)(?=[\s\[,]|$)" + _NOT_A_DATE
    + r"|(?:(?<![\w.])\[?(?P<outer>\d{1,9})(?:/\d{1,9})?\]?[ \t]*)?[\[(][ \t]*(?P<bn>\d{1,15})/(?P<bt>\d{1,15})(?=[ \t]*[\])(]|[ \t])" + _NOT_A_DATE
)
_WORDS_RE = re.compile(r"[A-Za-z_][\w./]*")
_NUM_RE = re.compile(_NUM)
_DIGIT_RE = re.compile(r"\d")
_NONFINITE_RE = re.compile(r"nan|inf", re.IGNORECASE)
#: A number with a fraction just after a field's integer (tacotron2's ``Train loss 12002 4.972964``).
_NEXT_VALUE_RE = re.compile(
    r"(?<![ \t])[ \t]+(?P<v>[-+]?\d+\.\d+(?:[eE][-+]?\d+)?)(?![\w%/.])"  # (?<!): linear on blank runs
    r"(?![ \t]*(?:ms/it|s/it|it/s|ms/step|s/step|tok/s|tokens/s|samples/s|updates|steps)(?![A-Za-z]))"
)


def _fields_slow(text: str) -> list[tuple[Field, int, int]]:
    """Fields with the start of their number and of their total (-1: none)."""
    text = unglue(text) if "[" in text else text  # "loss[3.57]" reads as "loss 3.57"
    out: list[tuple[Field, int, int]] = []
    pair: tuple[int, re.Match[str]] | None = None
    lead: tuple[Field, int, int] | None = None
    rate: tuple[Field, int, int] | None = None
    value_first = False
    for m in _FIELD_RE.finditer(text):
        num = m.group("num")
        if num is not None:
            words = _WORDS_RE.findall(m.group("key"))
            if num.strip("+-").isalpha() and words[-1].lower() in _STOPWORDS:
                continue  # "number of nan iterations" is matched whole; this is a shorter try
            value = parse_float(num)
            if value is None:
                continue
            total = m.group("total")
            field = Field(
                _key(words),
                value,
                parse_float(total) if total is not None else None,
                (m.group("unit") or "").lower(),
            )
            if pair is None and total is None and field.unit == "" and num.isdigit():
                pair = (len(out), m)
            out.append((field, m.start("num"), m.start("total") if total is not None else -1))
        elif m.group("bnum") is not None:
            total = float(m.group("btotal"))
            out.append((Field(_BRACKET_KEY, float(m.group("bnum")), total), m.start("bnum"), m.start("btotal")))
        elif m.group("enum") is not None:
            etotal = m.group("etotal")
            out.append((Field("epoch", float(m.group("enum")), float(etotal) if etotal else None),
                        m.start("enum"), m.start("etotal") if etotal else -1))
        elif m.group("gnum") is not None:
            out.append((Field(m.group("gkey").lower(), float(m.group("gnum"))), m.start("gnum"), -1))
        elif m.group("xnum") is not None:
            out.append((Field("batch", float(m.group("xnum"))), m.start("xnum"), -1))
        elif m.group("vnum") is not None:
            value = parse_float(m.group("vnum"))
            if value is not None:
                vkey = _key(m.group("vkey").split())
                # darknet's "0.001000 rate," is its learning rate
                given = (Field("learning_rate" if vkey == "rate" else vkey, value), m.start("vnum"), -1)
                out.append(given)
                if vkey == "rate":
                    rate = given
                else:
                    value_first = True
        elif m.group("lnum") is not None:
            lead = (Field("iteration", float(m.group("lnum"))), m.start("lnum"), -1)
            out.append(lead)
        elif m.group("cnum") is not None:
            # a count glued before its word (espnet2's "8epoch:train:376-750batch:", "8/20epoch"): a
            # batch range's end counts within the epoch (read under the bracketed counter's key)
            word = m.group("cword").lower()
            ctotal = m.group("ctotal")
            out.append((Field("epoch" if word == "epoch" else _BRACKET_KEY, float(m.group("cnum")), float(ctotal) if ctotal else None),
                        m.start("cnum"), m.start("ctotal") if ctotal else -1))
        else:
            value = parse_float(m.group("pnum"))
            unit = m.group("punit").lower()
            if value is not None and not (unit in ("steps", "updates") and _after_duration_word(text, m.start())):
                out.append((Field(unit.replace("/", "_per_"), value, None, unit), m.start("pnum"), -1))
    if not value_first:
        # a leading "N:" is an iteration, "0.001 rate," a learning rate, only beside a loss given before its key
        out = [x for x in out if x is not lead and x is not rate]
    if pair is not None:
        _step_then_value(text, out, *pair)
    if any(f.total is not None and key_words(f.key)[-1:] in _BATCH_WORD for f, _a, _b in out) and any(
        key_words(f.key)[-1:] == ("epoch",) for f, _a, _b in out
    ):
        # "Epoch 0 Batch 50/225": a batch counter N/T beside an epoch counts within the epoch (the
        # counter rule reads it as a progress bar's N/T): no field of its own
        out = [x for x in out if not (x[0].total is not None and key_words(x[0].key)[-1:] in _BATCH_WORD)]
    return out


_BATCH_WORD = frozenset({("batch",), ("batches",)})


def fields_with_positions(text: str) -> list[tuple[Field, int, int]]:
    """The fields of a cleaned line with the start of each one's number and total (-1: none)."""
    return _fields_slow(text[:MAX_LINE_CHARS])


def _after_duration_word(text: str, start: int) -> bool:
    words = _WORDS_RE.findall(text[max(0, start - 24) : start].lower())
    return bool(words) and words[-1] in _DURATION_WORDS


def _step_then_value(text: str, out: list[tuple[Field, int, int]], i: int, m: re.Match[str]) -> None:
    """``<loss key> N V``: a loss key with an integer, then a bare fraction: N is the step, V the loss."""
    field = out[i][0]
    meaning = classify_key(field.key)
    if meaning is None or meaning[0] != LOSS:
        return
    if any((c := classify_key(f.key, f.unit)) is not None and c[0] == STEP for f, _, _ in out):
        return
    nxt = _NEXT_VALUE_RE.match(text, m.end())
    if nxt is None:
        return
    value = parse_float(nxt.group("v"))
    if value is None:
        return
    out[i : i + 1] = [(Field("step", field.value), out[i][1], -1), (Field(field.key, value), nxt.start("v"), -1)]


def tokenize(text: str) -> Tokens:
    """The fields of one cleaned line (see the module docstring)."""
    tokens = _tokenize(text[:MAX_LINE_CHARS], skip_meaningless=False)
    assert tokens is not None  # (only a skip returns None)
    return tokens


def tokenize_meaningful(text: str) -> Tokens | None:
    """``tokenize``, or None for a line no key of which can mean anything and that has no ``N/T`` counter.

    The check is cheap (the line's letter runs against ``KEY_VOCABULARY``): NCCL chatter,
    warnings and tracebacks skip the field regex.
    """
    return _tokenize(text[:MAX_LINE_CHARS], skip_meaningless=True)


def _tokenize(text: str, *, skip_meaningless: bool) -> Tokens | None:
    if _DIGIT_RE.search(text) is None and _NONFINITE_RE.search(text) is None:
        # no number, so no field and no counter: only the words matter
        return Tokens((), None, not EVAL_LINE_WORDS.isdisjoint(_WORDS_RE.findall(without_logger(text).lower())), 0)
    if skip_meaningless and is_meaningless(text):
        return None
    found = _fields_slow(text)
    num_numbers = len(_NUM_RE.findall(text))
    is_eval = not EVAL_LINE_WORDS.isdisjoint(_WORDS_RE.findall((own := without_logger(text)).lower()))
    if is_eval and EVAL_NO_VALUE_RE.search(own) is not None:
        is_eval = not EVAL_LINE_WORDS.isdisjoint(_WORDS_RE.findall(EVAL_NO_VALUE_RE.sub(" ", own).lower()))
    counter, outer = _counter(text, taken_starts(found))
    return Tokens(tuple(f for f, _, _ in found), counter, is_eval, num_numbers if not found else -1, outer)


#: Meanings that make a line a record (or a state change) on their own; the others (metrics,
#: rank, time) only join a record being assembled.
RECORD_KINDS = frozenset({STEP, LOSS, EVAL, EPOCH, NAN_COUNT})


def meanings(tokens: Tokens) -> tuple[tuple[str, int] | None, ...]:
    """``classify_key`` of each field."""
    return tuple(classify_key(f.key, f.unit) for f in tokens.fields)


def is_metrics_only(tokens: Tokens, kinds: tuple[tuple[str, int] | None, ...] | None = None) -> bool:
    """The line has fields, none a step, loss, epoch or evaluation, and no evaluation word.

    Such a line can only add metrics to a record being assembled: with none open it reads
    as nothing, and the reader skips its classification.
    """
    if not tokens.fields or tokens.is_eval:
        return False
    kinds = kinds if kinds is not None else meanings(tokens)
    return all(m is None or m[0] not in RECORD_KINDS for m in kinds) and any(kinds)


#: Words of a loss key that name it the training loss ("train loss", "loss (train)").
_TRAIN_WORDS = frozenset({"train", "training"})


def is_eval_line(tokens: Tokens, kinds: tuple[tuple[str, int] | None, ...]) -> bool:
    """A line of an evaluation: a word of it names one, and no field is a loss its key calls the
    training one ("Epoch 3 | train loss 1.97 | val loss 2.11" is a training record that carries
    the evaluation along; fairseq's "| valid | ... | loss 5.2" is an evaluation)."""
    if not tokens.is_eval:
        return False
    return not any(
        m is not None and m[0] == LOSS and not _TRAIN_WORDS.isdisjoint(key_words(f.key))
        for f, m in zip(tokens.fields, kinds, strict=True)
    )


def _counter_match(text: str, taken: frozenset[int]) -> re.Match[str] | None:
    """The first ``N/T`` whose ``N`` is no field's number or total (``Epoch 1/90`` is the epoch's)."""
    if "/" not in text:
        return None
    for c in _COUNTER_RE.finditer(text):
        if c.start("n" if c.group("n") is not None else "bn") not in taken:
            return c
    return None


def counter_spans(text: str, taken: frozenset[int] = frozenset()) -> tuple[int, int, int] | None:
    """Where the counter ``_counter`` reads is: the starts of its ``N``, ``T`` and outer number
    (-1: none; ``N/?`` has no ``T``), whatever the values; None when the line has none.
    ``taken``: the starts of the fields' numbers and totals (``fields_with_positions``)."""
    c = _counter_match(text, taken)
    if c is None:
        return None
    if c.group("n") is not None:
        return c.start("n"), (c.start("t") if c.group("t") != "?" else -1), -1
    return c.start("bn"), c.start("bt"), (c.start("outer") if c.group("outer") is not None else -1)


def taken_starts(found: list[tuple[Field, int, int]]) -> frozenset[int]:
    """The starts of the numbers and totals of fields (``fields_with_positions``)."""
    return frozenset(x for _f, a, b in found for x in (a, b) if x >= 0)


def _counter(text: str, taken: frozenset[int]) -> tuple[tuple[int, int] | None, int | None]:
    c = _counter_match(text, taken)
    if c is None:
        return None, None
    if c.group("n") is not None:
        n, t = int(c.group("n")), c.group("t")
        if t == "?":
            return (n, 0), None
        return ((n, int(t)) if 0 <= n <= int(t) else None), None
    n, tt = int(c.group("bn")), int(c.group("bt"))
    outer = c.group("outer")
    return ((n, tt) if n <= tt else None), (int(outer) if outer is not None and n <= tt else None)


# -- dict lines ----------------------------------------------------------------------------

_BARE_NONFINITE_RE = re.compile(r"(?<=[:\[,\s])(-?inf|nan)(?=\s*[,}\]])")


def read_dict(text: str) -> tuple[dict[str, Any], str] | None:
    """The dict a line prints (JSON or Python ``str(dict)``) and its style, else None."""
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end <= start:
        return None
    body = text[start : end + 1]
    if '"' in body:
        try:
            doc = jsonsafe.loads(body)  # accepts NaN / Infinity; a line nested 30,000 deep is no dict
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            return doc, "jsonl"
    if "'" in body:
        simple = _simple_py_dict(body)
        if simple is not None:
            return simple, "hf"
        body = _BARE_NONFINITE_RE.sub(lambda m: repr(m.group(1)), body)
        try:
            with warnings.catch_warnings():  # ('\i' in a string: Python's warning, on the user's stderr)
                warnings.simplefilter("ignore")
                doc = ast.literal_eval(body)  # literals only: nothing in the log can run
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return None
        if isinstance(doc, dict):
            return doc, "hf"
    return None


# HF Trainer prints ``str(dict)`` of plain keys and numbers; such a line is read with one regex
# (what ``ast.literal_eval`` would give: only shapes Python itself accepts and repr prints).
_PY_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?|nan|-?inf"
_PY_PAIR = r"'([A-Za-z0-9_ ./-]*)':[ \t]*(" + _PY_NUMBER + r")"
_PY_DICT_RE = re.compile(r"\{[ \t]*" + _PY_PAIR + r"(?:[ \t]*,[ \t]*" + _PY_PAIR + r")*[ \t]*\}")
_PY_PAIR_RE = re.compile(_PY_PAIR)


def _simple_py_dict(body: str) -> dict[str, Any] | None:
    if _PY_DICT_RE.fullmatch(body) is None:
        return None
    doc: dict[str, Any] = {}
    for key, num in _PY_PAIR_RE.findall(body):
        if num in ("nan", "inf", "-inf"):
            doc[key] = num  # as the bare non-finite rewrite gives them: strings
        elif "." in num or "e" in num:
            doc[key] = float(num)
        else:
            doc[key] = int(num)
    return doc


#: A string value ``"601/2161"`` (ms-swift's ``"global_step/max_steps": "601/2161"``): the count N.
_COUNT_OF_TOTAL_RE = re.compile(r"(\d{1,15})[ \t]*/[ \t]*\d{1,15}")


def dict_fields(doc: dict[str, Any]) -> tuple[Field, ...]:
    """Numeric entries of a dict (one level of nesting flattened with ``/``)."""
    out: list[Field] = []
    for key, value in list(doc.items())[:512]:
        if isinstance(value, dict):
            for k2, v2 in list(value.items())[:64]:
                f = _value(f"{key}/{k2}", v2)
                if f is not None:
                    out.append(f)
            continue
        f = _value(str(key), value)
        if f is not None:
            out.append(f)
    return tuple(out)


def _value(key: str, value: Any) -> Field | None:
    if isinstance(value, list) and value:
        value = value[0]  # per-group values: the first group
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            return None  # an integer beyond any float
    elif isinstance(value, str):
        count = _COUNT_OF_TOTAL_RE.fullmatch(value.strip())
        parsed = float(count.group(1)) if count is not None else parse_float(value)
        if parsed is None:
            return None
        number = parsed
    else:
        return None
    return Field(_CAMEL_RE.sub("_", key.strip()).lower().replace(" ", "_"), number)


@functools.lru_cache(maxsize=256)
def _minute_s(year: int, month: int, day: int, hour: int, minute: int) -> int:
    # timegm is arithmetic past the month (day, hour and seconds are added as they are):
    # one call a minute, not one a line
    return calendar.timegm((year, month, day, hour, minute, 0, 0, 0, 0))


def timestamp_match(text: str) -> tuple[int, re.Match[str]] | None:
    """The timestamp near the line's start as (its form: index in ``_TIMESTAMP_RES``, match), else None."""
    head = text[:64]
    if _ANY_TIMESTAMP_RE.search(head) is None:
        return None  # the common case: one scan, not one per shape
    for i, regex in enumerate(_TIMESTAMP_RES):
        m = regex.search(head)
        if m is not None:
            return i, m
    return None


def timestamp_s(text: str) -> tuple[float, int, int] | None:
    """(seconds, start, end) of a timestamp near the line's start (UTC calendar arithmetic; no clock)."""
    found = timestamp_match(text)
    if found is None:
        return None
    form, m = found
    g = m.groupdict()
    base = stamp_minute_s(form, m.group(0)[: m.end("mi") - m.start()])
    if base is None:
        return None
    frac = g.get("f")
    return base + int(g["s"]) + (int(frac) / 10 ** len(frac) if frac else 0.0), m.start(), m.end()


#: The part of each timestamp form up to its minute (``stamp_minute_s``).
_MINUTE_RES = tuple(re.compile(r.pattern.split(":(?P<s>")[0]) for r in _TIMESTAMP_RES)


def stamp_minute_s(form: int, text: str) -> int | None:
    """Seconds of a timestamp of ``form`` up to its minute (``text``: that part of it), else None."""
    m = _MINUTE_RES[form].fullmatch(text)
    if m is None:
        return None
    g = m.groupdict()
    year = int(g["y"]) if form == 0 else 2001  # detectron2 prints no year
    try:
        return _minute_s(year, int(g["mo"]), int(g["d"]), int(g["h"]), int(g["mi"]))
    except (ValueError, OverflowError):
        return None
