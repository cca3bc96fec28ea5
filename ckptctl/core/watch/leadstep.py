"""A record's step printed without its key: bare at the head of the line, or as a range.

Pure, stdlib only. Some loops print a record as pipe-separated cells whose first cell is the
step with no key (``10 | loss 9.3750 | lr 3.0e-04 | 13597.70ms``: a table row without its
header). The reader takes that leading integer as the step only for a line whose cells name a
training loss and no step, epoch or counter of their own; anything else keeps its reading.

CNTK's ``ProgressPrinter`` (``cntk/logging/progress_print.py``) prints the minibatches a line
averages as a range: `` Minibatch[ 501-1000]: loss = 6.146891 * 22750, metric = 0.00% * 22750;``
(the loss times the samples it averages), counted from the start of the epoch; at the end of an
epoch ``Finished Epoch[1 of 10]: loss = 6.5 * 45500, ...`` (the epoch's average: a summary of the
lines above, no record of its own; with no range printed at all, the epoch's record).
``MinibatchRanges`` turns the range's last minibatch into a step that goes on across epochs: the
minibatches of the epochs finished in this log plus the range's end. A process started again
prints ranges from 1 again: the step goes back within the epoch (CNTK restores the checkpoint of
the last finished epoch; the reader's restart rules see it). ``Evaluation Minibatch[...]`` lines
carry a metric, no loss.
"""

from __future__ import annotations

import re

#: Blanks, an integer, blanks, a ``|`` and a key's first letter (one blank run per place: linear).
_LEAD_RE = re.compile(r"[ \t]{0,32}(\d{1,12})[ \t]{0,32}\|[ \t]{0,32}[A-Za-z]")
#: ``Minibatch[ 501-1000]`` (CNTK pads the numbers to 4 places); one blank run per place: linear.
_RANGE_RE = re.compile(r"(?<![A-Za-z])[Mm]inibatch\[[ \t]{0,12}(\d{1,12})[ \t]{0,12}-[ \t]{0,12}(\d{1,12})[ \t]{0,12}\]")
#: ``Finished Epoch[1 of 10]`` (``Finished Epoch [16]`` before CNTK 2.0): the end of an epoch.
_EPOCH_END_RE = re.compile(r"Finished Epoch[ \t]{0,4}\[[ \t]{0,12}(\d{1,9})(?:[ \t]{1,12}of[ \t]{1,12}\d{1,9})?[ \t]{0,12}\]")


def leading_step(body: str) -> int | None:
    """The step a line prints bare at its head (``12 | loss ...``), else None."""
    if not body[:1].isdigit() and body[:1] not in (" ", "\t"):
        return None
    m = _LEAD_RE.match(body)
    return None if m is None else int(m.group(1))


def has_range(body: str) -> bool:
    """The line prints a minibatch range or an epoch's end (read the general way: ``MinibatchRanges``)."""
    return "inibatch[" in body or "Finished Epoch" in body


class MinibatchRanges:
    """A log's minibatch ranges (CNTK): the step of a range line, the epochs finished so far."""

    def __init__(self) -> None:
        self.done = 0
        """Minibatches of the epochs finished in this log."""
        self.last = 0
        """The last range's end in the current epoch."""
        self.seen = False
        """A range was printed (else the epochs' summaries are the records)."""

    def step(self, body: str) -> tuple[int | None, bool]:
        """The step of a training line printing a range, and whether it is an epoch.

        An epoch's end is counted and gives no step, unless the log printed no range at all (a
        printer with no minibatch frequency: the epochs' summaries are the log's records, ``True``)."""
        end = _EPOCH_END_RE.search(body)
        if end is not None:
            if not self.seen:
                return int(end.group(1)), True
            self.done, self.last = self.done + self.last, 0
            return None, False
        m = _RANGE_RE.search(body)
        if m is None:
            return None, False
        self.seen, self.last = True, int(m.group(2))
        return self.done + self.last, False
