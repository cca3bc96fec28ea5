"""The narrow storage interface every command uses: list, stat, read, rename, write.

Paths are ``str`` (a ``Path`` mangles ``s3://``). fsspec is imported lazily here
and nowhere else, and every backend error is mapped to a ``StorageError`` with a
one-line message. Object stores have no atomic rename: ``rename`` there is a
copy followed by a delete of the source (documented in the README), and callers
that need atomicity use a commit marker instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from stat import S_ISDIR
from typing import IO, Any, TypeVar, cast

from ckptctl.adapters import localfile, ranges
from ckptctl.adapters.localfile import open_regular
from ckptctl.core.verify import jsonsafe
from ckptctl.errors import CkptctlError, NotFoundError, StorageError, StorageUnreachableError

T = TypeVar("T")

#: JSON object of fsspec storage options applied to every URL (e.g. an S3 endpoint).
STORAGE_OPTIONS_ENV = "CKPTCTL_STORAGE_OPTIONS"
#: The most ``read_bytes`` reads of a whole file (``.metadata``, manifests, pointer files):
#: a bigger (or sparse 1 TB) file is refused after reading this much, never read whole.
MAX_WHOLE_READ_BYTES = 512 << 20
#: Seconds an object store may take to accept a connection, and to answer each read (S3).
STORAGE_TIMEOUT_ENV = "CKPTCTL_STORAGE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 10.0
#: Attempts per request (botocore) and per call (s3fs's own loop): a store that never answers
#: costs at most about ``ATTEMPTS**2`` timeouts per call, then a one-line error (was 415 s).
ATTEMPTS = 2

__all__ = [
    "DEFAULT_TIMEOUT_S", "MAX_WHOLE_READ_BYTES", "STORAGE_OPTIONS_ENV", "STORAGE_TIMEOUT_ENV", "Entry",
    "FileTooLargeError", "Storage",
]  # fmt: skip


class FileTooLargeError(StorageError):
    """A whole-file read of something bigger than the caller's cap."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One item in a directory listing."""

    name: str
    """Base name, no slashes."""
    path: str
    """Full path as the filesystem knows it (no protocol)."""
    is_dir: bool
    size_bytes: int
    mtime_s: float | None
    """Modification time (POSIX seconds), when the backend reports one."""
    link_problem: str = ""
    """Local only: why this symbolic link is not followed (a loop, a target out of the run
    root); '' for any other entry. Such an entry is never read."""


_entry_fields = tuple(getattr(Entry, f).__set__ for f in ("name", "path", "is_dir", "size_bytes", "mtime_s", "link_problem"))


def _make_entry(name: str, path: str, is_dir: bool, size_bytes: int, mtime_s: float | None) -> Entry:
    """``Entry(name, path, is_dir, size_bytes, mtime_s)`` without the frozen ``__init__``'s
    ``object.__setattr__`` per field (the same instance, a third of the time)."""
    e = object.__new__(Entry)
    s_name, s_path, s_dir, s_size, s_mtime, s_link = _entry_fields
    s_name(e, name)
    s_path(e, path)
    s_dir(e, is_dir)
    s_size(e, size_bytes)
    s_mtime(e, mtime_s)
    s_link(e, "")
    return e


def _mtime_of(info: dict[str, Any]) -> float | None:
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def _is_connection_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(
        names
        & {
            "EndpointConnectionError",
            "ConnectionClosedError",
            "ClientConnectorError",
            "ServerDisconnectedError",
            "ConnectTimeoutError",
            "ConnectionRefusedError",
            "ConnectionResetError",
            "ReadTimeoutError",
            "FSTimeoutError",
            "TimeoutError",
            "IncompleteRead",
            "ResponseStreamingError",
            "ClientPayloadError",
        }
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def timeout_s() -> float:
    """The object-store client timeout (``CKPTCTL_STORAGE_TIMEOUT_S``, default ``DEFAULT_TIMEOUT_S``)."""
    raw = os.environ.get(STORAGE_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise StorageError(f"{STORAGE_TIMEOUT_ENV}={raw[:40]!r}: give seconds between 0 and 3600")
    return value


def _with_timeouts(protocol: str, options: dict[str, Any]) -> dict[str, Any]:
    """S3: connect and read timeouts and bounded retries, unless the options set their own."""
    if protocol not in ("s3", "s3a"):
        return options
    timeout = timeout_s()
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("connect_timeout", timeout)
    config.setdefault("read_timeout", timeout)
    config.setdefault("retries", {"total_max_attempts": ATTEMPTS, "mode": "standard"})
    return {**options, "config_kwargs": config}


class _GuardedReader:
    """A remote file whose reads map backend errors like every other call (a store that dies
    during ``--deep`` is a one-line error, not a traceback)."""

    def __init__(self, storage: Storage, path: str, f: Any) -> None:
        self._storage, self._path, self._f = storage, path, f

    def read(self, n: int = -1) -> bytes:
        return self._storage._call("read", self._path, lambda: self._f.read(n))

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._storage._call("read", self._path, lambda: self._f.seek(offset, whence))

    def tell(self) -> int:
        return int(self._f.tell())

    def close(self) -> None:
        self._f.close()


class Storage:
    """One filesystem (local, memory, s3, ...) behind the calls ckptctl needs."""

    def __init__(self, fs: Any, protocol: str) -> None:
        self._fs = fs
        self.protocol = protocol
        self.confined_to: str | None = None
        """Local: the directory a command was pointed at (as named); nothing under it is read
        through a symbolic link that leads out of it (``open_directory`` sets it)."""
        self._confined_real: str | None = None

    @property
    def fs(self) -> Any:
        """The fsspec filesystem; for local paths made on first use (most local calls use ``os``:
        not importing fsspec saves a tenth of a second on every command's start)."""
        if self._fs is None:
            from fsspec.implementations.local import LocalFileSystem

            self._fs = LocalFileSystem()
        return self._fs

    # -- construction -------------------------------------------------------------

    @classmethod
    def for_url(cls, url: str, **storage_options: Any) -> tuple[Storage, str]:
        """Return the storage for ``url`` and the path inside it (no protocol)."""
        if not url:
            raise StorageError("empty path")
        env_options = os.environ.get(STORAGE_OPTIONS_ENV)
        options: dict[str, Any] = {}
        if env_options:
            try:
                options = jsonsafe.loads(env_options, max_bytes=1 << 20)
            except jsonsafe.JsonError as e:
                raise StorageError(f"{STORAGE_OPTIONS_ENV} is not valid JSON: {e}") from e
            if not isinstance(options, dict):
                raise StorageError(f"{STORAGE_OPTIONS_ENV} must be a JSON object of fsspec options")
        options.update(storage_options)
        if url.startswith("file://") or ("://" not in url and "::" not in url):
            # a local path: what fsspec's local file system would make of it, without fsspec
            local = url.removeprefix("file://")
            return cls(None, "file"), os.path.abspath(os.path.expanduser(local)).rstrip("/") or "/"
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        options = _with_timeouts(protocol, options)
        try:
            import fsspec.core
            from fsspec.registry import known_implementations
        except ImportError as e:  # pragma: no cover - fsspec is a hard dependency
            raise StorageError(f"fsspec is not installed: {e}") from e
        if protocol not in known_implementations and protocol != "file":
            raise StorageError(f"unknown storage protocol {protocol!r} in {url!r}")
        try:
            fs, path = fsspec.core.url_to_fs(url, **options)
        except ImportError as e:
            raise StorageError(
                f"the {protocol!r} protocol needs an extra package: {e}",
                hint="pip install 'ckptctl[s3]' for s3://",
            ) from e
        except (ValueError, TypeError) as e:
            raise StorageError(f"cannot open {url!r}: {e}") from e
        if protocol in ("s3", "s3a") and "retries" not in fs.__dict__:
            fs.retries = ATTEMPTS  # s3fs's own retry loop around botocore's (default 5)
        if protocol == "file":
            path = os.path.abspath(os.path.expanduser(path))
        return cls(fs, protocol), path.rstrip("/") or "/"

    @classmethod
    def open_directory(cls, url: str, **storage_options: Any) -> tuple[Storage, str]:
        """Like ``for_url``, for a URL that must be an existing directory (a run root or checkpoint)."""
        storage, path = cls.for_url(url, **storage_options)
        info = storage.info(path)
        if info is None:
            raise NotFoundError(f"{url}: no such directory", hint="check the run root path or URL")
        if not info.is_dir:
            raise StorageError(f"{url}: is a file, expected a directory (a run root or a checkpoint)")
        storage.confine(path)
        return storage, path

    def confine(self, path: str) -> None:
        """Local storage: never follow a link from under ``path`` to outside it (reads, listings)."""
        if self.is_local:
            self.confined_to, self._confined_real = path, os.path.realpath(path)

    def _check_read(self, path: str) -> None:
        if self.confined_to is not None and self._confined_real is not None:
            localfile.check_confined(path, self.confined_to, self._confined_real)

    # -- naming ---------------------------------------------------------------------

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    def url(self, path: str) -> str:
        """The user-facing form of ``path``: plain for local files, ``proto://`` otherwise."""
        if self.is_local:
            return path
        return f"{self.protocol}://{path.lstrip('/')}" if self.protocol != "memory" else f"memory://{path}"

    @staticmethod
    def join(base: str, *names: str) -> str:
        return posixpath.join(base, *names)

    @staticmethod
    def basename(path: str) -> str:
        return posixpath.basename(path.rstrip("/"))

    @staticmethod
    def parent(path: str) -> str:
        return posixpath.dirname(path.rstrip("/"))

    # -- error mapping ----------------------------------------------------------------

    def _call(self, what: str, path: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except FileNotFoundError as e:
            raise NotFoundError(f"{self.url(path)}: no such file or directory") from e
        except NotADirectoryError as e:
            raise StorageError(f"{self.url(path)}: not a directory") from e
        except IsADirectoryError as e:
            raise StorageError(f"{self.url(path)}: is a directory") from e
        except PermissionError as e:
            raise StorageError(f"{self.url(path)}: permission denied ({what})") from e
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise StorageError(f"{self.url(path)}: too many levels of symbolic links") from e
            if _is_connection_error(e):
                raise self._unreachable(path, what, e) from e
            raise StorageError(f"{self.url(path)}: {what} failed: {e.strerror or e}") from e
        except Exception as e:
            if _is_connection_error(e):
                raise self._unreachable(path, what, e) from e
            if type(e).__name__ in {"NoCredentialsError", "ClientError", "PartialCredentialsError"}:
                raise StorageError(f"{self.url(path)}: {what} refused: {_first_line(e)}") from e
            if self.is_local or isinstance(e, CkptctlError):
                raise
            # any other failure inside an object-store client: still one line and its exit code
            raise StorageError(f"{self.url(path)}: {what} failed ({type(e).__name__}: {_first_line(e)})") from e

    def _unreachable(self, path: str, what: str, e: BaseException) -> StorageUnreachableError:
        return StorageUnreachableError(
            f"{self.url(path)}: storage endpoint unreachable or not answering ({what}: {type(e).__name__})",
            hint=f"check the endpoint URL and that the object store is up (client timeout {timeout_s():g} s, "
            f"{STORAGE_TIMEOUT_ENV})",
        )

    # -- reads ----------------------------------------------------------------------------

    def list_dir(self, path: str) -> list[Entry]:
        """The entries directly inside ``path`` (one listing request on object stores)."""

        def run() -> list[Entry]:
            if self.is_local:
                return self._list_local(path, self._confined_real)
            infos = self.fs.ls(path, detail=True)
            entries = []
            for info in infos:
                name = posixpath.basename(str(info["name"]).rstrip("/"))
                full = str(info["name"]).rstrip("/")
                if full.rstrip("/") == path.rstrip("/") and info.get("type") != "directory":
                    # `ls` of a file returns the file itself
                    raise NotADirectoryError(path)
                entries.append(
                    Entry(
                        name=name,
                        path=full,
                        is_dir=info.get("type") == "directory",
                        size_bytes=int(info.get("size") or 0),
                        mtime_s=_mtime_of(info),
                    )
                )
            return entries

        return self._call("list", path, run)

    @staticmethod
    def _list_local(path: str, confined_real: str | None) -> list[Entry]:
        entries: list[Entry] = []
        add = entries.append
        make = _make_entry  # a checkpoint directory lists 1,000s of shard files: no per-field setattr
        with os.scandir(path) as it:
            for de in it:
                if de.is_symlink():
                    why = localfile.link_problem(de.path, confined_real)
                    if why:  # a loop, or a way out of the run root: one problem on this entry
                        add(Entry(de.name, de.path, False, 0, None, link_problem=why))
                        continue
                try:
                    st = de.stat()  # follows symlinks; a dangling link raises
                except FileNotFoundError:
                    add(Entry(de.name, de.path, False, 0, None))
                    continue
                if S_ISDIR(st.st_mode):  # what de.is_dir() says: both follow links
                    add(make(de.name, de.path, True, 0, st.st_mtime))
                else:
                    add(make(de.name, de.path, False, st.st_size, st.st_mtime))
        return entries

    def info(self, path: str) -> Entry | None:
        """Stat one path; ``None`` if it does not exist."""

        def run() -> Entry | None:
            try:
                if self.is_local:
                    st = os.stat(path)
                    import stat as _stat

                    is_dir = _stat.S_ISDIR(st.st_mode)
                    return Entry(
                        posixpath.basename(path), path, is_dir, 0 if is_dir else st.st_size, st.st_mtime
                    )
                info = self.fs.info(path)
            except FileNotFoundError:
                return None
            return Entry(
                posixpath.basename(path.rstrip("/")),
                path,
                info.get("type") == "directory",
                int(info.get("size") or 0),
                _mtime_of(info),
            )

        return self._call("stat", path, run)

    def read_bytes(
        self,
        path: str,
        start: int | None = None,
        end: int | None = None,
        *,
        max_bytes: int | None = None,
        nofollow: bool = False,
    ) -> bytes:
        """The bytes of ``path`` (or ``[start, end)`` of it) in one request.

        A whole-file read (no ``end``) stops after ``max_bytes`` (default
        ``MAX_WHOLE_READ_BYTES``) and raises ``FileTooLargeError``; special files are refused,
        and so is a link out of the run root (``nofollow``: any link, for ckptctl's own files).
        """
        cap = MAX_WHOLE_READ_BYTES if max_bytes is None else max_bytes
        whole = end is None

        def run() -> bytes:
            if self.is_local:
                self._check_read(path)
                with open_regular(path, nofollow=nofollow) as f:
                    if start:
                        f.seek(start)
                    return f.read(cap + 1) if end is None else f.read(end - (start or 0))
            if whole:
                return bytes(self.fs.cat_file(path, start=start, end=(start or 0) + cap + 1))
            return bytes(self.fs.cat_file(path, start=start, end=end))

        data = self._call("read", path, run)
        if whole and len(data) > cap:
            limit = f"{cap >> 20} MiB" if cap >= 1 << 20 else f"{cap} bytes"
            raise FileTooLargeError(f"{self.url(path)}: larger than {limit}, refused (not read whole)")
        return data

    @contextmanager
    def open_read(self, path: str, block_size: int = 8 << 20) -> Iterator[IO[bytes]]:
        """A sequential reader (buffered, with read-ahead on object stores)."""
        if self.is_local:
            self._check_read(path)
            f = self._call("open", path, lambda: open_regular(path, buffering=0))
        else:
            f = self._call(
                "open",
                path,
                lambda: self.fs.open(path, "rb", block_size=block_size, cache_type="readahead"),
            )
        try:
            yield f if self.is_local else cast(IO[bytes], _GuardedReader(self, path, f))
        finally:
            f.close()

    @contextmanager
    def open_range(self, path: str, start: int, end: int) -> Iterator[ranges.RangeReader]:
        """Read ``[start, end)`` of ``path`` sequentially (the deep check's segments).

        Local files: positioned reads from ``start``, the kernel told the range is read
        once, in order (``posix_fadvise`` SEQUENTIAL: a larger readahead window), and asked
        to fetch ahead where the page cache misses (``ranges.LocalRange``). Object stores:
        ranged GETs of ``RANGE_GET_BYTES``, ``RANGE_GETS_IN_FLIGHT`` of them ahead of the
        reader, never past ``end``. Read errors are ``StorageError``s.
        """
        if self.is_local:
            self._check_read(path)
            f = self._call("open", path, lambda: open_regular(path, buffering=0))
            try:
                fd = f.fileno()
                if ranges.HAS_FADVISE and end > start:
                    with contextlib.suppress(OSError):  # advice only (some file systems refuse it)
                        os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_SEQUENTIAL)
                yield ranges.LocalRange(fd, start, end, lambda fn: self._call("read", path, fn))
            finally:
                f.close()
        else:
            reader = ranges.RangedGets(lambda a, b: self.read_bytes(path, a, b), start, end)
            try:
                yield reader
            finally:
                reader.close()

    def exists(self, path: str) -> bool:
        return self.info(path) is not None

    # -- writes (only rollback/quarantine, audit log, training library, gc) ---------------

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write a whole file: a new temporary file (never through a link), then renamed over ``path``."""

        def run() -> None:
            if self.is_local:
                localfile.check_no_link_dirs(path, self.confined_to)
                os.makedirs(posixpath.dirname(path), exist_ok=True)
                tmp = f"{path}.tmp-{os.getpid()}"
                fd = localfile.open_for_write(tmp, os.O_CREAT | os.O_EXCL | os.O_TRUNC)
                try:
                    localfile.write_all(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)  # replaces a link or a FIFO at `path` by the file, never writes into it
            else:
                self.fs.pipe_file(path, data)

        self._call("write", path, run)

    def append_line(self, path: str, line: str) -> None:
        """Append one line; on object stores this is read-modify-write of a small file."""

        def run() -> None:
            if self.is_local:
                localfile.check_no_link_dirs(path, self.confined_to)
                os.makedirs(posixpath.dirname(path), exist_ok=True)
                # O_NOFOLLOW | O_NONBLOCK, regular files only: a link is never written through
                # and a FIFO never blocks the writer (who may hold the run-root lock)
                fd = localfile.open_for_write(path, os.O_CREAT | os.O_APPEND)
                try:
                    localfile.write_all(fd, (line.rstrip("\n") + "\n").encode("utf-8"))
                    os.fsync(fd)
                finally:
                    os.close(fd)
            else:
                try:
                    old = bytes(self.fs.cat_file(path))
                except FileNotFoundError:
                    old = b""
                self.fs.pipe_file(path, old + line.rstrip("\n").encode() + b"\n")

        self._call("append", path, run)

    def check_appendable(self, path: str) -> None:
        """Raise now if ``append_line(path, ...)`` would be refused (a link, a FIFO, a device,
        a linked folder): callers check before a change whose record must follow it."""

        def run() -> None:
            if not self.is_local:
                return
            localfile.check_no_link_dirs(path, self.confined_to)
            if os.path.lexists(path):
                os.close(localfile.open_for_write(path, os.O_APPEND))

        self._call("append", path, run)

    def makedirs(self, path: str) -> None:
        self._call("mkdir", path, lambda: self.fs.makedirs(path, exist_ok=True))

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``; refuses to overwrite. Object stores: copy, then delete."""

        def run() -> None:
            if self.is_local:
                if os.path.lexists(dst):
                    raise FileExistsError(errno.EEXIST, "destination exists", dst)
                os.rename(src, dst)
                return
            if self.fs.exists(dst):
                raise FileExistsError(errno.EEXIST, "destination exists", dst)
            # mv on an object store is copy-then-delete, never atomic; the copy
            # completes before anything is removed, so a crash leaves both, not neither.
            self.fs.copy(src, dst, recursive=True)
            self.fs.rm(src, recursive=True)

        self._call("rename", src, run)

    def remove_file(self, path: str) -> None:
        """Delete one file; a file that is already gone is fine (lock files, commit markers)."""

        def run() -> None:
            try:
                if self.is_local:
                    os.unlink(path)
                else:
                    self.fs.rm_file(path)
            except FileNotFoundError:
                return
            self.invalidate_cache(self.parent(path))

        self._call("delete", path, run)

    def remove_tree(self, path: str) -> None:
        """Delete a directory tree. Only retention (`gc --yes`) calls this."""

        def run() -> None:
            if self.is_local:
                import shutil

                shutil.rmtree(path)
            else:
                self.fs.rm(path, recursive=True)

        self._call("delete", path, run)

    def invalidate_cache(self, path: str | None = None) -> None:
        invalidate = getattr(self.fs, "invalidate_cache", None)
        if invalidate is not None:
            invalidate(path)
