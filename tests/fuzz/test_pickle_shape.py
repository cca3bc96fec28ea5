"""``check_shape`` (core/verify/pickle_shape.py): no false alarms on real pickles, no miss on the bounds."""

from __future__ import annotations

import pickle
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptctl.core.verify.pickle_shape import MAX_NESTING, PickleShapeError, check_shape
from tests.fuzz.test_fuzz import FUZZ

LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=300) \
    | st.binary(max_size=300)  # fmt: skip
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=5) | st.lists(inner, max_size=5).map(tuple)
    | st.dictionaries(st.text(max_size=8), inner, max_size=5) | st.frozensets(st.integers(), max_size=5),
    max_leaves=40,
)  # fmt: skip


@FUZZ
@given(value=VALUES, protocol=st.integers(0, pickle.HIGHEST_PROTOCOL))
def test_every_ordinary_pickle_passes(value: object, protocol: int) -> None:
    data = pickle.dumps(value, protocol=protocol)
    check_shape(data)
    assert pickle.loads(data) == value  # the check changed nothing


def _nested(depth: int, make: str) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value] if make == "list" else (value,) if make == "tuple" else {"k": value}
    return value


@pytest.mark.parametrize("make", ["list", "tuple", "dict"])
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_nesting_bound_is_exact(make: str, protocol: int) -> None:
    check_shape(pickle.dumps(_nested(MAX_NESTING - 1, make), protocol=protocol))
    with pytest.raises(PickleShapeError, match="nested"):
        check_shape(pickle.dumps(_nested(MAX_NESTING + 1, make), protocol=protocol))


@pytest.mark.parametrize(
    "data",
    [
        b"\x80\x02Nr\xff\xff\xff\x0f.",  # LONG_BINPUT past the file size
        b"\x80\x02Np99999\n.",  # PUT past the file size
        b"\x80\x03B\xff\xff\xff\x7fxx.",  # BINBYTES longer than the file
        b"\x80\x04\x95" + struct.pack("<Q", 1 << 40) + b"N.",  # FRAME longer than the file
        b"\x80\x02N",  # no STOP
        b"\x80\x02\xff.",  # not an opcode
        b"\x80\x02a.",  # APPEND on an empty stack
    ],
)
def test_claims_past_the_file_are_refused(data: bytes) -> None:
    with pytest.raises(PickleShapeError):
        check_shape(data)


class Node:
    """An object pickled as NEWOBJ + a BUILD of its state dict, as DCP's metadata classes are."""

    def __init__(self, a: object, b: object) -> None:
        self.a = a
        self.b = b

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and (self.a, self.b) == (other.a, other.b)


def _reference_depth(data: bytes) -> int:
    """The deepest nesting ``check_shape`` must see, computed independently with ``pickletools``."""
    import pickletools

    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    worst = 0
    for op, arg, _pos in pickletools.genops(data):
        name = op.name
        if name == "MARK":
            marks.append(len(stack))
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[int(arg)] = stack[-1]  # type: ignore[arg-type]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[int(arg)])  # type: ignore[arg-type]
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            k = int(name[-1])
            d = max(stack[-k:]) + 1
            del stack[-k:]
            stack.append(d)
        elif name in ("TUPLE", "LIST", "DICT", "FROZENSET", "OBJ", "INST"):
            s = marks.pop()
            d = max(stack[s:], default=-1) + 1
            del stack[s:]
            stack.append(d)
        elif name in ("APPENDS", "SETITEMS", "ADDITEMS"):
            s = marks.pop()
            d = max(stack[s:], default=-1) + 1
            del stack[s:]
            stack[-1] = max(stack[-1], d)
        elif name in ("APPEND", "BUILD"):
            d = stack.pop() + 1
            stack[-1] = max(stack[-1], d)
        elif name == "SETITEM":
            d = max(stack.pop(), stack.pop()) + 1
            stack[-1] = max(stack[-1], d)
        elif name in ("REDUCE", "NEWOBJ", "STACK_GLOBAL"):
            d = stack.pop()
            stack[-1] = max(stack[-1], d)
        elif name == "POP":
            stack.pop()
        elif name not in ("PROTO", "FRAME", "STOP"):
            stack.append(0)  # a scalar, an empty container or a global
        if stack:
            worst = max(worst, stack[-1])
    return worst


NESTED = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(st.text(max_size=4), inner, max_size=4) | st.builds(Node, inner, inner),
    max_leaves=60,
)  # fmt: skip


@FUZZ
@given(value=NESTED, protocol=st.integers(2, pickle.HIGHEST_PROTOCOL), shared=st.booleans())
def test_depth_matches_an_independent_model(value: object, protocol: int, shared: bool) -> None:
    """The fast paths (opcodes taken together) count nesting exactly like a plain walk."""
    if shared:
        value = [value, (value,), Node(value, [value])]  # memo references to deep values
    data = pickle.dumps(value, protocol=protocol)
    depth = _reference_depth(data)
    check_shape(data, max_nesting=depth)
    if depth:
        with pytest.raises(PickleShapeError, match="nested"):
            check_shape(data, max_nesting=depth - 1)
