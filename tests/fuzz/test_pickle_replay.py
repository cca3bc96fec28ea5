"""``check_shape`` replays repeated units (core/verify/pickle_replay.py): the same verdict as
the opcode-by-opcode walk (``replay=False``), on genuine, mutated and generated pickles."""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptctl.core.verify import pickle_replay
from ckptctl.core.verify.pickle_shape import PickleShapeError, check_shape
from tests.fuzz.test_fuzz import FUZZ
from tests.fuzz.test_pickle_shape import NESTED, Node, _reference_depth


@pytest.fixture(scope="module")
def many_entries(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real ``.metadata`` of 300 entries (1-D, 2-D, bf16, a bytes value): units that repeat."""
    import torch
    import torch.distributed.checkpoint as dcp

    warnings.filterwarnings("ignore")
    path = tmp_path_factory.mktemp("replay") / "step_1"
    sd: dict[str, object] = {f"layer{i}.weight": torch.zeros(3 + i % 5) for i in range(200)}
    sd.update({f"block{i}.proj": torch.zeros(2, 70000 + i) for i in range(60)})
    sd.update({f"norm{i}": torch.ones(4, dtype=torch.bfloat16) for i in range(40)})
    sd["step"] = 7
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(path), single_file_per_rank=False))
    return (path / ".metadata").read_bytes()


def _outcome(data: bytes, *, replay: bool, max_nesting: int = 100) -> str | None:
    try:
        check_shape(data, max_nesting=max_nesting, replay=replay)
    except PickleShapeError as e:
        return str(e)
    return None


def _same(data: bytes, max_nesting: int = 100) -> str | None:
    walked = _outcome(data, replay=False, max_nesting=max_nesting)
    assert _outcome(data, replay=True, max_nesting=max_nesting) == walked
    return walked


def test_replay_covers_a_genuine_metadata(many_entries: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Most of a genuine ``.metadata`` is replayed (else the tests below prove nothing)."""
    replayed = [0]
    match = pickle_replay._Unit.match

    def counting(self: pickle_replay._Unit, data: bytes, pos: int, memo: list[int]) -> int:
        end = match(self, data, pos, memo)
        replayed[0] += max(0, end - pos)
        return end

    monkeypatch.setattr(pickle_replay._Unit, "match", counting)
    assert _same(many_entries) is None
    assert replayed[0] > len(many_entries) // 2, (replayed[0], len(many_entries))


@pytest.mark.parametrize("max_nesting", [2, 3, 4, 5, 6, 8])
def test_nesting_bound_is_the_walks(many_entries: bytes, max_nesting: int) -> None:
    _same(many_entries, max_nesting)


def test_put_disables_replay(many_entries: bytes) -> None:
    """A protocol-2 pickle (BINPUT, slots that can be overwritten) has the walk's verdict."""
    md = pickle.loads(many_entries)  # our own file, just written by dcp.save
    for protocol in (2, 3, 4, 5):
        _same(pickle.dumps(md, protocol=protocol))


@FUZZ
@given(
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=6),
    cut=st.none() | st.floats(0, 1),
    splice=st.none() | st.tuples(st.floats(0, 1), st.floats(0, 1), st.integers(1, 600)),
    max_nesting=st.sampled_from([3, 5, 8, 100]),
)
def test_mutated_metadata_has_the_walks_verdict(
    many_entries: bytes, edits: list[tuple[float, int]], cut: float | None,
    splice: tuple[float, float, int] | None, max_nesting: int,
) -> None:  # fmt: skip
    data = bytearray(many_entries)
    if splice is not None:  # a run of bytes copied elsewhere: units repeated out of place
        src, dst, length = (int(splice[0] * len(data)), int(splice[1] * len(data)), splice[2])
        data[dst:dst] = data[src : src + length]
    for where, value in edits:
        data[int(where * len(data))] = value
    if cut is not None:
        del data[int(cut * len(data)) :]
    _same(bytes(data), max_nesting)


@FUZZ
@given(value=NESTED, copies=st.integers(2, 12), protocol=st.integers(2, pickle.HIGHEST_PROTOCOL))
def test_repeated_values_have_the_walks_depth(value: object, copies: int, protocol: int) -> None:
    """Units repeated in a frame (a dict of equal, unshared values) nest exactly as walked."""
    doc = {f"k{i}": Node(copy.deepcopy(value), [i]) for i in range(copies)}
    data = pickle.dumps(doc, protocol=protocol)
    depth = _reference_depth(data)
    assert _same(data, depth) is None
    if depth:
        assert _same(data, depth - 1) is not None


@pytest.mark.parametrize("protocol", [4, 5])
def test_same_opcodes_reading_a_deeper_slot_are_walked(protocol: int) -> None:
    """Units alike but for the memo slot they read: a deeper slot is never taken for a flat one."""
    flat: list[object] = [0]
    deep: object = 0
    for _ in range(30):
        deep = [deep]
    doc: dict[str, object] = {"flat": flat, "deep": deep}
    for i in range(40):  # flat ones first (learned), then the deep one, then flat ones again
        doc[f"k{i}"] = Node(deep if i == 25 else flat, i)
    data = pickle.dumps(doc, protocol=protocol)
    depth = _reference_depth(data)
    assert depth > 30
    assert _same(data, depth) is None
    assert _same(data, depth - 1) is not None
