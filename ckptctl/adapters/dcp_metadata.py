"""Read DCP ``.metadata`` safely, without torch.

``.metadata`` is a plain pickle. ``dcp.load`` unpickles it with ``pickle.load``,
so a hostile file runs code. Here a restricted unpickler admits only the DCP
metadata classes, torch's size/dtype/layout helpers and ``pathlib`` paths, each
mapped to an inert stand-in; any other global is refused (``disallowed global``)
and nothing in the file runs. The stand-ins are then converted into the plain
``ckptctl.core.dcp`` model.
"""

from __future__ import annotations

import io
import pathlib
import pickle
from typing import Any

from ckptctl.core.dcp import Chunk, DcpIndex, StorageItem, TensorEntry, is_dtype_name


class MetadataError(ValueError):
    """The bytes are not a readable, well-formed DCP ``.metadata``; the message says why."""

    def __init__(self, message: str, *, hostile: bool = False) -> None:
        super().__init__(message)
        self.hostile = hostile


class _Stub:
    """An inert object that records whatever state BUILD gives it.

    No ``__setstate__``: pickle's own BUILD stores a dict state (and the slot dict of a
    ``(dict, slots)`` pair) in the instance, in C; any other state is an unpickling error.
    """


class _Metadata(_Stub):
    pass


class _TensorStorageMetadata(_Stub):
    pass


class _BytesStorageMetadata(_Stub):
    pass


class _ChunkStorageMetadata(_Stub):
    pass


class _MetadataIndex(_Stub):
    pass


class _StorageInfo(_Stub):
    pass


class _StorageMeta(_Stub):
    pass


class _TensorProperties(_Stub):
    def __setstate__(self, state: Any) -> None:
        # torch writes (dtype, layout, requires_grad, memory_format, pin_memory)
        if isinstance(state, tuple) and len(state) == 5:
            self.__dict__["dtype"] = state[0]
        elif isinstance(state, dict):
            self.__dict__.update(state)
        elif isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            self.__dict__.update(state[0] or {})
            self.__dict__.update(state[1])
        else:
            raise pickle.UnpicklingError(f"TensorProperties state {type(state).__name__}")


class _DType:
    def __init__(self, name: str) -> None:
        self.name = name


class _MemFormat:
    def __init__(self, value: Any = None) -> None:
        self.value = value


def _size(*args: Any) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def _layout(name: Any) -> str:
    return str(name)


def _posix_path(*parts: Any) -> pathlib.PurePosixPath:
    return pathlib.PurePosixPath(*[str(p) for p in parts])


def _windows_path(*parts: Any) -> pathlib.PureWindowsPath:
    return pathlib.PureWindowsPath(*[str(p) for p in parts])


_DCP = "torch.distributed.checkpoint.metadata"
_SHARD = "torch.distributed._shard.sharded_tensor.metadata"  # older torch kept TensorProperties here

_ALLOWED: dict[tuple[str, str], Any] = {
    (_DCP, "Metadata"): _Metadata,
    (_DCP, "TensorStorageMetadata"): _TensorStorageMetadata,
    (_DCP, "BytesStorageMetadata"): _BytesStorageMetadata,
    (_DCP, "ChunkStorageMetadata"): _ChunkStorageMetadata,
    (_DCP, "TensorProperties"): _TensorProperties,
    (_SHARD, "TensorProperties"): _TensorProperties,
    (_DCP, "MetadataIndex"): _MetadataIndex,
    (_DCP, "StorageMeta"): _StorageMeta,
    (_DCP, "_MEM_FORMAT_ENCODING"): _MemFormat,
    (_SHARD, "MEM_FORMAT_ENCODING"): _MemFormat,
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): _StorageInfo,
    ("torch", "Size"): _size,
    ("torch.serialization", "_get_layout"): _layout,
    # StorageMeta.checkpoint_id: the module depends on the Python that wrote it.
    ("pathlib", "PosixPath"): _posix_path,
    ("pathlib", "PurePosixPath"): _posix_path,
    ("pathlib._local", "PosixPath"): _posix_path,
    ("pathlib._local", "PurePosixPath"): _posix_path,
    ("pathlib", "WindowsPath"): _windows_path,
    ("pathlib", "PureWindowsPath"): _windows_path,
    ("pathlib._local", "WindowsPath"): _windows_path,
    ("pathlib._local", "PureWindowsPath"): _windows_path,
}


#: Every ``(module, name)`` global a genuine DCP ``.metadata`` references, besides
#: ``torch.<dtype>`` and ``torch.<layout>`` (see ``is_allowed_metadata_global``).
#: ``ckptctl.training`` resolves the same list to the real torch classes.
ALLOWED_METADATA_GLOBALS: frozenset[tuple[str, str]] = frozenset(_ALLOWED)


def is_allowed_metadata_global(module: str, name: str) -> bool:
    """May a DCP ``.metadata`` pickle reference ``module.name``?"""
    if (module, name) in ALLOWED_METADATA_GLOBALS:
        return True
    return module == "torch" and (is_dtype_name(name) or name in ("strided", "sparse_coo", "sparse_csr"))


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get((module, name))
        if allowed is not None:
            return allowed
        if module == "torch" and is_dtype_name(name):
            return _DType(name)
        if module == "torch" and name in ("strided", "sparse_coo", "sparse_csr"):
            return name
        raise pickle.UnpicklingError(f"disallowed global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent id in .metadata (not a DCP metadata file)")


def unpickle_metadata(data: bytes) -> Any:
    """Unpickle with the allow-list; raise ``MetadataError`` with the reason."""
    if not data:
        raise MetadataError("empty file")
    try:
        return _RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        msg = str(e)
        raise MetadataError(f"not a DCP metadata pickle: {msg}", hostile="disallowed global" in msg) from e
    except EOFError as e:
        raise MetadataError(f"truncated pickle ({e or 'ran out of input'})") from e
    except (ValueError, TypeError, AttributeError, IndexError, KeyError, OverflowError,
            RecursionError, MemoryError, UnicodeDecodeError) as e:  # fmt: skip
        raise MetadataError(f"unreadable pickle: {type(e).__name__}: {e}") from e


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if type(value) is tuple and all(type(v) is int for v in value):
        return value  # the common case: torch.Size was rebuilt as a tuple of ints
    if not isinstance(value, (tuple, list)):
        raise MetadataError(f"{what} is {type(value).__name__}, expected a sequence of ints")
    for v in value:
        if not isinstance(v, int) or isinstance(v, bool):
            raise MetadataError(f"{what} holds {v!r}, expected ints")
    return tuple(value)


def _all_ints(values: tuple[Any, ...]) -> bool:
    return all(v.__class__ is int for v in values)


def _attr(obj: Any, name: str, what: str) -> Any:
    try:
        return obj.__dict__[name]
    except (AttributeError, KeyError):
        raise MetadataError(f"{what} has no {name!r}") from None


def to_index(metadata: Any) -> DcpIndex:
    """Convert the unpickled stand-ins into a ``DcpIndex``; ``MetadataError`` if malformed."""
    if not isinstance(metadata, _Metadata):
        raise MetadataError(f"top-level object is {type(metadata).__name__}, not DCP Metadata")
    sdm = _attr(metadata, "state_dict_metadata", "Metadata")
    storage = metadata.__dict__.get("storage_data")
    if not isinstance(sdm, dict):
        raise MetadataError("state_dict_metadata is not a dict")
    if storage is None:
        raise MetadataError("no storage_data (written by an unsupported storage writer)")
    if not isinstance(storage, dict):
        raise MetadataError("storage_data is not a dict")
    tensors: dict[str, TensorEntry] = {}
    byte_fqns: set[str] = set()
    for fqn, md in sdm.items():
        if not isinstance(fqn, str):
            raise MetadataError(f"state_dict_metadata key {fqn!r} is not a string")
        if isinstance(md, _BytesStorageMetadata):
            byte_fqns.add(fqn)
            continue
        if not isinstance(md, _TensorStorageMetadata):
            raise MetadataError(f"{fqn}: unexpected entry {type(md).__name__}")
        size = _int_tuple(_attr(md, "size", fqn), f"{fqn}.size")
        props = md.__dict__.get("properties")
        dtype = ""
        if props is not None:
            dt = props.__dict__.get("dtype")
            dtype = dt.name if isinstance(dt, _DType) else ""
        raw_chunks = _attr(md, "chunks", fqn)
        if not isinstance(raw_chunks, (list, tuple)):
            raise MetadataError(f"{fqn}.chunks is not a list")
        chunks = []
        for i, c in enumerate(raw_chunks):
            if c.__class__ is not _ChunkStorageMetadata:
                raise MetadataError(f"{fqn}.chunks[{i}] is {type(c).__name__}")
            d = c.__dict__
            offs, sizes = d.get("offsets"), d.get("sizes")
            # the common case inline (thousands of chunks): tuples of plain ints
            if not (offs.__class__ is tuple and sizes.__class__ is tuple and _all_ints(offs + sizes)):
                offs = _int_tuple(_attr(c, "offsets", fqn), f"{fqn}.chunks[{i}].offsets")
                sizes = _int_tuple(_attr(c, "sizes", fqn), f"{fqn}.chunks[{i}].sizes")
            chunks.append(Chunk(offs, sizes))
        tensors[fqn] = TensorEntry(fqn=fqn, size=size, dtype=dtype, chunks=tuple(chunks))
    items = []
    for key, info in storage.items():
        if not isinstance(key, _MetadataIndex) or not isinstance(info, _StorageInfo):
            raise MetadataError("storage_data holds something other than MetadataIndex -> _StorageInfo")
        fqn = _attr(key, "fqn", "MetadataIndex")
        if not isinstance(fqn, str):
            raise MetadataError(f"storage_data key fqn {fqn!r} is not a string")
        raw_offset = key.__dict__.get("offset")
        chunk_offsets = None if raw_offset is None else _int_tuple(raw_offset, f"{fqn} offset")
        rel = _attr(info, "relative_path", fqn)
        offset = _attr(info, "offset", fqn)
        length = _attr(info, "length", fqn)
        if not isinstance(rel, str):
            raise MetadataError(f"{fqn}: relative_path {rel!r} is not a string")
        for name, v in (("offset", offset), ("length", length)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise MetadataError(f"{fqn}: {name} {v!r} is not an int")
        transforms = info.__dict__.get("transform_descriptors")
        items.append(
            StorageItem(
                fqn=fqn,
                chunk_offsets=chunk_offsets,
                relative_path=rel,
                offset=offset,
                length=length,
                transformed=bool(transforms),
                transforms=tuple(str(t) for t in transforms)
                if isinstance(transforms, (list, tuple))
                else (),
            )
        )
    version = metadata.__dict__.get("version")
    return DcpIndex(
        tensors=tensors,
        byte_fqns=frozenset(byte_fqns),
        items=tuple(items),
        version=version if isinstance(version, str) else None,
    )


def read_index(data: bytes) -> DcpIndex:
    """Parse ``.metadata`` bytes into a ``DcpIndex`` (``MetadataError`` on any problem)."""
    return to_index(unpickle_metadata(data))


def merge_indexes(indexes: list[DcpIndex]) -> DcpIndex:
    """Union of rank-local indexes (``__r.metadata``): each rank lists its own chunks."""
    tensors: dict[str, TensorEntry] = {}
    byte_fqns: set[str] = set()
    items: list[StorageItem] = []
    for idx in indexes:
        byte_fqns |= idx.byte_fqns
        items.extend(idx.items)
        for fqn, t in idx.tensors.items():
            if fqn in tensors:
                prev = tensors[fqn]
                seen = set(prev.chunks)
                extra = tuple(c for c in t.chunks if c not in seen)
                tensors[fqn] = TensorEntry(fqn, prev.size, prev.dtype or t.dtype, prev.chunks + extra)
            else:
                tensors[fqn] = t
    return DcpIndex(
        tensors=tensors,
        byte_fqns=frozenset(byte_fqns),
        items=tuple(items),
        version=indexes[0].version if indexes else None,
    )
