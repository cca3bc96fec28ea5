"""Training state beyond weights: RNG streams, dataloader position, per-rank values.

Every value produced here loads with ``torch.load(weights_only=True)``: bulk
state is a tensor (the Mersenne Twister words of Python and NumPy), the rest is
plain ints, floats, strings and None. Nothing needs a pickle of a class.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler

# -- RNG ------------------------------------------------------------------------------------------


def capture_rng_state() -> dict[str, Any]:
    """The state of Python's ``random``, NumPy's global RNG, torch CPU and every initialised CUDA device."""
    version, words, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "python": {
            "version": int(version),
            "state": torch.tensor(words, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
        "torch": torch.get_rng_state(),
    }
    try:
        import numpy as np
    except ImportError:  # numpy is optional
        pass
    else:
        kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        state["numpy"] = {
            "bit_generator": str(kind),
            "key": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = {
            str(i): torch.cuda.get_rng_state(i) for i in range(torch.cuda.device_count())
        }
    return state


def restore_rng_state(state: dict[str, Any]) -> list[str]:
    """Restore what ``capture_rng_state`` captured; returns warnings about what could not be restored."""
    notes: list[str] = []
    py = state.get("python")
    if py is not None:
        words = tuple(int(w) for w in py["state"].tolist())
        gauss = py.get("gauss_next")
        random.setstate((int(py["version"]), words, None if gauss is None else float(gauss)))
    if "torch" in state:
        torch.set_rng_state(state["torch"].to(dtype=torch.uint8, device="cpu"))
    np_state = state.get("numpy")
    if np_state is not None:
        try:
            import numpy as np
        except ImportError:
            notes.append("numpy RNG state saved but numpy is not installed; not restored")
        else:
            np.random.set_state(
                (
                    np_state["bit_generator"],
                    np.asarray(np_state["key"].numpy(), dtype=np.uint32),
                    int(np_state["pos"]),
                    int(np_state["has_gauss"]),
                    float(np_state["cached_gaussian"]),
                )
            )
    cuda = state.get("cuda")
    if cuda:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
            for idx, s in cuda.items():
                torch.cuda.set_rng_state(s.to(dtype=torch.uint8, device="cpu"), int(idx))
        else:
            notes.append(
                f"CUDA RNG state saved for {len(cuda)} device(s), this process sees "
                f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}; CUDA RNG not restored"
            )
    return notes


def rng_template() -> dict[str, Any]:
    """A state dict of the same structure as ``capture_rng_state`` for DCP to load into."""
    return capture_rng_state()


# -- per-rank values ---------------------------------------------------------------------------------


class PerRank:
    """Marks a stateful object whose state differs per rank (e.g. torchdata's ``StatefulDataLoader``).

    Stored under ``<key>.rank<r>``; without this wrapper DCP keeps a single copy
    of a non-tensor value (it assumes replicated state), so per-rank state would
    silently collapse to one rank's. Resuming at another world size restores the
    ranks that exist in both and warns for the others.
    """

    def __init__(self, obj: Any) -> None:
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise TypeError(
                f"PerRank needs an object with state_dict/load_state_dict, got {type(obj).__name__}"
            )
        self.obj = obj

    def state_dict(self) -> dict[str, Any]:
        return dict(self.obj.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.obj.load_state_dict(state)


# -- dataloader position ----------------------------------------------------------------------------


class ResumableBatchSampler(Sampler[list[int]]):
    """A distributed batch sampler whose position survives a restart, at any world size.

    Epoch ``e`` visits a permutation of ``range(num_samples)`` drawn from its own
    generator (seeded by ``seed`` and ``e``, never the global RNG), in global
    batches of ``global_batch_size``; global batch ``b`` is
    ``perm[b*G:(b+1)*G]`` and rank ``r`` of ``W`` takes the ``r``-th contiguous
    slice of ``G/W`` indices. The state is ``(epoch, batches consumed)``, the same
    on every rank, so a checkpoint written by 2 ranks resumes on 1 or 4 with the
    same global batches. The last partial global batch of an epoch is dropped.

    Use it as ``DataLoader(dataset, batch_sampler=sampler)``. A batch counts as
    consumed when it is handed out, which is exact with ``num_workers=0``;
    worker processes prefetch ahead of the training loop, so with workers use
    torchdata's ``StatefulDataLoader`` (wrapped in ``PerRank``) instead.
    """

    def __init__(
        self,
        num_samples: int,
        global_batch_size: int,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if rank is None or world_size is None:
            import torch.distributed as dist

            initialised = dist.is_available() and dist.is_initialized()
            rank = rank if rank is not None else (dist.get_rank() if initialised else 0)
            world_size = (
                world_size
                if world_size is not None
                else (dist.get_world_size() if initialised else 1)
            )
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if global_batch_size < 1 or global_batch_size > num_samples:
            raise ValueError(
                f"global_batch_size must be in [1, num_samples={num_samples}], got {global_batch_size}"
            )
        if global_batch_size % world_size:
            raise ValueError(
                f"global_batch_size {global_batch_size} is not divisible by world_size {world_size}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.num_samples = num_samples
        self.global_batch_size = global_batch_size
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.batches_done = 0
        """Global batches of the current epoch handed out so far."""
        self._perm_epoch: int | None = None
        self._perm: list[int] = []

    @property
    def batches_per_epoch(self) -> int:
        return self.num_samples // self.global_batch_size

    @property
    def local_batch_size(self) -> int:
        return self.global_batch_size // self.world_size

    def __len__(self) -> int:
        return self.batches_per_epoch

    def _permutation(self, epoch: int) -> list[int]:
        if self._perm_epoch != epoch:
            if self.shuffle:
                g = torch.Generator()
                g.manual_seed((self.seed * 1_000_003 + epoch) & 0x7FFF_FFFF_FFFF_FFFF)
                self._perm = torch.randperm(self.num_samples, generator=g).tolist()
            else:
                self._perm = list(range(self.num_samples))
            self._perm_epoch = epoch
        return self._perm

    def local_indices(self, epoch: int, batch: int) -> list[int]:
        """The indices this rank gets for global batch ``batch`` of ``epoch``."""
        perm = self._permutation(epoch)
        start = batch * self.global_batch_size + self.rank * self.local_batch_size
        return perm[start : start + self.local_batch_size]

    def __iter__(self) -> Iterator[list[int]]:
        # The counter moves before the batch is handed out: a state_dict() taken
        # after the training step that used it must count it as consumed.
        while self.batches_done < self.batches_per_epoch:
            batch = self.batches_done
            self.batches_done += 1
            yield self.local_indices(self.epoch, batch)
        self.epoch += 1
        self.batches_done = 0

    def data_position(self) -> dict[str, int]:
        """Where the next batch comes from: ``epoch`` and ``index`` (global batches consumed in it)."""
        if self.batches_done >= self.batches_per_epoch:
            return {"epoch": self.epoch + 1, "index": 0}
        return {"epoch": self.epoch, "index": self.batches_done}

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "batches_done": self.batches_done,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_samples": self.num_samples,
            "global_batch_size": self.global_batch_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("seed", "shuffle", "num_samples", "global_batch_size"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"dataloader state was saved with {key}={state[key]!r}, this sampler has "
                    f"{key}={getattr(self, key)!r}: the data order would not continue"
                )
        self.epoch = int(state["epoch"])
        self.batches_done = int(state["batches_done"])
        if self.batches_done > self.batches_per_epoch:
            warnings.warn(
                f"dataloader position {self.batches_done} is past the epoch end; starting the next epoch",
                stacklevel=2,
            )
            self.epoch += 1
            self.batches_done = 0
