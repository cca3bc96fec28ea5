"""The narrow storage interface every command uses: list, stat, read, rename, write.

Paths are ``str`` (a ``Path`` mangles ``s3://``). fsspec is imported lazily here
and nowhere else, and every backend error is mapped to a ``StorageError`` with a
one-line message. Object stores have no atomic rename: ``rename`` there is a
copy followed by a delete of the source (documented in the README), and callers
that need atomicity use a commit marker instead.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, TypeVar

from ckptctl.adapters.localfile import open_regular
from ckptctl.errors import NotFoundError, StorageError, StorageUnreachableError

T = TypeVar("T")

#: JSON object of fsspec storage options applied to every URL (e.g. an S3 endpoint).
STORAGE_OPTIONS_ENV = "CKPTCTL_STORAGE_OPTIONS"
#: The most ``read_bytes`` reads of a whole file (``.metadata``, manifests, pointer files):
#: a bigger (or sparse 1 TB) file is refused after reading this much, never read whole.
MAX_WHOLE_READ_BYTES = 512 << 20

__all__ = ["MAX_WHOLE_READ_BYTES", "STORAGE_OPTIONS_ENV", "Entry", "FileTooLargeError", "Storage"]


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
        }
    )


class Storage:
    """One filesystem (local, memory, s3, ...) behind the calls ckptctl needs."""

    def __init__(self, fs: Any, protocol: str) -> None:
        self.fs = fs
        self.protocol = protocol

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
                options = json.loads(env_options)
            except ValueError as e:
                raise StorageError(f"{STORAGE_OPTIONS_ENV} is not valid JSON: {e}") from e
        options.update(storage_options)
        try:
            import fsspec.core
            from fsspec.registry import known_implementations
        except ImportError as e:  # pragma: no cover - fsspec is a hard dependency
            raise StorageError(f"fsspec is not installed: {e}") from e
        protocol = url.split("://", 1)[0] if "://" in url else "file"
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
        return storage, path

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
                raise StorageUnreachableError(
                    f"{self.url(path)}: storage endpoint unreachable ({e})",
                    hint="check the endpoint URL and that the object store is up",
                ) from e
            raise StorageError(f"{self.url(path)}: {what} failed: {e.strerror or e}") from e
        except Exception as e:
            if _is_connection_error(e):
                raise StorageUnreachableError(
                    f"{self.url(path)}: storage endpoint unreachable ({type(e).__name__})",
                    hint="check the endpoint URL and that the object store is up",
                ) from e
            if type(e).__name__ in {"NoCredentialsError", "ClientError", "PartialCredentialsError"}:
                raise StorageError(f"{self.url(path)}: {what} refused: {e}") from e
            raise

    # -- reads ----------------------------------------------------------------------------

    def list_dir(self, path: str) -> list[Entry]:
        """The entries directly inside ``path`` (one listing request on object stores)."""

        def run() -> list[Entry]:
            if self.is_local:
                return self._list_local(path)
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
    def _list_local(path: str) -> list[Entry]:
        entries = []
        with os.scandir(path) as it:
            for de in it:
                try:
                    st = de.stat()  # follows symlinks; a dangling link raises
                except FileNotFoundError:
                    entries.append(Entry(de.name, de.path, False, 0, None))
                    continue
                is_dir = de.is_dir()
                entries.append(
                    Entry(de.name, de.path, is_dir, 0 if is_dir else st.st_size, st.st_mtime)
                )
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
        self, path: str, start: int | None = None, end: int | None = None, *, max_bytes: int | None = None
    ) -> bytes:
        """The bytes of ``path`` (or ``[start, end)`` of it) in one request.

        A whole-file read (no ``end``) stops after ``max_bytes`` (default
        ``MAX_WHOLE_READ_BYTES``) and raises ``FileTooLargeError``; special files are refused.
        """
        cap = MAX_WHOLE_READ_BYTES if max_bytes is None else max_bytes
        whole = end is None

        def run() -> bytes:
            if self.is_local:
                with open_regular(path) as f:
                    if start:
                        f.seek(start)
                    return f.read(cap + 1) if end is None else f.read(end - (start or 0))
            if whole:
                return bytes(self.fs.cat_file(path, start=start, end=(start or 0) + cap + 1))
            return bytes(self.fs.cat_file(path, start=start, end=end))

        data = self._call("read", path, run)
        if whole and len(data) > cap:
            raise FileTooLargeError(
                f"{self.url(path)}: larger than {cap >> 20} MiB, refused (not read whole)"
            )
        return data

    @contextmanager
    def open_read(self, path: str, block_size: int = 8 << 20) -> Iterator[IO[bytes]]:
        """A sequential reader (buffered, with read-ahead on object stores)."""
        if self.is_local:
            f = self._call("open", path, lambda: open_regular(path, buffering=0))
        else:
            f = self._call(
                "open",
                path,
                lambda: self.fs.open(path, "rb", block_size=block_size, cache_type="readahead"),
            )
        try:
            yield f
        finally:
            f.close()

    def exists(self, path: str) -> bool:
        return self.info(path) is not None

    # -- writes (only rollback/quarantine, audit log, training library, gc) ---------------

    def write_bytes(self, path: str, data: bytes) -> None:
        def run() -> None:
            if self.is_local:
                os.makedirs(posixpath.dirname(path), exist_ok=True)
                tmp = f"{path}.tmp-{os.getpid()}"
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            else:
                self.fs.pipe_file(path, data)

        self._call("write", path, run)

    def append_line(self, path: str, line: str) -> None:
        """Append one line; on object stores this is read-modify-write of a small file."""

        def run() -> None:
            if self.is_local:
                os.makedirs(posixpath.dirname(path), exist_ok=True)
                with open(path, "a", encoding="utf-8") as f:
                    f.write(line.rstrip("\n") + "\n")
                    f.flush()
                    os.fsync(f.fileno())
            else:
                try:
                    old = bytes(self.fs.cat_file(path))
                except FileNotFoundError:
                    old = b""
                self.fs.pipe_file(path, old + line.rstrip("\n").encode() + b"\n")

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
