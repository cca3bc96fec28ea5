"""Line shapes read beside the field reader: a dict after a prefix of fields, a bare list ending in ``step, lr``.

Pure, stdlib only. The reader (``ckptctl.core.watch.losslog``) asks these when its own rules
give no record for a line, and its fast path (``logfast``) reads such lines the general way.

* **A dict after a bracketed prefix of fields** (ParlAI's ``[ time:10s total_exs:32 ] {'exs': 32,
  'train_loss': 330.1}``): the prefix's fields and the dict's are one record. Its position is a
  step of either; with none, the count of examples (samples) seen, which only goes up.
* **A bare list ending in a step and a learning rate** (the VITS family's ``logger.info([*losses,
  global_step, lr])``: VITS, so-vits-svc, Bert-VITS2 print ``[2.68, 2.04, 5.97, 41.6, 3.53, 37.0, 200,
  0.0002]``; RVC prints ``[200, 9.99875e-05]`` alone and the losses as ``loss_disc=...`` on the next
  line): the next-to-last number (a whole number) is the step, the last (between 0 and 1) the
  learning rate, and the first of the numbers before them the loss (the first component, as a
  line of named components gives). A list of two opens a record the next line's loss joins.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ckptctl.core.watch import logkeys as lk
from ckptctl.core.watch import logtokens as lt
from ckptctl.core.watch.logplan import Record, apply, dict_plan_for, dict_record, plan_for

__all__ = ["dict_line_record", "is_list_line", "list_record", "prefix_dict_record"]

#: A bracketed list of 2 to 16 numbers ending the line, after a logger's prefix (``INFO:name:``,
#: ``| INFO | ``, a timestamp) or alone. Bounded repetition, anchored at the end: linear.
_LIST_RE = re.compile(
    r"(?:^|(?<=[:\]|\s]))\[[ \t]*(?P<nums>" + lk.NUM + r"(?:[ \t]*,[ \t]*" + lk.NUM + r"){1,15})[ \t]*,?[ \t]*\]$"
)


def is_list_line(text: str) -> bool:
    """The line ends in a bracketed list of numbers (whatever they are: the fast path reads such
    lines the general way)."""
    return text.endswith("]") and _LIST_RE.search(text) is not None


def list_record(text: str) -> Record | None:
    """The record of a line that is (after a prefix of words) a list of numbers ending in a step and a
    learning rate, else None."""
    if not text.endswith("]"):
        return None
    m = _LIST_RE.search(text)
    if m is None:
        return None
    values = [lt.parse_float(x.strip()) for x in m.group("nums").split(",")]
    if any(v is None for v in values):
        return None
    nums = [float(v) for v in values if v is not None]
    step, lr = nums[-2], nums[-1]
    if not lt.is_count(step) or not 0 < lr < 1 or not all(math.isfinite(v) or math.isnan(v) for v in nums):
        return None
    rec = Record(step=int(step), metrics={lk.LR: lr})
    if len(nums) > 2:
        rec.loss, rec.loss_rank = nums[0], 3
    return rec


def dict_line_record(body: str, doc: tuple[dict[str, Any], str]) -> Record | None:
    """The record of a line holding the dict ``doc`` (``lt.read_dict``): the dict's own, or, when it
    has no step, the one a bracketed prefix of fields gives it (``prefix_dict_record``)."""
    rec = dict_record(*doc)
    if rec is None or rec.step is None:
        rec = prefix_dict_record(body, doc[0]) or rec
    return rec


def prefix_dict_record(body: str, doc: dict[str, Any]) -> Record | None:
    """The record of a dict line whose text before the dict holds fields (a bracketed prefix),
    when they give it the position the dict lacks; else None."""
    start = body.find("{")
    prefix = body[:start].strip()
    if not prefix or "]" not in prefix:
        return None
    tokens = lt.tokenize(prefix)
    if not tokens.fields:
        return None
    dfields = lt.dict_fields(doc)
    plan = dict_plan_for(tuple(f.key for f in dfields))
    if plan.saw_eval:
        return None
    r = apply(plan, [f.value for f in dfields], [None] * len(dfields))
    kinds = lt.meanings(tokens)
    pre = apply(plan_for(kinds, tuple((f.key, f.unit) for f in tokens.fields)), [f.value for f in tokens.fields], [f.total for f in tokens.fields])
    if r.loss is None or pre.saw_eval:
        return None
    step = r.step if r.step is not None else pre.step
    # (of the prefix only what counts the run: ParlAI's "time:10s" is the time since the start, no step's)
    metrics = {**{k: v for k, v in pre.metrics.items() if k in (lk.SAMPLES, lk.TOKENS)}, **r.metrics}
    if step is None:
        seen = metrics.get(lk.SAMPLES)
        step = int(seen) if seen is not None and lt.is_count(seen) else None
    if step is None:
        return None
    epoch = r.epoch if r.epoch is not None else pre.epoch
    return Record(step=step, loss=r.loss, loss_rank=r.loss_rank, epoch=epoch, rank=r.rank, metrics=metrics, wall=r.wall, fmt="hf")


#: Most batch keys whose pairs are followed (a log has one or two).
_MAX_PAIR_KEYS = 16


class EpochBatchPairs:
    """A batch key's ``N/T`` that is an (epoch, batch) pair, not a count of a total.

    WeNet's ``TRAIN Batch 4/203700 loss ...`` prints ``Batch {epoch}/{batch_idx}``: one line
    cannot tell it from batch 4 of 203700, but a count of a total keeps its total while the count
    moves, and this pair keeps its first number while the second moves. Once a batch key (no epoch
    on its line) shows the same ``N`` with another ``T``, or a ``T`` of 0 (no total is 0: WeNet logs
    each epoch's batch 0), its lines read as epoch ``N``, batch ``T`` (a counter within the epoch,
    composed with it by ``axis``). The lines before are read as they were (step ``N``).
    """

    def __init__(self) -> None:
        self.last: dict[str, tuple[float, float]] = {}
        self.pairs: set[str] = set()

    def read(self, tokens: lt.Tokens) -> lt.Tokens:
        """The tokens with each pair's field split into an epoch and a batch."""
        if not any(f.total is not None and is_batch_key(f.key) for f in tokens.fields):
            return tokens
        fields: list[lt.Field] = []
        for f in tokens.fields:
            if f.total is None or not is_batch_key(f.key):
                fields.append(f)
                continue
            prev = self.last.get(f.key)
            if f.total == 0 or (prev is not None and prev[0] == f.value and prev[1] != f.total):
                self.pairs.add(f.key)  # (a total of 0 is none: WeNet's first batch of an epoch, "Batch 3/0")
            if f.key in self.last or len(self.last) < _MAX_PAIR_KEYS:
                self.last[f.key] = (f.value, f.total)
            if f.key in self.pairs:
                fields += [lt.Field("epoch", f.value), lt.Field("batch", f.total)]
            else:
                fields.append(f)
        return tokens._replace(fields=tuple(fields))


def is_batch_key(key: str) -> bool:
    """A key the batch counter is read under (``Batch``, ``TRAIN Batch``): a step ranked last."""
    return lk.classify_key(key) == (lk.STEP, 6)
