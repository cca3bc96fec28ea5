"""A value in brackets glued to its key: ``updates[ 21641] train loss[3.57521]`` (DrQA's trainer).

Pure, stdlib only. The tokenizer (``ckptctl.core.watch.logtokens``) reads ``key value``; a line whose
values sit in brackets right after their keys is given to it with those brackets blanked (same length:
every position stays, for the fast path's templates). A value is a fraction (``loss[3.57]``,
``lr[3e-4]``) or a number padded by blanks (``updates[ 14]``, a logger's fixed width); a whole number
right after the bracket is an index (``steps[0]``, code in a traceback) and stays as it is.
"""

from __future__ import annotations

import re

from ckptctl.core.watch.logkeys import NUM

_FRACTION = r"[-+]?(?:\d*\.\d+(?:[eE][-+]?\d+)?|\d+\.?\d*[eE][-+]?\d+)"
#: (the bracket first: the regex engine looks for it alone; the key's last letter, a blank at most between)
_GLUED_RE = re.compile(
    r"\[(?:(?<=[A-Za-z_]\[)|(?<=[A-Za-z_] \[))(?P<inner>[ \t]+" + NUM + r"[ \t]*|[ \t]*" + _FRACTION + r"[ \t]*)\](?![\w.])"
)


def unglue(text: str) -> str:
    """``text`` with the brackets around values glued to their keys blanked (same length)."""
    return _GLUED_RE.sub(lambda m: f" {m.group('inner')} ", text)
