"""The one JSON parser for files ckptctl did not write itself (or that anyone could have edited).

Every JSON document ckptctl reads goes through ``loads``: trainer_state.json, safetensors
headers and indexes, ``ckptctl.json`` and its commit marker, the lock, ``job.json``, the
audit log, recovery reports, torchelastic's error files, JSON-lines loss logs. Limits:

- size: at most ``max_bytes`` (the caller's cap, default ``MAX_JSON_BYTES``);
- depth: containers nested at most ``max_depth`` deep (``MAX_JSON_DEPTH``). The C parser
  stops at Python's recursion limit with ``RecursionError``; that, and any depth over the
  cap, is a ``JsonError`` (a 100,000-deep ``[[[[...`` never reaches a consumer that walks it);
- text: UTF-8; big integers past Python's digit limit are a ``JsonError``.

Numbers are range-checked where they are used (``bounded_int``: pids, steps, sizes), never
trusted because they parsed. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: The largest JSON document read whole (a trainer_state.json of a long run is a few MiB).
MAX_JSON_BYTES = 64 << 20
#: Deepest nesting accepted (real files nest < 10: trainer_state.json's log_history is 3).
MAX_JSON_DEPTH = 64
INT64_MAX = 2**63 - 1


class JsonError(ValueError):
    """Not a JSON document within the limits; the message says why (one line)."""


def loads(
    data: bytes | str,
    *,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    allow_nan: bool = True,
) -> Any:
    """Parse ``data`` (see the module docstring); ``JsonError`` for anything outside the limits."""
    if len(data) > max_bytes:
        raise JsonError(f"{len(data)} bytes, over the {max_bytes}-byte limit for a JSON document")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JsonError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    else:
        text = data
    try:
        doc = json.loads(text) if allow_nan else json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise JsonError(f"nested deeper than {max_depth} levels") from None
    except ValueError as e:  # JSONDecodeError, the int digit limit, a refused constant
        raise JsonError(_one_line(str(e))) from None
    depth = depth_of(doc, stop_at=max_depth + 1)
    if depth > max_depth:
        raise JsonError(f"nested deeper than {max_depth} levels")
    return doc


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _one_line(text: str) -> str:
    line = text.splitlines()[0] if text else "not JSON"
    return line[:200]


def depth_of(value: Any, *, stop_at: int = MAX_JSON_DEPTH + 1) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), iteratively; stops counting at ``stop_at``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest >= stop_at:
                return deepest
        stack.extend((c, depth) for c in children if isinstance(c, (dict, list)))
    return deepest


def bounded_int(value: Any, *, lo: int = 0, hi: int = INT64_MAX) -> int | None:
    """``value`` as an int in ``[lo, hi]``, else None: never a bool, a float, a string, a huge int.

    A float that is a whole number (``30.0``) is accepted; ``inf``/``nan`` are not.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    if not isinstance(value, int):
        return None
    return value if lo <= value <= hi else None
