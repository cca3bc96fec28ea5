"""``RunRoot``: a run root opened once (storage, path inside it, the user's URL) and passed along.

Every runroot function takes one instead of a URL string, so a use case resolves
the URL, reads credentials and checks the directory exists exactly once, and
errors name the root the way the user wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ckptctl.adapters.storage import Entry, Storage


@dataclass(frozen=True, slots=True)
class RunRoot:
    """A folder holding one directory per checkpoint (any fsspec URL)."""

    storage: Storage
    path: str
    """The root's path inside ``storage`` (no protocol)."""
    url: str
    """The root in the user's URL form (``/shared/run``, ``s3://bucket/run``)."""

    @classmethod
    def open(cls, url: str) -> RunRoot:
        """Open an existing directory (``NotFoundError`` / ``StorageError`` otherwise)."""
        storage, path = Storage.open_directory(url)
        return cls.at(storage, path)

    @classmethod
    def for_url(cls, url: str) -> RunRoot:
        """Resolve ``url`` without checking that it exists (a root a save is about to create)."""
        storage, path = Storage.for_url(url)
        return cls.at(storage, path)

    @classmethod
    def at(cls, storage: Storage, path: str) -> RunRoot:
        return cls(storage=storage, path=path, url=storage.url(path))

    def child(self, name: str) -> str:
        """Path (inside the storage) of the directory ``name`` directly under the root."""
        return self.storage.join(self.path, name)

    def child_url(self, name: str) -> str:
        """``name`` under the root, in the user's URL form."""
        return self.storage.url(self.child(name))

    def list(self) -> list[Entry]:
        """One listing of the root (one request on an object store)."""
        return self.storage.list_dir(self.path)


def as_run_root(root: str | RunRoot) -> RunRoot:
    """A URL is opened (it must exist); a ``RunRoot`` is passed through."""
    return root if isinstance(root, RunRoot) else RunRoot.open(root)
