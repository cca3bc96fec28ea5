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
import math
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from ckptctl.core.verify import jsonsafe

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
    template: object | None = None
    """The template the line matched (``None``: read the slow way): lines with the same one
    differ only in their numbers, so what depends on the text alone can be kept per template."""


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


# Each part of a key word is at most 128 characters and a word at most 8 parts: a start inside a
# long run of word characters ("a/a/a/...", "a-a-a-...") then costs a bounded scan, so the
# field regex stays linear in the line (unbounded, a 64 KiB such line took minutes).
_WORD = r"\(?[A-Za-z_][\w./]{0,127}(?:-[A-Za-z][\w./]{0,127}){0,7}\)?"
#: The key a bracketed step counter is read under (a step key; see ``_BRACKET_STEP``).
_BRACKET_KEY = "iter"
# One pass of the regex engine finds every field (Python only sees the matches):
#   key words (separated by spaces only: "|", ",", ";", " - ", "]" end a key), an
#   optional ":"/"=" (then "[" or "(" may open a value: lr=[3e-4]), the number, a
#   glued unit, an optional "/ T";  or a word with a number glued to it (iter120);
#   or a number followed by a unit word (503 ms/it, 5000 updates).
#   Before those: a step-like word and a bracketed counter (mmengine's "Iter(train) [ 8200/40000]",
#   Composer's "[batch=120/4800]", "step (120/4800)"): the counter is that step.
#   ("batch" only as Composer's "[batch=N/T]": a bare "Batch (12/300)" next to an epoch counts
#   within the epoch, which the progress-bar rule reads).
_BRACKET_STEP = r"iter|iteration|step"
_FIELD_RE = re.compile(
    r"(?i:(?<![\w.])(?P<bkey>" + _BRACKET_STEP + r")(?:\([A-Za-z_]+\))?[ \t]*[\[(]"
    r"|\[[ \t]*(?P<bkey2>" + _BRACKET_STEP + r"|batch)[ \t]*[=:])"
    r"[ \t]*(?P<bnum>\d{1,15})[ \t]*/[ \t]*(?P<btotal>\d{1,15})[ \t]*[\])]"
    r"|(?=[(A-Za-z_\d+.-])(?<![\w.])(?<![A-Za-z_./-][/-])(?P<key>" + _WORD + r"(?:[ \t]+" + _WORD + r"){0,7})"
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
_ANY_NUM_RE = re.compile(r"(?=[-+.\dnNiI])(?:" + _NUM + r"|(?i:[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z]))")


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
        elif m.group("bnum") is not None:
            total = float(m.group("btotal"))
            out.append((Field(_BRACKET_KEY, float(m.group("bnum")), total), m.start("bnum"), m.start("btotal")))
        elif m.group("gnum") is not None:
            out.append((Field(m.group("gkey").lower(), float(m.group("gnum"))), m.start("gnum"), -1))
        else:
            value = parse_float(m.group("pnum"))
            if value is not None:
                unit = m.group("punit").lower()
                out.append((Field(unit.replace("/", "_per_"), value, None, unit), m.start("pnum"), -1))
    return out


# -- line templates: the fast path -------------------------------------------------------------
#
# A log prints the same few templates millions of times with other numbers in them.
# The first time a line's template (its text with the numbers taken out) comes back,
# the field regex's answer is kept with a regex of the template: the line's own
# text, each number a group of the same form (sign, thousands separators, fraction,
# exponent; nan/inf as written), runs of blanks of any width. A later line that
# matches it whole has the same fields at the same numbers; one regex match (mostly
# literal text, fast) replaces the field regex, the word scan and the number scan.
# A line that matches no template takes the full path. The template is only made
# from lines where that equivalence is plain: no digit outside the numbers, no digit in a key, every field's number and total exactly one number.


@dataclass(frozen=True, slots=True, eq=False)
class _Template:
    regex: re.Pattern[str]
    layout: tuple[tuple[str, int, int, str], ...]
    """(key, index of the number, index of the total or -1, unit) per field."""
    is_eval: bool
    num_numbers: int
    maybe_counter: bool
    """A digit touches a ``/`` on both sides (``12/300``): look for a progress counter."""
    kinds: frozenset[str]
    meanings: tuple[tuple[str, int] | None, ...]
    """``classify_key`` of each field, in order."""
    """What its fields' keys mean (``classify_key`` reads only the key and unit)."""


#: Lookup key of a line's template: the text without ASCII digits and blanks (templates may share one).
_KEY_TABLE = str.maketrans("", "", "0123456789 \t")
_MAYBE_COUNTER_RE = re.compile(r"\d/[\d?]")
_EXP_PIECE_RE = re.compile(r"[eE][-+]?")
_DIGIT_RE = re.compile(r"\d")
_NONFINITE_RE = re.compile(r"nan|inf", re.IGNORECASE)
_BLANKS_RE = re.compile(r"[ \t]+")
_FORM_RE = re.compile(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d*)(\.?)(\d*)((?:[eE][-+]?\d+)?)")
_TEMPLATES: dict[str, list[_Template]] = {}
#: Keys seen once: a template is compiled when its key comes back (one-off lines cost no compile).
_SEEN_KEYS: set[str] = set()
_MAX_TEMPLATES = 2048
#: The templates that matched last, newest first (tried before the key is even computed).
_RECENT: list[_Template] = []
_MAX_RECENT = 4
_MAX_PER_KEY = 4
#: Longest line a template is made of (memory and compile time stay small: 2048 x 2 KB).
_MAX_TEMPLATE_CHARS = 2048


def _number_form(num: str) -> str:
    """A regex for numbers of ``num``'s form (what ``_NUM`` would read there, and nothing else)."""
    m = _FORM_RE.fullmatch(num)
    if m is None or not any(c.isdigit() for c in num):
        return re.escape(num)  # nan, -inf, Infinity: as written
    sign, whole, dot, frac, exp = m.groups()
    out = re.escape(sign)
    if "," in whole:
        out += r"\d{1,3}(?:,\d{3})+"
    elif whole:
        out += r"\d+"
    if dot:
        out += r"\.\d+" if frac else r"\."
    if exp:
        out += re.escape(exp[:2]) + r"\d+" if exp[1] in "+-" else re.escape(exp[0]) + r"\d+"
    # No look-around as ``_NUM`` has: the text around the number is the template's own,
    # where it held (its pieces hold no digit, so a greedy form takes the whole number).
    return out


def _same(a: float | None, b: float | None) -> bool:
    return a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))


def _literal(piece: str) -> str:
    return "[ \t]+".join(re.escape(p) for p in _BLANKS_RE.split(piece))


def _make_template(text: str, found: list[tuple[Field, int, int]], words: list[str], num_numbers: int) -> _Template | None:
    spans = [(m.start(), m.end(), m.group()) for m in _ANY_NUM_RE.finditer(text)]
    index = {start: k for k, (start, _end, _num) in enumerate(spans)}
    layout = []
    for f, a, b in found:
        if a not in index or (b >= 0 and b not in index) or any(c.isdigit() for c in f.key):
            return None
        layout.append((f.key, index[a], index[b] if b >= 0 else -1, f.unit))
    pieces: list[str] = []
    pos = 0
    for start, end, _num in spans:
        pieces.append(text[pos:start])
        pos = end
    pieces.append(text[pos:])
    if any(c.isdigit() for p in pieces for c in p):
        return None  # digits no number took (a version 2.5.1): their reading depends on their neighbours
    if any(p in (",", ".") or _EXP_PIECE_RE.fullmatch(p) for p in pieces[1:-1]):
        return None  # "3,5071" is two numbers, "16,507" one: where numbers meet, widths matter
    for f, (_key, i, j, _unit) in zip((f for f, _, _ in found), layout, strict=True):
        # the field regex read exactly these numbers (not a part of one, not two)
        if not _same(parse_float(spans[i][2]), f.value) or (j >= 0 and not _same(parse_float(spans[j][2]), f.total)):
            return None
    body = "".join(_literal(p) + "(" + _number_form(num) + ")" for p, (_s, _e, num) in zip(pieces, spans, strict=False))
    try:
        regex = re.compile(body + _literal(pieces[-1]))
    except re.error:
        return None
    maybe_counter = _MAYBE_COUNTER_RE.search(text) is not None
    meanings = tuple(classify_key(k, u) for k, _i, _j, u in layout)
    kinds = frozenset(m[0] for m in meanings if m is not None)
    is_eval = bool(set(words) & EVAL_LINE_WORDS)
    if is_eval and _EVAL_NO_VALUE_RE.search(text) is not None:
        is_eval = not EVAL_LINE_WORDS.isdisjoint(_WORDS_RE.findall(_EVAL_NO_VALUE_RE.sub(" ", text).lower()))
    return _Template(regex, tuple(layout), is_eval, num_numbers, maybe_counter, kinds, meanings)


def tokenize(text: str) -> Tokens:
    """The fields of one cleaned line (see the module docstring)."""
    tokens = _tokenize(text[:MAX_LINE_CHARS], skip_meaningless=False)
    assert tokens is not None  # (only a skip returns None)
    return tokens


def tokenize_meaningful(text: str) -> Tokens | None:
    """``tokenize``, or None for a line no key of which can mean anything and that has no ``N/T`` counter.

    The check is cheap (the line's letter runs against ``KEY_VOCABULARY``), done only when
    no template matched: NCCL chatter, warnings and tracebacks skip the field regex.
    """
    return _tokenize(text[:MAX_LINE_CHARS], skip_meaningless=True)


def _is_meaningless(text: str) -> bool:
    # ASCII only: a non-ASCII letter could lower-case into a vocabulary word (K, the Kelvin sign)
    return (
        text.isascii()
        and _VOCABULARY.isdisjoint(_LETTER_RUNS_RE.findall(text.lower()))
        and _MAYBE_COUNTER_RE.search(text) is None
    )


def _tokenize(text: str, *, skip_meaningless: bool) -> Tokens | None:
    if _DIGIT_RE.search(text) is None and _NONFINITE_RE.search(text) is None:
        # no number, so no field and no counter: only the words matter
        return Tokens((), None, not EVAL_LINE_WORDS.isdisjoint(_WORDS_RE.findall(text.lower())), 0)
    m = None
    for template in _RECENT:  # the last templates that matched: most lines are one of them
        m = template.regex.fullmatch(text)
        if m is not None:
            break
    key = ""
    if m is None:
        key = text.translate(_KEY_TABLE)
        for template in _TEMPLATES.get(key, ()):
            m = template.regex.fullmatch(text)
            if m is not None:
                _RECENT.insert(0, template)
                del _RECENT[_MAX_RECENT:]
                break
    if m is not None:
        return _from_match(template, m, text)
    if skip_meaningless and _is_meaningless(text):
        return None
    found = _fields_slow(text)
    all_words = _WORDS_RE.findall(text.lower())
    num_numbers = len(_NUM_RE.findall(text))
    if len(text) > _MAX_TEMPLATE_CHARS:
        pass  # a hostile or odd long line: no template (its regex would cost more than it saves)
    elif key in _SEEN_KEYS and len(_TEMPLATES.get(key, ())) < _MAX_PER_KEY:
        made = _make_template(text, found, all_words, num_numbers)
        if made is not None:
            if len(_TEMPLATES) >= _MAX_TEMPLATES:
                _TEMPLATES.clear()
            _TEMPLATES.setdefault(key, []).append(made)
    else:
        if len(_SEEN_KEYS) >= 4 * _MAX_TEMPLATES:
            _SEEN_KEYS.clear()
        _SEEN_KEYS.add(key)
    is_eval = not EVAL_LINE_WORDS.isdisjoint(all_words)
    if is_eval and _EVAL_NO_VALUE_RE.search(text) is not None:
        is_eval = not EVAL_LINE_WORDS.isdisjoint(_WORDS_RE.findall(_EVAL_NO_VALUE_RE.sub(" ", text).lower()))
    return Tokens(tuple(f for f, _, _ in found), _counter(text), is_eval, num_numbers if not found else -1)


#: Meanings that make a line a record (or a state change) on their own; the others (metrics,
#: rank, time) only join a record being assembled.
_RECORD_KINDS = frozenset({"step", "loss", "eval", "epoch", "nan_count"})


def is_metrics_only(tokens: Tokens) -> bool:
    """The line's template has fields, none a step, loss, epoch or evaluation, and no evaluation word.

    Such a line can only add metrics to a record being assembled: with none open it reads
    as nothing, and the reader skips its classification.
    """
    t = tokens.template
    return isinstance(t, _Template) and bool(t.layout) and not t.is_eval and t.kinds.isdisjoint(_RECORD_KINDS)


def meanings(tokens: Tokens) -> tuple[tuple[str, int] | None, ...]:
    """``classify_key`` of each field (kept with the line's template)."""
    t = tokens.template
    if isinstance(t, _Template):
        return t.meanings
    return tuple(classify_key(f.key, f.unit) for f in tokens.fields)


def is_inert(tokens: Tokens) -> bool:
    """Every line of this one's template reads as nothing while no record is open.

    Metrics only (``is_metrics_only``), or fields that mean nothing and no progress counter.
    """
    t = tokens.template
    if not isinstance(t, _Template) or not t.layout:
        return False
    return is_metrics_only(tokens) or (not t.kinds and not t.maybe_counter)


def tokenize_as(template: object, text: str) -> Tokens | None:
    """``tokenize(text)`` when ``text`` is a line of ``template`` (a ``Tokens.template``), else None."""
    if not isinstance(template, _Template):
        return None
    m = template.regex.fullmatch(text)
    return None if m is None else _from_match(template, m, text)


def _from_match(template: _Template, m: re.Match[str], text: str) -> Tokens:
    nums = m.groups()
    # every group is a number of _NUM's shape: float() reads it once thousands commas are gone
    fields = [Field(fkey, _float(nums[i]), _float(nums[j]) if j >= 0 else None, unit) for fkey, i, j, unit in template.layout]
    counter = _counter(text) if template.maybe_counter else None
    return Tokens(tuple(fields), counter, template.is_eval, template.num_numbers if not fields else -1, template)


def _float(num: str) -> float:
    return float(num if "," not in num else num.replace(",", ""))


def _counter(text: str) -> tuple[int, int] | None:
    """The first bare ``N/T`` (``N/?``: an unknown total, 0)."""
    c = _COUNTER_RE.search(text) if "/" in text else None
    if c is None:
        return None
    n, t = int(c.group("n")), c.group("t")
    if t == "?":
        return n, 0
    return (n, int(t)) if 0 <= n <= int(t) else None


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
        except jsonsafe.JsonError:
            doc = None
        if isinstance(doc, dict):
            return doc, "jsonl"
    if "'" in body:
        simple = _simple_py_dict(body)
        if simple is not None:
            return simple, "hf"
        body = _BARE_NONFINITE_RE.sub(lambda m: repr(m.group(1)), body)
        try:
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

#: Every word ``classify_key`` answers on (and the evaluation words a line is skipped for):
#: a key whose words hold none of them means nothing. Kept next to ``classify_key``; a
#: test checks that every key it classifies in the corpora holds one.
KEY_VOCABULARY: tuple[str, ...] = (
    "loss", "rank", "lr", "learning", "norm", "gnorm", "scale", "scaler", "mfu", "tflop", "tflops",
    "tps", "wps", "tok", "token", "tokens", "ntokens", "words", "sample", "samples", "sps", "ups",
    "it", "step", "steps", "globalstep", "iter", "iteration", "iterations", "global", "updates",
    "time", "timestamp", "walltime", "ts", "dt", "ms", "elapsed", "epoch", "nan",
    "val", "valid", "validate", "validation", "eval", "evaluate", "evaluation", "evaluating", "test", "testing", "dev",
)  # fmt: skip
#: A line that can carry a field with a meaning has a vocabulary word between non-letters
#: (a key's words are split at ``_ . / -`` and blanks; a digit or other sign next to a
#: word only makes it longer, never shorter).
_VOCABULARY = frozenset(KEY_VOCABULARY)
_LETTER_RUNS_RE = re.compile(r"[a-z]+")

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
#: An evaluation word used as a key, with a value or none yet (LitGPT's "loss train: 2.3, val: n/a"
#: or "val: 2.4"): that field is the evaluation, not the line (its other fields are training ones).
_EVAL_NO_VALUE_RE = re.compile(
    r"(?i)\b(?:val|valid|validation|eval|evaluation)[ \t]*[:=][ \t]*(?:n/a|na|none|null|-+(?![\d.])|" + _NUM + r")(?![\w/])"
)
#: Any of these words on a text line makes it an evaluation line (fairseq's "| valid | ... | loss 5.2 |").
EVAL_LINE_WORDS = frozenset({"val", "valid", "validate", "validation", "eval", "evaluate", "evaluation", "evaluating"})
_NOT_LOSS_WORDS = frozenset({"scale", "aux", "auxiliary", "balance", "router", "z", "epoch", "function", "fn", "type", "weight", "weights", "coef", "ratio"})
_STEP_WORDS = {
    "global_step": 0, "globalstep": 0, "num_updates": 0, "updates": 1, "optimizer_step": 0,
    "step": 2, "steps": 2, "iteration": 3, "iter": 3, "it": 4, "global": 2, "_step": 2,
}  # fmt: skip
_LOSS_RANK_EXACT = {"loss": 0, "total_loss": 1, "train_loss": 1, "training_loss": 1, "lm_loss": 1,
                    "train/loss": 1, "train_loss_step": 0, "loss_step": 1, "train/loss_step": 0, "train/lm_loss": 1}  # fmt: skip


#: Words that only say a loss is the training one (``loss train``, ``loss/train/total``).
_TRAIN_QUALIFIERS = frozenset({"train", "training", "total"})
_TIME_KEYS = frozenset({"ms_per_it", "s_per_it", "ms_per_step", "s_per_step", "sec_it"})


_KEY_SPLIT_RE = re.compile(r"[_\s/.\-]+")


@functools.lru_cache(maxsize=4096)
def key_words(key: str) -> tuple[str, ...]:
    """The words of a key (``lm_loss`` -> ``lm``, ``loss``)."""
    return tuple(w for w in _KEY_SPLIT_RE.split(key) if w)


@functools.lru_cache(maxsize=4096)
def classify_key(key: str, unit: str = "") -> tuple[str, int] | None:
    """(meaning, rank: lower is preferred) of a field's key, or None for anything else."""
    words = list(key_words(key))
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
        if set(words) - {"loss"} <= _TRAIN_QUALIFIERS:
            return LOSS, 1  # "loss train", "loss (train)", "Train loss/train/total": the training loss
        if last == "loss" or (words[0] == "loss" and len(words) == 2 and words[1].isdigit()):
            return LOSS, 2
        return LOSS, 3  # a component (loss_cls, decoder_loss): only when nothing better
    path = key.split("/")
    if len(path) > 1 and key_words(path[-2])[-1:] == ("time",):
        # a path metric's clock ("time/token", "time/sample", "time/batch"): a counter, not a duration
        counted = key_words(path[-1])
        return (TOKENS, 0) if counted in {("token",), ("tokens",)} else (SAMPLES, 0) if counted in {("sample",), ("samples",)} else None
    if last in {"lr", "learning_rate"} or words[-2:] == ["learning", "rate"] or (wset & {"lr"} and (len(words) <= 3 or "lr" in key_words(path[0]))):
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


@functools.lru_cache(maxsize=256)
def _minute_s(year: int, month: int, day: int, hour: int, minute: int) -> int:
    # timegm is arithmetic past the month (day, hour and seconds are added as they are):
    # one call a minute, not one a line
    return calendar.timegm((year, month, day, hour, minute, 0, 0, 0, 0))


def timestamp_s(text: str) -> tuple[float, int, int] | None:
    """(seconds, start, end) of a timestamp near the line's start (UTC calendar arithmetic; no clock)."""
    head = text[:64]
    if _ANY_TIMESTAMP_RE.search(head) is None:
        return None  # the common case: one scan, not one per shape
    for i, regex in enumerate(_TIMESTAMP_RES):
        m = regex.search(head)
        if m is None:
            continue
        g = m.groupdict()
        year = int(g["y"]) if i == 0 else 2001  # detectron2 prints no year
        try:
            base = _minute_s(year, int(g["mo"]), int(g["d"]), int(g["h"]), int(g["mi"])) + int(g["s"])
        except (ValueError, OverflowError):
            return None
        frac = g.get("f")
        return base + (int(frac) / 10 ** len(frac) if frac else 0.0), m.start(), m.end()
    return None
