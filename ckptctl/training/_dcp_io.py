"""The DCP storage layer the checkpointer uses: checksumming writer, safe reader, safe planner.

Three things stock DCP (torch 2.13) does not do, and why they live here:

* **Checksums while writing.** ``_ChecksummingFS`` wraps the writer's file
  system so every stream a rank opens for writing updates a CRC-32 and a byte
  count as the bytes go out. The rank that wrote a file therefore knows its
  checksum without reading it back, which matters on object stores where a
  read-back is a second download. A stream that seeks (so the bytes seen are
  not the file's bytes in order) is marked unusable and its file is re-read.
* **Safe ``.metadata``.** ``FileSystemReader.read_metadata`` is a plain
  ``pickle.load``. ``read_metadata_safely`` uses an unpickler that resolves only
  the DCP metadata classes and plain containers, then checks the structure
  (every ``relative_path`` a plain file name, offsets and lengths >= 0).
* **Safe non-tensor records.** ``DefaultLoadPlanner.load_bytes`` calls
  ``torch.load(weights_only=False)``. ``SafeLoadPlanner`` uses
  ``weights_only=True`` and turns a refusal into ``UnsafeCheckpointError``.
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
import posixpath
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from ckptctl.adapters.dcp_metadata import MetadataError, is_allowed_metadata_global, read_index
from ckptctl.adapters.fastcrc import crc32 as fast_crc32
from ckptctl.core.verify.contract import is_plain_file_name
from ckptctl.core.verify.dcp import is_dtype_name
from ckptctl.core.verify.manifest import format_crc32
from ckptctl.training.errors import UnsafeCheckpointError

METADATA_NAME = ".metadata"
_READ_CHUNK_BYTES = 8 << 20

# DCP warns on every single-process save/load; a 1-process run is a supported case here.
_NO_DIST_WARNING = r"torch\.distributed is (disabled|unavailable)"
warnings.filterwarnings("ignore", message=_NO_DIST_WARNING)


@contextmanager
def quiet_no_dist() -> Iterator[None]:
    """Silence DCP's single-process warning (warning filters are global: main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_DIST_WARNING)
        yield


def unwrap_dcp_error(e: BaseException) -> BaseException:
    """The first per-rank failure inside a DCP ``CheckpointException`` (or ``e`` itself)."""
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        for _rank, failure in sorted(failures.items()):
            inner = failure[0] if isinstance(failure, tuple) else failure
            if isinstance(inner, BaseException):
                return inner
    return e


def is_dcp_exception(e: BaseException) -> bool:
    from torch.distributed.checkpoint.api import CheckpointException

    return isinstance(e, CheckpointException)


# -- checksums while writing ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A file this rank wrote, with the checksum of exactly the bytes it wrote."""

    name: str
    size_bytes: int
    crc32: str | None
    """8 hex digits, or None when the stream was not written sequentially (re-read it)."""


#: Writes at least this large are checksummed on a helper thread while the bytes go out.
OVERLAP_MIN_BYTES = 1 << 20
_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def _crc_pool() -> ThreadPoolExecutor:
    """Shared helper threads (one per DCP writer thread is plenty; they only run CRC-32s)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ckptctl-crc")
        return _POOL


def _forget_pool_after_fork() -> None:
    # a forked child has none of the parent's threads: it starts its own pool on first use
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool_after_fork)


class _CrcStream:
    """A write-only stream wrapper that keeps a running CRC-32 and byte count."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.crc = 0
        self.size = 0
        self.sequential = True

    def write(self, data: Any) -> int:
        view = data if isinstance(data, (bytes, bytearray)) else memoryview(data).cast("B")
        pending = None
        if len(view) >= OVERLAP_MIN_BYTES:
            # Checksum on a helper thread while this one writes (both release the GIL); the
            # bytes do not change meanwhile: the writer owns them until write() returns.
            pending = _crc_pool().submit(fast_crc32, view, self.crc)
        try:
            n = self._raw.write(view)
        except BaseException:
            if pending is not None:
                pending.cancel()
            raise
        written = len(view) if n is None else int(n)
        if written != len(view):
            # A short write: the caller retries with the rest, so the bytes still
            # arrive in order; checksum exactly what went out.
            if pending is not None:
                pending.result()
                pending = None
            view = memoryview(view)[:written]
        self.crc = pending.result() if pending is not None else fast_crc32(view, self.crc)
        self.size += written
        return written

    def seek(self, *args: Any) -> int:
        self.sequential = False
        return int(self._raw.seek(*args))

    def truncate(self, *args: Any) -> int:
        self.sequential = False
        return int(self._raw.truncate(*args))

    def tell(self) -> int:
        return int(self._raw.tell())

    def flush(self) -> None:
        if not getattr(self._raw, "closed", False):
            self._raw.flush()

    def fileno(self) -> int:
        return int(self._raw.fileno())

    def close(self) -> None:
        if not getattr(self._raw, "closed", False):
            self._raw.close()

    @property
    def closed(self) -> bool:
        return bool(getattr(self._raw, "closed", False))

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return bool(self._raw.seekable())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _ChecksummingFS:
    """Delegates to a DCP ``FileSystemBase`` and records a checksum for every file written."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.written: dict[str, WrittenFile] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @contextmanager
    def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
        with self._inner.create_stream(path, mode) as raw:
            if "w" not in mode:
                yield raw
                return
            stream = _CrcStream(raw)
            ok = False
            try:
                yield stream
                ok = True
            finally:
                name = posixpath.basename(os.fspath(path))
                with self._lock:
                    if ok:
                        self.written[name] = WrittenFile(
                            name,
                            stream.size,
                            format_crc32(stream.crc) if stream.sequential else None,
                        )
                    else:
                        self.written.pop(name, None)

    def rename(self, path: Any, new_path: Any) -> None:
        self._inner.rename(path, new_path)
        old, new = posixpath.basename(os.fspath(path)), posixpath.basename(os.fspath(new_path))
        with self._lock:
            record = self.written.pop(old, None)
            if record is not None:
                self.written[new] = WrittenFile(new, record.size_bytes, record.crc32)

    def rm_file(self, path: Any) -> None:
        self._inner.rm_file(path)
        with self._lock:
            self.written.pop(posixpath.basename(os.fspath(path)), None)


def file_writer(path: str, *, thread_count: int = 1) -> Any:
    """A DCP writer for a POSIX directory (files fsynced) whose ``.fs.written`` lists what this
    rank wrote, with CRC-32s."""
    writer: Any = FileSystemWriter(path, sync_files=True, thread_count=thread_count, overwrite=True)
    writer.fs = _ChecksummingFS(writer.fs)
    return writer


def fsspec_writer(url: str, *, storage_options: dict[str, Any], thread_count: int = 1) -> Any:
    """A DCP writer for an fsspec URL (an object store), with ``.fs.written`` like ``file_writer``."""
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    # fsync means nothing for an upload (close() completes it); DCP's fallback
    # for streams without fileno() would be a machine-wide os.sync().
    writer: Any = FsspecWriter(
        url, sync_files=False, thread_count=thread_count, overwrite=True, **storage_options
    )
    writer.fs = _ChecksummingFS(writer.fs)
    return writer


def crc32_of_stream(f: Any) -> tuple[int, str]:
    """(size, CRC-32) of everything readable from ``f``."""
    crc = 0
    size = 0
    while True:
        chunk = f.read(_READ_CHUNK_BYTES)
        if not chunk:
            break
        crc = fast_crc32(chunk, crc)
        size += len(chunk)
    return size, format_crc32(crc)


# -- safe .metadata -------------------------------------------------------------------------------

class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only what a DCP ``.metadata`` pickle needs; anything else is refused."""

    def find_class(self, module: str, name: str) -> Any:
        # The same allow-list as `ckptctl verify` (adapters/dcp_metadata.py), resolved to the
        # real classes because dcp.load needs a real Metadata object.
        if not is_allowed_metadata_global(module, name):
            raise pickle.UnpicklingError(f"disallowed global {module}.{name}")
        if module == "torch" and is_dtype_name(name):
            # allowed as a dtype name (possibly one this torch does not have): must be one here
            value = getattr(torch, name, None)
            if not isinstance(value, torch.dtype):
                raise pickle.UnpicklingError(f"torch.{name} is not a dtype of this torch")
            return value
        return getattr(importlib.import_module(module), name)

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not allowed in .metadata")


def parse_metadata_bytes(data: bytes, where: str) -> Metadata:
    """Parse ``.metadata`` bytes without running anything they name; check the structure.

    The bytes first go through ``ckptctl verify``'s stand-in reader: it bounds the pickle's
    shape (memo, lengths, nesting), refuses any BUILD onto a class or global object and
    type-checks every value DCP's loader uses. Only a stream it accepts is unpickled onto
    the real torch classes, so nothing can set an attribute of a torch class for the process.
    """
    try:
        read_index(data)
    except MetadataError as e:
        raise UnsafeCheckpointError(
            f"{where}: .metadata refused by the restricted reader: {e}",
            hint="run `ckptctl verify --deep` on it; do not load it with plain dcp.load",
        ) from e
    try:
        md = _MetadataUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # any parse failure of untrusted bytes is "unsafe or corrupt"
        raise UnsafeCheckpointError(
            f"{where}: .metadata refused by the restricted reader: {e}",
            hint="run `ckptctl verify --deep` on it; do not load it with plain dcp.load",
        ) from e
    if not isinstance(md, Metadata):
        raise UnsafeCheckpointError(f"{where}: .metadata does not hold a DCP Metadata object")
    storage_data = md.storage_data
    if not isinstance(storage_data, dict):
        raise UnsafeCheckpointError(f"{where}: .metadata has no storage index")
    for index, info in storage_data.items():
        rel = getattr(info, "relative_path", None)
        if not isinstance(rel, str) or not is_plain_file_name(rel):
            raise UnsafeCheckpointError(
                f"{where}: .metadata entry {getattr(index, 'fqn', index)!r} points at {rel!r}, "
                "which is not a file inside the checkpoint"
            )
        for field_name in ("offset", "length"):
            value = getattr(info, field_name, None)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise UnsafeCheckpointError(
                    f"{where}: .metadata entry {getattr(index, 'fqn', index)!r} has {field_name}={value!r}"
                )
    return md


class _PreparsedMetadataMixin:
    """A reader that returns metadata parsed safely beforehand instead of unpickling it itself.

    ``read_metadata`` takes no ``**kwargs`` on purpose: DCP then never falls back
    to rank-local ``__r.metadata`` files (which describe only one rank's chunks).
    """

    _ckptctl_metadata: Metadata
    load_id: str

    def read_metadata(self) -> Metadata:
        md = self._ckptctl_metadata
        meta = md.storage_meta if md.storage_meta is not None else StorageMeta()
        meta.load_id = self.load_id
        md.storage_meta = meta
        return md


class _SafeFileSystemReader(_PreparsedMetadataMixin, FileSystemReader):
    pass


def file_reader(path: str, metadata: Metadata) -> Any:
    """A DCP reader for a POSIX directory that uses ``metadata`` (parsed safely) instead of
    unpickling ``.metadata`` itself."""
    reader: Any = _SafeFileSystemReader(path)
    reader._ckptctl_metadata = metadata
    return reader


def fsspec_reader(url: str, metadata: Metadata, *, storage_options: dict[str, Any]) -> Any:
    """``file_reader`` for an fsspec URL (an object store)."""
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

    class _SafeFsspecReader(_PreparsedMetadataMixin, FsspecReader):
        pass

    reader: Any = _SafeFsspecReader(url, **storage_options)
    reader._ckptctl_metadata = metadata
    return reader


# -- safe non-tensor records ------------------------------------------------------------------------


def load_record_safely(data: io.BytesIO, key: str) -> Any:
    """``torch.load(weights_only=True)`` of one BYTE_IO record; a refusal names the key."""
    try:
        return torch.load(data, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UnsafeCheckpointError(
            f"record {key!r} needs more than weights_only unpickling and was refused "
            f"(nothing in it ran): {first}",
            hint="non-tensor state must be plain Python values (int, float, str, bool, None, "
            "list/tuple/dict of those) or tensors",
        ) from e


class SafeLoadPlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` whose non-tensor records load with ``weights_only=True``."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        obj = load_record_safely(value, fqn)
        if self.flatten_state_dict:
            from torch.distributed.checkpoint._traverse import set_element

            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj


# Values that ``torch.load(weights_only=True)`` always accepts, checked without a round trip.
_PLAIN_SCALARS = (int, float, str, bool, bytes, type(None), complex)


def is_plainly_safe(value: Any, _depth: int = 0) -> bool:
    """True if ``value`` is built only of types weights_only unpickling accepts (fast path)."""
    if _depth > 64:
        return False
    if isinstance(value, _PLAIN_SCALARS) and type(value) in _PLAIN_SCALARS:
        return True
    if type(value) in (list, tuple, set):
        return all(is_plainly_safe(v, _depth + 1) for v in value)
    if type(value) is dict:
        return all(
            is_plainly_safe(k, _depth + 1) and is_plainly_safe(v, _depth + 1)
            for k, v in value.items()
        )
    return isinstance(value, (torch.Tensor, torch.Size, torch.dtype, torch.device))


def check_loads_safely(value: Any, key: str) -> None:
    """Refuse (at save time) a non-tensor value that would not load with weights_only=True."""
    if is_plainly_safe(value):
        return
    from ckptctl.training.errors import UnsafeStateError

    buf = io.BytesIO()
    try:
        torch.save(value, buf)
        buf.seek(0)
        torch.load(buf, weights_only=True)
    except Exception as e:
        raise UnsafeStateError(
            f"state value {key!r} of type {type(value).__name__} would not load with "
            f"torch.load(weights_only=True): {str(e).strip().splitlines()[0] if str(e).strip() else e!r}",
            hint="store plain Python values (int, float, str, bool, None, list/tuple/dict) or tensors; "
            "convert numpy arrays with torch.from_numpy",
        ) from e
