"""Rank coordination for the checkpointer: a few collectives on a CPU (gloo) process group.

Everything exchanged between ranks here is JSON or raw bytes carried in uint8
tensors, never pickles (``broadcast_object_list``/``gather_object`` unpickle
what they receive). Without an initialised process group every call is the
single-process identity, so the same code runs in 1-process scripts and tests.

Why a separate gloo group: the training loop may use NCCL (GPU tensors only),
and an async save runs its collectives from a background thread, which must
never interleave with the main thread's collectives on the same group.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def new_cpu_group() -> Any:
    """A new gloo group over all ranks (a collective call: every rank must make it, in the same order)."""
    if not is_distributed():
        return None
    return dist.new_group(backend="gloo")


class Coordinator:
    """Collectives over one CPU process group (``None``: single process)."""

    def __init__(self, group: Any) -> None:
        self.group = group
        if is_distributed():
            self.rank = dist.get_rank(group)
            self.world_size = dist.get_world_size(group)
        else:
            self.rank = 0
            self.world_size = 1

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1 or (self.group is not None and is_distributed())

    @property
    def is_coordinator(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.is_distributed:
            dist.barrier(group=self.group)

    def any_true(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is true on any rank."""
        if not self.is_distributed:
            return bool(flag)
        t = torch.tensor([1 if flag else 0], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return bool(t.item())

    def max_int(self, value: int) -> int:
        if not self.is_distributed:
            return int(value)
        t = torch.tensor([int(value)], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return int(t.item())

    def broadcast_bytes(self, data: bytes | None, src: int = 0) -> bytes:
        """``data`` from rank ``src`` on every rank (other ranks pass None)."""
        if not self.is_distributed:
            return data or b""
        src_global = dist.get_global_rank(self.group, src) if self.group is not None else src
        n = torch.tensor(
            [len(data) if self.rank == src and data is not None else 0], dtype=torch.int64
        )
        dist.broadcast(n, src=src_global, group=self.group)
        size = int(n.item())
        if self.rank == src:
            buf = (
                torch.frombuffer(bytearray(data or b""), dtype=torch.uint8)
                if size
                else torch.empty(0, dtype=torch.uint8)
            )
        else:
            buf = torch.empty(size, dtype=torch.uint8)
        if size:
            dist.broadcast(buf, src=src_global, group=self.group)
        return bytes(buf.numpy().tobytes())

    def broadcast_json(self, obj: Any, src: int = 0) -> Any:
        data = json.dumps(obj).encode() if self.rank == src else None
        return json.loads(self.broadcast_bytes(data, src=src).decode())

    def all_gather_bytes(self, data: bytes) -> list[bytes]:
        if not self.is_distributed:
            return [data]
        n = torch.tensor([len(data)], dtype=torch.int64)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(sizes, n, group=self.group)
        longest = max(int(s.item()) for s in sizes)
        mine = torch.zeros(longest, dtype=torch.uint8)
        if data:
            mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        out = [torch.zeros(longest, dtype=torch.uint8) for _ in range(self.world_size)]
        dist.all_gather(out, mine, group=self.group)
        return [
            bytes(t[: int(s.item())].numpy().tobytes()) for t, s in zip(out, sizes, strict=True)
        ]

    def all_gather_json(self, obj: Any) -> list[Any]:
        return [json.loads(b.decode()) for b in self.all_gather_bytes(json.dumps(obj).encode())]
