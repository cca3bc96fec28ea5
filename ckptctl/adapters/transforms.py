"""Undo DCP writer extensions (``FileSystemWriter(_extensions=[...])``) so deep verify can look inside.

A record written through an extension is stored as the extension's output stream
(today: ``stream.zstd`` -- zstd frames around the usual ``torch.save`` archive), and
``.metadata`` lists the descriptors in the order the reader applies them. This adapter
decodes the ones it knows with whatever decompressor is installed (the ``zstandard``
package, streamed and capped so a crafted record cannot expand without bound; else
Python 3.14's ``compression.zstd``), never torch.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Callable, Sequence

#: The most a single record may decompress to; bigger is reported, not decoded.
MAX_DECODED_BYTES = 256 << 20
#: ... and by what ratio, past ``RATIO_FLOOR_BYTES`` (zeros compress ~1000x; a bomb far more).
MAX_DECODE_RATIO = 1024
RATIO_FLOOR_BYTES = 16 << 20


#: What a ``torch.save`` archive adds around a tensor's raw bytes (data.pkl, names, 64-byte
#: alignment, the central directory): generous, a few KiB in practice.
ARCHIVE_OVERHEAD_BYTES = 1 << 20


def decode_cap(encoded_bytes: int, declared_bytes: int | None = None) -> int:
    """How many bytes a record of ``encoded_bytes`` may decode to.

    ``declared_bytes``: what the index says the record holds (a tensor chunk's raw size).
    A genuine record decodes to that plus the archive's overhead whatever its ratio (zeros
    compress ~1000x and more); without it the ratio cap applies. Never past ``MAX_DECODED_BYTES``.
    """
    by_ratio = max(RATIO_FLOOR_BYTES, encoded_bytes * MAX_DECODE_RATIO)
    if declared_bytes is not None:
        by_ratio = max(by_ratio, declared_bytes + ARCHIVE_OVERHEAD_BYTES)
    return min(MAX_DECODED_BYTES, by_ratio)


class TransformError(ValueError):
    """The stream is not what its descriptor says (corrupt), or decodes past the cap."""


class TransformLimitError(TransformError):
    """The stream decodes past ``decode_cap``: too large to check here (not proof of damage)."""


def _zstd_decoder() -> Callable[[bytes, int], bytes] | None:
    try:
        zstandard = importlib.import_module("zstandard")

        def zs(data: bytes, cap: int) -> bytes:
            # streamed, so a crafted frame cannot expand past the cap in memory
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
            return bytes(reader.read(cap + 1))

        return zs
    except ImportError:
        pass
    try:
        zstd_mod = importlib.import_module("compression.zstd")  # Python 3.14+
    except ImportError:
        return None

    def std(data: bytes, cap: int) -> bytes:
        # streamed in pieces of at most cap + 1 bytes: a crafted frame cannot expand past it
        d = zstd_mod.ZstdDecompressor()
        out = bytearray()
        rest = data
        while len(out) <= cap:
            out += d.decompress(rest, max_length=cap + 1 - len(out))
            rest = b""
            if d.eof:
                if not d.unused_data:
                    break
                rest, d = d.unused_data, zstd_mod.ZstdDecompressor()  # next frame
            elif d.needs_input:
                break
        return bytes(out)

    return std


def _kind(descriptor: str) -> str:
    # "stream.zstd/1" -> "stream.zstd"
    return descriptor.split("/", 1)[0]


def decoder_for(descriptors: Sequence[str]) -> tuple[Callable[[bytes, int | None], bytes] | None, str]:
    """A function undoing ``descriptors`` in order, or (None, why it cannot be undone here)."""
    steps: list[Callable[[bytes, int], bytes]] = []
    for desc in descriptors:
        if _kind(desc) != "stream.zstd":
            return None, f"unknown writer extension {desc!r}"
        found = _zstd_decoder()
        if found is None:
            return None, "no zstd decompressor installed (pip install 'ckptctl[fast]')"
        steps.append(found)

    def run(data: bytes, declared_bytes: int | None = None) -> bytes:
        for i, step in enumerate(steps):
            # the last step yields the archive itself: the index's declared size applies to it
            cap = decode_cap(len(data), declared_bytes if i == len(steps) - 1 else None)
            try:
                out = step(data, cap)
            except Exception as e:  # the decompressors raise their own error types
                raise TransformError(f"zstd stream does not decode: {type(e).__name__}: {e}") from e
            if len(out) > cap:
                raise TransformLimitError(
                    f"decodes to more than {cap} bytes (caps: {MAX_DECODED_BYTES >> 20} MiB, "
                    f"{MAX_DECODE_RATIO}x past {RATIO_FLOOR_BYTES >> 20} MiB)"
                )
            data = out
        return data

    return run, ""
