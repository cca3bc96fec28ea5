"""Read the plain part of a pickle without running it.

A stack machine over ``pickletools.genops`` that rebuilds only dicts, lists,
tuples, sets, strings, bytes, numbers, booleans and None. Everything else (a
global, the result of calling one, a torch storage reference) becomes an inert
``Opaque`` carrying the global's name, so nothing in the file runs and no class
is imported. ``collections.OrderedDict()`` is rebuilt as a dict because every
torch state dict is one. Bounded: the number of opcodes and the size of any
string are capped by the caller's input size, and containers are built
iteratively (no recursion). Pure: bytes in, value out.
"""

from __future__ import annotations

import pickletools
from dataclasses import dataclass
from typing import Any

#: Stop after this many opcodes (a torch.save data.pkl of a large model has a few million).
MAX_OPCODES = 20_000_000


class PickleWalkError(ValueError):
    """Not a pickle this walker can follow; the message says why."""


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
    n = 0
    try:
        for op, arg, _pos in pickletools.genops(data):
            n += 1
            if n > MAX_OPCODES:
                raise PickleWalkError(f"more than {MAX_OPCODES} opcodes")
            name = op.name
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
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg)] = stack[-1]  # type: ignore[arg-type]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
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
    return stack[0]


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
