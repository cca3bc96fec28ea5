"""Errors raised by ``ckptctl.training``; all are ``CkptctlError``s with a one-line message and a hint."""

from __future__ import annotations

from ckptctl.errors import CkptctlError, ProblemFound


class CheckpointSaveError(CkptctlError):
    """A save failed; nothing was committed (the temporary directory, if any, is left for inspection)."""


class UnsafeStateError(CheckpointSaveError):
    """A non-tensor value in the state would not load with ``torch.load(weights_only=True)``."""


class CheckpointLoadError(CkptctlError):
    """A checkpoint could not be loaded into the given state."""


class UnsafeCheckpointError(CheckpointLoadError):
    """A record in the checkpoint needs more than ``weights_only`` unpickling; it was refused, nothing ran."""


class IncompleteCheckpointError(CheckpointLoadError):
    """The checkpoint named for loading is not complete (ckptctl's verifier says why)."""


class NoCompleteCheckpointError(ProblemFound):
    """``load_latest`` found no complete checkpoint under the run root."""


class LoadCoverageError(CheckpointLoadError):
    """The checkpoint's keys and the live state's keys differ beyond the load's allowances.

    ``missing``: keys the live state expects that the checkpoint does not hold (they would
    keep their fresh values); ``unexpected``: keys the checkpoint holds that nothing
    restores (they would be dropped silently). Both are dotted DCP key names, e.g.
    ``optimizer.state.fc.weight.exp_avg``.
    """

    def __init__(
        self,
        message: str,
        *,
        missing: tuple[str, ...] = (),
        unexpected: tuple[str, ...] = (),
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.missing = missing
        self.unexpected = unexpected
