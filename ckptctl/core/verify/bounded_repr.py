"""A short, safe ``repr`` of an untrusted value, for messages.

A value from a crafted file can be a list of 2**40 shared references, nested 100,000
deep, or an int whose ``str()`` raises (over 4,300 digits). Printed whole, it takes
minutes and gigabytes; ``bounded_repr`` shows 6 items, 3 levels and 80 characters at most.
Pure: stdlib only.
"""

from __future__ import annotations

import reprlib
from typing import Any


class _BoundedRepr(reprlib.Repr):
    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxstring = 80
        self.maxother = 80
        self.maxlong = 40

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:  # str() of a 4,300-digit int raises; never print it whole
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_REPR = _BoundedRepr()


def bounded_repr(value: Any) -> str:
    """A short, safe repr of an untrusted value for a message (bounded size, depth and ints)."""
    try:
        return _REPR.repr(value)
    except Exception:  # a stand-in's repr can fail on odd state; the type is enough then
        return f"<{type(value).__name__}>"
