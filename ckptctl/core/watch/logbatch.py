"""A template's recipe for many parts at once: the parts of a redrawn progress bar in one call.

Pure, stdlib only; used by ``ckptctl.core.watch.loghot`` (repeated parts). A Lightning or tqdm
line redraws one bar shape 3 to 100 times; ``loghot`` finds all its parts with one ``findall``
and reads each by the template's ``read`` (``logrecipe._codegen``). Per part that is a call, the
record-open check and the format-lock check, each the same for every part of the line: nothing a
recipe does changes them (a recipe sets ``in_eval``, ``epoch_header``, ``fast_stamp`` and
``last_bar_step``, and calls ``lock`` only when the check fails).

The *batch reader* is the recipe's own source turned into a loop over ``findall``'s tuples
(``read_all(found, line_no, P, out)``): the two checks made once before the loop (either fails:
0, the caller reads every part as before), each group a loop variable, and where ``read`` would
give ``None`` or ``False`` the loop stops there, before that part changed anything but what
reading it again sets to the same values. It returns how many parts it read, each giving the
point ``read`` gives, appended to ``out`` in order; the caller reads the rest part by part. So a
line gives exactly the events and state of calling ``read`` on each part.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import CodeType
from typing import Any

from ckptctl.core.watch.logrecipe import GROUP_RE, Template, compiled

HEAD = "def read(g, line_no, P):"
PENDING = "    if P.pending is not None: return None"
LOCK = "    if (P.locked != _fmt or P.weak_lock) and not P.lock(_fmt): return False"
POINT = "    return _new(_LP, ("
_CONV_RE = re.compile(r"\b(_f|int)\(g(\d+)\)")
_RETURN_RE = re.compile(r"\breturn (?:None|False)$")
#: Number texts kept with their floats per parser (``FastPath.floats``): short numbers repeat (a bar's
#: epoch, rate and rounded loss); emptied when full.
MEMO = 2048

BatchReader = Callable[[list[tuple[str, ...]], int, Any, list[Any]], int]


def group_forms(pattern: str) -> list[str]:
    """The text of each capturing group of ``pattern`` (a template's regex), in order."""
    forms: list[tuple[int, str]] = []
    stack: list[int] = []  # (start of each open group; -1: not capturing)
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = pattern.index("]", i + 2 if pattern[i + 1 : i + 2] in ("]", "^") else i + 1) + 1
            continue
        if c == "(":
            stack.append(-1 if pattern[i + 1 : i + 2] == "?" else i + 1)
        elif c == ")":
            start = stack.pop()
            if start >= 0:
                forms.append((start, pattern[start:i]))
        i += 1
    return [f for _start, f in sorted(forms)]


def batch_source(source: str, groups: int, plain: set[int] | None = None) -> str | None:
    """The batch reader's source of the recipe ``source`` whose template has ``groups`` groups
    (None: a recipe of another form, e.g. a weak one that locks the format itself)."""
    lines = source.splitlines()
    if len(lines) < 4 or lines[0] != HEAD or lines[1] != PENDING or lines.count(LOCK) != 1 or groups < 2:
        return None
    names = [f"g{k}" for k in range(groups)]
    out = [
        "def read_all(found, line_no, P, out):",
        "    if P.pending is not None or P.locked != _fmt or P.weak_lock: return 0",
        "    append = out.append",
        "    i = 0",
        f"    for {', '.join(names)} in found:",
    ]
    for line in lines[2:]:
        if line == LOCK:
            continue  # (checked once, above: no recipe line changes the lock)
        if "P.lock(" in line or "P.pending" in line or re.search(r"\b(?:i|found|append|last)\b", line):
            return None
        if any(int(k) >= groups for k in GROUP_RE.findall(line)):
            return None
        body = GROUP_RE.sub(r"g\1", line)  # (each group a loop variable)
        if line.startswith(POINT):
            out += ["    " + body.replace("return ", "append(", 1) + ")", "        i += 1"]
            continue
        if "return" in body:
            if _RETURN_RE.search(body) is None:
                return None
            body = _RETURN_RE.sub("break", body)  # (this part is read again by ``read``: same values set)
        out.append("    " + body)
    if not lines[-1].startswith(POINT):
        return None
    out += _after_points(out)
    out.append("    return i")
    loop = next(k for k, line in enumerate(out) if line.startswith("    for "))
    return "\n".join(_reuse(out, loop, plain or set())) + "\n"


#: Lines of a recipe after its last ``return None``/``False``: each part that gets to them gives a point.
_SET_ONCE = ("        P.in_eval = False", "        P.epoch_header = None")
_REDRAW = ("        redraw = step == P.last_bar_step", "        P.last_bar_step = step")


def _after_points(out: list[str]) -> list[str]:
    """What the loop's points set, set once after it (``out``: the batch reader so far, changed):
    the flags every point clears, and the last bar step as a local (each point compares with the
    previous one's). These lines come after every ``break``: a part that sets them gives a point."""
    last_break = max((k for k, line in enumerate(out) if line.endswith("break")), default=0)
    after: list[str] = []
    if all(line in out[last_break:] and out.count(line) == 1 for line in _SET_ONCE):
        for line in _SET_ONCE:
            out.remove(line)
        after.append("    if i: " + "; ".join(line.strip() for line in _SET_ONCE))
    if all(line in out[last_break:] and out.count(line) == 1 for line in _REDRAW) and sum("last_bar_step" in line for line in out) == 2:
        out[out.index(_REDRAW[0])] = "        redraw = step == last"
        out[out.index(_REDRAW[1])] = "        last = step"
        out.insert(out.index("    i = 0"), "    last = P.last_bar_step")
        after.append("    P.last_bar_step = last")
    return after


def _reuse(out: list[str], loop: int, plain: set[int]) -> list[str]:
    """``out`` (a batch reader, its loop at line ``loop``) with each group's conversion made once
    per value run: a group whose text is the previous part's (the epoch, a total, a rate: most
    parts of a line repeat them) keeps the previous part's value. A conversion of a matched
    number never raises, so converting it at the top of the loop changes nothing else. Only the
    groups in ``plain`` (numbers written with digits: never a NaN, whose points compare unequal
    to themselves only when their NaNs are distinct objects)."""
    convs: dict[tuple[str, str], str] = {}  # (conversion, group) -> its variable
    for m in _CONV_RE.finditer("\n".join(out[loop + 1 :])):
        if int(m.group(2)) in plain:
            convs.setdefault((m.group(1), m.group(2)), f"c{len(convs)}")
    if not convs:
        return out
    head = [f"    s{k} = None" for k in sorted({k for _c, k in convs})] + [f"    {v} = None" for v in convs.values()]
    top: list[str] = []
    for k in sorted({k for _c, k in convs}):
        mine = [(c, v) for (c, kk), v in convs.items() if kk == k]
        if mine[0][0] == "_f" and len(mine) == 1:  # (a float: from the parser's memo of number texts)
            v = mine[0][1]
            top += [
                f"        {v} = _FM.get(g{k})",
                f"        if {v} is None:",
                f"            {v} = _f(g{k})",
                f"            if len(_FM) >= {MEMO}: _FM.clear()",
                f"            _FM[g{k}] = {v}",
            ]
            continue
        sets = "; ".join(f"{v} = {c}(g{k})" for c, v in mine)
        top.append(f"        if g{k} != s{k}: s{k} = g{k}; {sets}")
    body = [_CONV_RE.sub(lambda m: convs.get((m.group(1), m.group(2)), m.group()), line) for line in out[loop + 1 :]]
    return out[:loop] + head + [out[loop]] + top + body


def batch_reader(t: Template, cache: dict[str, CodeType], floats: dict[str, float]) -> BatchReader | None:
    """``t``'s batch reader (``cache``: compiled sources, the parser's ``recipe_code``), or None."""
    read = t.read
    if read is None:
        return None
    forms = group_forms(t.regex.pattern)
    plain = {k for k, form in enumerate(forms) if not any(c in form for c in "nNiI")} if len(forms) == t.regex.groups else set()
    source = batch_source(t.source, t.regex.groups, plain)
    if source is None:
        return None
    code = compiled(cache, source, "<ckptctl.logfast batch>")
    namespace = read.__globals__  # (the recipe's own names: ``_fmt``, ``_shape``, ``_LP`` ...)
    namespace["_FM"] = floats
    exec(code, namespace)  # our own code (``logrecipe._codegen``'s, in a loop)
    reader: BatchReader = namespace.pop("read_all")
    return reader
