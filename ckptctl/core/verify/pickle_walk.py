"""Read the plain part of a pickle without running it.

A stack machine over ``pickletools.genops`` that rebuilds only dicts, lists,
tuples, sets, strings, bytes, numbers, booleans and None. Everything else (a
global, the result of calling one, a torch storage reference) becomes an inert
``Opaque`` carrying the global's name, so nothing in the file runs and no class
is imported. ``collections.OrderedDict()`` is rebuilt as a dict because every
torch state dict is one.

Bounded before anything is built: at most ``MAX_OPCODES`` opcodes, ``MAX_CONTAINERS``
containers, ``MAX_STACK`` values on the stack (a genuine pickle's stack stays near its
nesting plus one 1,000-item batch) and ``MAX_MEMO`` memo entries; past any of them,
``PickleTooLargeError`` (the caller reads no keys; that alone is no damage). Containers
are built iteratively (no recursion) and the value returned is cut at ``MAX_DEPTH``
(deeper containers, and a container that holds itself, become ``Opaque``), so nothing
that walks it later recurses without end (a tuple nested 100,000 deep). Pure: bytes in,
value out.
"""

from __future__ import annotations

import pickletools
from dataclasses import dataclass
from typing import Any

#: Stop after this many opcodes (a torch.save data.pkl of a large model has a few million).
MAX_OPCODES = 5_000_000
#: Containers built at most (every tensor costs a torch.save pickle about five).
MAX_CONTAINERS = 1_000_000
#: Values on the stack at most: the pickler batches APPENDS/SETITEMS by 1,000 items.
MAX_STACK = 100_000
#: Memo entries at most.
MAX_MEMO = 2_000_000
#: The walked value is cut below this depth (keys and top-level values are what callers use).
MAX_DEPTH = 16


class PickleWalkError(ValueError):
    """Not a pickle this walker can follow; the message says why."""


class PickleTooLargeError(PickleWalkError):
    """Past the walker's cost caps: its keys are not read (not evidence of damage by itself)."""


@dataclass(frozen=True, slots=True)
class Opaque:
    """A value the walker did not build: what made it (``module.name``), if known."""

    what: str


class _Mark:
    pass


_MARK = _Mark()
_DICT_CLASSES = frozenset({"collections.OrderedDict", "builtins.dict", "__builtin__.dict"})


def _pop_mark(stack: list[Any]) -> list[Any]:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is _MARK:
            items = stack[i + 1 :]
            del stack[i:]
            return items
    raise PickleWalkError("MARK expected on the stack")


_SCALARS = (str, int, float, bool, bytes, type(None))


def _setitems(target: Any, items: list[Any]) -> None:
    if isinstance(target, dict):
        for k, v in zip(items[::2], items[1::2], strict=False):
            # scalar keys only: hashing a crafted tuple nested 100,000 deep would overflow the
            # C stack; state dicts are keyed by strings and ints
            if isinstance(k, _SCALARS):
                target[k] = v


def walk(data: bytes) -> Any:
    """The pickle's top-level value with only plain containers rebuilt."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    n = containers = 0
    try:
        for op, arg, _pos in pickletools.genops(data):
            n += 1
            if n > MAX_OPCODES:
                raise PickleTooLargeError(f"more than {MAX_OPCODES:,} opcodes")
            if len(stack) > MAX_STACK:
                raise PickleTooLargeError(f"more than {MAX_STACK:,} values on the pickle stack")
            name = op.name
            if name in _BUILDS:
                containers += 1
                if containers > MAX_CONTAINERS:
                    raise PickleTooLargeError(f"more than {MAX_CONTAINERS:,} containers")
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                break
            if name == "MARK":
                stack.append(_MARK)
            elif name in ("EMPTY_DICT",):
                stack.append({})
            elif name == "DICT":
                d: dict[Any, Any] = {}
                _setitems(d, _pop_mark(stack))
                stack.append(d)
            elif name in ("EMPTY_LIST",):
                stack.append([])
            elif name == "LIST":
                stack.append(_pop_mark(stack))
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name == "TUPLE":
                stack.append(tuple(_pop_mark(stack)))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                k = int(name[-1])
                if len(stack) < k:
                    raise PickleWalkError(f"{name} on a short stack")
                items = stack[-k:]
                del stack[-k:]
                stack.append(tuple(items))
            elif name in ("EMPTY_SET",):
                stack.append(set())
            elif name == "FROZENSET":
                stack.append(frozenset(x for x in _pop_mark(stack) if _hashable(x)))
            elif name == "ADDITEMS":
                items = _pop_mark(stack)
                if isinstance(stack[-1], set):
                    stack[-1].update(x for x in items if _hashable(x))
            elif name == "SETITEM":
                v, k = stack.pop(), stack.pop()
                _setitems(stack[-1], [k, v])
            elif name == "SETITEMS":
                items = _pop_mark(stack)
                _setitems(stack[-1], items)
            elif name == "APPEND":
                v = stack.pop()
                if isinstance(stack[-1], list):
                    stack[-1].append(v)
            elif name == "APPENDS":
                items = _pop_mark(stack)
                if isinstance(stack[-1], list):
                    stack[-1].extend(items)
            elif name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                if name == "INST":
                    _pop_mark(stack)
                stack.append(Opaque(f"{module}.{attr}"))
            elif name == "STACK_GLOBAL":
                attr, module = stack.pop(), stack.pop()
                stack.append(Opaque(f"{module}.{attr}"))
            elif name in ("REDUCE", "NEWOBJ"):
                args, fn = stack.pop(), stack.pop()
                stack.append(_plain_call(fn.what if isinstance(fn, Opaque) else "?", args))
            elif name == "NEWOBJ_EX":
                _kw, _args, cls = stack.pop(), stack.pop(), stack.pop()
                stack.append(Opaque(cls.what if isinstance(cls, Opaque) else "?"))
            elif name == "OBJ":
                items = _pop_mark(stack)
                cls = items[0] if items else None
                stack.append(Opaque(cls.what if isinstance(cls, Opaque) else "?"))
            elif name == "BUILD":
                stack.pop()  # the state: the object stays as it was (opaque or plain)
            elif name in ("BINPERSID", "PERSID"):
                if name == "BINPERSID":
                    stack.pop()
                stack.append(Opaque("persistent"))
            elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                if len(memo) >= MAX_MEMO:
                    raise PickleTooLargeError(f"more than {MAX_MEMO:,} memo entries")
                memo[len(memo) if name == "MEMOIZE" else int(arg)] = stack[-1]  # type: ignore[arg-type]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                key = int(arg)  # type: ignore[arg-type]
                if key not in memo:
                    raise PickleWalkError(f"memo {key} read before it was written")
                stack.append(memo[key])
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                _pop_mark(stack)
            elif name == "DUP":
                stack.append(stack[-1])
            elif name in ("NONE",):
                stack.append(None)
            elif name == "NEWTRUE":
                stack.append(True)
            elif name == "NEWFALSE":
                stack.append(False)
            elif name in ("EXT1", "EXT2", "EXT4"):
                stack.append(Opaque(f"<extension {arg}>"))
            elif name in ("BYTEARRAY8", "NEXT_BUFFER", "READONLY_BUFFER"):
                stack.append(Opaque(name.lower()))
            elif op.stack_after and op.stack_before == [] and len(op.stack_after) == 1:
                # every remaining "push one value" opcode: ints, floats, strings, bytes
                stack.append(arg)
            else:
                raise PickleWalkError(f"unexpected opcode {name}")
    except (ValueError, IndexError, KeyError, TypeError, AttributeError) as e:
        if isinstance(e, PickleWalkError):
            raise
        raise PickleWalkError(f"not a valid pickle: {e}") from e
    if len(stack) != 1:
        raise PickleWalkError("the pickle does not leave exactly one value")
    return cut(stack[0], MAX_DEPTH)


# Opcodes that build a container (counted against MAX_CONTAINERS before it is built).
_BUILDS = frozenset({"EMPTY_DICT", "DICT", "EMPTY_LIST", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2",
                     "TUPLE3", "EMPTY_SET", "FROZENSET", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ", "INST"})  # fmt: skip
_CONTAINERS = (dict, list, tuple, set, frozenset)
TOO_DEEP = Opaque("<nested too deep>")


def cut(value: Any, max_depth: int) -> Any:
    """A copy of ``value`` whose containers below ``max_depth`` (or holding an ancestor) are
    ``TOO_DEEP``; iterative, shared containers copied once."""
    if not isinstance(value, _CONTAINERS):
        return value
    done: dict[int, Any] = {}
    # each container is visited twice: first to push its children, then (children done) to copy
    todo: list[tuple[Any, int, bool]] = [(value, 0, False)]
    while todo:
        item, depth, children_done = todo.pop()
        if not children_done:
            if id(item) in done:
                continue
            done[id(item)] = TOO_DEEP  # stays so below max_depth, or when reached again from inside
            if depth >= max_depth:
                continue
            todo.append((item, depth, True))
            kids = item.values() if isinstance(item, dict) else item
            todo.extend((c, depth + 1, False) for c in kids if isinstance(c, _CONTAINERS) and id(c) not in done)
            continue

        def copy(c: Any) -> Any:
            return done.get(id(c), TOO_DEEP) if isinstance(c, _CONTAINERS) else c

        if isinstance(item, dict):
            done[id(item)] = {k: copy(v) for k, v in item.items()}
        elif isinstance(item, list):
            done[id(item)] = [copy(c) for c in item]
        elif isinstance(item, tuple):
            done[id(item)] = tuple(copy(c) for c in item)
        else:
            done[id(item)] = type(item)(item)  # sets hold scalars only (see _hashable)
    return done[id(value)]


def _plain_call(what: str, args: Any) -> Any:
    """The value of calling a plain constructor the way protocols 0-2 spell plain values
    (``set([...])``, ``_codecs.encode(s, 'latin1')`` for bytes); anything else stays opaque."""
    if what in _DICT_CLASSES:
        return {}
    one = args[0] if isinstance(args, tuple) and len(args) >= 1 else None
    if what in ("builtins.set", "__builtin__.set") and isinstance(one, list):
        return {x for x in one if _hashable(x)}
    if what in ("builtins.frozenset", "__builtin__.frozenset") and isinstance(one, list):
        return frozenset(x for x in one if _hashable(x))
    if what == "_codecs.encode" and isinstance(one, str) and len(args) == 2 and args[1] == "latin1":
        return one.encode("latin-1")
    return Opaque(what)


def _hashable(x: Any) -> bool:
    return isinstance(x, _SCALARS)  # never hash a container (see _setitems)


def top_level_keys(value: Any) -> list[str]:
    """The string keys of a walked top-level dict, in the writer's order ([] for anything else)."""
    if not isinstance(value, dict):
        return []
    return [k for k in value if isinstance(k, str)]
