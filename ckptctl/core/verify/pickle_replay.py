"""Repeated units of a pickle, checked once and replayed: ``check_shape`` at C speed.

A DCP ``.metadata`` is thousands of near-identical units: one state-dict entry (a key
string and its ``TensorStorageMetadata``), one storage key, one storage value. Between
two units only literals change (a name, a size, an offset) and the memo slots they read.
What ``check_shape`` computes for a unit -- the nesting depth of what it pushes, of what
it memoizes, how many empty containers it builds -- depends on nothing else: its opcodes
and the depths of the memo slots it reads.

So ``check_shape`` calls ``Replay.at_boundary`` where one item of a frame (``MARK ...
SETITEMS``) ends. There the bytes since the previous item's end, if they are a
self-contained unit (they only push: nothing below their start is popped or changed, every
mark they open is closed, they read no memo slot they made), are learned once: the opcodes
are walked again on their own with the same rules as ``check_shape`` and kept as a
*template*: regular expressions of the opcodes with their literals left open (no
alternation, no repetition: a match costs one pass over the bytes), string opcodes between
them (their lengths read, never matched). A later unit that matches a template, reads memo
slots of the same depths, and fits the stack and container bounds is applied in a few
calls: its pushes, memo slots and container count added as the template recorded. Anything
else -- a literal of another width, a frame boundary inside, a memo slot of another depth --
does not match, and ``check_shape`` walks it opcode by opcode as before. The result is the
one the opcode walk gives (the tests compare both on every fuzzed pickle).

Bounded on any input: at most ``MAX_LEARNED`` templates learned per pickle, each from at
most ``MAX_UNIT_BYTES`` bytes with at most ``MAX_STRINGS`` strings; nothing kept across calls.
Pure: stdlib only.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from operator import itemgetter
from typing import Any

#: Largest span learned as a template, in bytes (a genuine unit is 50 to 400).
MAX_UNIT_BYTES = 2048
#: Most templates learned (tried) per pickle: learning walks the span once more.
MAX_LEARNED = 32
#: Most templates kept at one frame position (a genuine frame alternates two kinds of unit).
MAX_PER_FRAME = 4
#: Most string opcodes in one template (each is one Python step when matched).
MAX_STRINGS = 4
#: Most failed matches per pickle (each costs up to a template's length), then no more
#: replay: a genuine ``.metadata`` has a few dozen; a crafted one cannot make every item
#: boundary rescan kilobytes that the walk then reads again.
MAX_MISSES = 2048

# Fixed-width literal opcodes: argument bytes (BININT1, BININT2, BININT, NONE, NEWTRUE, NEWFALSE).
_LITERALS = {0x4B: 1, 0x4D: 2, 0x4A: 4, 0x4E: 0, 0x88: 0, 0x89: 0}


def _tuple_getter(indices: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    if len(indices) == 1:
        i = indices[0]
        return lambda g: (g[i],)
    return itemgetter(*indices)


#: A learned span, opcode by opcode: a regex fragment, ``(width, index, depth)`` for a memo
#: read (BINGET 1, LONG_BINGET 4), or None where a SHORT_BINUNICODE stands.
_Step = bytes | tuple[int, int, int] | None


class _Piece:
    """Opcodes between two strings: one regular expression, and the depths of the memo
    slots it reads where the slot differs between units (the others are in the expression)."""

    __slots__ = ("h_depths", "h_get", "j_depths", "j_get", "j_unpack", "match")

    def __init__(self, steps: list[_Step], captured: frozenset[int], first: int) -> None:
        parts: list[bytes] = []
        h_groups: list[int] = []
        j_groups: list[int] = []
        h_depths: list[int] = []
        j_depths: list[int] = []
        for k, step in enumerate(steps):
            if isinstance(step, bytes):
                parts.append(step)
                continue
            assert step is not None
            width, index, depth = step
            op = b"h" if width == 1 else b"j"
            if first + k in captured:
                (h_groups if width == 1 else j_groups).append(len(h_groups) + len(j_groups))
                (h_depths if width == 1 else j_depths).append(depth)
                parts.append(op + rb"([\s\S]{%d})" % width)
            else:
                parts.append(re.escape(op + index.to_bytes(width, "little")))
        self.match = re.compile(b"".join(parts)).match
        self.h_get = _tuple_getter(h_groups) if h_groups else None
        self.h_depths = tuple(h_depths)
        self.j_get = _tuple_getter(j_groups) if j_groups else None
        self.j_unpack = struct.Struct(f"<{len(j_groups)}I").unpack
        self.j_depths = tuple(j_depths)


class _Unit:
    """A learned unit: its pieces (a string opcode between each two) and what it does."""

    __slots__ = ("built", "captured", "follow", "memo", "peak", "pieces", "pushed", "steps")

    def __init__(self, steps: list[_Step], captured: frozenset[int],
                 pushed: list[int], memo: list[int], built: int, peak: int) -> None:  # fmt: skip
        self.steps = steps
        self.captured = captured  # the memo reads (by position in steps) matched by depth, not slot
        self.pushed = pushed  # depths it leaves on the stack
        self.memo = memo  # depths of the memo slots it adds, in order
        self.built = built  # empty containers it builds
        self.peak = peak  # most values above its start when it pushes an empty container
        self.pieces: list[_Piece] = []
        self.follow: _Unit | None = None  # the unit replayed right after this one, last time
        first = 0
        for k, step in enumerate([*steps, None]):
            if step is None:
                self.pieces.append(_Piece(steps[first:k], captured, first))
                first = k + 1

    def same_effect(self, other: _Unit) -> bool:
        return (self.pushed, self.memo, self.built, self.peak) == (other.pushed, other.memo, other.built, other.peak)

    def merged(self, other: _Unit) -> _Unit | None:
        """One unit for both, reading the slots where they differ by depth; None if they are not alike."""
        if len(self.steps) != len(other.steps) or not self.same_effect(other):
            return None
        captured = set(self.captured)
        for k, (a, b) in enumerate(zip(self.steps, other.steps, strict=True)):
            if a == b:
                continue
            if not (isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] and a[2] == b[2]):
                return None  # other opcodes, or a slot of another depth
            captured.add(k)
        return _Unit(self.steps, frozenset(captured), self.pushed, self.memo, self.built, self.peak)

    def match(self, data: bytes, pos: int, memo: list[int]) -> int:
        """The end of this unit at ``pos``, or -1 if the bytes there are not one of it."""
        get = memo.__getitem__
        join = b"".join
        strings = len(self.pieces) - 1
        for piece in self.pieces:
            m = piece.match(data, pos)
            if m is None:
                return -1
            try:
                if piece.h_get is not None and tuple(map(get, join(piece.h_get(m.groups())))) != piece.h_depths:
                    return -1
                if piece.j_get is not None and (
                    tuple(map(get, piece.j_unpack(join(piece.j_get(m.groups()))))) != piece.j_depths
                ):
                    return -1
            except IndexError:  # a memo slot not made yet: the opcode walk says what it is
                return -1
            pos = m.end()
            if strings:  # SHORT_BINUNICODE: skipped by its length
                strings -= 1
                if data[pos] != 0x8C:  # past the end: IndexError, caught by the caller
                    return -1
                pos += 2 + data[pos + 1]
                if pos > len(data):
                    return -1
        return pos


class _Unlearnable(Exception):
    pass


def learn(data: bytes, start: int, end: int, memo: list[int], memo_start: int, max_nesting: int) -> _Unit | None:
    """The template of ``data[start:end]`` if it is a self-contained unit, else None.

    ``memo`` holds the depth of every slot made so far (``check_shape`` has walked the span
    already); a unit reading a slot at or past ``memo_start`` (made inside it) is not learned.
    """
    stack: list[int] = []
    marks: list[int] = []
    new_memo: list[int] = []
    built = peak = strings = 0
    steps: list[_Step] = []

    def need(k: int) -> None:
        if len(stack) < k:
            raise _Unlearnable

    pos = start
    try:
        while pos < end:
            code = data[pos]
            op = re.escape(bytes([code]))
            width = _LITERALS.get(code)
            if width is not None:
                steps.append(op + (rb"[\s\S]{%d}" % width if width else b""))
                stack.append(0)
                pos += 1 + width
            elif code == 0x68 or code == 0x6A:  # BINGET, LONG_BINGET
                width = 1 if code == 0x68 else 4
                index = data[pos + 1] if width == 1 else struct.unpack_from("<I", data, pos + 1)[0]
                if index >= memo_start:
                    raise _Unlearnable
                steps.append((width, index, memo[index]))
                stack.append(memo[index])
                pos += 1 + width
            elif code == 0x8C:  # SHORT_BINUNICODE: its bytes are skipped, between two pieces
                strings += 1
                if strings > MAX_STRINGS:
                    raise _Unlearnable
                steps.append(None)
                stack.append(0)
                pos += 2 + data[pos + 1]
            elif code == 0x94:  # MEMOIZE
                need(1)
                new_memo.append(stack[-1])
                steps.append(op)
                pos += 1
            elif code == 0x28:  # MARK
                marks.append(len(stack))
                steps.append(op)
                pos += 1
            elif code == 0x29:  # EMPTY_TUPLE
                stack.append(0)
                steps.append(op)
                pos += 1
            elif code == 0x7D or code == 0x5D:  # EMPTY_DICT, EMPTY_LIST
                peak = max(peak, len(stack))
                built += 1
                stack.append(0)
                steps.append(op)
                pos += 1
            elif code == 0x81 or code == 0x52:  # NEWOBJ, REDUCE
                need(2)
                depth = stack.pop()
                stack[-1] = max(stack[-1], depth)
                steps.append(op)
                pos += 1
            elif code == 0x62 or code == 0x61:  # BUILD, APPEND
                need(2)
                depth = stack.pop() + 1
                stack[-1] = max(stack[-1], depth)
                steps.append(op)
                pos += 1
            elif code == 0x73:  # SETITEM
                need(3)
                depth = max(stack.pop(), stack.pop()) + 1
                stack[-1] = max(stack[-1], depth)
                steps.append(op)
                pos += 1
            elif code == 0x75 or code == 0x65 or code == 0x74:  # SETITEMS, APPENDS, TUPLE
                if not marks:
                    raise _Unlearnable
                mark = marks.pop()
                depth = max(stack[mark:], default=-1) + 1
                del stack[mark:]
                if code == 0x74:
                    stack.append(depth)
                else:
                    need(1)
                    stack[-1] = max(stack[-1], depth)
                steps.append(op)
                pos += 1
            elif 0x85 <= code <= 0x87:  # TUPLE1..3
                arity = code - 0x84
                need(arity)
                depth = max(stack[-arity:]) + 1
                del stack[-arity:]
                stack.append(depth)
                steps.append(op)
                pos += 1
            else:
                raise _Unlearnable  # anything else (a frame, a global, a PUT...) is walked
            if stack and stack[-1] > max_nesting:
                raise _Unlearnable
    except (IndexError, struct.error, _Unlearnable):
        return None
    if pos != end or marks or not stack:
        return None
    return _Unit(steps, frozenset(), stack, new_memo, built, peak)


class Replay:
    """The templates learned in one ``check_shape`` call (never kept across calls)."""

    __slots__ = ("last", "learned", "max_nesting", "misses", "units")

    def __init__(self, max_nesting: int) -> None:
        self.units: dict[tuple[int, int], list[_Unit]] = {}
        self.last: dict[tuple[int, int], tuple[int, int, int]] = {}
        self.learned = 0
        self.misses = 0
        self.max_nesting = max_nesting

    def at_boundary(
        self, data: bytes, pos: int, stack: list[int], marks: list[int], memo: list[int],
        built: int, max_built: int, max_stack: int,
    ) -> tuple[int, int]:  # fmt: skip
        """At the end of an item of the frame ``marks[-1]``: replay what follows, or learn
        the item that just ended. Returns the new position and container count."""
        if self.misses >= MAX_MISSES:
            return pos, built
        key = (len(marks), marks[-1])
        prev = self.last.get(key)
        if (
            prev is not None
            and self.learned < MAX_LEARNED
            and len(stack) > prev[1]
            and pos - prev[0] <= MAX_UNIT_BYTES
        ):  # the bytes since the previous item's end were walked: learn them
            self.learned += 1
            unit = learn(data, prev[0], pos, memo, prev[2], self.max_nesting)
            if unit is not None:
                known = self.units.setdefault(key, [])
                for k, other in enumerate(known):  # the same unit reading other slots (a name's)
                    both = other.merged(unit)
                    if both is not None:
                        known[k] = both
                        break
                else:
                    if len(known) >= MAX_PER_FRAME:
                        del known[0]  # the oldest (e.g. the units before the memo passed 256 slots)
                    known.append(unit)
        units = self.units.get(key)
        if units:
            last: _Unit | None = None
            while True:
                # units come in turns (a key, its value): the one that came after the unit
                # just replayed the last time is tried first, then the others
                follow = last.follow if last is not None else None
                for unit in (units if follow is None else (follow, *units)):
                    try:
                        end = unit.match(data, pos, memo)
                    except IndexError:  # a string opcode cut by the end: walked (and refused) below
                        end = -1
                    if end < 0:
                        self.misses += 1
                    elif built + unit.built <= max_built and len(stack) + unit.peak <= max_stack:
                        stack.extend(unit.pushed)
                        memo.extend(unit.memo)
                        built += unit.built
                        pos = end
                        if last is not None:
                            last.follow = unit
                        last = unit
                        break
                else:
                    break
        self.last[key] = (pos, len(stack), len(memo))
        return pos, built
