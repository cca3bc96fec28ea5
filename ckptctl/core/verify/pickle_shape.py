"""Bound what unpickling untrusted bytes can cost, before any byte is unpickled.

CPython's C unpickler trusts the numbers inside a pickle: ``LONG_BINPUT 2**28``
in a 9-byte file resizes its memo to 4 GB, ``BINBYTES8`` allocates what it claims
before finding the data missing, and a tuple nested 200,000 deep used as a dict key
overflows the C stack while hashing (a segfault, not an exception). ``check_shape``
walks the opcodes once, executing nothing (string payloads skipped by their length, the
opcodes of a genuine protocol-4 ``.metadata`` and their usual runs dispatched first), and
refuses a pickle that:

- claims an argument longer than the bytes left, or a memo index above the file size
  (so the memo, and every container, is bounded by the file size);
- nests containers deeper than ``MAX_NESTING`` (tuples exactly; a list mutated after
  it was memoized is counted where it was built -- deep lists fail later with a
  catchable ``RecursionError``, never a crash);
- leaves more than ``MAX_STACK`` values on the stack when it builds an empty container
  (a genuine pickle's stack holds its nesting plus one 1,000-item batch; 20 million
  ``EMPTY_SET`` in a row would make the C unpickler build 4 GB of sets), or builds more
  empty containers than a quarter of its size in bytes (a genuine ``.metadata`` builds
  one per ~14 bytes: they can only be filled from bytes that follow);
- has no ``STOP`` or an opcode pickle does not define.

Pure: bytes in, ``PickleShapeError`` out. Stdlib only.
"""

from __future__ import annotations

import struct

from ckptctl.core.verify.pickle_replay import Replay

#: Deepest container nesting accepted. A genuine DCP ``.metadata`` nests about 8 deep
#: (Metadata -> dict -> TensorStorageMetadata -> state -> chunks -> chunk -> state -> Size).
MAX_NESTING = 100
#: Most values on the stack when an empty container is pushed (see the module docstring).
MAX_STACK = 100_000


class PickleShapeError(ValueError):
    """The pickle claims more than it holds, or nests too deep; the message says where."""


# How each opcode's argument is laid out.
_FIXED, _LINE, _TWO_LINES, _LEN1, _LEN4, _LEN4S, _LEN8 = range(7)
# What it does to the stack (only what decides nesting depth).
(_PUSH, _APPEND, _EXTEND, _FROM_MARK, _TUPLE_N, _SETITEM, _POP, _DUP, _MARK, _POP_MARK, _GET,
 _PUT, _MEMOIZE, _POP2_PUSH, _BUILD, _NEWOBJ_EX, _NOTHING, _STOP, _FRAME, _KEEP) = range(20)  # fmt: skip

_OPS: dict[int, tuple[int, int, int]] = {}  # opcode -> (arg layout, arg size, stack effect)


def _op(codes: str, layout: int, size: int, effect: int) -> None:
    for c in codes:
        _OPS[ord(c) if len(c) == 1 else int(c)] = (layout, size, effect)


_op("NN\x88\x89\x97", _FIXED, 0, _PUSH)  # NONE, NEWTRUE, NEWFALSE, NEXT_BUFFER
_op("])}\x8f", _FIXED, 0, _PUSH)  # empty containers
_op("J", _FIXED, 4, _PUSH)
_op("K", _FIXED, 1, _PUSH)
_op("M", _FIXED, 2, _PUSH)
_op("G", _FIXED, 8, _PUSH)
_op("ILSVFP", _LINE, 0, _PUSH)  # INT, LONG, STRING, UNICODE, FLOAT, PERSID
_op("\x8aUC\x8c", _LEN1, 0, _PUSH)  # LONG1, SHORT_BINSTRING, SHORT_BINBYTES, SHORT_BINUNICODE
_op("\x8bT", _LEN4S, 0, _PUSH)  # LONG4, BINSTRING (signed lengths)
_op("BX", _LEN4, 0, _PUSH)  # BINBYTES, BINUNICODE
_op("\x8e\x96\x8d", _LEN8, 0, _PUSH)  # BINBYTES8, BYTEARRAY8, BINUNICODE8
_op("\x82", _FIXED, 1, _PUSH)  # EXT1 (resolved through find_class)
_op("\x83", _FIXED, 2, _PUSH)
_op("\x84", _FIXED, 4, _PUSH)
_op("c", _TWO_LINES, 0, _PUSH)  # GLOBAL
_op("a", _FIXED, 0, _APPEND)
_op("eu\x90", _FIXED, 0, _EXTEND)  # APPENDS, SETITEMS, ADDITEMS
_op("ltd\x91o", _FIXED, 0, _FROM_MARK)  # LIST, TUPLE, DICT, FROZENSET, OBJ
_op("i", _TWO_LINES, 0, _FROM_MARK)  # INST
_op("\x85\x86\x87", _FIXED, 0, _TUPLE_N)  # TUPLE1..3: the arity is code - 0x84
_op("s", _FIXED, 0, _SETITEM)
_op("0", _FIXED, 0, _POP)
_op("2", _FIXED, 0, _DUP)
_op("(", _FIXED, 0, _MARK)
_op("1", _FIXED, 0, _POP_MARK)
_op("g", _LINE, 0, _GET)
_op("h", _FIXED, 1, _GET)
_op("j", _FIXED, 4, _GET)
_op("p", _LINE, 0, _PUT)
_op("q", _FIXED, 1, _PUT)
_op("r", _FIXED, 4, _PUT)
_op("\x94", _FIXED, 0, _MEMOIZE)
_op("\x93R\x81", _FIXED, 0, _POP2_PUSH)  # STACK_GLOBAL, REDUCE, NEWOBJ
_op("b", _FIXED, 0, _BUILD)
_op("\x92", _FIXED, 0, _NEWOBJ_EX)
_op("\x80", _FIXED, 1, _NOTHING)  # PROTO
_op("\x95", _FIXED, 8, _FRAME)
_op("\x98Q", _FIXED, 0, _KEEP)  # READONLY_BUFFER, BINPERSID: replace the top
_op(".", _FIXED, 0, _STOP)

_TABLE: list[tuple[int, int, int] | None] = [_OPS.get(i) for i in range(256)]
_U4 = struct.Struct("<I").unpack_from
_I4 = struct.Struct("<i").unpack_from
_U8 = struct.Struct("<Q").unpack_from



#: The opcodes that push a value as it is, by how the step takes them: 1-5 a literal of that
#: many bytes, opcode included (depth 0); BINGET, LONG_BINGET (the memo slot's depth);
#: SHORT_BINUNICODE (depth 0, often memoized). Two thirds of a genuine ``.metadata``'s steps.
_LEAF = bytearray(256)
for _code, _kind in ((0x4B, 2), (0x4D, 3), (0x4A, 5), (0x4E, 1), (0x88, 1), (0x89, 1)):
    _LEAF[_code] = _kind  # BININT1, BININT2, BININT, NONE, NEWTRUE, NEWFALSE
_BINGET, _LONG_BINGET, _SHORT_BINUNICODE = 6, 7, 8
_LEAF[0x68], _LEAF[0x6A], _LEAF[0x8C] = _BINGET, _LONG_BINGET, _SHORT_BINUNICODE
_LEAVES = bytes(_LEAF)


def check_shape(data: bytes, *, max_nesting: int = MAX_NESTING, replay: bool = True) -> None:
    """Raise ``PickleShapeError`` if unpickling ``data`` could cost more than its size or nest too deep.

    ``replay``: units repeated after the end of a frame's item are checked by template
    (``pickle_replay``); the same result as walking every opcode (``replay=False``), faster.
    """
    n = len(data)
    replayer = Replay(max_nesting) if replay else None
    table = _TABLE
    leaves = _LEAVES
    u4 = _U4
    stack: list[int] = []  # nesting depth of each stack item
    marks: list[int] = []
    memo: list[int] = []  # depth of each memo slot (a list: indices are bounded by the file size)
    memoize = memo.append
    push = stack.append
    pos = 0
    built, max_built = 0, 10_000 + n // 4
    try:
        while True:  # data[pos] past the end raises IndexError: "no STOP" below
            code = data[pos]
            # The opcodes a genuine protocol-4 .metadata is mostly made of, inline, most
            # frequent first, the opcodes that usually follow taken in the same step (half of
            # all opcodes are a MEMOIZE right after the opcode that made the value). data[pos]
            # past the end is an IndexError, reported below as "no STOP".
            kind = leaves[code]
            if kind:  # a run of values pushed as they are: one step, one table look-up each
                while True:  # (the kinds as literals: _BINGET, _LONG_BINGET, _SHORT_BINUNICODE)
                    if kind == 6:
                        push(memo[data[pos + 1]])
                        pos += 2
                    elif kind == 7:
                        push(memo[u4(data, pos + 1)[0]])
                        pos += 5
                    elif kind == 8:
                        pos += 2 + data[pos + 1]
                        push(0)
                        if data[pos] == 0x94:
                            memoize(0)
                            pos += 1
                    else:
                        push(0)
                        pos += kind
                    code = data[pos]
                    kind = leaves[code]
                    if not kind:
                        break
            if code == 0x85:  # TUPLE1, each often memoized, often several in a row
                depth = stack[-1]
                while True:
                    depth += 1
                    pos += 1
                    if data[pos] == 0x94:
                        memoize(depth)
                        pos += 1
                    if data[pos] != 0x85:
                        break
                if depth > max_nesting:
                    raise PickleShapeError(f"containers nested more than {max_nesting} deep (at byte {pos - 1})")
                stack[-1] = depth
                if data[pos] != 0x52:
                    continue
                code = 0x52  # REDUCE(torch.Size, (dims,)): taken below in the same step
            if code == 0x29:  # EMPTY_TUPLE
                pos += 1
                if data[pos] == 0x81:  # NEWOBJ(cls, ()): the class's slot becomes the object
                    if not stack:
                        raise IndexError
                    pos += 1
                    if data[pos] == 0x94:
                        memoize(stack[-1])
                        pos += 1
                    if data[pos] != 0x7D:
                        continue
                    code = 0x7D  # its state dict: taken below in the same step
                else:
                    push(0)
                    continue
            if code == 0x7D or code == 0x5D:  # EMPTY_DICT, EMPTY_LIST (then its items, after a MARK)
                built += 1
                if built > max_built or len(stack) > MAX_STACK:
                    raise _too_many(pos, built, max_built)
                push(0)
                pos += 1
                if data[pos] == 0x94:
                    memoize(0)
                    pos += 1
                if data[pos] == 0x28:
                    marks.append(len(stack))
                    pos += 1
                continue
            if code == 0x75 or code == 0x65:  # SETITEMS, APPENDS (a state dict is then BUILT)
                start = marks.pop()
                if start < len(stack):
                    depth = max(stack[start:]) + 1
                    del stack[start:]
                    if depth > stack[-1]:
                        stack[-1] = depth
                        if depth > max_nesting:
                            raise PickleShapeError(f"containers nested more than {max_nesting} deep (at byte {pos})")
                pos += 1
                if data[pos] == 0x62:  # BUILD
                    depth = stack.pop() + 1
                    if depth > stack[-1]:
                        stack[-1] = depth
                        if depth > max_nesting:
                            raise PickleShapeError(f"containers nested more than {max_nesting} deep (at byte {pos})")
                    pos += 1
                if marks and replayer is not None:  # an item of a frame ended: units repeat here
                    pos, built = replayer.at_boundary(data, pos, stack, marks, memo, built, max_built, MAX_STACK)
                continue
            if code == 0x81 or code == 0x52:  # NEWOBJ, REDUCE
                depth = stack.pop()
                if depth < stack[-1]:
                    depth = stack[-1]
                else:
                    stack[-1] = depth
                pos += 1
                if data[pos] == 0x94:
                    memoize(depth)
                    pos += 1
                continue
            if code == 0x28:  # MARK
                marks.append(len(stack))
                pos += 1
                continue
            if code == 0x62 or code == 0x61:  # BUILD, APPEND: the top item goes into the one below
                depth = stack.pop() + 1
                if depth > stack[-1]:
                    stack[-1] = depth
                    if depth > max_nesting:
                        raise PickleShapeError(f"containers nested more than {max_nesting} deep (at byte {pos})")
                pos += 1
                continue
            if code == 0x74:  # TUPLE
                start = marks.pop()
                depth = max(stack[start:], default=-1) + 1
                del stack[start:]
                if depth > max_nesting:
                    raise PickleShapeError(f"containers nested more than {max_nesting} deep (at byte {pos})")
                push(depth)
                pos += 1
                if data[pos] == 0x94:
                    memoize(depth)
                    pos += 1
                continue
            if code == 0x94:  # MEMOIZE
                memoize(stack[-1])
                pos += 1
                continue
            spec = table[code]
            if spec is None:
                raise PickleShapeError(f"unknown opcode 0x{code:02x} at byte {pos}")
            layout, size, effect = spec
            arg_at = pos + 1
            if layout == _FIXED:
                pos = arg_at + size
            elif layout == _LEN1:
                pos = arg_at + 1 + data[arg_at]
            elif layout == _LEN4:
                pos = arg_at + 4 + _U4(data, arg_at)[0]
            elif layout == _LEN8:
                pos = arg_at + 8 + _U8(data, arg_at)[0]
            elif layout == _LEN4S:
                length = _I4(data, arg_at)[0]
                if length < 0:
                    raise PickleShapeError(f"negative length at byte {pos}")
                pos = arg_at + 4 + length
            else:
                end = data.find(b"\n", arg_at)
                if layout == _TWO_LINES and end >= 0:
                    end = data.find(b"\n", end + 1)
                if end < 0:
                    raise PickleShapeError(f"unterminated argument at byte {pos}")
                pos = end + 1
            if pos > n:
                raise PickleShapeError(f"truncated: opcode at byte {arg_at - 1} claims {pos - n} bytes past the end")
            if effect == _PUSH:
                if code == 0x8F:  # EMPTY_SET: the largest empty container
                    built += 1
                    if built > max_built or len(stack) > MAX_STACK:
                        raise _too_many(pos, built, max_built)
                push(0)
            elif effect == _MEMOIZE:
                memoize(stack[-1])
            elif effect == _GET:
                index = _memo_index(data, arg_at, layout, size)
                push(memo[index] if index < len(memo) else 0)
            elif effect == _PUT:
                index = _memo_index(data, arg_at, layout, size)
                if index > n:
                    raise PickleShapeError(f"memo index {index} at byte {arg_at - 1} exceeds the file size")
                if index >= len(memo):
                    memo.extend([0] * (index + 1 - len(memo)))
                memo[index] = stack[-1]
                replayer = None  # a slot may change from here on: templates name slots
            elif effect == _MARK:
                marks.append(len(stack))
            elif effect == _POP2_PUSH:
                depth = stack.pop()
                stack[-1] = max(stack[-1], depth)
            elif effect == _FROM_MARK:
                start = marks.pop()
                depth = max(stack[start:], default=-1) + 1
                del stack[start:]
                stack.append(depth)
            elif effect == _EXTEND:
                start = marks.pop()
                depth = max(stack[start:], default=-1) + 1
                del stack[start:]
                stack[-1] = max(stack[-1], depth)
            elif effect in (_BUILD, _APPEND):
                depth = stack.pop() + 1
                stack[-1] = max(stack[-1], depth)
            elif effect == _SETITEM:
                depth = max(stack.pop(), stack.pop()) + 1
                stack[-1] = max(stack[-1], depth)
            elif effect == _TUPLE_N:
                arity = code - 0x84
                if len(stack) < arity:
                    raise IndexError
                depth = max(stack[-arity:]) + 1
                del stack[-arity:]
                stack.append(depth)
            elif effect == _POP:
                if stack:
                    stack.pop()
                else:
                    marks.pop()  # POP of a bare mark, as the C unpickler allows
            elif effect == _DUP:
                stack.append(stack[-1])
            elif effect == _POP_MARK:
                del stack[marks.pop():]
            elif effect == _NEWOBJ_EX:
                depth = max(stack.pop(), stack.pop())
                stack[-1] = max(stack[-1], depth)
            elif effect == _FRAME:
                if _U8(data, arg_at)[0] > n - pos:
                    raise PickleShapeError(f"truncated: frame at byte {arg_at - 1} runs past the end")
            elif effect == _STOP:
                return
            elif effect == _KEEP and not stack:
                raise IndexError
            if stack and stack[-1] > max_nesting:
                raise PickleShapeError(f"containers nested more than {max_nesting} deep (at byte {arg_at - 1})")
    except (IndexError, struct.error, ValueError) as e:
        if isinstance(e, PickleShapeError):
            raise
        if pos >= n:
            raise PickleShapeError("truncated: no STOP opcode") from None
        raise PickleShapeError(f"malformed pickle near byte {pos}") from None


def _too_many(pos: int, built: int, max_built: int) -> PickleShapeError:
    if built > max_built:
        return PickleShapeError(f"more than {max_built:,} empty containers for its size (at byte {pos})")
    return PickleShapeError(f"more than {MAX_STACK:,} values on the stack (at byte {pos})")


def _memo_index(data: bytes, at: int, layout: int, size: int) -> int:
    if layout == _LINE:
        text = data[at : data.index(b"\n", at)]
        if len(text) > 20:
            raise PickleShapeError(f"memo index of {len(text)} digits")
        return int(text)
    if size == 1:
        return data[at]
    return int(_U4(data, at)[0])
