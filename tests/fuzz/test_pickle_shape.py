"""``check_shape`` (core/pickle_shape.py): no false alarms on real pickles, no miss on the bounds."""

from __future__ import annotations

import pickle
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptctl.core.pickle_shape import MAX_NESTING, PickleShapeError, check_shape
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
