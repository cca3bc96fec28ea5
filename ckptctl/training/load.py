"""Loads: verify a checkpoint (quick on rank 0, deep spread over the ranks), then restore the state.

``Loader.load`` restores a named checkpoint and refuses one that does not
verify complete. ``Loader.load_latest`` walks back from the newest checkpoint
``locate`` finds, passing over (and logging) each one that does not verify or
load. Every answer that decides what to do next is broadcast from rank 0, so
every rank takes the same path. The deep check compares each file's size and
CRC-32 with the manifest through ``core/verify``'s manifest checks, the files
spread over the ranks by size.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch.distributed.checkpoint as dcp

from ckptctl.adapters.storage import Storage
from ckptctl.core.verify.contract import check_manifest_checksums, check_manifest_files
from ckptctl.core.verify.manifest import MANIFEST_NAME, Manifest, ManifestError, parse_manifest
from ckptctl.errors import NotFoundError
from ckptctl.training import _dcp_io
from ckptctl.training import _state_dict as _sd
from ckptctl.training._dist import Coordinator
from ckptctl.training._state_dict import PER_RANK_KEY_FMT, PROGRESS_KEY, RNG_KEY_FMT
from ckptctl.training.commit import commit_protocol_for
from ckptctl.training.errors import (
    CheckpointLoadError,
    IncompleteCheckpointError,
    NoCompleteCheckpointError,
    UnsafeCheckpointError,
)
from ckptctl.training.save import collect_state
from ckptctl.training.state import restore_rng_state

logger = logging.getLogger("ckptctl.training")

VerifyMode = Literal["deep", "quick", "none"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadResult:
    """What a resume restored, and from where."""

    path: str
    step: int
    tokens_seen: int | None
    samples_seen: int | None
    world_size: int
    """World size now."""
    saved_world_size: int | None
    """World size of the run that wrote the checkpoint (from the manifest)."""
    skipped: tuple[str, ...] = ()
    """Newer checkpoints passed over by ``load_latest``, each ``"<path>: <why>"``."""
    notes: tuple[str, ...] = ()
    """State that could not be restored exactly (e.g. RNG of ranks that no longer exist)."""
    extra: dict[str, Any] = field(default_factory=dict)


class Loader:
    """Verify and load checkpoints on every rank of ``coord``."""

    def __init__(
        self, coord: Coordinator, *, storage_options: Mapping[str, Any], save_rng: bool
    ) -> None:
        self.coord = coord
        self.rank = coord.rank
        self.world_size = coord.world_size
        self.storage_options = dict(storage_options)
        self.save_rng = save_rng

    def load(self, path: str, state: Mapping[str, Any], *, verify: VerifyMode) -> LoadResult:
        problem = self.verify_for_load(path, verify)
        if problem is not None:
            raise IncompleteCheckpointError(
                f"{path}: {problem}",
                hint="use `ckptctl locate <root>` or load_latest() to pick a complete one",
            )
        return self.load_verified(path, state, skipped=())

    def load_latest(
        self, state: Mapping[str, Any], *, root_url: str, verify: VerifyMode
    ) -> LoadResult | None:
        from ckptctl.runroot.locate import find_latest_complete
        from ckptctl.runroot.reports import CheckOptions

        # The caller's state decides what a resume needs: a checkpoint holding only a model is
        # right for a state that holds only a model (DCP's load refuses a missing key anyway), so
        # the library does not apply `locate`'s model-only skip meant for the CLI's resume.
        opts = CheckOptions(include_model_only=True)
        skipped: list[str] = []
        before: int | None = None
        while True:
            info: dict[str, Any] | None = None
            if self.rank == 0:
                try:
                    found = find_latest_complete(root_url, before_step=before, options=opts)
                    info = {
                        "path": found.checkpoint.path if found.checkpoint else None,
                        "step": found.checkpoint.step if found.checkpoint else None,
                        "skipped": [
                            f"{r.path}: {r.status}: {'; '.join(r.problems) or 'no detail'}"
                            for r in found.skipped
                        ],
                        "error": None,
                    }
                except Exception as e:
                    if isinstance(e, NotFoundError):
                        info = {
                            "path": None,
                            "step": None,
                            "skipped": [],
                            "error": None,
                            "missing_root": True,
                        }
                    else:
                        info = {
                            "path": None,
                            "step": None,
                            "skipped": [],
                            "error": f"{type(e).__name__}: {e}",
                        }
            info = self.coord.broadcast_json(info)
            assert info is not None
            if info.get("error"):
                raise CheckpointLoadError(f"cannot search {root_url}: {info['error']}")
            for s in info["skipped"]:
                logger.warning("ckptctl: skipping %s", s)
            skipped.extend(info["skipped"])
            path = info["path"]
            if path is None:
                if not skipped and before is None:
                    return None  # nothing there: a fresh start
                raise NoCompleteCheckpointError(
                    f"{root_url}: no complete checkpoint (passed over {len(skipped)})",
                    hint="run `ckptctl list` on the root to see what is wrong with each",
                )
            step = int(info["step"])
            problem = self.verify_for_load(path, verify, quick_done=True)
            if problem is None:
                try:
                    return self.load_verified(path, state, skipped=tuple(skipped))
                except _sd.StateMismatch:
                    raise
                except (CheckpointLoadError, UnsafeCheckpointError) as e:
                    problem = e.message
            msg = f"{path}: {problem}"
            logger.warning("ckptctl: skipping %s", msg)
            skipped.append(msg)
            before = step

    # -- verification ----------------------------------------------------------------------------------

    def verify_for_load(
        self, path: str, mode: VerifyMode, *, quick_done: bool = False
    ) -> str | None:
        """None if ``path`` may be loaded, else why not (the same answer on every rank)."""
        if mode == "none":
            return None
        verdict: dict[str, Any] | None = None
        if self.rank == 0:
            if quick_done:
                verdict = {"problem": None}
            else:
                try:
                    from ckptctl.runroot.locate import verify_checkpoint

                    report = verify_checkpoint(path)
                    verdict = {
                        "problem": None
                        if report.is_complete
                        else f"{report.status}: {'; '.join(report.problems) or 'no detail'}"
                    }
                except Exception as e:
                    verdict = {"problem": f"cannot verify: {e}"}
        verdict = self.coord.broadcast_json(verdict)
        assert verdict is not None
        if verdict["problem"] or mode != "deep":
            return verdict["problem"]
        return self.deep_check(path)

    def deep_check(self, path: str) -> str | None:
        """Every file's size and CRC-32 against the manifest, the files spread over the ranks by size."""
        problems: list[str] = []
        try:
            storage, cpath = Storage.for_url(path)
            manifest_bytes = storage.read_bytes(Storage.join(cpath, MANIFEST_NAME))
        except Exception as e:
            manifest_bytes = None
            missing = isinstance(e, NotFoundError)
            if not missing:
                problems.append(f"cannot read {MANIFEST_NAME}: {e}")
        if manifest_bytes is None and not problems:
            # Not written by ckptctl: the verifier's own deep check, on rank 0.
            verdict: dict[str, Any] | None = None
            if self.rank == 0:
                from ckptctl.runroot.locate import verify_checkpoint

                report = verify_checkpoint(path, deep=True)
                verdict = {
                    "problem": None
                    if report.is_complete
                    else f"{report.status}: {'; '.join(report.problems)}"
                }
            verdict = self.coord.broadcast_json(verdict)
            assert verdict is not None
            return verdict["problem"]
        if manifest_bytes is not None:
            try:
                problems.extend(self._check_my_share(storage, cpath, parse_manifest(manifest_bytes)))
            except ManifestError as e:
                problems.append(f"{MANIFEST_NAME}: {e}")
            except Exception as e:
                problems.append(f"deep check failed: {e}")
        everyone = self.coord.all_gather_json(problems)
        merged = sorted({p for ps in everyone for p in ps})
        return f"corrupt: {'; '.join(merged)}" if merged else None

    def _check_my_share(self, storage: Storage, cpath: str, manifest: Manifest) -> list[str]:
        """This rank's share of the manifest's files (largest first, to the least loaded rank),
        read once each and judged by ``core/verify``'s manifest checks."""
        loads = [0] * self.world_size
        mine = []
        for f in sorted(manifest.files, key=lambda f: (-f.size_bytes, f.path)):
            target = loads.index(min(loads))
            loads[target] += f.size_bytes + 1
            if target == self.rank and f.checksum is not None:
                mine.append(f)
        sizes: dict[str, int] = {}
        computed: dict[str, str] = {}
        for f in mine:
            with storage.open_read(Storage.join(cpath, f.path)) as fh:
                sizes[f.path], computed[f.path] = _dcp_io.crc32_of_stream(fh)
        share = dataclasses.replace(manifest, files=tuple(mine))
        found = check_manifest_files(share, sizes, step_from_name=None)
        # A file whose size is wrong already has its problem; its CRC differs too, say it once.
        wrong_size = {f.path for f in mine if sizes[f.path] != f.size_bytes}
        found += check_manifest_checksums(
            share, {p: c for p, c in computed.items() if p not in wrong_size}
        )
        return [p.message for p in found]

    # -- restoring --------------------------------------------------------------------------------------

    def load_verified(
        self, path: str, state: Mapping[str, Any], *, skipped: tuple[str, ...]
    ) -> LoadResult:
        storage, cpath = Storage.for_url(path)
        manifest: Manifest | None = None
        try:
            manifest = parse_manifest(storage.read_bytes(Storage.join(cpath, MANIFEST_NAME)))
        except Exception as e:
            if not isinstance(e, NotFoundError):
                raise CheckpointLoadError(f"{path}: unreadable {MANIFEST_NAME}: {e}") from e
        try:
            md_bytes = storage.read_bytes(Storage.join(cpath, _dcp_io.METADATA_NAME))
        except Exception as e:
            raise CheckpointLoadError(f"{path}: cannot read {_dcp_io.METADATA_NAME}: {e}") from e
        metadata = _dcp_io.parse_metadata_bytes(md_bytes, path)

        split = _sd.split_state(state)
        template = collect_state(
            split, rank=self.rank, step=0, tokens_seen=None, samples_seen=None, save_rng=self.save_rng
        )
        notes: list[str] = []
        saved_keys = _sd.top_level_keys(metadata)
        for key in list(template):
            if key in saved_keys:
                continue
            if key.startswith("ckptctl.rng.rank"):
                notes.append(
                    f"no RNG state saved for rank {self.rank} (saved world size differs); RNG not restored"
                )
                del template[key]
            elif key in {PER_RANK_KEY_FMT.format(key=k, rank=self.rank) for k in split.per_rank}:
                notes.append(f"no {key!r} in the checkpoint (saved world size differs); left as is")
                del template[key]
        for key in split.plain:
            # Plain values come back as saved, whatever the caller passed as a placeholder.
            if key in saved_keys:
                template[key] = _sd.template_from_metadata(metadata, key)
        missing = sorted(
            k for k in template if k not in saved_keys and not _sd.is_empty_state(template[k])
        )
        for key in [k for k in template if k not in saved_keys]:
            del template[key]  # empty containers: DCP saved nothing for them
        if missing:
            raise _sd.StateMismatch(
                f"{path}: the checkpoint has no {', '.join(repr(k) for k in missing)} "
                f"(it holds {', '.join(sorted(saved_keys))})",
                hint="the state dict passed to load must name the same entries as the one saved",
            )
        _sd.check_shapes(template, metadata, path)

        try:
            protocol = commit_protocol_for(storage, Storage.parent(cpath), self.storage_options)
            reader = protocol.make_reader(cpath, metadata)
            with _dcp_io.quiet_no_dist():
                dcp.load(
                    template,
                    storage_reader=reader,
                    planner=_dcp_io.SafeLoadPlanner(),
                    process_group=self.coord.group,
                    no_dist=not self.coord.is_distributed,
                )
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)) or not (
                isinstance(e, Exception) or _dcp_io.is_dcp_exception(e)
            ):
                raise
            inner = _dcp_io.unwrap_dcp_error(e)
            if isinstance(inner, UnsafeCheckpointError):
                raise UnsafeCheckpointError(f"{path}: {inner.message}", hint=inner.hint) from inner
            first_line = str(inner).strip().splitlines()[0] if str(inner).strip() else ""
            raise CheckpointLoadError(
                f"{path}: load failed: {type(inner).__name__}: {first_line}"
            ) from (inner if isinstance(inner, Exception) else None)

        self._apply(split, template, state)
        progress = template.get(PROGRESS_KEY) or {}
        rng = template.get(RNG_KEY_FMT.format(rank=self.rank))
        if rng is not None and self.save_rng:
            notes.extend(restore_rng_state(rng))
        for note in notes:
            logger.warning("ckptctl: %s", note)
        step = int(progress.get("step", manifest.step if manifest else 0))
        return LoadResult(
            path=path,
            step=step,
            tokens_seen=progress.get("tokens_seen"),
            samples_seen=progress.get("samples_seen"),
            world_size=self.world_size,
            saved_world_size=manifest.world_size if manifest else None,
            skipped=skipped,
            notes=tuple(notes),
            extra=dict(manifest.extra) if manifest else {},
        )

    def _apply(self, split: _sd.Split, loaded: dict[str, Any], state: Mapping[str, Any]) -> None:
        if split.model is not None:
            from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

            if split.optimizer is not None:
                set_state_dict(
                    split.model,
                    split.optimizer,
                    model_state_dict=loaded[str(split.model_key)],
                    optim_state_dict=loaded[str(split.optim_key)],
                )
            else:
                set_model_state_dict(split.model, loaded[str(split.model_key)])
        for key, obj in split.stateful.items():
            obj.load_state_dict(loaded[key])
        for key, wrapped in split.per_rank.items():
            per_key = PER_RANK_KEY_FMT.format(key=key, rank=self.rank)
            if per_key in loaded:
                wrapped.load_state_dict(loaded[per_key])
        if split.plain:
            if not isinstance(state, MutableMapping):
                raise TypeError(
                    "state holds plain values; pass a mutable dict so load can write them back"
                )
            for key in split.plain:
                state[key] = loaded[key]
