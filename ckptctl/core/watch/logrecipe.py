"""How a line template reads its groups: generated code (a *recipe*) per template.

Pure, stdlib only; used by ``ckptctl.core.watch.logfast`` (which finds and matches templates).
A ``RECORD`` or ``DICT`` template's recipe is Python source made from the general reader's
plan for the line's keys (``logplan``): group indices and our own metric names only, never
text from the log, compiled once per template. It mirrors ``LossLogParser.record`` and
``accept``: what the line gives, ``False`` (read: no event) or ``None`` (read it the general
way; nothing was changed).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import CodeType
from typing import Any, Protocol

from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.logevents import (
    EPOCH_AXIS,
    EPOCH_BATCH_AXIS,
    STEP_AXIS,
    LogEvent,
    LossPoint,
    RestartDetector,
    record_shape,
)
from ckptctl.core.watch.logextras import is_batch_key
from ckptctl.core.watch.logplan import (
    OP_DICT_SEC,
    OP_DICT_WALL,
    OP_EPOCH,
    OP_METRIC,
    OP_NAN_COUNT,
    OP_RANK,
    OP_SEC,
    OP_SEC_MS,
    OP_WALL,
    RELATIVE_RE,
    SHAPE_CHARS,
    Plan,
    Record,
    dialect,
    dict_plan_for,
    plan_for,
)

NOTHING, METRICS, RECORD, DICT, GENERAL, EVAL = range(6)
"""What a template's lines give: nothing whatever their numbers; nothing unless a record is
open; a point (text or dict line) by its recipe; read them the general way; or (``EVAL``, a
line with no digit that heads an evaluation, ``***** Running Evaluation *****``) nothing but
the evaluation's start when no record is open (else the general way)."""


class Parser(Protocol):
    """What the fast path reads and changes of its parser (``losslog.LossLogParser``)."""

    num_lines: int
    pending: Record | None
    locked: str | None
    in_eval: bool
    last_bar_step: int | None
    epoch_ctx: int | None
    epoch_header: int | None
    fast_stamp: tuple[str, int]
    restarts: RestartDetector
    unread_samples: list[str]

    plain: bool
    recipe_code: dict[str, CodeType]
    """The compiled recipes of this parser's templates, by their source."""

    @property
    def requested_generic(self) -> bool: ...
    @property
    def requested_csv(self) -> bool: ...
    def feed_general(self, line: str, events: list[LogEvent]) -> None: ...
    def feed_part(self, part: str, line_no: int, multi: bool, events: list[LogEvent]) -> None: ...
    def emit_pending(self) -> list[LogEvent]: ...
    def expire_pending(self, line_no: int) -> None: ...
    weak_lock: bool
    weak_shapes: set[str]

    def lock(self, fmt: str, weak: bool = False) -> bool: ...
    def point_fmt(self, fmt: str) -> str: ...

class Template:
    """One line shape: its regex over the raw line, what it gives, and how to read its groups."""

    __slots__ = ("batch", "failure", "key", "kind", "metric_like", "multi", "next", "read", "regex", "shape", "source")

    def __init__(self, regex: re.Pattern[str], kind: int, shape: str | None, failure: bool, metric_like: bool | None) -> None:
        self.regex = regex
        self.kind = kind
        self.shape = shape
        """The lines' shape (``logevents.line_shape``); None: each line's own (hex words vary it)."""
        self.failure = failure
        self.metric_like = metric_like
        self.read: Callable[..., Any] | None = None
        """The recipe of a ``RECORD``/``DICT`` template (generated code; see ``_codegen``)."""
        self.source = ""
        """The recipe's source (for tests and debugging)."""
        self.key = b""
        """Its lookup key (``logfast.line_key``); empty: a line it matches may have another key
        (a hex word or a digit of another script in it), so it is never guessed (``loghot``)."""
        self.next: Template | None = None
        """The template of the line that came after one of this template last time (``loghot``)."""
        self.multi: re.Pattern[str] | None = None
        """Its regex for a whole line of ``\\r``-separated parts it all matches (``loghot``; made on first use)."""
        self.batch: Callable[..., int] | None = None
        """Its recipe for all the parts of such a line in one call (``logbatch``; made with ``multi``,
        None: it has none)."""


class Numbers:
    """Where the numbers of a line are: by their start in ``body``, the group of each."""

    def __init__(self) -> None:
        self.group: dict[int, int] = {}
        """Start of a number in ``body`` -> its group index (0-based)."""
        self.text: dict[int, str] = {}
        self.tag: int = -1
        """Group of the first torchrun tag's number (the rank), -1: none."""
        self.stamp_minute: int = -1
        """Group of the timestamp up to its minute, -1: none."""
        self.stamp_form = 0
        """Its form (``logtokens.timestamp_match``)."""
        self.stamp_sec: int = -1
        self.stamp_frac: int = -1
        self.stamp_frac_digits = 0
        self.digits: set[int] = set()
        """Groups of numbers written with digits only (a form of digits only)."""


# -- recipes -----------------------------------------------------------------------------------


def _conv(num: str) -> str:
    """The conversion of a number group of this form (as ``parse_float`` reads it)."""
    if not any(c.isdigit() for c in num):
        return "_f"  # nan, inf as written
    return "_fc" if "," in num else "_f"


def record_recipe(t: Template, tokens: lt.Tokens, body: str, nums: Numbers, text: str, p: Parser) -> bool:
    """Code that reads a text record's groups as ``Parser._read_tokens`` reads the line."""
    found = lt.fields_with_positions(body)
    if [f for f, _, _ in found] != list(tokens.fields):
        return False
    if any(f.total is not None and is_batch_key(f.key) for f in tokens.fields):
        return False  # a batch key's N/T may be an (epoch, batch) pair: the parser's state decides (logextras)
    groups: list[int] = []
    totals: list[int] = []
    for f, a, b in found:
        if a not in nums.group or (b >= 0 and b not in nums.group):
            return False
        if lt.parse_float(nums.text[a]) != f.value and f.value == f.value:
            return False
        groups.append(nums.group[a])
        totals.append(nums.group[b] if b >= 0 else -1)
    kinds = lt.meanings(tokens)
    plan = plan_for(kinds, tuple((f.key, f.unit) for f in tokens.fields))
    counter = lt.counter_spans(body, lt.taken_starts(found))
    if (counter is None) != (tokens.counter is None):
        return False
    cgroups: tuple[int, int, int] | None = None
    if counter is not None:
        n_at, t_at, outer_at = counter
        if n_at not in nums.group or (t_at >= 0 and t_at not in nums.group) or (outer_at >= 0 and outer_at not in nums.group):
            return False
        cgroups = (nums.group[n_at], nums.group[t_at] if t_at >= 0 else -1, nums.group[outer_at] if outer_at >= 0 else -1)
    convs = [_conv(nums.text[a]) for _f, a, _b in found]
    fmt = dialect(text)
    relative = RELATIVE_RE.search(text) is not None
    source = _codegen(plan, groups, totals, convs, cgroups, nums, dict_style=None, weak=tokens.is_eval)
    return _compile(t, source, p, fmt, relative, record_shape(text) if t.shape is not None else "")


def dict_recipe(t: Template, doc: tuple[dict[str, Any], str], body: str, nums: Numbers, p: Parser) -> bool:
    """Code that reads a dict line's groups as ``losslog.dict_record`` + ``accept`` read the line."""
    d, style = doc
    if "train_runtime" in d:
        return False
    fields = lt.dict_fields(d)
    start = body.find("{")
    starts = sorted(a for a in nums.group if a > start)
    if len(starts) != len(fields) or len(fields) != len(d) or any(isinstance(v, (dict, list, str, bool)) for v in d.values()):
        return False
    for f, a in zip(fields, starts, strict=True):
        if lt.parse_float(nums.text[a]) != f.value and f.value == f.value:
            return False
    plan = dict_plan_for(tuple(f.key for f in fields))
    if plan.saw_eval:
        return False
    groups = [nums.group[a] for a in starts]
    convs = [_conv(nums.text[a]) for a in starts]
    keys_ok = style != "hf" or bool({"epoch", "learning_rate", "grad_norm"} & set(d))
    source = _codegen(plan, groups, [-1] * len(groups), convs, None, nums, dict_style=(style, keys_ok))
    return _compile(t, source, p, style, False, t.shape or "")


def _fc(s: str) -> float:
    return float(s.replace(",", ""))


def _compile(t: Template, source: str | None, p: Parser, fmt: str, relative: bool, shape: str) -> bool:
    if source is None:
        return False
    namespace: dict[str, Any] = {
        "_f": float, "_fc": _fc, "_new": tuple.__new__, "_LP": LossPoint, "_INFS": (float("inf"), float("-inf")),
        "_minute": lt.stamp_minute_s, "_fmt": fmt, "_pfmt": p.point_fmt(fmt), "_shape": shape[:SHAPE_CHARS],
        "_relative": relative, "_STEP": STEP_AXIS, "_EPOCH": EPOCH_AXIS, "_EPOCH_BATCH": EPOCH_BATCH_AXIS,
    }  # fmt: skip
    # (templates of one record in other widths share their recipe's source)
    code = compiled(p.recipe_code, source, "<ckptctl.logfast template>")
    exec(code, namespace)  # our own code: group indices and our metric names, no text from the log
    t.read = namespace["read"]
    t.source = source
    return True


#: Compiled recipes kept per parser (as many as templates).
_MAX_CODES = 512
#: A recipe's use of its template's match group ``k`` (``g[k]``).
GROUP_RE = re.compile(r"\bg\[(\d+)\]")


def compiled(cache: dict[str, CodeType], source: str, filename: str) -> CodeType:
    """``source`` compiled, from ``cache`` (a parser's ``recipe_code``: at most ``_MAX_CODES``
    kept, emptied when full)."""
    code = cache.get(source)
    if code is None:
        if len(cache) >= _MAX_CODES:
            cache.clear()
        code = cache[source] = compile(source, filename, "exec")
    return code

#: A value that is a count (a step, a rank): finite, non-negative, whole, exact in a float.
_COUNT = "v == v and 0 <= v < 9007199254740992 and v == int(v)"


def _codegen(
    plan: Plan,
    groups: list[int],
    totals: list[int],
    convs: list[str],
    counter: tuple[int, int, int] | None,
    nums: Numbers,
    *,
    dict_style: tuple[str, bool] | None,
    weak: bool = False,
) -> str | None:
    """Python source of ``read(g, line_no, P)``: the point of a matched line, False (read: no event)
    or None (read it the general way); None when every line of the template goes the general way.

    Mirrors ``apply`` (``logplan``), ``LossLogParser.record`` and ``accept`` with what the plan
    fixes folded in: only the fields the line has are read, in the plan's order.
    """
    if plan.loss < 0 or (plan.saw_eval and plan.loss_rank > 1):
        return None  # no loss (a record's header line) or an evaluation record: the general reader
    L = ["def read(g, line_no, P):", "    if P.pending is not None: return None"]

    def val(i: int) -> str:
        # (a number with thousands separators: read without them, as ``parse_float`` does; inline, no call)
        return f"_f(g[{groups[i]}])" if convs[i] == "_f" else f"_f(g[{groups[i]}].replace(',', ''))"

    # the step: the first candidate whose value is a count
    # (the first candidate written in digits only, at most 15, is always a count: the step is never None)
    step_sure = bool(plan.steps) and convs[plan.steps[0]] == "_f" and groups[plan.steps[0]] in nums.digits
    if not step_sure:
        L.append("    step = None")
    indent = "    "
    for i in plan.steps:
        if convs[i] == "_f" and groups[i] in nums.digits:
            L.append(f"{indent}step = int(g[{groups[i]}])")  # (digits only, at most 15: always a count)
            break
        L += [f"{indent}v = {val(i)}", f"{indent}if {_COUNT}: step = int(v)"]
        if i != plan.steps[-1]:
            L.append(f"{indent}else:")
            indent += "    "
    L.append(f"    loss = {val(plan.loss)}")
    ops = [op for op, _i, _k in plan.ops]
    has_epoch = OP_EPOCH in ops
    has_rank = OP_RANK in ops
    has_wall = any(op in (OP_SEC, OP_SEC_MS, OP_WALL, OP_DICT_WALL, OP_DICT_SEC) for op in ops)
    has_nan = OP_NAN_COUNT in ops
    first: dict[str, str] = {}  # the metrics before any that is set only when not set yet: one literal
    for op, i, kind in plan.ops:
        if op in (OP_SEC, OP_SEC_MS, OP_DICT_SEC):
            break
        if op == OP_METRIC and kind not in first:
            first[kind] = val(i)
    L += ["    metrics = {" + ", ".join(f"{k!r}: {v}" for k, v in first.items()) + "}"]
    if has_rank:
        L.append("    rank = None")
    if has_wall:
        L.append("    wall = None")
    sure: set[str] = set(first)
    for op, i, kind in plan.ops:
        if op == OP_METRIC:
            if kind not in sure:
                L.append(f"    metrics[{kind!r}] = {val(i)}")
                sure.add(kind)  # (only the first of a kind counts: ``setdefault``)
        elif op in (OP_SEC, OP_SEC_MS, OP_DICT_SEC):
            scaled = "v / 1000" if op == OP_SEC_MS else "v"
            L += [f"    v = {val(i)}", "    if v > 1e8: wall = v"]
            if kind not in sure:
                L.append(f"    elif {kind!r} not in metrics: metrics[{kind!r}] = {scaled}")
        elif op == OP_EPOCH:
            L.append(f"    epoch = {val(i)}")  # (its total is no part of a point)
        elif op == OP_RANK:
            L += [f"    v = {val(i)}", f"    rank = int(v) if {_COUNT} else None"]
        elif op == OP_WALL:
            L += [f"    v = {val(i)}", "    wall = v if v > 1e8 else None"]
        elif op == OP_DICT_WALL:
            L += [f"    v = {val(i)}", "    if v > 1e8: wall = v"]
        elif op == OP_NAN_COUNT:
            L.append(f"    nan_count = {val(i)}")
    wall = "wall" if has_wall else "None"
    if nums.stamp_minute >= 0:
        frac = f" + int(g[{nums.stamp_frac}]) / {10**nums.stamp_frac_digits}" if nums.stamp_frac >= 0 else " + 0.0"
        L += [
            f"    a = g[{nums.stamp_minute}]",
            "    fs = P.fast_stamp",
            "    if a == fs[0]: base = fs[1]",
            "    else:",
            f"        base = _minute({nums.stamp_form}, a)",
            "        if base is None: return None",
            "        P.fast_stamp = (a, base)",
        ]
        if has_wall:
            L.append(f"    if wall is None: wall = base + int(g[{nums.stamp_sec}]){frac}")
        else:
            L.append(f"    wall = base + int(g[{nums.stamp_sec}]){frac}")
            wall = "wall"
    rank = "rank" if has_rank else "None"
    if nums.tag >= 0:
        L.append(f"    if rank is None: rank = int(g[{nums.tag}])" if has_rank else f"    rank = int(g[{nums.tag}])")
        rank = "rank"
    epoch = "epoch" if has_epoch else "None"
    if dict_style is not None:
        style, keys_ok = dict_style
        no_step = not plan.steps  # (the step is None whatever the values: folded)
        if style == "jsonl" or not keys_ok:
            L.append("    if step is None: return False")
        if not no_step:
            L.append("    P.in_eval = False" if step_sure else "    if step is not None: P.in_eval = False")
        L += [
            "    if (P.locked != _fmt or P.weak_lock) and not P.lock(_fmt): return False",
            f"    return _new(_LP, (step, loss, line_no, _pfmt, {rank}, {epoch}, False, metrics, {wall}, _STEP, None, '', False))",
        ]
        return "\n".join(L) + "\n"
    # LossLogParser.record: the rules that need more than the keys, with what the template fixes
    # folded in: whether the step is set here ("sure"), never by the keys ("none") or by the
    # values ("maybe"); whether the epoch is whole (True, False, or None: by its value)
    step_is = "sure" if step_sure else "none" if not plan.steps else "maybe"
    if has_nan:
        L.append("    if nan_count > 0: return None")  # (rare: the general reader says it)
    whole: bool | None = False
    if has_epoch and all(groups[i] in nums.digits and convs[i] == "_f" for op, i, _k in plan.ops if op == OP_EPOCH):
        whole = True  # (every epoch of the line is digits only, at most 15: a whole number)
    elif has_epoch:
        whole = None
        L += [
            "    if epoch is not None and (epoch != epoch or epoch in _INFS): epoch = None",
            "    whole = epoch is not None and 0 <= epoch < 9007199254740992 and epoch == int(epoch)",
        ]
    dyn_axis = step_is != "sure" and (counter is not None or (has_epoch and whole is not False))
    if dyn_axis:
        L.append("    axis = _STEP; epoch_len = None")
    from_bar = "False"
    if counter is not None and step_is != "sure":
        n_g, t_g, outer_g = counter
        if not has_epoch:
            L.append("    epoch = None")
        ind = "    "
        if step_is == "maybe":
            L += ["    from_bar = False", "    if step is None:"]
            ind = "        "
        L.append(f"{ind}n = int(g[{n_g}])")
        if t_g >= 0:
            L += [f"{ind}t = int(g[{t_g}])", f"{ind}if n > t: return None"]
        # the bar's epoch: the line's whole epoch, else its outer counter, else the parser's
        outer = f"int(g[{outer_g}])" if outer_g >= 0 else "P.epoch_ctx"
        e_sure = whole is True or outer_g >= 0
        last_epoch = [i for op, i, _k in plan.ops if op == OP_EPOCH][-1:]
        if whole is True:  # (the epoch's digits: its float is already the epoch, as ``float(int(...))``)
            L.append(f"{ind}e = int(g[{groups[last_epoch[0]]}])")
        else:
            L.append(f"{ind}e = " + (outer if whole is False else f"int(epoch) if whole else {outer}"))
        body = ["step = e * t + n if t else n", "epoch = float(e)", "if t: axis = _EPOCH_BATCH; epoch_len = t"] if t_g >= 0 else ["step = n", "epoch = float(e)"]
        if whole is True:
            body.remove("epoch = float(e)")
        if e_sure:
            L += [ind + b for b in body]
        else:
            L += [f"{ind}if e is not None:"] + [ind + "    " + b for b in body] + [f"{ind}else:", f"{ind}    step = n"]
        if step_is == "maybe":
            L.append("        from_bar = True")
            from_bar = "from_bar"
        else:
            from_bar = "True"  # (no step field: every line's step is its counter's)
            step_is = "sure"
        epoch = "epoch"
    if has_epoch and step_is != "sure" and whole is not False:
        if whole is None:
            L.append("    if step is None and whole: step = int(epoch); axis = _EPOCH")
        elif step_is == "none":
            L.append("    step = int(epoch); axis = _EPOCH")
            step_is = "sure"
        else:
            L.append("    if step is None: step = int(epoch); axis = _EPOCH")
    # (LossLogParser.record: a line with a loss ends an "Epoch 3/20" header's reach)
    L += [] if step_is == "sure" else ["    if step is None: return None"]
    L += ["    P.in_eval = False", "    P.epoch_header = None"]
    if weak:
        L.append("    if _shape not in P.weak_shapes: return None")  # (the first of its shape: held by the reader)
        L.append("    if P.locked != _fmt and not P.lock(_fmt, True): return False")
    else:
        L.append("    if (P.locked != _fmt or P.weak_lock) and not P.lock(_fmt): return False")
    redraw = "False"
    if from_bar == "True":
        L += ["    redraw = step == P.last_bar_step", "    P.last_bar_step = step"]
        redraw = "redraw"
    elif from_bar == "from_bar":
        L += [
            "    redraw = False",
            "    if from_bar:",
            "        redraw = step == P.last_bar_step",
            "        P.last_bar_step = step",
        ]
        redraw = "redraw"
    axis, epoch_len = ("axis", "epoch_len") if dyn_axis else ("_STEP", "None")
    L.append(
        f"    return _new(_LP, (step, loss, line_no, _pfmt, {rank}, {epoch}, {redraw}, metrics, {wall}, {axis}, {epoch_len}, _shape, _relative))"
    )
    return "\n".join(L) + "\n"
