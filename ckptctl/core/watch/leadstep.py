"""A record's step printed bare at the head of the line, before its first ``|``.

Pure, stdlib only. Some loops print a record as pipe-separated cells whose first cell is the
step with no key (``10 | loss 9.3750 | lr 3.0e-04 | 13597.70ms``: a table row without its
header). The reader takes that leading integer as the step only for a line whose cells name a
training loss and no step, epoch or counter of their own; anything else keeps its reading.
"""

from __future__ import annotations

import re

#: Blanks, an integer, blanks, a ``|`` and a key's first letter (one blank run per place: linear).
_LEAD_RE = re.compile(r"[ \t]{0,32}(\d{1,12})[ \t]{0,32}\|[ \t]{0,32}[A-Za-z]")


def leading_step(body: str) -> int | None:
    """The step a line prints bare at its head (``12 | loss ...``), else None."""
    if not body[:1].isdigit() and body[:1] not in (" ", "\t"):
        return None
    m = _LEAD_RE.match(body)
    return None if m is None else int(m.group(1))
