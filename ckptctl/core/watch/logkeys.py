"""What a log key means: step, loss, learning rate, tokens, throughput, ... read from its words.

Pure, stdlib only. ``classify_key`` answers from the key's words (``lm_loss`` -> ``lm``,
``loss``), so a new logger with familiar words needs no new code; ``KEY_VOCABULARY`` lists
every word it answers on (a line holding none of them carries no field with a meaning).
"""

from __future__ import annotations

import functools
import re

#: A number as the field reader reads one: sign, thousands separators, fraction, exponent.
NUM = r"(?<![\d.])[-+]?(?:(?:\d{1,3}(?:,\d{3})+(?!\d|,\d)|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?!\.?\d)"

#: Every word ``classify_key`` answers on (and the evaluation words a line is skipped for):
#: a key whose words hold none of them means nothing. Kept next to ``classify_key``; a
#: test checks that every key it classifies in the corpora holds one.
KEY_VOCABULARY: tuple[str, ...] = (
    "loss", "rank", "lr", "learning", "norm", "gnorm", "scale", "scaler", "mfu", "tflop", "tflops",
    "tps", "wps", "tok", "token", "tokens", "ntokens", "words", "sample", "samples", "sps", "ups",
    "it", "step", "steps", "globalstep", "iter", "iteration", "iterations", "global", "updates",
    "time", "timestamp", "walltime", "ts", "dt", "ms", "elapsed", "epoch", "nan",
    "val", "valid", "validate", "validation", "eval", "evaluate", "evaluation", "evaluating", "test", "testing", "dev",
    "xent", "nll", "cost", "mse", "rmse", "mae", "entropy",
    "up", "upd", "ep", "itn", "batch", "perplexity", "ppl", "exs", "examples",
)  # fmt: skip
#: Words a logger glues to ``loss`` (fairseq-lua's ``trainloss``, ``validloss``, ``testloss``):
#: ``key_words`` splits such a word in two, so the key reads as ``train loss``.
_GLUED_LOSS_PREFIXES = ("train", "training", "total", "valid", "val", "test", "eval", "dev", "lm", "avg", "mean")
KEY_VOCABULARY += tuple(p + "loss" for p in _GLUED_LOSS_PREFIXES)
#: Words a logger glues after ``loss`` (MXNet metric names: insightface's ``lossvalue``): split too.
_GLUED_LOSS_SUFFIXES = ("value",)
KEY_VOCABULARY += tuple("loss" + p for p in _GLUED_LOSS_SUFFIXES)
#: A line that can carry a field with a meaning has a vocabulary word between non-letters
#: (a key's words are split at ``_ . / -`` and blanks; a digit or other sign next to a
#: word only makes it longer, never shorter).
_VOCABULARY = frozenset(KEY_VOCABULARY)
_LETTER_RUNS_RE = re.compile(r"[a-z]+")

STEP = "step"
EPOCH = "epoch"
LOSS = "loss"
EVAL = "eval"
LR = "lr"
TOKENS = "tokens"
SAMPLES = "samples"
SEC_PER_STEP = "sec_per_step"
TOKENS_PER_S = "tokens_per_s"
SAMPLES_PER_S = "samples_per_s"
STEPS_PER_S = "steps_per_s"
MFU = "mfu"
TFLOPS = "tflops"
LOSS_SCALE = "loss_scale"
GRAD_NORM = "grad_norm"
RANK = "rank"
NAN_COUNT = "nan_count"
WALL = "wall"

_EVAL_WORDS = frozenset({"val", "valid", "validate", "validation", "eval", "evaluate", "evaluation", "test", "testing", "dev"})
#: An evaluation word used as a key, with a value or none yet (LitGPT's "loss train: 2.3, val: n/a"
#: or "val: 2.4"): that field is the evaluation, not the line (its other fields are training ones).
EVAL_NO_VALUE_RE = re.compile(
    r"(?i)\b(?:val|valid|validation|eval|evaluation)[ \t]*[:=][ \t]*(?:n/a|na|none|null|-+(?![\d.])|" + NUM + r")(?![\w/])"
)
#: Python logging's basic format (``INFO:name:``) and Hydra's (``[time][name][INFO]``) open a line
#: with the logger's name: the program's, not the line's (a project named ``mi-test`` does not make
#: every line an evaluation line), so its words are left out of ``EVAL_LINE_WORDS``' check.
_LOGGER_PREFIX_RE = re.compile(r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL):[\w.\-]{1,128}:"
                               r"|(?:\[[^\]\n]{1,64}\])?\[[\w.\-]{1,128}\]\[(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]")


def without_logger(text: str) -> str:
    """``text`` less a logging prefix naming the logger (``_LOGGER_PREFIX_RE``)."""
    m = _LOGGER_PREFIX_RE.match(text)
    return text if m is None else text[m.end():]


#: Any of these words on a text line makes it an evaluation line (fairseq's "| valid | ... | loss 5.2 |", timm's
#: and the ImageNet example's "Test: [ 0/48]  Loss: ...").
EVAL_LINE_WORDS = frozenset({"val", "valid", "validate", "validation", "eval", "evaluate", "evaluation", "evaluating", "test", "testing"})
_NOT_LOSS_WORDS = frozenset({"scale", "aux", "auxiliary", "balance", "router", "z", "epoch", "function", "fn", "type", "weight", "weights", "coef", "ratio"})
_STEP_WORDS = {
    "global_step": 0, "globalstep": 0, "num_updates": 0, "updates": 1, "optimizer_step": 0,
    "step": 2, "steps": 2, "iteration": 3, "iterations": 3, "iter": 3, "it": 4, "global": 2, "_step": 2,
    "i": 5,  # a loop's index (torch-rnn's "Epoch 1.06 / 50, i = 21 / 17800, loss = 3.07"): last of all
}  # fmt: skip
#: A training loss named by its criterion, with no word "loss" (OpenNMT-py's ``xent: 4.05``, TF
#: scripts' ``cost= 0.28``, ``RMSE_Train``): a loss only bare or with a training qualifier
#: (``time cost``, ``batch_cost``, ``rmse_val`` are not), and after any key named loss.
_CRITERION_WORDS = frozenset({"xent", "nll", "cost", "mse", "rmse", "mae", "cross_entropy", "crossentropy"})
#: The training objective logged only as its perplexity (Sockeye's ``perplexity=29.69``): a loss
#: after any key named loss or by its criterion (fairseq's ``loss ... ppl``, OpenNMT-py's ``ppl:
#: ... xent:`` keep theirs); bare or with a training qualifier only.
_PERPLEXITY_WORDS = frozenset({"perplexity", "ppl"})
_LOSS_RANK_EXACT = {"loss": 0, "total_loss": 1, "train_loss": 1, "training_loss": 1, "lm_loss": 1,
                    "train/loss": 1, "train_loss_step": 0, "loss_step": 1, "train/loss_step": 0, "train/lm_loss": 1}  # fmt: skip


#: Words that only say a loss is the training one (``loss train``, ``loss/train/total``).
_TRAIN_QUALIFIERS = frozenset({"train", "training", "total", "trn"})
#: Abbreviated keys, whole (Marian's ``Ep. 1 : Up. 14000 : Sen. 965,843 : Cost 5.20``, spaCy 2's
#: ``Itn.`` column; the dot is no part of a key): only alone, never as a word of a longer key
#: (``warm up``, ``speed up``).
_ABBREVIATED = {"up": ("step", 1), "upd": ("step", 1), "itn": ("step", 3), "ep": ("epoch", 0)}
#: A batch counter within the epoch (icefall's ``Epoch 0, batch 120, loss[...]``): a step key
#: ranked after every other (a per-epoch counter is composed with the epoch by ``axis``); only
#: the key alone (``batch size``, ``batch_time``, ``tokens per batch`` are none).
_BATCH_KEYS = frozenset({"batch", "batch_idx", "batch_id"})
#: A logger's level word glued before a key (``DEBUG TRAIN Batch``): not a word of the key.
_LEVEL_WORDS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "notice", "trace"})
_TIME_KEYS = frozenset({"ms_per_it", "s_per_it", "ms_per_step", "s_per_step", "sec_it"})


#: A rate's unit as a word of its own (``samples/sec``, ``updates/sec``): it ends a key (``logtokens``).
RATE_UNIT_RE = re.compile(r"(?i)^[a-z]+/(?:s|sec|second)$")
_KEY_SPLIT_RE = re.compile(r"[_\s/.\-]+")


_GLUED_LOSS = frozenset(p + "loss" for p in _GLUED_LOSS_PREFIXES)
_LOSS_GLUED = frozenset("loss" + p for p in _GLUED_LOSS_SUFFIXES)


@functools.lru_cache(maxsize=4096)
def key_words(key: str) -> tuple[str, ...]:
    """The words of a key (``lm_loss`` -> ``lm``, ``loss``; ``trainloss`` -> ``train``, ``loss``)."""
    words: list[str] = []
    for w in _KEY_SPLIT_RE.split(key):
        if w in _GLUED_LOSS:
            words += (w[:-4], "loss")
        elif w in _LOSS_GLUED:
            words += ("loss", w[4:])
        elif w:
            words.append(w)
    if len(words) > 1 and words[0] == "l" and words[1].isalpha() and "loss" not in words:
        words[0] = "loss"  # BasicSR's loss components "l_pix", "l_g_gan", "l_d_real" (its loss_dict keys)
    return tuple(words)


@functools.lru_cache(maxsize=4096)
def classify_key(key: str, unit: str = "") -> tuple[str, int] | None:
    """(meaning, rank: lower is preferred) of a field's key, or None for anything else."""
    words = list(key_words(key))
    if not words:
        return None
    if len(words) > 1 and words[0] in _LEVEL_WORDS and key.startswith(words[0]):
        # a logger's level glued before a counter's key (WeNet's "DEBUG TRAIN Batch 4/203700"): no
        # word of it (only for a step or an epoch: InfoGAN's "info_loss" is a loss of its own)
        unlevelled = classify_key(key[len(words[0]) :].lstrip("_ /.-"), unit)
        if unlevelled is not None and unlevelled[0] in (STEP, EPOCH):
            return unlevelled
    wset = set(words)
    last = words[-1]
    if wset & _EVAL_WORDS:
        return (EVAL, 0) if "loss" in wset or wset & {"step", "iter", "iteration", "ppl"} else None
    if "nan" in wset and wset & {"iterations", "iteration", "steps", "count"}:
        return NAN_COUNT, 0
    if wset & {"skipped", "skip", "number", "nan"}:
        return None
    if last == "rank" and len(words) <= 2:
        return RANK, 0
    if "loss" in wset:
        if wset & {"scale", "scaler"}:
            return LOSS_SCALE, 0
        if last == "loss" and "epoch" in wset and wset - {"epoch", "avg", "mean"} <= _TRAIN_QUALIFIERS | {"loss"}:
            # an epoch's average named so (GluonTS's "avg_epoch_loss"): only when nothing else is (a
            # metric name with Lightning's "_epoch" suffix, beside its "_step" twin, stays none)
            return LOSS, 4
        if wset & _NOT_LOSS_WORDS or "lr" in wset:
            return None
        tail = "_".join(words[words.index("loss") - 1 :]) if words.index("loss") > 0 else "_".join(words[words.index("loss") :])
        for candidate in (key, "_".join(words[-3:]), "_".join(words[-2:]), tail):
            if candidate in _LOSS_RANK_EXACT:
                return LOSS, _LOSS_RANK_EXACT[candidate]
        if set(words) - {"loss"} <= _TRAIN_QUALIFIERS:
            return LOSS, 1  # "loss train", "loss (train)", "Train loss/train/total": the training loss
        if last == "loss" or (words[0] == "loss" and len(words) == 2 and words[1].isdigit()):
            return LOSS, 2
        return LOSS, 3  # a component (loss_cls, decoder_loss): only when nothing better
    if wset & _CRITERION_WORDS or words[-2:] == ["cross", "entropy"]:
        rest = wset - _CRITERION_WORDS - {"cross", "entropy"}
        return (LOSS, 2) if rest <= _TRAIN_QUALIFIERS else None
    if wset & _PERPLEXITY_WORDS:
        return (LOSS, 3) if wset - _PERPLEXITY_WORDS <= _TRAIN_QUALIFIERS else None
    path = key.split("/")
    if len(path) > 1 and key_words(path[-2])[-1:] == ("time",):
        # a path metric's clock ("time/token", "time/sample", "time/batch"): a counter, not a duration
        counted = key_words(path[-1])
        return (TOKENS, 0) if counted in {("token",), ("tokens",)} else (SAMPLES, 0) if counted in {("sample",), ("samples",)} else None
    if last in {"lr", "learning_rate"} or words[-2:] == ["learning", "rate"] or (wset & {"lr"} and (len(words) <= 3 or "lr" in key_words(path[0]))):
        return LR, 0
    if wset & {"gnorm", "grad_norm"} or words[-2:] == ["grad", "norm"] or (last == "norm" and "grad" in wset):
        return GRAD_NORM, 0
    if last == "scale" and len(words) <= 2 and words[0] not in ("logit", "logits"):
        return LOSS_SCALE, 1  # ("grad_scale", "scale"; open_clip's "Logit Scale" is the model's temperature)
    if wset & {"mfu"}:
        return MFU, 0
    if wset & {"tflops", "tflop"}:
        return TFLOPS, 0
    per = "per" in wset or unit.endswith(("/s", "/sec")) or last in {"s", "sec", "second", "ps"}
    if wset & {"tps", "wps"} or (wset & {"tokens", "tok", "token", "words"} and per):
        return TOKENS_PER_S, 0
    if (wset & {"samples", "sample"} and per) or wset & {"sps"}:
        return SAMPLES_PER_S, 0
    if key in {"it_per_s", "ups", "steps_per_second", "train_steps_per_second"} or unit == "it/s":
        return STEPS_PER_S, 0
    timing = "time" in wset or wset & {"dt", "ms", "elapsed"} or key in _TIME_KEYS
    excluded = wset & {"data", "loader", "last", "wall", "train_wall", "eta", "total", "avg"}
    per_step = wset & {"iteration", "iter", "step", "it", "batch", "time", "dt"} or key.endswith(("_per_it", "_per_step"))
    if timing and not excluded and (per_step or key == "ms"):
        return SEC_PER_STEP, 0 if ("per" in wset or key.endswith(("_per_it", "_per_step"))) else 1
    if (wset & {"tokens", "token"} and wset & {"seen", "consumed", "num", "input", "total", "processed"}) or key in {"tokens", "ntokens"}:
        return TOKENS, 0
    if wset & {"samples", "sample"} and wset & {"seen", "consumed", "num", "processed"}:
        return SAMPLES, 0
    if wset & {"exs", "examples"} and wset & {"seen", "num", "processed", "total"}:
        return SAMPLES, 0  # examples seen (ParlAI's "total_exs:32")
    if key in _ABBREVIATED:
        return _ABBREVIATED[key]
    if key in _BATCH_KEYS or (last == "batch" and wset - {"batch"} <= _TRAIN_QUALIFIERS):
        return STEP, 6
    if last in _STEP_WORDS and not wset & {"per", "time", "validate"}:
        joined = "_".join(words[-2:])
        return STEP, min(_STEP_WORDS.get(joined, 9), _STEP_WORDS[last])
    if key in _STEP_WORDS:
        return STEP, _STEP_WORDS[key]
    if last == "epoch" or (words[0] == "epoch" and wset - {"epoch"} <= _TRAIN_QUALIFIERS):
        return EPOCH, 0  # ("Epoch_Train: 64003": TF-CRNN's, an epoch named the training one)
    if key in {"time", "timestamp", "_timestamp", "wall_time", "walltime", "ts"}:
        return WALL, 0
    return None


_MAYBE_COUNTER_RE = re.compile(r"\d[ \t]*/[ \t]*[\d?]")


def is_meaningless(text: str) -> bool:
    """No word of the line is one a key can mean something by, and it holds no ``N/T`` counter.

    ASCII only: a non-ASCII letter could lower-case into a vocabulary word (K, the Kelvin sign).
    """
    return (
        text.isascii()
        and _VOCABULARY.isdisjoint(_LETTER_RUNS_RE.findall(text.lower()))
        and _MAYBE_COUNTER_RE.search(text) is None
        # camel-case words (OLMo's "train/CrossEntropyLoss=12.18"), looked at only on such a line
        and _VOCABULARY.isdisjoint(w.lower() for w in _CAMEL_RUNS_RE.findall(text))
    )


#: The words of a camel-case key (``CrossEntropyLoss`` -> ``Cross``, ``Entropy``, ``Loss``).
_CAMEL_RUNS_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
