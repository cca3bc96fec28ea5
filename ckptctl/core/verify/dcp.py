"""A torch-free picture of a DCP ``.metadata`` index, and DCP's on-disk names.

``ckptctl.adapters.dcp_metadata`` builds these from the pickle with a restricted
unpickler; the verifier in ``ckptctl.core.verify.contract`` reasons about them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

METADATA_NAME = ".metadata"
SHARD_SUFFIX = ".distcp"
#: ``__{rank}_{n}.distcp``: the rank's index in the process group, then a per-rank counter.
SHARD_NAME = re.compile(r"^__(?P<rank>[0-9]{1,9})_(?P<n>[0-9]{1,9})\.distcp\Z")
#: ``__{rank}.metadata``: rank-local metadata (``dcp.save(..., use_collectives=False)``).
RANK_METADATA_NAME = re.compile(r"^__(?P<rank>[0-9]{1,9})\.metadata\Z")
#: The largest offset, length or dimension an index may hold: DCP and torch keep them in int64.
MAX_INDEX_INT = 2**63 - 1


def is_metadata_name(name: str) -> bool:
    """Is ``name`` one of DCP's own index files (``.metadata``, ``__r.metadata``), never a data file?"""
    # both end in ".metadata": the regex only for names that do (one per record otherwise)
    return name.endswith(METADATA_NAME) and (name == METADATA_NAME or RANK_METADATA_NAME.match(name) is not None)

# Bytes per element, by the dtype's name in ``torch.<name>``.
DTYPE_ITEMSIZE: dict[str, int] = {
    "float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2,
    "bfloat16": 2, "complex128": 16, "cdouble": 16, "complex64": 8, "cfloat": 8,
    "complex32": 4, "chalf": 4, "int64": 8, "long": 8, "int32": 4, "int": 4,
    "int16": 2, "short": 2, "int8": 1, "uint8": 1, "uint16": 2, "uint32": 4,
    "uint64": 8, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1, "qint8": 1,
    "quint8": 1, "qint32": 4, "float4_e2m1fn_x2": 1, "quint4x2": 1, "quint2x4": 1,
    "bits8": 1, "bits16": 2, "bits1x8": 1, "bits2x4": 1, "bits4x2": 1, "bit": 1,
    "uint1": 1, "uint2": 1, "uint3": 1, "uint4": 1, "uint5": 1, "uint6": 1, "uint7": 1,
    "int1": 1, "int2": 1, "int3": 1, "int4": 1, "int5": 1, "int6": 1, "int7": 1,
}  # fmt: skip
"""Bytes per element of every ``torch`` dtype (torch 2.13's ``dtype.itemsize``)."""

#: Dtype names a newer torch may add (``float8_e3m4``, ``float6_e3m2fn_x4``...): accepted in
#: ``.metadata`` with an unknown element size, so the raw-size check is skipped for them.
_FUTURE_DTYPE = re.compile(r"^(?:float|bfloat|int|uint|bits|complex|qint|quint)\d[0-9a-z_]*\Z")


def is_dtype_name(name: str) -> bool:
    """Is ``torch.<name>`` a dtype a genuine ``.metadata`` may name (known now or shaped like one)?"""
    return name in DTYPE_ITEMSIZE or _FUTURE_DTYPE.match(name) is not None


@dataclass(frozen=True, slots=True)
class Chunk:
    """One saved piece of a tensor: where it sits in the global tensor and its shape."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """A tensor in the saved state dict."""

    fqn: str
    size: tuple[int, ...]
    dtype: str
    """``torch.<dtype>`` name without the module, e.g. ``float32``; '' if unknown."""
    chunks: tuple[Chunk, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.size:
            n *= s
        return n


@dataclass(frozen=True, slots=True)
class StorageItem:
    """Where one record (a tensor chunk or a non-tensor value) lives on disk."""

    fqn: str
    chunk_offsets: tuple[int, ...] | None
    """The chunk's offsets for tensors; None for bytes (non-tensor) records."""
    relative_path: str
    offset: int
    length: int
    transformed: bool = False
    """Written through a writer extension (e.g. zstd): the bytes are not a plain torch.save zip."""
    transforms: tuple[str, ...] = ()
    """The extensions' descriptors (``stream.zstd/1``), in the order a reader undoes them."""


@dataclass(frozen=True, slots=True)
class DcpIndex:
    """Everything the verifier needs from one ``.metadata`` (or the union of rank-local ones)."""

    tensors: dict[str, TensorEntry]
    byte_fqns: frozenset[str]
    items: tuple[StorageItem, ...]
    version: str | None = None


_new = object.__new__
_set_chunk = tuple(getattr(Chunk, f).__set__ for f in ("offsets", "sizes"))
_set_tensor = tuple(getattr(TensorEntry, f).__set__ for f in ("fqn", "size", "dtype", "chunks"))
_set_item = tuple(
    getattr(StorageItem, f).__set__
    for f in ("fqn", "chunk_offsets", "relative_path", "offset", "length", "transformed", "transforms")
)


def make_chunk(offsets: tuple[int, ...], sizes: tuple[int, ...]) -> Chunk:
    """``Chunk(offsets, sizes)`` without the frozen ``__init__``'s one ``object.__setattr__``
    per field: the same instance, built at the speed an index of 100,000 records needs."""
    c = _new(Chunk)
    so, ss = _set_chunk
    so(c, offsets)
    ss(c, sizes)
    return c


def make_tensor_entry(fqn: str, size: tuple[int, ...], dtype: str, chunks: tuple[Chunk, ...]) -> TensorEntry:
    """``TensorEntry(fqn, size, dtype, chunks)``, built as ``make_chunk`` builds a ``Chunk``."""
    t = _new(TensorEntry)
    sf, ss, sd, sc = _set_tensor
    sf(t, fqn)
    ss(t, size)
    sd(t, dtype)
    sc(t, chunks)
    return t


def make_storage_item(
    fqn: str,
    chunk_offsets: tuple[int, ...] | None,
    relative_path: str,
    offset: int,
    length: int,
    transformed: bool = False,
    transforms: tuple[str, ...] = (),
) -> StorageItem:
    """``StorageItem(...)`` (the same arguments), built as ``make_chunk`` builds a ``Chunk``."""
    it = _new(StorageItem)
    s0, s1, s2, s3, s4, s5, s6 = _set_item
    s0(it, fqn)
    s1(it, chunk_offsets)
    s2(it, relative_path)
    s3(it, offset)
    s4(it, length)
    s5(it, transformed)
    s6(it, transforms)
    return it


@dataclass(slots=True)
class DcpUnit:
    """One DCP directory inside a checkpoint: the step dir itself or a nested one (HF).

    ``runroot.inspect`` lists and parses it; ``runroot.deep`` reads its records."""

    subdir: str
    files: dict[str, int]
    index: DcpIndex | None = None
    rank_local: int = 0


@functools.lru_cache(maxsize=65536)
def shard_rank(name: str) -> int | None:
    """The writer rank of a ``__r_n.distcp`` file name, else None."""
    m = SHARD_NAME.match(name)
    return int(m.group("rank")) if m else None
