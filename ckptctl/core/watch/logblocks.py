"""Key-value blocks: a record printed as a two-column table, one key per row.

Pure, stdlib only. Stable-Baselines3's logger (and the loggers built like it) prints each
record as a block between rules of dashes, a ``| key | value |`` row per metric, grouped
under section rows with no value (``| time/ |``, ``| train/ |``)::

    ---------------------------------------
    | rollout/                |           |
    |    ep_rew_mean          | -213      |
    | time/                   |           |
    |    iterations           | 18        |
    |    total_timesteps      | 73728     |
    | train/                  |           |
    |    loss                 | 0.482     |
    |    n_updates            | 170       |
    ---------------------------------------

The block is one record: its keys are classified like any other (``n_updates`` the step,
``loss`` the training loss, ``learning_rate``), rows under an evaluation section
(``| eval/ |``) are left out. The block ends at a rule or at any line that is no row.
"""

from __future__ import annotations

import re

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch.logtokens import Field, parse_float

#: A rule of dashes (``-----``, old Stable Baselines' ``//-----``) around a block.
_RULE_RE = re.compile(r"^[ \t]*(?://[ \t]*)?-{8,}[ \t]*$")  # (one blank run per place: linear)
#: A row: a key cell with a letter in it, then a number or nothing (a section).
_ROW_RE = re.compile(r"^[ \t]*\|[ \t]*(?P<key>[A-Za-z][^|]{0,120}?)[ \t]*\|[ \t]*(?P<value>[^|\s]{0,40})[ \t]*\|[ \t]*$")
#: At most this many rows make a block (a longer run of rows is no record).
MAX_ROWS = 200


class KeyValueBlocks:
    """The block being read: ``feed`` takes a line, says whether it was a row, and gives a finished block's fields."""

    def __init__(self) -> None:
        self.fields: list[Field] = []
        self.section = ""
        self.rows = 0
        self.seen = False
        """A block was read in this log: its lines are read the general way from then on."""
        self.took = False
        """The last line fed was a row or rule of a block (the parser resets it)."""

    def feed(self, text: str) -> tuple[bool, list[Field] | None]:
        """(the line was a row or a rule of a block, the fields of the block it ended or None)."""
        m = _ROW_RE.match(text)
        value = parse_float(m.group("value")) if m is not None and m.group("value") else None
        if m is not None and (value is not None or not m.group("value")) and self.rows < MAX_ROWS:
            self.rows, self.took = self.rows + 1, True
            self.seen = True
            key = m.group("key").strip()
            if value is None:
                self.section = key.rstrip("/") if key.endswith("/") else self.section
                return True, None
            in_eval = bool(set(lk.key_words(self.section.lower())) & lk.EVAL_LINE_WORDS)
            if not in_eval:
                self.fields.append(Field(key.lower().replace(" ", "_"), value))
            return True, None
        if not self.rows:
            self.took = _RULE_RE.match(text) is not None and self.seen
            return self.took, None
        done = self.fields
        self.fields, self.section, self.rows = [], "", 0
        self.took = _RULE_RE.match(text) is not None
        return self.took, done or None
