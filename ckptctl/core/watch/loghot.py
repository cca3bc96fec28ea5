"""The fast path's hot loop without per-line lookups: guessed templates and repeated parts.

Pure, stdlib only; used by ``ckptctl.core.watch.logfast``. Two shortcuts, each giving the
template the lookup by key would give, so a line is read exactly as before:

* **The next template, guessed.** A log prints its line shapes in the same order again and
  again (a record, the timer block under it, the next record). Each template remembers the
  template of the line that came after it last time (``Template.next``); the next line is
  first matched by that one. A template only matches lines of its own key (it fixes every
  character but ASCII digits, and digits are what a key leaves out), so when it matches and
  is still the first template of its key (the one the lookup tries first), the lookup would
  have found it: its line's key is never computed (an encode, a translate and a hash of the
  whole line, a fifth of a record's cost). Templates whose lines may have another key (a hex
  word, which keys write as ``0x``; a digit of another script) are never guessed.
* **Repeated parts.** A progress bar redrawn with ``\\r`` prints one part shape several times
  in a line (Lightning's ``Epoch 3: 42%|...| 840/2000 [..., train_loss_step=2.31]``). When all
  parts of a line have the same key, the first template of that key reads all of them with
  one ``findall`` over the whole line (each match anchored to a whole part); when it matched
  every part, the parts are read from the matches in order, as the part-by-part loop reads
  them (its lookup would find that template for each part), else the loop reads the line.

And a template's regex captures only the numbers its recipe reads (``captured``): the others
are matched as before, by the same forms, in non-capturing groups (a line's match makes no
strings for a progress bar's percentage, times or counters nobody reads).
"""

from __future__ import annotations

import re
from types import CodeType
from typing import Protocol

from ckptctl.core.watch import logparts
from ckptctl.core.watch.logbatch import batch_reader
from ckptctl.core.watch.logevents import LogEvent
from ckptctl.core.watch.logparts import read_rest
from ckptctl.core.watch.logrecipe import GROUP_RE, Template, compiled

#: A digit of another script (a template made of a line with one may match lines of other keys).
_OTHER_DIGIT_RE = re.compile(r"(?![0-9])\d")
#: The ``multi`` of a template whose whole-line regex failed once (its parts vary in width): never tried again.
_NEVER = re.compile(r"(?!)")
_NO_TEMPLATES: list[Template | None] = [None]


class Fast(logparts.Fast, Protocol):
    """What the shortcuts use of ``logfast.FastPath``."""

    by_key: dict[bytes, list[Template]]
    prev_rep: Template | None
    floats: dict[str, float]


def guess_key(t: Template, part: str, key: bytes) -> bytes:
    """The key a template may be guessed under (``Template.key``): ``key`` when every line the
    template matches has that key, else ``b""`` (never guessed)."""
    if "0x" in part or "\\d" in t.regex.pattern or _OTHER_DIGIT_RE.search(part) is not None:
        return b""
    return key


def read_repeated(fast: Fast, key: bytes, line: str, parts: list[str], line_no: int, out: list[LogEvent]) -> Template | None:
    """A line whose ``parts`` all have key ``key``, read by its first template when that template
    matches every part: that template (None: nothing was read, the part-by-part loop reads the line)."""
    known = fast.by_key.get(key)
    if known is None:
        return None
    t = known[0]
    read = t.read
    if read is None or t.regex.groups < 2:
        return None  # (parts that give nothing: no ``findall`` tuples to read; the loop counts them)
    multi = t.multi
    if multi is None:
        try:  # each match a whole part: after the start or a \r, up to a \r or the end
            multi = re.compile(r"(?<![^\r])(?:" + t.regex.pattern + r")(?![^\r])")
        except (re.error, RecursionError, OverflowError):
            multi = _NEVER
        t.multi = multi
        t.batch = batch_reader(t, fast.p.recipe_code, fast.floats)
    found = multi.findall(line)
    if len(found) != len(parts):
        # (no match spans a \r, and each starts and ends at a part's ends: one per part, or a part missed)
        t.multi = _NEVER
        return None
    _read_found(fast, t, found, line, line_no, out)
    if t.key:
        fast.prev_rep = t
    return t


def guess_repeated(fast: Fast, line: str, line_no: int, out: list[LogEvent]) -> bool:
    """``line`` (no hex word in it) read as ``logfast._parts`` would, by the template the last line
    of repeated parts was read by, without the line's key (True), or nothing was done (False).

    That template is guessed as the next one is for single lines: when its whole-part ``findall``
    matches every part, every part has its key (it fixes every character but ASCII digits); when it
    is still its key's first template and no line plan is kept for the line's key (plans come
    first), ``_parts`` would have read the line by ``read_repeated`` with it, and noted it the same."""
    t = fast.prev_rep
    if t is None:
        return False
    n = line.count("\r") + 1
    found = t.multi.findall(line) if t.multi is not None and n > 2 else ()
    if len(found) != n or fast.by_key.get(t.key, _NO_TEMPLATES)[0] is not t:
        return False
    whole = b"\r".join([t.key] * n)
    if whole in fast.plans:
        return False
    p = fast.p
    state = fast.plan_state.get(whole)
    note = p.plain and (state is None or state[0] < logparts.MAX_PLAN_BUILDS)
    _read_found(fast, t, found, line, line_no, out)  # type: ignore[arg-type]
    if note and p.plain:  # (reading may have changed it: as ``logfast._parts`` after ``read_repeated``)
        logparts.note_line(fast, whole, line, [t] * n)
    return True


def _read_found(fast: Fast, t: Template, found: list[tuple[str, ...]], line: str, line_no: int, out: list[LogEvent]) -> None:
    """The parts of ``line``, each matched by ``t`` (``found``: their groups), read in order."""
    p = fast.p
    restarts = p.restarts
    batch = t.batch
    start = 0
    if batch is not None and p.plain:
        start = batch(found, line_no, p, out)  # (the parts up to the first its recipe does not give a point for)
        if start:
            fast.hits += start
            if not restarts.settled:
                restarts.saw_point()
            if start == len(found):
                return
    read = t.read
    assert read is not None
    parts = line.split("\r")
    for i in range(start, len(found)):
        groups = found[i]
        if p.plain:
            event = read(groups, line_no, p)
            if event:
                out.append(event)
                if not restarts.settled:
                    restarts.saw_point()
                fast.hits += 1
                continue
            read_rest(fast, t, event, parts[i], line_no, out)
            continue
        p.feed_part(parts[i], line_no, True, out)


def captured(t: Template, regex_text: str, recipe_code: dict[str, CodeType]) -> str:
    """``regex_text`` (``logfast._pattern``: each number, tag number and timestamp piece one group)
    with only the groups ``t``'s recipe reads capturing, and the recipe renumbered to match."""
    used = sorted({int(m.group(1)) for m in GROUP_RE.finditer(t.source)})
    new = {old: i for i, old in enumerate(used)}
    out: list[str] = []
    group = 0
    i = 0
    n = len(regex_text)
    while i < n:
        c = regex_text[i]
        if c == "\\":
            out.append(regex_text[i : i + 2])
            i += 2
            continue
        if c == "(" and regex_text[i + 1 : i + 2] != "?":
            out.append("(" if group in new else "(?:")  # (a group of ``_pattern``: capturing, in order)
            group += 1
        else:
            out.append(c)
        i += 1
    if t.read is not None and new != {k: k for k in used}:
        source = GROUP_RE.sub(lambda m: f"g[{new[int(m.group(1))]}]", t.source)
        code = compiled(recipe_code, source, "<ckptctl.logfast template>")
        namespace = dict(t.read.__globals__)
        exec(code, namespace)  # our own code (``logrecipe._codegen``), its groups renumbered
        t.read, t.source = namespace["read"], source
    return "".join(out)
