"""An epoch heading: a line that names the epoch alone, the head of the record on the lines below.

Pure, stdlib only. Some trainers print each epoch as a block: a line with the epoch and nothing
else, then the epoch's values on lines of their own, each behind the logger's timestamp. nnU-Net
v2 prints ``Epoch 12``, ``Current learning rate: 0.0089``, ``train_loss -0.71``, ``val_loss ...``;
its first version ``epoch:  12``, ``train loss : -0.71``, ``validation loss: ...``, ``lr: 0.0089``.
The reader (``losslog``) opens a record at that epoch (its position on the epoch axis) and the
short lines after it join the record as any multi-line record's do (the first training loss, the
learning rate before it); an evaluation line closes it.

A line is a heading when its only field is a whole epoch and its text ends with the word epoch and
that number, the word at the start of the text or right after a prefix's separator (``:``, ``|``,
``]``, ``>``, ``-``): ``2024-04-26 09:39:10: Epoch 0``, ``INFO:root:epoch: 6``, ``| Epoch #3``. Prose
that ends in an epoch (``saving the model at epoch 12``) is none; nor is ``Epoch 3/20`` (an epoch of
a total: Keras's header, read by its own rule).
"""

from __future__ import annotations

import re

#: The word epoch and a whole number ending the line, at its start or after a separator. One
#: optional blank run per place, anchored at the end: linear in a search.
_HEADING_RE = re.compile(r"(?:^|[:|\]>-])[ \t]{0,32}epoch[ \t]{0,8}[:=#]?[ \t]{0,8}\d{1,9}[ \t]{0,32}$", re.IGNORECASE)
#: Longest text a heading line may have (a prefix and the heading).
_MAX_HEADING_CHARS = 160


def is_epoch_heading(body: str) -> bool:
    """The line (its text after the timestamp) is an epoch heading."""
    return len(body) <= _MAX_HEADING_CHARS and _HEADING_RE.search(body) is not None
