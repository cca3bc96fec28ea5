"""How a finished save becomes a checkpoint: one named commit protocol per kind of storage.

| protocol | storage | the save writes into | before the DCP write | the commit |
| --- | --- | --- | --- | --- |
| ``RenameCommit`` | POSIX (local disk, NFS, Lustre) | ``step_N.tmp-<token>/`` | nothing | fsync, atomic rename to ``step_N``, fsync the root |
| ``MarkerCommit`` | object stores (``s3://``, ``gs://``, ``memory://``) | ``step_N/`` itself | an existing ``step_N/`` moved aside | the commit marker, written last |

Both write the manifest, then the commit marker, into the write path (``save.py``
does that, the same for both). What differs is named here, in the order a save
calls it (every rank unless said):

1. ``write_path(step, token)``: where DCP writes.
2. ``prepare(final_path, token, coord)``: before any shard is written (a collective).
3. ``make_writer(write_path, thread_count)``: the DCP writer for this storage.
4. ``recorded_size_holds(path, size)``: for each file this rank wrote, whether the
   byte count seen while writing is the file's (else the file is re-read for its CRC).
5. ``publish(step, write_path, final_path, token)``: rank 0, after the marker; the
   checkpoint becomes visible under its final name.

``make_reader`` is the DCP reader for the same storage (loads). Adding a storage
kind is one new class here and one line in ``commit_protocol_for``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol

from torch.distributed.checkpoint.metadata import Metadata

from ckptctl.adapters.storage import Storage
from ckptctl.core.names import step_dir_name, temp_dir_name
from ckptctl.runroot import mutate
from ckptctl.runroot.root import RunRoot
from ckptctl.training import _dcp_io
from ckptctl.training._dist import Coordinator
from ckptctl.training.errors import CheckpointSaveError

logger = logging.getLogger("ckptctl.training")

#: Why an existing ``step_N`` is moved aside by a save (the audit record's reason).
_SUPERSEDE_REASON = "a new save at the same step (resumed from an earlier checkpoint)"


class CommitProtocol(Protocol):
    """What differs between storages in a save and a load (see the module's table)."""

    name: str

    def write_path(self, step: int, token: str) -> str: ...

    def prepare(self, final_path: str, token: str, coord: Coordinator) -> None: ...

    def make_writer(self, write_path: str, *, thread_count: int) -> Any: ...

    def make_reader(self, path: str, metadata: Metadata) -> Any: ...

    def recorded_size_holds(self, path: str, size_bytes: int) -> bool: ...

    def publish(self, step: int, write_path: str, final_path: str, token: str) -> None: ...


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RenameCommit:
    """POSIX: write into a temporary directory, then rename it to ``step_N`` (atomic)."""

    name = "rename"

    def __init__(self, storage: Storage, root_path: str) -> None:
        self.storage = storage
        self.root_path = root_path

    def write_path(self, step: int, token: str) -> str:
        return Storage.join(self.root_path, temp_dir_name(step, token))

    def prepare(self, final_path: str, token: str, coord: Coordinator) -> None:
        """Nothing: an older ``step_N`` stays visible until the new one is complete (``publish``)."""

    def make_writer(self, write_path: str, *, thread_count: int) -> Any:
        return _dcp_io.file_writer(write_path, thread_count=thread_count)

    def make_reader(self, path: str, metadata: Metadata) -> Any:
        return _dcp_io.file_reader(path, metadata)

    def recorded_size_holds(self, path: str, size_bytes: int) -> bool:
        # A stat is cheap here; a file rewritten behind the checksumming stream shows up as a
        # size that differs from the bytes the stream saw.
        return os.stat(path).st_size == size_bytes

    def publish(self, step: int, write_path: str, final_path: str, token: str) -> None:
        fsync_dir(write_path)
        run_root = RunRoot.at(self.storage, self.root_path)
        if os.path.lexists(final_path):
            aside = mutate.supersede(
                run_root, step_dir_name(step), token, step=step, reason=_SUPERSEDE_REASON
            )
            logger.warning(
                "ckptctl: %s already existed (an older run's); moved it to %s", final_path, aside
            )
        mutate.commit(run_root, Storage.basename(write_path), Storage.basename(final_path))
        fsync_dir(self.root_path)


class MarkerCommit:
    """Object stores: write ``step_N/`` in place; the commit marker, written last, is the commit.

    There is no atomic directory rename on an object store (a rename is copy-then-delete),
    so the marker, whose content is the CRC-32 of the manifest's bytes, is what ``locate``
    trusts; a directory without a valid marker is never complete.
    """

    name = "marker"

    def __init__(
        self, storage: Storage, root_path: str, storage_options: Mapping[str, Any]
    ) -> None:
        self.storage = storage
        self.root_path = root_path
        self.storage_options = dict(storage_options)

    def write_path(self, step: int, token: str) -> str:
        return Storage.join(self.root_path, step_dir_name(step))

    def prepare(self, final_path: str, token: str, coord: Coordinator) -> None:
        """Quarantine an existing ``step_N/`` first (rank 0), so no old commit marker ever sits
        next to new shards; every rank raises if that failed."""
        err = None
        if coord.rank == 0 and self.storage.exists(final_path):
            try:
                aside = mutate.supersede(
                    RunRoot.at(self.storage, self.root_path),
                    Storage.basename(final_path),
                    token,
                    step=None,
                    reason=_SUPERSEDE_REASON,
                )
                logger.warning("ckptctl: %s existed; moved it to %s before saving", final_path, aside)
            except Exception as e:
                err = str(e)
        err = coord.broadcast_json(err)
        if err:
            raise CheckpointSaveError(f"cannot move the existing {final_path} aside: {err}")

    def make_writer(self, write_path: str, *, thread_count: int) -> Any:
        return _dcp_io.fsspec_writer(
            self.storage.url(write_path),
            storage_options=self.storage_options,
            thread_count=thread_count,
        )

    def make_reader(self, path: str, metadata: Metadata) -> Any:
        return _dcp_io.fsspec_reader(
            self.storage.url(path), metadata, storage_options=self.storage_options
        )

    def recorded_size_holds(self, path: str, size_bytes: int) -> bool:
        # An upload stream cannot be rewritten behind the writer's back; a stat would be a
        # round trip per file.
        return True

    def publish(self, step: int, write_path: str, final_path: str, token: str) -> None:
        """Nothing: the marker already written is the commit."""


def commit_protocol_for(
    storage: Storage, root_path: str, storage_options: Mapping[str, Any]
) -> CommitProtocol:
    """The commit protocol for ``storage`` (the only place that asks which kind it is)."""
    if storage.is_local:
        return RenameCommit(storage, root_path)
    return MarkerCommit(storage, root_path, storage_options)
