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
MAX_DECODED_BYTES = 1 << 32


class TransformError(ValueError):
    """The stream is not what its descriptor says (corrupt), or decodes past the cap."""


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
        return bytes(zstd_mod.decompress(data))

    return std


def _kind(descriptor: str) -> str:
    # "stream.zstd/1" -> "stream.zstd"
    return descriptor.split("/", 1)[0]


def decoder_for(descriptors: Sequence[str]) -> tuple[Callable[[bytes], bytes] | None, str]:
    """A function undoing ``descriptors`` in order, or (None, why it cannot be undone here)."""
    steps: list[Callable[[bytes, int], bytes]] = []
    for desc in descriptors:
        if _kind(desc) != "stream.zstd":
            return None, f"unknown writer extension {desc!r}"
        found = _zstd_decoder()
        if found is None:
            return None, "no zstd decompressor installed (pip install zstandard)"
        steps.append(found)

    def run(data: bytes) -> bytes:
        for step in steps:
            try:
                out = step(data, MAX_DECODED_BYTES)
            except Exception as e:  # the decompressors raise their own error types
                raise TransformError(f"zstd stream does not decode: {type(e).__name__}: {e}") from e
            if len(out) > MAX_DECODED_BYTES:
                raise TransformError(f"decodes to more than {MAX_DECODED_BYTES} bytes")
            data = out
        return data

    return run, ""
