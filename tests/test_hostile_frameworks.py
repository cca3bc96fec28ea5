"""Issue 27: framework checkpoint files (HF, accelerate, Lightning, DeepSpeed) with hostile pickles.

The real files come from each framework's own save code (tests/framework_writers.py via
tests/test_frameworks.py's cache); the attacks replace one file's ``data.pkl`` the way a
crafted checkpoint would. Pickle globals are allowed by exact (module, qualified name),
never by module prefix: an attribute chain under a framework's module is ``hostile-pickle``.
Pathological pickles (20 million ``EMPTY_SET``, a tuple nested 100,000 deep) are refused
fast under a memory cap.
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from ckptctl.core.verify import records
from ckptctl.runroot.locate import verify_target
from ckptctl.runroot.reports import CheckOptions

REPO = Path(__file__).resolve().parent.parent


def _su(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def chain_pickle(module: str, name: str, *, opcode: str = "STACK_GLOBAL") -> bytes:
    """A protocol-4 pickle calling ``module``'s attribute ``name`` (dotted: an attribute chain)
    with one string; ``torch.load(weights_only=False)`` would run it."""
    if opcode == "STACK_GLOBAL":
        head = _su(module) + _su(name) + b"\x93"
    else:  # GLOBAL: protocol 4 resolves a dotted name here too
        head = b"c" + module.encode() + b"\n" + name.encode() + b"\n"
    return b"\x80\x04" + head + _su("echo pwned") + b"\x85R."


def rewrite_pickle(path: Path, payload: bytes, *, deflate: bool = False) -> None:
    """Replace the archive's data.pkl by ``payload`` (other members kept), as a valid zip."""
    with zipfile.ZipFile(path) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in members:
            if name.endswith("data.pkl"):
                z.writestr(name, payload, compress_type=zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)
            else:
                z.writestr(name, data)
    path.write_bytes(buf.getvalue())


def _written(kind: str) -> Path:
    pytest.importorskip({"hf": "transformers", "accelerate": "accelerate", "lightning": "lightning",
                         "deepspeed": "deepspeed"}[kind])  # fmt: skip
    from tests.test_frameworks import _written as written

    return written(kind)


def _deep(target: Path) -> dict[str, object]:
    doc = verify_target(str(target), options=CheckOptions(deep=True)).to_json()
    return doc["checkpoints"][0]  # type: ignore[no-any-return,index]


def _codes(report: dict[str, object]) -> set[str]:
    return {p["code"] for p in report["problem_details"]}  # type: ignore[attr-defined,index]


# (framework, checkpoint inside its written tree, file whose pickle is replaced, (module, name))
ATTACKS = [
    ("hf", "run/checkpoint-4", "optimizer.pt", ("transformers.trainer_utils", "os.system")),
    ("hf", "run/checkpoint-4", "training_args.bin", ("transformers.training_args", "TrainingArguments.__init__")),
    ("deepspeed", "global_step4", "mp_rank_00_model_states.pt", ("deepspeed.runtime.zero.config", "os.system")),
    ("deepspeed", "global_step4", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
     ("deepspeed.utils.tensor_fragment", "fragment_address.__init__.__globals__")),
    ("lightning", "run/epoch=0-step=4.ckpt", None, ("lightning.fabric.utilities.data", "os.system")),
    ("lightning", "sharded/epoch=0-step=4.ckpt", "meta.pt", ("lightning.pytorch", "os.system")),
    ("accelerate", "checkpoints/checkpoint_1", "random_states_0.pkl", ("accelerate.state", "os.system")),
    ("accelerate", "checkpoints/checkpoint_1", "optimizer.bin", ("torch.optim", "os.system")),
    # the base list is exact too: an attribute chain from an allowed torch helper
    ("hf", "run/checkpoint-4", "scheduler.pt", ("torch._utils", "_rebuild_tensor_v2.__globals__")),
    ("hf", "run/checkpoint-4", "rng_state.pth", ("torch", "serialization.os.system")),
]  # fmt: skip


@pytest.mark.parametrize("opcode", ["STACK_GLOBAL", "GLOBAL"])
@pytest.mark.parametrize(("kind", "where", "file", "glob"), ATTACKS, ids=lambda x: str(x))
def test_attribute_chain_under_a_trusted_module_is_hostile(
    kind: str, where: str, file: str | None, glob: tuple[str, str], opcode: str, tmp_path: Path
) -> None:
    """Finding (b): an attribute chain under a trusted module (protocol 4 resolves dotted
    names) passed `verify --deep` as complete; the framework's torch.load would run it."""
    src = _written(kind) / where
    ckpt = tmp_path / src.name
    (shutil.copytree if src.is_dir() else shutil.copy)(src, ckpt)
    assert _deep(ckpt)["status"] == "complete"  # the real writer's files pass as they are
    rewrite_pickle(ckpt / file if file else ckpt, chain_pickle(*glob, opcode=opcode))
    report = _deep(ckpt)
    assert report["status"] == "corrupt" and "hostile-pickle" in _codes(report), report["problem_details"]
    shown = " ".join(report["problems"])  # type: ignore[arg-type]
    assert glob[1] in shown


def test_every_real_writer_file_passes_deep_verify_without_hostile_globals() -> None:
    """The exact allow-lists still admit what the real writers write (their own save code)."""
    for kind, sub in (("hf", "run"), ("hf", "model_only"), ("accelerate", "checkpoints"), ("lightning", "run"),
                      ("lightning", "sharded"), ("lightning", "weights"), ("deepspeed", "")):  # fmt: skip
        root = _written(kind) / sub if sub else _written(kind)
        doc = verify_target(str(root), options=CheckOptions(deep=True)).to_json()
        for c in doc["checkpoints"]:
            assert "hostile-pickle" not in _codes(c), (kind, c["name"], c["problems"])
            assert c["status"] == "complete" or c.get("model_only"), (kind, c["name"], c["problems"])


@pytest.mark.parametrize(
    ("module", "name", "allowed"),
    [
        ("torch._utils", "_rebuild_tensor_v2", True),
        ("torch", "_utils._rebuild_tensor_v2", False),  # the same object, but only the exact pair is listed
        ("torch", "FloatStorage", True),
        ("torch", "FloatStorage\n", False),
        ("torch", "Float.Storage", False),
        ("numpy.dtypes", "UInt32DType", True),
        ("numpy.dtypes", "os.UInt32DType", False),
        ("collections", "OrderedDict.fromkeys", False),
        ("builtins", "set", True),
        ("builtins", "eval", False),
    ],
)
def test_base_allow_list_is_exact(module: str, name: str, allowed: bool) -> None:
    assert records.is_allowed_global(module, name) is allowed


def test_writer_globals_are_exact_pairs() -> None:
    writer = frozenset({("deepspeed.runtime.zero.config", "ZeroStageEnum")})
    assert records.is_allowed_global("deepspeed.runtime.zero.config", "ZeroStageEnum", writer=writer)
    assert not records.is_allowed_global("deepspeed.runtime.zero.config", "os.system", writer=writer)
    assert not records.is_allowed_global("deepspeed.runtime.zero", "config.ZeroStageEnum", writer=writer)


def test_memo_mixing_put_and_memoize_makes_names_unresolvable() -> None:
    """MEMOIZE numbers its slot after PUT's keys: a scan that guessed the slot could read a
    harmless name where the unpickler reads another. Mixed: every GET is unresolvable."""
    p = b"\x80\x04" + _su("os") + b"q\x05" + _su("system") + b"\x94" + _su("torch") + b"\x94"
    p += b"h\x00h\x01\x93" + _su("x") + b"\x85R."
    found = records.pickle_globals(p)
    assert found and all(m.startswith("<") for m, _ in found), found


# -- bounded cost: pathological pickles in a framework file ---------------------------------------


def _torch_save_like(path: Path, data_pkl: bytes, *, deflate: bool) -> Path:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", data_pkl, compress_type=zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)
        z.writestr("archive/version", b"3\n")
    path.write_bytes(buf.getvalue())
    return path


def _capped_verify(target: Path, *args: str, mem_mb: int = 1024, timeout: float = 60) -> tuple[int, str, float]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))

    env = dict(os.environ, PYTHONPATH=str(REPO), CKPTCTL_NO_PROGRESS="1")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "ckptctl", "verify", str(target), "--json", *args],
                       capture_output=True, text=True, env=env, timeout=timeout, preexec_fn=limit)  # fmt: skip
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr[-2000:]
    return r.returncode, r.stdout, time.perf_counter() - t0


@pytest.mark.parametrize("deflate", [True, False])
@pytest.mark.parametrize("deep", [False, True])
def test_twenty_million_empty_sets_are_refused_fast_in_bounded_memory(tmp_path: Path, deflate: bool, deep: bool) -> None:
    """Finding: a 20 KB torch.save of 20M EMPTY_SET opcodes took 4.7 GB and 50 s in quick verify."""
    bomb = b"\x80\x02" + b"\x8f" * 20_000_000 + b"."
    f = _torch_save_like(tmp_path / "checkpoint-7.pt", bomb, deflate=deflate)
    if deflate:
        assert f.stat().st_size < 64 << 10
    rc, out, seconds = _capped_verify(f, *(["--deep"] if deep else []), timeout=120)
    report = json.loads(out)["checkpoints"][0]
    assert report["status"] != "complete" or not deflate, report
    assert seconds < 15, seconds
    assert rc in (0, 3)


def test_tuple_nested_100000_deep_is_no_traceback(tmp_path: Path) -> None:
    deep = b"\x80\x04" + b"K\x01" + b"\x85" * 100_000 + b"."
    f = _torch_save_like(tmp_path / "epoch=0-step=3.ckpt", deep, deflate=False)
    for args in ((), ("--deep",)):
        rc, out, _ = _capped_verify(f, *args)
        assert rc in (0, 3) and json.loads(out)["checkpoints"]


def test_metadata_of_empty_containers_is_refused_before_unpickling(tmp_path: Path) -> None:
    from tests.fuzz.corpus import write_small_checkpoint

    step = write_small_checkpoint(tmp_path / "step_3")
    (step / ".metadata").write_bytes(b"\x80\x04" + b"\x8f" * 5_000_000 + b".")
    rc, out, seconds = _capped_verify(step, mem_mb=768)
    assert rc == 3 and json.loads(out)["checkpoints"][0]["status"] == "corrupt"
    assert seconds < 15


def test_the_attack_pickle_asks_the_unpickler_for_the_chain() -> None:
    """The payloads above are what they claim: pickle asks find_class for the dotted name."""
    import pickle

    calls: list[str] = []

    class Spy(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            calls.append(f"{module}:{name}")
            return lambda *_: None

    Spy(io.BytesIO(chain_pickle("transformers.trainer_utils", "os.system"))).load()
    assert calls == ["transformers.trainer_utils:os.system"]


# -- bounded cost: safetensors headers --------------------------------------------------------------


def _safetensors(path: Path, header: dict[str, object], data: bytes = b"\0" * 4) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)
    return path


@pytest.mark.parametrize(
    ("shape", "offsets", "why"),
    [
        ([10**30] * 200_000, [0, 4], "2**64"),  # the finding: 110 s of CPU, then a traceback
        ([1] * 200_000, [0, 4], "dimensions"),
        ([2**40, 2**40], [0, 4], "2**64 elements"),
        ([int("9" * 4000)], [0, 4], "2**64"),
        ([1], [0, 2**70], "data_offsets"),
        ([1], [0, 10**5000], None),  # past the JSON parser's digit limit: not JSON
    ],
    ids=["200k-huge-dims", "200k-dims", "overflowing-product", "4000-digit-dim", "offset-2**70", "5000-digit-offset"],
)
def test_safetensors_header_with_a_hostile_shape_is_refused_fast(
    tmp_path: Path, shape: list[int], offsets: list[int], why: str | None
) -> None:
    """Finding: a safetensors header with a 200,000-dimension shape of huge ints burned 110 s of
    CPU, then a traceback (the element count was multiplied out as a huge int, then printed)."""
    header: dict[str, object] = {"w": {"dtype": "F32", "shape": shape, "data_offsets": offsets}}
    if shape == [1] and offsets[1] == 10**5000:
        raw = b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, ' + b"9" * 5000 + b"]}}"
        f = tmp_path / "model.safetensors"
        f.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 4)
    else:
        f = _safetensors(tmp_path / "model.safetensors", header)
    rc, out, seconds = _capped_verify(f, timeout=60)
    report = json.loads(out)["checkpoints"][0]
    assert rc == 3 and report["status"] == "corrupt", report
    assert why is None or any(why in p for p in report["problems"]), report["problems"]
    assert max(len(p) for p in report["problems"]) < 600
    assert seconds < 20


def test_safetensors_header_within_the_limits_is_complete(tmp_path: Path) -> None:
    """The limits refuse nothing real: a 64-dimension tensor and 2**40-element shapes of zeros are read."""
    header = {"a": {"dtype": "F32", "shape": [1] * 64, "data_offsets": [0, 4]},
              "b": {"dtype": "F32", "shape": [2**40, 0], "data_offsets": [4, 4]}}  # fmt: skip
    rc, out, _ = _capped_verify(_safetensors(tmp_path / "model.safetensors", header))
    assert rc == 0 and json.loads(out)["checkpoints"][0]["status"] == "complete", out


# -- bounded cost: zip member tables ----------------------------------------------------------------


@pytest.mark.parametrize("deep", [False, True])
@pytest.mark.parametrize(("members", "why"), [(1_000_000, "refused unread"), (200_000, "overlap")])
def test_zip_directory_of_many_entries_is_one_problem(tmp_path: Path, deep: bool, members: int, why: str) -> None:
    """Finding: a zip directory of 1M entries took 150 s and 80 MB of output (one problem per
    entry under --deep), and quick verify called it complete."""
    from tests.fuzz.corpus import many_members_zip

    f = tmp_path / "checkpoint-9.pt"
    f.write_bytes(many_members_zip(members))
    rc, out, seconds = _capped_verify(f, *(["--deep"] if deep else []), timeout=120)
    report = json.loads(out)["checkpoints"][0]
    assert rc == 3 and report["status"] == "corrupt"
    assert len(report["problems"]) == 1 and why in report["problems"][0], report["problems"]
    assert len(out) < 10_000 and seconds < 60


def test_zip_with_many_genuine_members_under_the_cap_is_read(tmp_path: Path) -> None:
    from tests.fuzz.corpus import many_members_zip

    f = tmp_path / "checkpoint-9.pt"
    f.write_bytes(many_members_zip(20_000, distinct=True))
    for args in ((), ("--deep",)):
        rc, out, _ = _capped_verify(f, *args)
        assert rc == 0 and json.loads(out)["checkpoints"][0]["status"] == "complete", out[-2000:]


def test_dcp_record_with_a_huge_member_table_is_one_problem() -> None:
    from tests.fuzz.corpus import many_members_zip

    for members in (records.MAX_ZIP_MEMBERS + 1, 1000):  # past the tail a record's table is read from; or not
        findings, _ = records.check_record(many_members_zip(members))
        assert [p.code for p in findings.problems] == ["record-corrupt"], findings.problems


def test_problems_past_the_listing_cap_are_counted_in_one_line() -> None:
    findings = records.RecordFindings()
    for i in range(1000):
        findings.add(f"member {i} is bad")
    listed = findings.listed()
    assert len(listed) == records.MAX_LISTED_PROBLEMS + 1
    assert listed[-1].message == f"... and {1000 - records.MAX_LISTED_PROBLEMS:,} more problem(s) (not listed)"
