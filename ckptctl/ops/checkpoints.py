"""list / locate / verify: find the newest COMPLETE checkpoint and prove it.

The engine lives in ``ckptctl.runroot`` (``inspect``: scan and inspect; ``deep``:
every byte; ``locate``: the use cases; ``reports``: the result values), where the
training library can use it too. This module is the use-case face the CLI and
``recover`` call; it re-exports the engine's public names so existing imports
(``from ckptctl.ops.checkpoints import find_latest_complete``) keep working.
"""

from __future__ import annotations

from ckptctl.runroot.inspect import POINTER_FILES, RootScan, inspect_checkpoint, scan_root
from ckptctl.runroot.locate import (
    find_latest_complete,
    list_checkpoints,
    verify_checkpoint,
    verify_target,
)
from ckptctl.runroot.reports import (
    CheckOptions,
    CheckpointReport,
    ListResult,
    LocateResult,
    PointerHint,
    ProgressFn,
    VerifyResult,
    iso_time,
    pointer_agrees,
)

__all__ = [
    "POINTER_FILES",
    "CheckOptions",
    "CheckpointReport",
    "ListResult",
    "LocateResult",
    "PointerHint",
    "ProgressFn",
    "RootScan",
    "VerifyResult",
    "find_latest_complete",
    "inspect_checkpoint",
    "iso_time",
    "list_checkpoints",
    "pointer_agrees",
    "scan_root",
    "verify_checkpoint",
    "verify_target",
]
