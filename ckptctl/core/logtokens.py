"""Training-log lines as tokens: ``key -> number`` fields, whatever the logger.

Pure, stdlib only. One tokenizer reads every shape trainers print a metric in:
``key=value``, ``key: value``, ``key value``, ``key N/T``, glued ``iter120``,
``| lm loss: 2.3E+00 |``, ``123.4ms``, ``2,350``, ``-12.5``, ``nan``; a number
with no key before it takes a unit word after it (``503.0 ms/it``, ``5.9it/s``),
and a bare ``N/T`` counter (a progress bar's batch) is kept aside. Dict lines
(JSON, Python ``str(dict)``) are read as dicts. ``classify_key`` then says what a
key means (step, loss, learning rate, tokens, throughput, ...) from its words, so
a new logger with familiar words needs no new code.
"""

from __future__ import annotations

import ast
import calendar
import functools
import json
import math
import re
from dataclasses import dataclass
from typing import Any

#: Longest line read; the rest of a longer line is ignored (a 200 MB line cannot cost more).
MAX_LINE_CHARS = 65536

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b")
_TORCHRUN_TAG_RE = re.compile(r"^\[([A-Za-z_]*?)(\d{1,9})\]:\s?")
_NUM = r"(?<![\d.])[-+]?(?:(?:\d{1,3}(?:,\d{3})+(?!\d|,\d)|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?!\.?\d)"
#: Units a number may carry glued (``123.4ms``, ``61.3GiB``, ``5.9it/s``); any other
#: letters glued to a number make it no number (``{step:2d}``, ``0x1F``, ``8.5f``).
_UNITS = r"ms|us|s|sec|m|h|min|it|tok|samples|GiB|GB|MiB|MB|KiB|KB|G|M|K|B|k|x|TFLOP|TFLOPs"
#: Words a key never ends with: a "nan" after them is a word ("number of nan iterations").
_STOPWORDS = frozenset({"of", "the", "a", "an", "for", "to", "at", "in", "on", "is", "no", "any"})
_TIMESTAMP_RES = (
    re.compile(r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[ T](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d{1,6}))?"),
    re.compile(r"\[(?P<mo>\d\d)/(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"),
)


@dataclass(frozen=True, slots=True)
class Field:
    """One ``key -> number`` read from a line."""

    key: str
    """Lower-case words joined by ``_`` (``lm_loss``, ``elapsed_time_per_iteration_ms``)."""
    value: float
    total: float | None = None
    """The ``T`` of ``key N/T``."""
    unit: str = ""


@dataclass(frozen=True, slots=True)
class Tokens:
    fields: tuple[Field, ...]
    counter: tuple[int, int] | None
    """The first bare ``N/T`` (no key before it): a progress bar's batch of an epoch."""
    words: tuple[str, ...]
    """Every word of the line, lower-case (for event and header detection)."""
    num_numbers: int


def clean_line(raw: str) -> tuple[str, int | None]:
    """Strip ANSI codes and up to two torchrun tags; return (text, rank from the tag)."""
    text = _ANSI_RE.sub("", raw) if "\x1b" in raw else raw
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


def _key(words: list[str]) -> str:
    return "_".join(w.lower().strip("./()") for w in words[-6:] if w.strip("./()"))


_WORD = r"\(?[A-Za-z_][\w./]*\)?"
# One pass of the regex engine finds every field (Python only sees the matches):
#   key words (separated by spaces only: "|", ",", ";", " - ", "]" end a key), an
#   optional ":"/"=" (then "[" or "(" may open a value: lr=[3e-4]), the number, a
#   glued unit, an optional "/ T";  or a word with a number glued to it (iter120);
#   or a number followed by a unit word (503 ms/it, 5000 updates).
_FIELD_RE = re.compile(
    r"(?=[(A-Za-z_\d+.-])(?<![\w.])(?P<key>" + _WORD + r"(?:[ \t]+" + _WORD + r"){0,7})"
    r"[ \t]*(?:[:=][ \t]*[\[(]?[ \t]*)?"
    r"(?P<num>" + _NUM + r"|(?i:[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z]))"
    r"(?:(?P<unit>%|(?:" + _UNITS + r")(?:/(?:step|it|iter|s|sec|batch|gpu|GPU))?(?![A-Za-z0-9]))|(?![A-Za-z]))"
    r"(?:[ \t]*/[ \t]*(?P<total>\d[\d,]*)(?![\d.]))?"
    r"|(?<![\w.])(?P<gkey>iter|it|step|steps|iteration|epoch|global_step)(?P<gnum>\d+)(?![\w.])"
    r"|(?<![\w.])(?P<pnum>" + _NUM + r")[ \t]*(?P<punit>ms/it|s/it|it/s|ms/step|s/step|tok/s|tokens/s|samples/s|updates|steps)(?![A-Za-z])"
)
_COUNTER_RE = re.compile(r"(?:^|[|\s])(?P<n>\d{1,15})/(?P<t>\d{1,15}|\?)(?=[\s\[]|$)")
_WORDS_RE = re.compile(r"[A-Za-z_][\w./]*")
_NUM_RE = re.compile(_NUM)


#: Any number as the field reader sees one (the spans its groups capture).
# (the leading look-ahead lets the engine skip most positions at C speed)
_ANY_NUM_RE = re.compile(
    r"(?=[-+.\dnNiI])(?:(?P<n>" + _NUM + r")|(?P<w>(?i:[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z])))"
)
#: Shapes of lines seen (numbers blanked) -> where their fields' numbers are: a log
#: prints the same few templates millions of times; the field regex runs once per template.
_SHAPES: dict[str, tuple[tuple[str, int, int, str], ...] | None] = {}
_MAX_SHAPES = 4096


_SPLIT_NUM_RE = re.compile(
    r"(?=[-+.\dnNiI])(?:" + _NUM + r"|(?i:[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z]))"
)


def _shape(text: str) -> tuple[str, list[str]]:
    """The line with its numbers blanked (and padding collapsed), and the numbers in order."""
    pieces = _SPLIT_NUM_RE.split(text)
    nums = _SPLIT_NUM_RE.findall(text)
    kinds = "".join("w" if n[-1:].isalpha() else "n" for n in nums)
    # padding (f"{step:8d}") changes with the numbers, never the fields
    return " ".join("\x00".join(pieces).split()) + "\x01" + kinds, nums


def _fields_slow(text: str) -> list[tuple[Field, int, int]]:
    """Fields with the start of their number and of their total (-1: none)."""
    out: list[tuple[Field, int, int]] = []
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
            out.append((field, m.start("num"), m.start("total") if total is not None else -1))
        elif m.group("gnum") is not None:
            out.append((Field(m.group("gkey").lower(), float(m.group("gnum"))), m.start("gnum"), -1))
        else:
            value = parse_float(m.group("pnum"))
            if value is not None:
                unit = m.group("punit").lower()
                out.append((Field(unit.replace("/", "_per_"), value, None, unit), m.start("pnum"), -1))
    return out


def tokenize(text: str) -> Tokens:
    """The fields of one cleaned line (see the module docstring)."""
    text = text[:MAX_LINE_CHARS]
    shape, nums = _shape(text)
    layout = _SHAPES.get(shape)
    fields: list[Field] = []
    if layout is not None:
        for key, i, j, unit in layout:
            value = parse_float(nums[i])
            if value is None:
                layout = None
                break
            fields.append(Field(key, value, parse_float(nums[j]) if j >= 0 else None, unit))
    if layout is None:
        found = _fields_slow(text)
        fields = [f for f, _, _ in found]
        index = {m.start(): k for k, m in enumerate(_ANY_NUM_RE.finditer(text))}
        if all(a in index and (b < 0 or b in index) for _, a, b in found):
            if len(_SHAPES) >= _MAX_SHAPES:
                _SHAPES.clear()
            _SHAPES[shape] = tuple((f.key, index[a], index[b] if b >= 0 else -1, f.unit) for f, a, b in found)
    counter: tuple[int, int] | None = None
    c = _COUNTER_RE.search(text) if "/" in text else None
    if c is not None:
        n, t = int(c.group("n")), c.group("t")
        if t == "?":
            counter = (n, 0)
        elif 0 <= n <= int(t):
            counter = (n, int(t))
    all_words = tuple(_WORDS_RE.findall(text.lower()))
    num_numbers = len(_NUM_RE.findall(text)) if not fields else -1
    return Tokens(tuple(fields), counter, all_words, num_numbers)


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
            doc = json.loads(body)  # accepts NaN / Infinity
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            return doc, "jsonl"
    if "'" in body:
        body = _BARE_NONFINITE_RE.sub(lambda m: repr(m.group(1)), body)
        try:
            doc = ast.literal_eval(body)  # literals only: nothing in the log can run
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return None
        if isinstance(doc, dict):
            return doc, "hf"
    return None


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
        parsed = parse_float(value)
        if parsed is None:
            return None
        number = parsed
    else:
        return None
    return Field(key.strip().lower().replace(" ", "_"), number)


# -- what a key means ----------------------------------------------------------------------

STEP = "step"
EPOCH = "epoch"
LOSS = "loss"
EVAL = "eval"
LR = "lr"
TOKENS = "tokens"
SAMPLES = "samples"
SEC_PER_STEP = "sec_per_step"
TOKENS_PER_S = "tokens_per_s"
SAMPLES_PER_S = "samples_per_s"
STEPS_PER_S = "steps_per_s"
MFU = "mfu"
TFLOPS = "tflops"
LOSS_SCALE = "loss_scale"
GRAD_NORM = "grad_norm"
RANK = "rank"
NAN_COUNT = "nan_count"
WALL = "wall"

_EVAL_WORDS = frozenset({"val", "valid", "validate", "validation", "eval", "evaluate", "evaluation", "test", "testing", "dev"})
#: Any of these words on a text line makes it an evaluation line (fairseq's "| valid | ... | loss 5.2 |").
EVAL_LINE_WORDS = frozenset({"val", "valid", "validate", "validation", "eval", "evaluate", "evaluation", "evaluating"})
_NOT_LOSS_WORDS = frozenset({"scale", "aux", "auxiliary", "balance", "router", "z", "epoch", "function", "fn", "type", "weight", "weights", "coef", "ratio"})
_STEP_WORDS = {
    "global_step": 0, "globalstep": 0, "num_updates": 0, "updates": 1, "optimizer_step": 0,
    "step": 2, "steps": 2, "iteration": 2, "iter": 2, "it": 3, "global": 2, "_step": 2,
}  # fmt: skip
_LOSS_RANK_EXACT = {"loss": 0, "total_loss": 1, "train_loss": 1, "training_loss": 1, "lm_loss": 1,
                    "train/loss": 1, "train_loss_step": 0, "loss_step": 1, "train/loss_step": 0, "train/lm_loss": 1}  # fmt: skip


_TIME_KEYS = frozenset({"ms_per_it", "s_per_it", "ms_per_step", "s_per_step", "sec_it"})


def _split(key: str) -> list[str]:
    return [w for w in re.split(r"[_\s/.\-]+", key) if w]


@functools.lru_cache(maxsize=4096)
def classify_key(key: str, unit: str = "") -> tuple[str, int] | None:
    """(meaning, rank: lower is preferred) of a field's key, or None for anything else."""
    words = _split(key)
    if not words:
        return None
    wset = set(words)
    last = words[-1]
    if wset & _EVAL_WORDS:
        return (EVAL, 0) if "loss" in wset or wset & {"step", "iter", "iteration", "ppl"} else None
    if "nan" in wset and wset & {"iterations", "iteration", "steps", "count"}:
        return NAN_COUNT, 0
    if wset & {"skipped", "skip", "number", "nan"}:
        return None
    if last == "rank" and len(words) <= 2:
        return RANK, 0
    if "loss" in wset:
        if wset & {"scale", "scaler"}:
            return LOSS_SCALE, 0
        if wset & _NOT_LOSS_WORDS or "lr" in wset:
            return None
        tail = "_".join(words[words.index("loss") - 1 :]) if words.index("loss") > 0 else "_".join(words[words.index("loss") :])
        for candidate in (key, "_".join(words[-3:]), "_".join(words[-2:]), tail):
            if candidate in _LOSS_RANK_EXACT:
                return LOSS, _LOSS_RANK_EXACT[candidate]
        if last == "loss" or (words[0] == "loss" and len(words) == 2 and words[1].isdigit()):
            return LOSS, 2
        return LOSS, 3  # a component (loss_cls, decoder_loss): only when nothing better
    if last in {"lr", "learning_rate"} or words[-2:] == ["learning", "rate"] or (wset & {"lr"} and len(words) <= 3):
        return LR, 0
    if wset & {"gnorm", "grad_norm"} or words[-2:] == ["grad", "norm"] or (last == "norm" and "grad" in wset):
        return GRAD_NORM, 0
    if last == "scale" and len(words) <= 2:
        return LOSS_SCALE, 1
    if wset & {"mfu"}:
        return MFU, 0
    if wset & {"tflops", "tflop"}:
        return TFLOPS, 0
    per = "per" in wset or unit.endswith(("/s", "/sec")) or last in {"s", "sec", "second", "ps"}
    if wset & {"tps", "wps"} or (wset & {"tokens", "tok", "token", "words"} and per):
        return TOKENS_PER_S, 0
    if (wset & {"samples", "sample"} and per) or wset & {"sps"}:
        return SAMPLES_PER_S, 0
    if key in {"it_per_s", "ups", "steps_per_second", "train_steps_per_second"} or unit == "it/s":
        return STEPS_PER_S, 0
    timing = "time" in wset or wset & {"dt", "ms", "elapsed"} or key in _TIME_KEYS
    excluded = wset & {"data", "loader", "last", "wall", "train_wall", "eta", "total", "avg"}
    per_step = wset & {"iteration", "iter", "step", "it", "batch", "time", "dt"} or key.endswith(("_per_it", "_per_step"))
    if timing and not excluded and (per_step or key == "ms"):
        return SEC_PER_STEP, 0 if ("per" in wset or key.endswith(("_per_it", "_per_step"))) else 1
    if (wset & {"tokens", "token"} and wset & {"seen", "consumed", "num", "input", "total", "processed"}) or key in {"tokens", "ntokens"}:
        return TOKENS, 0
    if wset & {"samples", "sample"} and wset & {"seen", "consumed", "num", "processed"}:
        return SAMPLES, 0
    if last in _STEP_WORDS and not wset & {"per", "time", "validate"}:
        joined = "_".join(words[-2:])
        return STEP, min(_STEP_WORDS.get(joined, 9), _STEP_WORDS[last])
    if key in _STEP_WORDS:
        return STEP, _STEP_WORDS[key]
    if last == "epoch":
        return EPOCH, 0
    if key in {"time", "timestamp", "_timestamp", "wall_time", "walltime", "ts"}:
        return WALL, 0
    return None


def timestamp_s(text: str) -> tuple[float, int, int] | None:
    """(seconds, start, end) of a timestamp near the line's start (UTC calendar arithmetic; no clock)."""
    head = text[:64]
    for i, regex in enumerate(_TIMESTAMP_RES):
        m = regex.search(head)
        if m is None:
            continue
        g = m.groupdict()
        year = int(g["y"]) if i == 0 else 2001  # detectron2 prints no year
        try:
            base = calendar.timegm((year, int(g["mo"]), int(g["d"]), int(g["h"]), int(g["mi"]), int(g["s"]), 0, 0, 0))
        except (ValueError, OverflowError):
            return None
        frac = g.get("f")
        return base + (int(frac) / 10 ** len(frac) if frac else 0.0), m.start(), m.end()
    return None
