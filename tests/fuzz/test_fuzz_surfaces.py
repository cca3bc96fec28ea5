"""Property-based fuzzing of the surfaces added since the first hardening (issue 27).

Same capped worker and invariants as ``test_fuzz.py`` (only ckptctl's own errors, bounded
memory and time, nothing written to a read-only input), plus one property per surface:

- framework files: a pickle global outside the exact allow-list (attribute chains, protocol-4
  dotted names through ``GLOBAL``, ``STACK_GLOBAL``, memoized names, ``INST``) is
  ``hostile-pickle`` and the file is never ``complete``;
- TensorBoard: a byte changed before the last record is never read as ``continuous``;
- MLflow and JSON-lines logs, JSON state files, the audit log and the lock: any text;
- names and links: a run root of hostile names, links out of the root or onto themselves,
  FIFOs where ckptctl's own files go: ``locate`` finds the one genuine checkpoint, or none.

``make fuzz`` runs 1,000 inputs per test (``CKPTCTL_FUZZ_EXAMPLES``) and prints runs/s.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.fuzz.corpus import write_small_checkpoint
from tests.fuzz.harness import Harness

EXAMPLES = int(os.environ.get("CKPTCTL_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip
_COUNTER = iter(range(10**9))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(tmp_path_factory.mktemp("fuzz-surfaces"))
    yield h
    h.close()
    print(f"\nfuzz (issue 27 surfaces): {h.runs} inputs, {h.runs_per_s():.1f} runs/s in the worker, "
          f"{h.wall_runs_per_s():.1f} runs/s wall, {len(h.findings)} findings")  # fmt: skip
    assert not h.findings, "\n".join(h.findings[:20])


def _fresh(harness: Harness, name: str) -> Path:
    d = harness.scratch / f"in-{next(_COUNTER)}"
    d.mkdir()
    return d / name


# -- framework files: pickle globals --------------------------------------------------------------

#: Pairs every layout allows (tensor rebuild, containers): a plain name of these is no finding.
SAFE = {("torch._utils", "_rebuild_tensor_v2"), ("collections", "OrderedDict"), ("torch", "Size")}
MODULES = ["torch._utils", "torch", "collections", "torch.serialization", "numpy._core.multiarray",
           "transformers.training_args", "lightning.pytorch", "deepspeed.runtime.zero.config", "accelerate.state",
           "os", "builtins", "posix", "subprocess", "__builtin__"]  # fmt: skip
NAMES = ["_rebuild_tensor_v2", "OrderedDict", "Size", "system", "TrainingArguments", "eval", "getattr", "Popen"]
CHAIN = ["__globals__", "os", "system", "__init__", "__class__", "__reduce__", "__builtins__", "modules"]
ENCODINGS = ["GLOBAL-2", "GLOBAL-4", "STACK_GLOBAL", "STACK_GLOBAL-memo", "INST"]
#: Names no layout may allow in any module.
RUNS_CODE = {"system", "eval", "getattr", "Popen"}


def _su(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def global_pickle(module: str, name: str, encoding: str) -> bytes:
    """A pickle that calls ``module``'s ``name`` (dotted: an attribute chain) with one string."""
    arg = _su("echo pwned")
    if encoding == "GLOBAL-2":
        return b"\x80\x02c" + f"{module}\n{name}\n".encode() + arg + b"\x85R."
    if encoding == "GLOBAL-4":
        return b"\x80\x04c" + f"{module}\n{name}\n".encode() + arg + b"\x85R."
    if encoding == "STACK_GLOBAL":
        return b"\x80\x04" + _su(module) + _su(name) + b"\x93" + arg + b"\x85R."
    if encoding == "STACK_GLOBAL-memo":  # both names memoized, then fetched back: MEMOIZE ... BINGET
        return b"\x80\x04" + _su(module) + b"\x94" + _su(name) + b"\x94" + b"0" * 2 + b"h\x00h\x01\x93" + arg + b"\x85R."
    return b"\x80\x02(" + arg + b"i" + f"{module}\n{name}\n".encode() + b"."  # INST


@pytest.fixture(scope="module")
def carrier(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real torch.save archive (tensors, an OrderedDict): its data.pkl is replaced per input."""
    torch = pytest.importorskip("torch")
    from collections import OrderedDict

    path = tmp_path_factory.mktemp("carrier") / "model.pt"
    torch.save(OrderedDict(w=torch.arange(6.0).reshape(2, 3)), path)
    return path.read_bytes()


def _with_pickle(archive: bytes, payload: bytes) -> bytes:
    import io

    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in members:
            z.writestr(name, payload if name.endswith("data.pkl") else data)
    return out.getvalue()


@FUZZ
@given(module=st.sampled_from(MODULES), name=st.sampled_from(NAMES), chain=st.lists(st.sampled_from(CHAIN), max_size=3),
       encoding=st.sampled_from(ENCODINGS))  # fmt: skip
@example(module="transformers.training_args", name="os", chain=["system"], encoding="STACK_GLOBAL")
@example(module="torch._utils", name="_rebuild_tensor_v2", chain=["__globals__"], encoding="GLOBAL-4")
@example(module="torch._utils", name="_rebuild_tensor_v2", chain=[], encoding="STACK_GLOBAL-memo")
def test_fuzz_framework_pickle_globals(
    harness: Harness, carrier: bytes, module: str, name: str, chain: list[str], encoding: str
) -> None:
    dotted = ".".join([name, *chain])
    f = _fresh(harness, "checkpoint-7.pt")
    f.write_bytes(_with_pickle(carrier, global_pickle(module, dotted, encoding)))
    report = harness.run("verify_any", f, read_only_tree=f.parent)
    status, _, codes = str(report.get("outcome", "")).partition(" ")
    if not report.get("ok"):
        return  # the harness recorded the finding
    if (module, dotted) in SAFE and encoding != "INST":
        assert "hostile-pickle" not in codes, (module, dotted, encoding, report)
    elif chain or module in ("os", "builtins", "posix", "subprocess", "__builtin__") or name in RUNS_CODE:
        assert status != "complete" and "hostile-pickle" in codes.split(","), (module, dotted, encoding, report)


# -- TensorBoard event files ------------------------------------------------------------------------


def _tb_record(data: bytes) -> bytes:
    from ckptctl.core.verify.crc import masked_crc32c

    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked_crc32c(head)) + data + struct.pack("<I", masked_crc32c(data))


def _event_file(steps: range) -> tuple[bytes, list[int]]:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    records = [_tb_record(Event(step=s, wall_time=1.0 + s, summary=Summary(value=[Summary.Value(
        tag="train/loss", simple_value=2.0 + 8.0 * (s + 50) ** -0.4)])).SerializeToString()) for s in steps]  # fmt: skip
    starts = [sum(len(r) for r in records[:i]) for i in range(len(records))]
    return b"".join(records), starts


@pytest.fixture(scope="module")
def event_files() -> list[tuple[bytes, list[int]]]:
    """A continuous resumed run: the pre-failure writer's file (steps 10..500) and the resumed
    writer's (310..900, checkpoint 300); with each, the offset of every record."""
    pytest.importorskip("tensorboard")
    return [_event_file(range(10, 510, 10)), _event_file(range(310, 910, 10))]


def _write_run(harness: Harness, bodies: list[bytes]) -> Path:
    logdir = _fresh(harness, "tb")
    logdir.mkdir()
    for i, body in enumerate(bodies):
        (logdir / f"events.out.tfevents.{i + 1}.host").write_bytes(body)
    return logdir


def test_clean_event_files_are_continuous(harness: Harness, event_files: list[tuple[bytes, list[int]]]) -> None:
    """The property below is not vacuous: untouched, the run reads as continuous."""
    logdir = _write_run(harness, [body for body, _ in event_files])
    assert str(harness.run("watch", logdir).get("outcome", "")).startswith("continuous")


@FUZZ
@given(which=st.integers(0, 1), edits=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)), min_size=1,
       max_size=4), cut=st.none() | st.integers(0, 1 << 20))  # fmt: skip
def test_fuzz_tensorboard_bytes(
    harness: Harness, event_files: list[tuple[bytes, list[int]]], which: int, edits: list[tuple[int, int]],
    cut: int | None,
) -> None:
    body, starts = event_files[which]
    data = bytearray(body)
    end = len(data) if cut is None else cut % len(data)
    last = max((s for s in starts if s < end), default=0)  # the record the (cut) file ends in
    for pos, flip in edits:
        data[pos % len(data)] ^= flip
    changed_before_last = data[:last] != body[:last]  # (two flips of one byte undo each other)
    del data[end:]
    bodies = [b for b, _ in event_files]
    bodies[which] = bytes(data)
    logdir = _write_run(harness, bodies)
    report = harness.run("watch", logdir, read_only_tree=logdir)
    verdict = str(report.get("outcome", "")).split(" ")[0]
    if report.get("ok") and changed_before_last:
        assert verdict != "continuous", (which, edits, cut, end, last, report)  # no verdict from unread bytes


# -- MLflow metric files and JSON-lines logs --------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
JSON_TEXT = st.one_of(
    JSON_VALUES.map(lambda v: json.dumps(v, allow_nan=True)),
    st.integers(1, 100_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 50_000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.sampled_from(['{"pid": 1' + "0" * 40 + "}", '{"pid": Infinity}', '{"step": 1e999, "loss": -Infinity}',
                     '{"x": "\\ud800"}', "\xff\xfe", "", "{", '{"a": 1, "a": 2}']),
    st.text(max_size=60),
)  # fmt: skip


@FUZZ
@given(lines=st.lists(st.one_of(JSON_TEXT, st.builds(lambda s, v: json.dumps({"step": s, "loss": v}),
                                                     st.integers(-5, 2**64), st.floats(allow_nan=True))),
                      max_size=20))  # fmt: skip
def test_fuzz_jsonl_loss_lines(harness: Harness, lines: list[str]) -> None:
    good = [json.dumps({"step": s, "loss": 2.0 + 8.0 * (s + 50) ** -0.4}) for s in range(10, 610, 10)]
    f = _fresh(harness, "train.jsonl")
    f.write_text("\n".join(good[:30] + lines + good[30:]) + "\n", encoding="utf-8", errors="surrogatepass")
    harness.run("watch", f, read_only_tree=f.parent)


MLFLOW_LINES = st.lists(
    st.one_of(st.text(max_size=40),
              st.builds(lambda t, v, s: f"{t} {v} {s}", st.integers(-(2**70), 2**70), st.text(max_size=12),
                        st.integers(-(2**70), 2**70))),
    max_size=20,
)  # fmt: skip


@FUZZ
@given(lines=MLFLOW_LINES, long_tail=st.integers(0, 3))
def test_fuzz_mlflow_metric_files(harness: Harness, lines: list[str], long_tail: int) -> None:
    run = _fresh(harness, "run1")
    (run / "metrics").mkdir(parents=True)
    good = [f"{1000 * s} {2.0 + 8.0 * (s + 50) ** -0.4} {s}" for s in range(10, 610, 10)]
    text = "\n".join(good[:30] + lines + good[30:]) + "\n" + "x" * (long_tail * 40_000)
    (run / "metrics" / "loss").write_text(text, encoding="utf-8", errors="surrogatepass")
    harness.run("watch", run, read_only_tree=run)


@FUZZ
@given(text=JSON_TEXT)
def test_fuzz_json_parser(harness: Harness, text: str) -> None:
    f = _fresh(harness, "doc.json")
    f.write_text(text, encoding="utf-8", errors="surrogatepass")
    harness.run("json", f)


# -- run roots: names, links, the audit log, the lock, state files ---------------------------------


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("genuine") / "step_10")


NAME_TEXT = st.text(alphabet=st.sampled_from([*"step_ckpoin-0123456789", "\n", "\r", "\t", "\x1b", "\x00", " ", "$",
                                             "(", ")", "/", "."]), min_size=1, max_size=14)  # fmt: skip
ENTRY = st.tuples(
    st.sampled_from(["dir", "link-self", "link-outside", "link-genuine", "link-dangling", "link-parent", "fifo"]),
    st.one_of(NAME_TEXT, st.integers(11, 99).map(lambda n: f"step_{n}"),
              st.integers(11, 99).map(lambda n: f"step_{n}\n"), st.sampled_from(["latest", "LATEST"])),
)
STATE_FILE = st.tuples(st.sampled_from(["audit.jsonl", "lock", "job.json", "report-1.json"]),
                       st.one_of(JSON_TEXT, st.just("FIFO"), st.just("LINK")))  # fmt: skip


def _make_entry(root: Path, outside: Path, kind: str, name: str) -> None:
    if "/" in name or name in (".", "..") or "\x00" in name:
        return
    p = root / name
    if os.path.lexists(p):
        return
    if kind == "dir":  # a copy of a checkpoint whose .metadata would run code: must never be located
        shutil.copytree(outside / "step_99", p)
        (p / ".metadata").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    elif kind == "fifo":
        os.mkfifo(p)
    else:
        target = {"link-self": p, "link-outside": outside / "step_99", "link-genuine": root / "step_10",
                  "link-dangling": root / "absent", "link-parent": root}[kind]  # fmt: skip
        p.symlink_to(target)


@FUZZ
@given(entries=st.lists(ENTRY, max_size=5), state=st.lists(STATE_FILE, max_size=3))
@example(entries=[("dir", "step_99\n")], state=[])
@example(entries=[("link-parent", "step10")], state=[])  # found by this test: a link to the root
@example(entries=[("link-self", "step_30"), ("link-outside", "step_40")], state=[("audit.jsonl", "FIFO")])
@example(entries=[("link-outside", "latest")], state=[("lock", "[" * 100_000 + "]" * 100_000)])
def test_fuzz_run_root_names_links_and_state(
    harness: Harness, genuine: Path, entries: list[tuple[str, str]], state: list[tuple[str, str]]
) -> None:
    base = _fresh(harness, "case")
    outside = base / "outside"
    shutil.copytree(genuine, outside / "step_99")  # complete, newer, out of the root: never located
    root = base / "run"
    shutil.copytree(genuine, root / "step_10")
    for kind, name in entries:
        _make_entry(root, outside, kind, name)
    if state:
        (root / ".ckptctl").mkdir()
    for name, content in state:
        p = root / ".ckptctl" / name
        if os.path.lexists(p):
            continue
        if content == "FIFO":
            os.mkfifo(p)
        elif content == "LINK":
            p.symlink_to(outside / "step_99" / ".metadata")
        else:
            p.write_text(content, encoding="utf-8", errors="surrogatepass")
    report = harness.run("root", root, read_only_tree=base)
    outcome = str(report.get("outcome", ""))
    if report.get("ok") and not outcome.startswith("error"):
        located = outcome.split(" rollback=")[0]
        # the genuine one (or a link to it inside the root), never a hostile name or a way out
        assert os.path.realpath(located) == str((root / "step_10").resolve()), (entries, state, report)
