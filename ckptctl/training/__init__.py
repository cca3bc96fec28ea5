"""``ckptctl.training``: checkpoints that ckptctl can prove complete, and a resume that restores everything.

Typical use (every rank, after ``init_process_group``)::

    from ckptctl.training import Checkpointer, ResumableBatchSampler

    ckpt = Checkpointer("/ckpt/run1", save_every=100, keep_last=3, async_save=True)
    state = {"model": model, "optim": optimizer, "sched": scheduler, "data": sampler}
    resumed = ckpt.load_latest(state)            # or ckpt.load(path, state); None on a fresh start
    step = resumed.step if resumed else 0
    while step < total_steps:
        ...one optimizer step...
        step += 1
        ckpt.maybe_save(step, state, tokens_seen=tokens)   # periodic save, or emergency save + exit 75
    ckpt.close()

See ``docs/training.md`` for the commit protocol, what is saved, async memory
cost, preemption and retention.
"""

from ckptctl.core.names import step_dir_name
from ckptctl.training.checkpointer import Checkpointer
from ckptctl.training.errors import (
    CheckpointLoadError,
    CheckpointSaveError,
    IncompleteCheckpointError,
    NoCompleteCheckpointError,
    UnsafeCheckpointError,
    UnsafeStateError,
)
from ckptctl.training.load import LoadResult
from ckptctl.training.preemption import PREEMPTED_EXIT_CODE, PreemptedExit
from ckptctl.training.save import SAVE_PHASES, SaveHandle, SaveResult
from ckptctl.training.state import (
    PerRank,
    ResumableBatchSampler,
    capture_rng_state,
    restore_rng_state,
)

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "SAVE_PHASES",
    "CheckpointLoadError",
    "CheckpointSaveError",
    "Checkpointer",
    "IncompleteCheckpointError",
    "LoadResult",
    "NoCompleteCheckpointError",
    "PerRank",
    "PreemptedExit",
    "ResumableBatchSampler",
    "SaveHandle",
    "SaveResult",
    "UnsafeCheckpointError",
    "UnsafeStateError",
    "capture_rng_state",
    "restore_rng_state",
    "step_dir_name",
]
