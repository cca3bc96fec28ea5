"""The pure parts: layouts table, names of file checkpoints, safetensors headers, the pickle walker,
and DeepSpeed's file counts against the world size recorded inside (files written with torch.save
exactly as DeepSpeed names and fills them, for a 2 x 2 grid one CPU cannot run)."""

from __future__ import annotations

import io
import json
import pickle
import struct
from collections import OrderedDict
from pathlib import Path

import pytest

from ckptctl.core.verify import layouts as L
from ckptctl.core.verify import safetensors as st
from ckptctl.core.verify.pickle_walk import Opaque, PickleWalkError, top_level_keys, walk
from ckptctl.runroot.locate import list_checkpoints
from tests.test_verify import codes

# -- which framework wrote a directory ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "files", "dirs", "expected"),
    [
        ("checkpoint-500", ["model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                            "trainer_state.json", "training_args.bin"], [], "hf"),
        ("checkpoint-500", ["trainer_state.json", "scheduler.pt", "rng_state_0.pth", "rng_state_1.pth"],
         ["pytorch_model_fsdp_0", "optimizer_0"], "hf"),
        ("checkpoint-500", [], ["pytorch_model_fsdp_0"], "hf"),  # the crash of issue 11: model only
        ("checkpoint_3", ["model.safetensors", "optimizer.bin", "scheduler.bin", "random_states_0.pkl"], [],
         "accelerate"),
        ("my_state", ["model.safetensors", "optimizer.bin", "random_states_0.pkl"], [], "accelerate"),
        ("checkpoint_3", [], ["pytorch_model_fsdp_0"], "accelerate"),
        ("epoch=0-step=400.ckpt", [".metadata", "__0_0.distcp", "meta.pt"], [], "lightning"),
        ("iter_0000100", [".metadata", "__0_0.distcp", "metadata.json", "common.pt"], [], "megatron"),
        ("global_step30", ["mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt"], [],
         "deepspeed"),
        ("step-30", [".metadata", "__0_0.distcp"], [], "torchtitan"),
        ("step_30", [".metadata", "__0_0.distcp", "ckptctl.json"], [], "ckptctl"),
        ("checkpoint-5", [], [], None),
        ("random", ["notes.txt"], [], None),
    ],
)
def test_detect_layout(name: str, files: list[str], dirs: list[str], expected: str | None) -> None:
    from ckptctl.core.names import parse_checkpoint_name

    cn = parse_checkpoint_name(name)
    found = L.detect_layout(name, files, dirs, framework_hint=cn.framework if cn else None)
    assert (found.layout.key if found else None) == expected


@pytest.mark.parametrize(
    ("files", "dirs", "missing"),
    [
        (["model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"], [], []),
        (["model.safetensors", "optimizer.pt", "rng_state.pth"], [], ["scheduler.pt", "trainer_state.json"]),
        (["model.safetensors", "trainer_state.json"], [], []),  # save_only_model: a model-only export
        (["trainer_state.json", "scheduler.pt"], ["optimizer_0"], ["model weights"]),
        (["model.safetensors", "trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state_0.pth",
          "rng_state_2.pth"], [], ["rng_state_1.pth"]),
    ],
)
def test_hf_needs(files: list[str], dirs: list[str], missing: list[str]) -> None:
    found = L.match_parts(L.layout("hf"), files, dirs)
    problems = L.check_found(found)
    assert [next(m for m in ("scheduler.pt", "trainer_state.json", "model weights", "rng_state_1.pth")
                 if m in p.message) for p in problems] == missing


@pytest.mark.parametrize(
    ("name", "step", "framework"),
    [
        ("epoch=0-step=400.ckpt", 400, "lightning"),
        ("epoch=3-step=1200-val_loss=0.52.ckpt", 1200, "lightning"),
        ("checkpoint-3.pth.tar", 3, "torch-save"),
        ("model_step_100.pt", 100, "torch-save"),
        ("epoch_5.pth", 5, "torch-save"),
        ("ckpt-20.bin", 20, "torch-save"),
        ("last.ckpt", None, None),
        ("model_final.pt", None, None),
        ("notes-3.txt", None, None),
    ],
)
def test_file_checkpoint_names(name: str, step: int | None, framework: str | None) -> None:
    fc = L.parse_file_checkpoint_name(name)
    assert (fc.step if fc else None, fc.layout.key if fc else None) == (step, framework)


@pytest.mark.parametrize(
    ("contents", "model_only", "require", "missing"),
    [
        (["model", "optimizer", "scheduler"], False, ["optimizer", "lr_scheduler"], []),
        (["state_dict", "loops"], True, ["optimizer"], ["optimizer"]),
        (["module", "zero_pp_rank_0_mp_rank_00_optim_states"], False, ["optimizer", "model"], []),
        (["model", "optimizer_0", "rng_state"], False, ["rng", "dataloader"], ["dataloader"]),
    ],
)
def test_contents_model_only_and_require(
    contents: list[str], model_only: bool, require: list[str], missing: list[str]
) -> None:
    assert L.is_model_only(contents) is model_only
    assert L.missing_required(contents, require) == missing


def test_every_layout_names_its_source_and_valid_parts() -> None:
    for lay in L.LAYOUTS:
        assert lay.source, lay.key
        names = {p.name for p in lay.parts}
        for need in lay.needs:
            if lay.container == "dir":
                assert set(need.parts) <= names, (lay.key, need.what)
        assert lay.written_last is None or lay.written_last in names
        assert set(lay.signature) <= names, lay.key


def _name_variants() -> list[str]:
    """Every part's template filled in (and spoiled: a letter off either end, a digit swapped for a
    letter, a prefix, a suffix), plus names no layout has."""
    out = {".metadata", "__0_0.distcp", "notes.txt", "x", ""}
    for lay in L.LAYOUTS:
        for p in lay.parts:
            for filled in (p.name.replace("{n}", "7").replace("*", "a"), p.name.replace("{n}", "012").replace("*", "")):
                out.update({filled, filled[1:], filled[:-1], "a" + filled, filled + "a", filled.replace("7", "z")})
    return sorted(out)


def test_match_parts_prefilter_never_changes_a_match() -> None:
    """``_may_match`` (literal start and end) holds for every name a part's regex matches, and
    ``match_parts`` with it finds exactly what matching every part's regex on every name finds."""
    names = _name_variants()
    for lay in L.LAYOUTS:
        for p in lay.parts:
            for n in names:
                if p.pattern().match(n):
                    assert L._may_match(p.name, n), (lay.key, p.name, n)
        for n in names:  # one name at a time: the prefilter decides (a listing of 64 or fewer)
            found = L.match_parts(lay, [n], [n])
            first = {False: None, True: None}
            for p in lay.parts:
                if first[p.is_dir] is None and not n.endswith(".distcp") and p.pattern().match(n):
                    first[p.is_dir] = p.name
            expect = {name: [n] for name in first.values() if name is not None}
            got = {k: sorted(set(es)) for k, es in found.present.items()}
            assert got == expect, (lay.key, n, got, expect)


# -- safetensors ----------------------------------------------------------------------------------


def _st_bytes(header: dict[str, object], data_len: int) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * data_len


@pytest.mark.parametrize(
    ("tensors", "data_len", "expect"),
    [
        ({"a": ("F32", [2, 2], [0, 16]), "b": ("I64", [1], [16, 24])}, 24, []),
        ({"a": ("F32", [2, 2], [0, 16])}, 10, ["truncated"]),
        ({"a": ("F32", [2, 2], [0, 16]), "b": ("F32", [1], [12, 16])}, 16, ["overlaps"]),
        ({"a": ("F32", [2, 2], [4, 20])}, 20, ["gap"]),
        ({"a": ("F32", [2, 2], [0, 12])}, 12, ["needs 16"]),
        ({"a": ("F32", [1], [0, 4])}, 8, ["after the last tensor"]),
    ],
)
def test_safetensors_header_checks(tensors: dict[str, tuple[str, list[int], list[int]]], data_len: int,
                                   expect: list[str]) -> None:
    hdr = {k: {"dtype": d, "shape": s, "data_offsets": o} for k, (d, s, o) in tensors.items()}
    blob = _st_bytes(hdr, data_len)
    n = st.header_length(blob[:8])
    h = st.parse_header(blob[8 : 8 + n], n)
    msgs = [m for _cut, m in st.check_header(h, len(blob))]
    assert len(msgs) == len(expect) and all(e in m for e, m in zip(expect, msgs, strict=True)), msgs


def test_safetensors_refuses_garbage() -> None:
    with pytest.raises(st.SafetensorsError):
        st.header_length(struct.pack("<Q", 1 << 40))
    with pytest.raises(st.SafetensorsError):
        st.parse_header(b"[1, 2]", 6)
    with pytest.raises(st.SafetensorsError):
        st.parse_header(b'{"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', 60)
    assert not st.looks_like_safetensors(b"PK\x03\x04\x00\x00\x00\x00\x00")


def test_safetensors_index_against_headers() -> None:
    idx = st.parse_index(json.dumps({"weight_map": {"a": "f1", "b": "f1", "c": "f2"}}).encode())
    h1 = st.Header(header_bytes=0, tensors={"a": st.TensorInfo("a", "F32", (1,), 0, 4)})
    out = st.check_index(idx, {"f1": h1, "f2": None})
    assert len(out) == 1 and "1 tensor(s) the index places in f1 are not in it: b" in out[0][1]


# -- the pickle walker --------------------------------------------------------------------------------


class _Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("the walker must never run this",))


def test_walker_rebuilds_plain_state_and_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    buf = io.BytesIO()
    state = {"dp_world_size": 4, "mp_world_size": 2, "module": OrderedDict(w=torch.zeros(2)),
             "optimizer": None, "nested": {"xs": [1, 2.5, "s", b"b", (True, None)]}, "evil": _Boom()}
    torch.save(state, buf)
    from zipfile import ZipFile

    with ZipFile(io.BytesIO(buf.getvalue())) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    top = walk(pkl)
    assert capsys.readouterr().out == ""
    assert top["dp_world_size"] == 4 and top["mp_world_size"] == 2 and top["optimizer"] is None
    assert top["nested"] == {"xs": [1, 2.5, "s", b"b", (True, None)]}
    assert isinstance(top["module"], dict) and isinstance(top["module"]["w"], Opaque)
    assert isinstance(top["evil"], Opaque) and top["evil"].what.endswith(".print")  # protocol 2: __builtin__
    assert top_level_keys(top) == ["dp_world_size", "mp_world_size", "module", "optimizer", "nested", "evil"]


@pytest.mark.parametrize("proto", [0, 2, 4, 5])
def test_walker_protocols_and_memo(proto: int) -> None:
    shared = [1, 2]
    assert walk(pickle.dumps({"a": shared, "b": shared, "s": {3}, "f": frozenset({4})}, protocol=proto)) == {
        "a": [1, 2], "b": [1, 2], "s": {3}, "f": frozenset({4})}


@pytest.mark.parametrize("data", [b"", b"\x80\x02}q\x00(", b"not a pickle", b"\x80\x02h\x05."])
def test_walker_rejects_broken_pickles(data: bytes) -> None:
    with pytest.raises(PickleWalkError):
        walk(data)


# -- DeepSpeed counts, written file by file as DeepSpeed names and fills them ---------------------------


def _deepspeed_step(d: Path, *, dp: int, mp: int, optim: list[tuple[int, int]]) -> None:
    import torch

    d.mkdir(parents=True)
    for m in range(mp):  # engine._save_checkpoint: dp rank 0 of each mp rank
        torch.save({"module": {"w": torch.zeros(2)}, "buffer_names": [], "optimizer": None,
                    "param_shapes": [OrderedDict(w=torch.Size([2]))], "lr_scheduler": None,
                    "global_steps": 30, "dp_world_size": dp, "mp_world_size": mp, "ds_version": "0.19.8"},
                   d / f"mp_rank_{m:02d}_model_states.pt")
    for r, m in optim:  # engine._save_zero_checkpoint: every rank
        torch.save({"optimizer_state_dict": {"zero_stage": 2}, "ds_version": "0.19.8"},
                   d / f"zero_pp_rank_{r}_mp_rank_{m:02d}_optim_states.pt")


def test_deepspeed_counts_zero_files_against_recorded_world_size(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    grid = [(r, m) for r in range(2) for m in range(2)]
    _deepspeed_step(root / "global_step10", dp=2, mp=2, optim=grid)
    _deepspeed_step(root / "global_step20", dp=2, mp=2, optim=[g for g in grid if g != (1, 1)])
    _deepspeed_step(root / "global_step30", dp=2, mp=2, optim=[*grid, (2, 0)])
    res = {c.name: c for c in list_checkpoints(str(root)).checkpoints}
    assert res["global_step10"].status == "complete" and res["global_step10"].world_size == 4
    r20 = res["global_step20"]
    assert codes(r20) == {"part-missing"}
    assert "without zero_pp_rank_1_mp_rank_01_optim_states.pt (dp_world_size 2 x mp_world_size 2" in r20.problems[0]
    assert codes(res["global_step30"]) == {"rank-out-of-range"}
    (root / "global_step10" / "mp_rank_01_model_states.pt").unlink()
    r10 = next(c for c in list_checkpoints(str(root)).checkpoints if c.name == "global_step10")
    assert codes(r10) == {"part-missing"} and "mp_rank_01_model_states.pt" in r10.problems[0]


def test_walker_survives_a_deeply_nested_key() -> None:
    # a tuple nested 200,000 deep used as a dict key: hashing it would overflow the C stack
    data = b"\x80\x02}" + b")" + b"\x85" * 200_000 + b"K\x01s."
    top = walk(data)
    assert top == {}
