"""Read DCP ``.metadata`` safely, without torch.

``.metadata`` is a plain pickle. ``dcp.load`` unpickles it with ``pickle.load``,
so a hostile file runs code. Here a restricted unpickler admits only the DCP
metadata classes, torch's size/dtype/layout helpers and ``pathlib`` paths, each
mapped to an inert stand-in; any other global is refused (``disallowed global``)
and nothing in the file runs. The stand-ins are then converted into the plain
``ckptctl.core.verify.dcp`` model.
"""

from __future__ import annotations

import io
import pathlib
import pickle
from typing import Any, Literal

from ckptctl.core.verify.bounded_repr import bounded_repr as show
from ckptctl.core.verify.dcp import (
    MAX_INDEX_INT,
    Chunk,
    DcpIndex,
    StorageItem,
    TensorEntry,
    is_dtype_name,
    is_metadata_name,
    make_chunk,
    make_storage_item,
    make_tensor_entry,
)
from ckptctl.core.verify.pickle_shape import PickleShapeError, check_shape

#: The largest ``.metadata`` (or rank-local ``__r.metadata``) read. Genuine ones hold about
#: 200 bytes per chunk: 512 MiB is millions of chunks. Bigger is reported, never read whole.
MAX_METADATA_BYTES = 512 << 20


#: Why a ``.metadata`` was refused, for decisions (never the message): ``hostile`` -- the
#: pickle named a global outside the allow-list or tried to change a class or global;
#: ``shape`` -- its opcodes claim more than the file holds or nest too deep; ``too-large``,
#: ``empty``, ``truncated``; ``malformed`` -- any other unreadable pickle; ``invalid`` --
#: it unpickled but is not an index DCP's loader accepts.
MetadataErrorKind = Literal["hostile", "shape", "too-large", "empty", "truncated", "malformed", "invalid"]


class MetadataError(ValueError):
    """The bytes are not a readable, well-formed DCP ``.metadata``; ``kind`` says what, the message why."""

    def __init__(self, message: str, *, kind: MetadataErrorKind = "invalid") -> None:
        super().__init__(message)
        self.kind: MetadataErrorKind = kind

    @property
    def hostile(self) -> bool:
        """The pickle tried something no genuine ``.metadata`` does (never ran: it was refused)."""
        return self.kind == "hostile"


class _Refused(pickle.UnpicklingError):
    """The pickle tried something no genuine ``.metadata`` does: a foreign global, or changing one."""


class _Sealed(type):
    """A class nothing in a pickle can change: BUILD onto the class itself is refused.

    pickle's BUILD with a ``(state, slotstate)`` pair calls ``setattr`` on whatever object
    is on the stack -- a class object too. Without this, a ``.metadata`` could set
    ``__setstate__`` on a stand-in class and change how every later file is read.
    """

    def __setattr__(cls, name: str, value: Any) -> None:
        raise _Refused(f"attempt to set {name!r} on the class {cls.__name__}")

    def __delattr__(cls, name: str) -> None:
        raise _Refused(f"attempt to delete {name!r} from the class {cls.__name__}")


class _Stub(metaclass=_Sealed):
    """An inert object that records whatever state BUILD gives it (fresh instances only).

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


class _Frozen:
    """An object a pickle can reference (a global) but never change: no ``__dict__``, no setattr."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise _Refused(f"attempt to set {name!r} on a global ({type(self).__name__})")

    def __delattr__(self, name: str) -> None:
        raise _Refused(f"attempt to delete {name!r} from a global")


class _DType(_Frozen):
    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)


class _Callable(_Frozen):
    """A global function (``torch.Size``, ``pathlib.PosixPath``...) behind a frozen wrapper."""

    __slots__ = ("_fn",)
    _fn: Any

    def __init__(self, fn: Any) -> None:
        object.__setattr__(self, "_fn", fn)

    def __call__(self, *args: Any) -> Any:
        return self._fn(*args)


class _MemFormat(metaclass=_Sealed):
    def __init__(self, value: Any = None) -> None:
        self.value = value


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
    # torch pickles a Size as REDUCE(torch.Size, (tuple,)): the builtin tuple rebuilds it at C
    # speed, and an immutable type cannot be changed by a BUILD (TypeError, like any malformed state)
    ("torch", "Size"): tuple,
    ("torch.serialization", "_get_layout"): _Callable(_layout),
    # StorageMeta.checkpoint_id: the module depends on the Python that wrote it.
    ("pathlib", "PosixPath"): _Callable(_posix_path),
    ("pathlib", "PurePosixPath"): _Callable(_posix_path),
    ("pathlib._local", "PosixPath"): _Callable(_posix_path),
    ("pathlib._local", "PurePosixPath"): _Callable(_posix_path),
    ("pathlib", "WindowsPath"): _Callable(_windows_path),
    ("pathlib", "PureWindowsPath"): _Callable(_windows_path),
    ("pathlib._local", "WindowsPath"): _Callable(_windows_path),
    ("pathlib._local", "PureWindowsPath"): _Callable(_windows_path),
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
        raise _Refused(f"disallowed global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent id in .metadata (not a DCP metadata file)")


def unpickle_metadata(data: bytes) -> Any:
    """Unpickle with the allow-list; raise ``MetadataError`` with the reason.

    The opcodes are checked first (``check_shape``): claims past the file's end, memo
    indices above its size and nesting deeper than ``MAX_NESTING`` are refused before
    the C unpickler could allocate for them or overflow the C stack.
    """
    if not data:
        raise MetadataError("empty file", kind="empty")
    if len(data) > MAX_METADATA_BYTES:
        raise MetadataError(
            f"{len(data)} bytes, over the {MAX_METADATA_BYTES >> 20} MiB limit for .metadata", kind="too-large"
        )
    try:
        check_shape(data)
    except PickleShapeError as e:
        raise MetadataError(f"not a DCP metadata pickle: {e}", kind="shape") from e
    try:
        return _RestrictedUnpickler(io.BytesIO(data)).load()
    except _Refused as e:
        raise MetadataError(f"not a DCP metadata pickle: {show(str(e))}", kind="hostile") from e
    except pickle.UnpicklingError as e:
        raise MetadataError(f"not a DCP metadata pickle: {show(str(e))}", kind="malformed") from e
    except EOFError as e:
        raise MetadataError(f"truncated pickle ({e or 'ran out of input'})", kind="truncated") from e
    except (ValueError, TypeError, AttributeError, IndexError, KeyError, OverflowError,
            RecursionError, MemoryError, UnicodeDecodeError) as e:  # fmt: skip
        raise MetadataError(f"unreadable pickle: {type(e).__name__}: {show(str(e))}", kind="malformed") from e


def _int(value: Any, what: str) -> int:
    """A non-negative int64, as DCP's loader and ``torch.Size`` need."""
    if value.__class__ is not int:
        raise MetadataError(f"{what} is {type(value).__name__} {show(value)}, expected an int")
    if not 0 <= value <= MAX_INDEX_INT:
        raise MetadataError(f"{what} = {show(value)} is outside [0, 2**63)")
    return value


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if value.__class__ is tuple and _all_ints(value):
        return value  # the common case: torch.Size was rebuilt as a tuple of ints
    if not isinstance(value, (tuple, list)):
        raise MetadataError(f"{what} is {type(value).__name__}, expected a sequence of ints")
    return tuple(_int(v, f"{what}[{i}]") for i, v in enumerate(value))


def _all_ints(values: tuple[Any, ...]) -> bool:
    return all(v.__class__ is int and 0 <= v <= MAX_INDEX_INT for v in values)


def _attr(obj: Any, name: str, what: str) -> Any:
    try:
        return obj.__dict__[name]
    except (AttributeError, KeyError):
        raise MetadataError(f"{what} has no {name!r}") from None


def _plain_ints(values: Any) -> bool:
    """A tuple of int64s >= 0 (the common case, checked at C speed where it can be)."""
    if values.__class__ is not tuple:
        return False
    if not values:
        return True
    for v in values:
        if v.__class__ is not int:
            return False
    return min(values) >= 0 and max(values) <= MAX_INDEX_INT


def to_index(metadata: Any) -> DcpIndex:
    """Convert the unpickled stand-ins into a ``DcpIndex``; ``MetadataError`` if malformed.

    Each entry of the common shape (exact stand-in classes, tuples of plain ints, strings)
    is converted inline; any other entry goes through the full checks of ``_tensor_entry``
    and ``_storage_item``, which give the same index, or the error with its message.
    """
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
    ok_ints = _plain_ints
    for fqn, md in sdm.items():
        if md.__class__ is _TensorStorageMetadata and fqn.__class__ is str:
            d = md.__dict__
            size: Any = d.get("size")
            props = d.get("properties")
            raw_chunks = d.get("chunks")
            if (
                ok_ints(size)
                and props.__class__ is _TensorProperties
                and props.__dict__.get("dtype").__class__ is _DType
                and raw_chunks.__class__ is list
            ):
                chunks = []
                for c in raw_chunks:
                    if c.__class__ is not _ChunkStorageMetadata:
                        break
                    cd = c.__dict__
                    offs: Any = cd.get("offsets")
                    sizes: Any = cd.get("sizes")
                    if not (ok_ints(offs) and ok_ints(sizes)):
                        break
                    chunks.append(make_chunk(offs, sizes))
                else:
                    tensors[fqn] = make_tensor_entry(fqn, size, props.__dict__["dtype"].name, tuple(chunks))
                    continue
        if isinstance(md, _BytesStorageMetadata) and isinstance(fqn, str):
            byte_fqns.add(fqn)
            continue
        tensors[fqn] = _tensor_entry(fqn, md)  # any other shape: every check, its message
    items: list[StorageItem] = []
    add = items.append
    for key, info in storage.items():
        if key.__class__ is _MetadataIndex and info.__class__ is _StorageInfo:
            kd, idd = key.__dict__, info.__dict__
            fqn = kd.get("fqn")
            offs = kd.get("offset")
            hint = kd.get("index")
            rel = idd.get("relative_path")
            offset = idd.get("offset")
            length = idd.get("length")
            if (
                fqn.__class__ is str
                and (hint is None or hint.__class__ is int)
                and (offs is None or ok_ints(offs))
                and rel.__class__ is str
                and not is_metadata_name(rel)
                and offset.__class__ is int
                and length.__class__ is int
                and 0 <= offset <= MAX_INDEX_INT
                and 0 <= length <= MAX_INDEX_INT
                and idd.get("transform_descriptors") is None
            ):
                add(make_storage_item(fqn, offs, rel, offset, length))
                continue
        add(_storage_item(key, info))  # any other shape: every check, its message
    storage_meta = metadata.__dict__.get("storage_meta")
    if storage_meta is not None and storage_meta.__class__ is not _StorageMeta:
        # dcp.load sets storage_meta.load_id: anything but a StorageMeta (or None) breaks it
        raise MetadataError(f"storage_meta is {type(storage_meta).__name__}, not StorageMeta")
    version = metadata.__dict__.get("version")
    if version is not None and not isinstance(version, str):
        raise MetadataError(f"version is {type(version).__name__} {show(version)}, not a string")
    return DcpIndex(
        tensors=tensors,
        byte_fqns=frozenset(byte_fqns),
        items=tuple(items),
        version=version,
    )


def _tensor_entry(fqn: Any, md: Any) -> TensorEntry:
    if not isinstance(fqn, str):
        raise MetadataError(f"state_dict_metadata key {show(fqn)} is not a string")
    if not isinstance(md, _TensorStorageMetadata):
        raise MetadataError(f"{fqn}: unexpected entry {type(md).__name__}")
    size = _int_tuple(_attr(md, "size", fqn), f"{fqn}.size")
    props = md.__dict__.get("properties")
    if props.__class__ is not _TensorProperties:
        raise MetadataError(f"{fqn}.properties is {type(props).__name__}, not TensorProperties")
    dt = props.__dict__.get("dtype")
    if dt.__class__ is not _DType:
        # DCP's loader needs a torch.dtype here: a name string or a list is not one
        raise MetadataError(f"{fqn}.properties.dtype is {type(dt).__name__} {show(dt)}, not a torch dtype")
    dtype = dt.name
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
    return TensorEntry(fqn=fqn, size=size, dtype=dtype, chunks=tuple(chunks))


def _storage_item(key: Any, info: Any) -> StorageItem:
    if not isinstance(key, _MetadataIndex) or not isinstance(info, _StorageInfo):
        raise MetadataError("storage_data holds something other than MetadataIndex -> _StorageInfo")
    fqn = _attr(key, "fqn", "MetadataIndex")
    if not isinstance(fqn, str):
        raise MetadataError(f"storage_data key fqn {show(fqn)} is not a string")
    hint = key.__dict__.get("index")
    if hint is not None and hint.__class__ is not int:
        raise MetadataError(f"{fqn}: MetadataIndex.index is {type(hint).__name__}, expected an int or None")
    raw_offset = key.__dict__.get("offset")
    chunk_offsets = None if raw_offset is None else _int_tuple(raw_offset, f"{fqn} offset")
    rel = _attr(info, "relative_path", fqn)
    offset = _attr(info, "offset", fqn)
    length = _attr(info, "length", fqn)
    if not isinstance(rel, str):
        raise MetadataError(f"{fqn}: relative_path {show(rel)} is not a string")
    if is_metadata_name(rel):
        raise MetadataError(f"{fqn}: relative_path {show(rel)} names a metadata file, not a data file")
    offset = _int(offset, f"{fqn}: offset")
    length = _int(length, f"{fqn}: length")
    transforms = info.__dict__.get("transform_descriptors")
    if transforms is not None and not (
        isinstance(transforms, (list, tuple)) and all(isinstance(t, str) for t in transforms)
    ):
        # DCP's reader iterates the descriptors: a bare string or a number breaks it
        raise MetadataError(
            f"{fqn}: transform_descriptors is {show(transforms)}, expected a list of strings"
        )
    return StorageItem(
        fqn=fqn,
        chunk_offsets=chunk_offsets,
        relative_path=rel,
        offset=offset,
        length=length,
        transformed=bool(transforms),
        transforms=tuple(transforms or ()),
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
