"""How a training state dict maps onto DCP keys, and how a checkpoint's keys map back.

Pure helpers for ``Checkpointer`` (no I/O, no collectives): split the user's
state into model/optimizer, replicated stateful objects, per-rank objects and
plain values; build the template DCP loads into; check a template against a
checkpoint's metadata before any byte is read, so a mismatch is a clear error
rather than a DCP failure halfway through a load.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

from ckptctl.training.errors import CheckpointLoadError
from ckptctl.training.state import PerRank

#: Keys the checkpointer adds to every checkpoint; user state may not use the prefix.
RESERVED_PREFIX = "ckptctl"
PROGRESS_KEY = "ckptctl.progress"
RNG_KEY_FMT = "ckptctl.rng.rank{rank}"
PER_RANK_KEY_FMT = "{key}.rank{rank}"


@dataclass(slots=True)
class Split:
    """The user's state dict, sorted by how each entry is saved."""

    model_key: str | None = None
    model: Any = None
    optim_key: str | None = None
    optimizer: Any = None
    stateful: dict[str, Any] = field(default_factory=dict)
    per_rank: dict[str, PerRank] = field(default_factory=dict)
    plain: dict[str, Any] = field(default_factory=dict)


#: Stateful classes whose state is each rank's own, recognised without a ``PerRank`` wrapper
#: (by module and class name, so torchdata is never imported here).
PER_RANK_CLASSES = frozenset({("torchdata.stateful_dataloader.stateful_dataloader", "StatefulDataLoader")})


def is_per_rank_by_nature(value: Any) -> bool:
    """True for torchdata's ``StatefulDataLoader`` (and subclasses): each rank's loader is at
    its own position in its own shard, so saving it as replicated state would keep one rank's."""
    return any((c.__module__, c.__qualname__) in PER_RANK_CLASSES for c in type(value).__mro__)


def split_state(state: Mapping[str, Any]) -> Split:
    split = Split()
    for key, value in state.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"state keys must be non-empty strings, got {key!r}")
        if key.split(".", 1)[0] == RESERVED_PREFIX:
            raise ValueError(
                f"state key {key!r}: the prefix {RESERVED_PREFIX!r} is reserved for ckptctl"
            )
        if isinstance(value, torch.nn.Module):
            if split.model is not None:
                raise ValueError(
                    f"state has two models ({split.model_key!r}, {key!r}); pass one module (wrap several in an nn.ModuleDict)"
                )
            split.model_key, split.model = key, value
        elif isinstance(value, torch.optim.Optimizer):
            if split.optimizer is not None:
                raise ValueError(
                    f"state has two optimizers ({split.optim_key!r}, {key!r}); pass one"
                )
            split.optim_key, split.optimizer = key, value
        elif isinstance(value, PerRank):
            split.per_rank[key] = value
        elif is_per_rank_by_nature(value):
            split.per_rank[key] = PerRank(value)
        elif hasattr(value, "state_dict") and hasattr(value, "load_state_dict"):
            split.stateful[key] = value
        else:
            split.plain[key] = value
    if split.optimizer is not None and split.model is None:
        raise ValueError(
            f"state has an optimizer ({split.optim_key!r}) but no nn.Module to map its parameters"
        )
    return split


def model_optim_state(split: Split) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    out: dict[str, Any] = {}
    if split.model is None:
        return out
    if split.optimizer is not None:
        msd, osd = get_state_dict(split.model, split.optimizer)
        out[str(split.optim_key)] = osd
    else:
        msd = get_model_state_dict(split.model)
    out[str(split.model_key)] = msd
    return out


def flatten_leaves(obj: Any, prefix: str, out: list[tuple[str, Any]]) -> None:
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            flatten_leaves(v, f"{prefix}.{k}", out)
    elif isinstance(obj, list) and any(isinstance(v, (Mapping, list, torch.Tensor)) for v in obj):
        for i, v in enumerate(obj):
            flatten_leaves(v, f"{prefix}.{i}", out)
    else:
        out.append((prefix, obj))


def digest_replicated(sd: Mapping[str, Any], keys: Sequence[str]) -> dict[str, str]:
    """Per top-level key, a digest of the non-tensor values (and tensor shapes) that must agree across ranks."""
    digests: dict[str, str] = {}
    for key in keys:
        leaves: list[tuple[str, Any]] = []
        flatten_leaves(sd[key], key, leaves)
        h = hashlib.sha1(usedforsecurity=False)
        for name, value in leaves:
            if isinstance(value, torch.Tensor):
                h.update(f"{name}=tensor{tuple(value.shape)}{value.dtype};".encode())
            else:
                h.update(f"{name}={value!r};".encode())
        digests[key] = h.hexdigest()
    return digests


class StateMismatch(CheckpointLoadError):
    """The state passed to load does not match the checkpoint (a caller error, never a fallback)."""


def top_level_keys(metadata: Metadata) -> set[str]:
    """Top-level state keys present in a checkpoint (from DCP's planner data, else the flattened FQNs)."""
    keys: set[str] = set()
    planner_data = getattr(metadata, "planner_data", None) or {}
    for fqn in metadata.state_dict_metadata:
        path = planner_data.get(fqn)
        keys.add(str(path[0]) if isinstance(path, tuple) and path else fqn.split(".", 1)[0])
    return keys


def is_empty_state(value: Any) -> bool:
    leaves: list[tuple[str, Any]] = []
    flatten_leaves(value, "", leaves)
    return all(isinstance(v, (Mapping, list)) and not v for _, v in leaves)


def template_from_metadata(metadata: Metadata, key: str) -> Any:
    """The structure saved under top-level ``key``, with empty tensors and None placeholders."""
    from torch.distributed.checkpoint._traverse import set_element

    holder: dict[str, Any] = {}
    planner_data = getattr(metadata, "planner_data", None) or {}
    for fqn, md in metadata.state_dict_metadata.items():
        path = planner_data.get(fqn) or (fqn,)
        if str(path[0]) != key:
            continue
        value = (
            torch.empty(md.size, dtype=md.properties.dtype)
            if isinstance(md, TensorStorageMetadata)
            else None
        )
        set_element(holder, path, value)
    return holder.get(key)


def check_shapes(template: dict[str, Any], metadata: Metadata, path: str) -> None:
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    flat, _ = flatten_state_dict(template)
    bad = []
    for fqn, value in flat.items():
        md = metadata.state_dict_metadata.get(fqn)
        if md is None:
            bad.append(f"{fqn} (not in checkpoint)")
        elif isinstance(value, torch.Tensor):
            if not isinstance(md, TensorStorageMetadata):
                bad.append(f"{fqn} (a tensor here, not in the checkpoint)")
            elif tuple(md.size) != tuple(value.shape):
                bad.append(f"{fqn} (shape {tuple(value.shape)} here, {tuple(md.size)} saved)")
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise StateMismatch(
            f"{path}: the state does not match the checkpoint: {shown}",
            hint="build the same model/optimizer as the run that saved it",
        )
