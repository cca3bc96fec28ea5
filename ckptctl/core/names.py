"""Checkpoint directory names: which framework wrote it, which step, and whether it is final.

This module owns every name ckptctl itself gives a directory in a run root: its own
``step_N`` and ``step_N.tmp-<token>`` (the training library), quarantine names
(``rollback``), superseded and to-be-deleted names (training, retention) and its
state folder ``.ckptctl``. Nothing else formats or parses them.

Order matters: the first pattern that matches a name wins. Temp markers are
checked on the whole name, so ``tmp-checkpoint-500`` (HF's staging name) and
``step_120.tmp-ab12`` (ckptctl's) are both temporary. A temporary or
quarantined directory is never complete, whatever it holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Suffix ckptctl's rollback appends: ``step_120.quarantined-20261121T031200Z``.
QUARANTINE_TAG = ".quarantined-"
#: Quarantine stamp format: UTC, ISO 8601 basic, to the second (sorts as text).
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
#: ckptctl's own folder inside a run root (lock, audit log, recovery reports); never a
#: checkpoint name, so ``locate`` ignores it.
STATE_DIR_NAME = ".ckptctl"
#: Marker of ckptctl's temporary names: ``step_N.tmp-<token>`` (a save in progress) and
#: ``step_N.tmp-deleting-<hex>`` (retention purging it).
TEMP_TAG = ".tmp-"
_DELETING = "deleting-"
_SUPERSEDED = "superseded-"

#: The marker before the step in each framework's step-directory names (``step_120``,
#: ``step-120``, ``iter_0000120``, ``global_step120``, ``checkpoint-120``, ``checkpoint_120``).
STEP_MARKERS: dict[str, str] = {
    "ckptctl": "step_",
    "torchtitan": "step-",
    "megatron": "iter_",
    "deepspeed": "global_step",
    "hf": "checkpoint-",
    "accelerate": "checkpoint_",
}
#: Each framework's step directory, exactly (the step is group "step"): the names the layouts of
#: ``core.verify.layouts`` recognise a framework's checkpoint by.
STEP_DIR_NAMES: dict[str, str] = {
    **{fw: rf"^{re.escape(marker)}(?P<step>\d+)$" for fw, marker in STEP_MARKERS.items()},
    "lightning": r"^(?:.*[-_])?step=(?P<step>\d+)(?:[-_].*)?\.ckpt$",
}

# What torch.save archives are called (single-file checkpoints).
_FILE_SUFFIXES = r"\.(?:pt|pth|pth\.tar|ckpt|bin|tar)"
#: A single-file checkpoint by its suffix: ``.pt``, ``.pth``, ``.pth.tar``, ``.ckpt``, ``.bin``, ``.tar``.
FILE_CHECKPOINT_SUFFIX = re.compile(_FILE_SUFFIXES + "$", re.IGNORECASE)
#: A ``torch.save`` file's name (group ``stem``: the name without its suffix).
TORCH_SAVE_FILE_NAME = r"^(?P<stem>.+?)" + _FILE_SUFFIXES + "$"
#: The step in a Lightning checkpoint's name (``epoch=0-step=400.ckpt``), searched.
LIGHTNING_STEP = re.compile(r"(?:^|[-_])step=(?P<step>\d+)(?:[-_]|\.ckpt$|$)")
#: The step in a single-file checkpoint's stem (``checkpoint-3``, ``model_step_40``).
FILE_STEP = re.compile(
    r"^(?:.*?[-_])?(?:checkpoint|ckpt|model|step|iter|epoch|global_step)[-_=]?(?P<step>\d+)$", re.IGNORECASE
)

# ckptctl's own names (the training library writes only these; retention touches only these).
_CKPTCTL_FINAL = re.compile(STEP_DIR_NAMES["ckptctl"])
_CKPTCTL_TEMP = re.compile(r"^step_(?P<step>\d+)\.tmp-[0-9A-Za-z-]+$")

# (framework, regex). The step is group "step". Anchored on the left so that
# "my_step_1" is not a checkpoint; the tail (?P<tail>...) may hold a temp marker.
# accelerate's checkpoint_N is found by the generic pattern (framework "generic").
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    *(
        (fw, re.compile(rf"^(?P<pre>.*?){re.escape(STEP_MARKERS[fw])}(?P<step>\d+)(?P<tail>.*)$"))
        for fw in ("ckptctl", "torchtitan", "megatron", "deepspeed", "hf")
    ),
    ("generic", re.compile(r"^(?P<pre>.*?)(?:ckpt|checkpoint|step|epoch)[_-]?(?P<step>\d+)(?P<tail>.*)$")),
)

# Markers of a directory still being written (or abandoned mid-write).
_TEMP_MARKER = re.compile(
    r"(?:^|[._\-])(?:tmp|temp|inprogress|in-progress|in_progress|partial|incomplete|unfinished|staging|writing)(?:$|[._\-0-9])"
    r"|\.orbax-checkpoint-tmp",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class CheckpointName:
    """What a directory name says about the checkpoint inside it."""

    name: str
    step: int
    framework: str
    is_temp: bool
    """Still being written or abandoned mid-write: never complete."""
    is_quarantined: bool
    """Marked bad by ``ckptctl rollback``: never complete until undone."""

    @property
    def is_candidate(self) -> bool:
        """Could this directory hold a complete checkpoint?"""
        return not (self.is_temp or self.is_quarantined)


def parse_checkpoint_name(name: str) -> CheckpointName | None:
    """Recognise a checkpoint directory name; None if it is not one."""
    quarantined = QUARANTINE_TAG in name
    base = name.split(QUARANTINE_TAG, 1)[0] if quarantined else name
    for framework, pattern in _PATTERNS:
        m = pattern.match(base)
        if m is None:
            continue
        pre, tail = m.group("pre"), m.group("tail")
        # A prefix or suffix other than a temp marker means it is some other thing
        # ("old_step_3_backup" is not a checkpoint we manage).
        is_temp = bool(_TEMP_MARKER.search(pre + "|" + tail)) if (pre or tail) else False
        if (pre or tail) and not is_temp:
            continue
        return CheckpointName(
            name=name,
            step=int(m.group("step")),
            framework=framework,
            is_temp=is_temp,
            is_quarantined=quarantined,
        )
    return None


def quarantine_name(name: str, stamp: str) -> str:
    """The name a quarantined checkpoint gets (``stamp`` like 20261121T031200Z)."""
    return f"{name}{QUARANTINE_TAG}{stamp}"


def unquarantine_name(name: str) -> str | None:
    """The original name of a quarantined directory, or None if it is not one."""
    if QUARANTINE_TAG not in name:
        return None
    return name.split(QUARANTINE_TAG, 1)[0]


def stamp_of(name: str) -> str:
    """The quarantine stamp in a quarantined name ('' when it is not one)."""
    return name.split(QUARANTINE_TAG, 1)[1] if QUARANTINE_TAG in name else ""


def newest_first_key(cn: CheckpointName) -> tuple[int, int, str]:
    """Sort key: higher step first; at equal steps a final name before a temp one."""
    return (-cn.step, 1 if not cn.is_candidate else 0, cn.name)


# ---------------------------------------------------------------------------------------
# ckptctl's own names
# ---------------------------------------------------------------------------------------


def step_dir_name(step: int) -> str:
    """The final name of ckptctl's checkpoint at ``step``: ``step_120``."""
    return f"step_{step}"


def temp_dir_name(step: int, token: str) -> str:
    """Where a save of ``step`` is written before its commit: ``step_120.tmp-<token>``."""
    return f"{step_dir_name(step)}{TEMP_TAG}{token}"


def deleting_name(name: str, token: str) -> str:
    """A directory retention hid before purging it: ``step_120.tmp-deleting-<token>``
    (a temporary name: never complete; a later pass removes it if the purge never ran)."""
    return f"{name}{TEMP_TAG}{_DELETING}{token}"


def superseded_name(name: str, token: str) -> str:
    """An older ``step_N`` moved aside by a new save at the same step (a quarantine name)."""
    return quarantine_name(name, f"{_SUPERSEDED}{token}")


@dataclass(frozen=True, slots=True)
class OwnName:
    """One of the names ckptctl's training library writes."""

    step: int
    is_temp: bool
    """``step_N.tmp-<token>`` (an uncommitted or abandoned save, or a hidden one)."""


def parse_own_name(name: str) -> OwnName | None:
    """``step_N`` or ``step_N.tmp-<token>``; None for any other name (left alone)."""
    m = _CKPTCTL_FINAL.match(name)
    if m is not None:
        return OwnName(step=int(m.group("step")), is_temp=False)
    m = _CKPTCTL_TEMP.match(name)
    if m is not None:
        return OwnName(step=int(m.group("step")), is_temp=True)
    return None
