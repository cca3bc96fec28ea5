"""CRC-32 arithmetic: combine the CRCs of two adjacent byte ranges without re-reading them.

Deep verify reads every byte once: the zip members' CRC-32s are computed over
the member data, and the whole-file CRC-32 the manifest records is then
assembled from those pieces with ``crc32_combine`` (zlib's algorithm: multiply
by x^(8*len2) modulo the CRC polynomial), instead of a second pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_POLY = 0xEDB88320  # reflected CRC-32 polynomial


def _multmodp(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial (reflected bit order)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _build_x2n_table() -> tuple[int, ...]:
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_multmodp(table[-1], table[-1]))
    return tuple(table)


_X2N = _build_x2n_table()


def _x2nmodp(n: int, k: int) -> int:
    """x^(n * 2^k) modulo the CRC polynomial."""
    p = 1 << 31  # x^0
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A+B from crc32(A), crc32(B) and len(B)."""
    if len2 <= 0:
        return crc1
    return _multmodp(_x2nmodp(len2, 3), crc1) ^ crc2


def crc32_of_pieces(
    buf: Any,
    pieces: list[tuple[int, int, int]],
    crc32: Callable[[Any, int], int],
    *,
    min_piece_bytes: int = 1 << 16,
) -> int:
    """CRC-32 of ``buf`` reusing the known CRCs of some of its ranges.

    ``pieces`` are ``(start, length, crc)`` ranges of ``buf`` whose CRC is already
    known (zip member data). Ranges shorter than ``min_piece_bytes`` are simply
    re-read: combining costs a few microseconds, re-reading a small range less.
    """
    crc = 0
    pos = 0
    for start, length, piece_crc in sorted(pieces):
        if length < min_piece_bytes or start < pos:
            continue
        if start > pos:
            crc = crc32(buf[pos:start], crc)
        crc = crc32_combine(crc, piece_crc, length)
        pos = start + length
    if pos < len(buf):
        crc = crc32(buf[pos:], crc)
    return crc
