"""Issue 9: every ``.metadata`` and record finding, from the generated corpus (tests/fuzz/corpus.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckptctl.adapters.dcp_metadata import MetadataError, read_index
from ckptctl.core.verify.records import check_record, parse_directory
from ckptctl.runroot.locate import verify_checkpoint
from tests.fuzz.corpus import Case, metadata_cases, record_cases, write_small_checkpoint


@pytest.fixture(scope="module")
def real_step(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_small_checkpoint(tmp_path_factory.mktemp("real") / "step_10")


def _cases(real_step: Path) -> dict[str, Case]:
    return {c.name: c for c in metadata_cases((real_step / ".metadata").read_bytes())}


_NAMES = [
    "class_build_poison", "memo_huge_index", "memo_put_text", "binbytes_huge", "binbytes8_huge",
    "long4_huge", "shared_refs_bomb", "nesting_1000", "nesting_100k", "nesting_chunks_5000",
    "properties_int", "int_over_4300_digits", "offset_over_4300_digits", "length_2_64", "size_dim_huge",
    "dtype_list", "dtype_str", "transforms_str", "transforms_int_list", "relative_path_metadata",
    "relative_path_bytes", "chunk_sizes_str", "fqn_huge_repr", "truncated_half", "empty_file",
    "storage_meta_int", "index_hint_str",
]  # fmt: skip


def test_corpus_names_are_all_tested(real_step: Path) -> None:
    assert sorted(_cases(real_step)) == sorted(_NAMES)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", _NAMES)
@pytest.mark.parametrize("deep", [False, True], ids=["quick", "deep"])
def test_metadata_case_is_a_clean_verdict(real_step: Path, tmp_path: Path, name: str, deep: bool) -> None:
    case = _cases(real_step)[name]
    step = tmp_path / "step_10"
    shutil.copytree(real_step, step)
    (step / ".metadata").write_bytes(case.data)
    report = verify_checkpoint(str(step), deep=deep)
    assert report.status == case.expect, (case.why, report.problems)
    assert all(len(p) < 2000 for p in report.problems), "messages must stay short"


def test_reader_raises_only_metadata_error(real_step: Path) -> None:
    for case in _cases(real_step).values():
        with pytest.raises(MetadataError):
            read_index(case.data)


def test_class_build_does_not_poison_later_checkpoints(real_step: Path, tmp_path: Path) -> None:
    poison = _cases(real_step)["class_build_poison"]
    bad = tmp_path / "bad" / "step_10"
    shutil.copytree(real_step, bad)
    (bad / ".metadata").write_bytes(poison.data)
    assert verify_checkpoint(str(bad)).status == "corrupt"
    # the same process then checks a genuine checkpoint: it must still be complete
    assert verify_checkpoint(str(real_step)).status == "complete"
    assert read_index((real_step / ".metadata").read_bytes()).tensors["w"].chunks


def test_training_reader_is_not_poisoned(real_step: Path) -> None:
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

    from ckptctl.training._dcp_io import parse_metadata_bytes
    from ckptctl.training.errors import UnsafeCheckpointError

    before = dict(vars(ChunkStorageMetadata))
    for case in _cases(real_step).values():
        with pytest.raises(UnsafeCheckpointError):
            parse_metadata_bytes(case.data, "step_10")
    assert dict(vars(ChunkStorageMetadata)) == before
    md = parse_metadata_bytes((real_step / ".metadata").read_bytes(), "step_10")
    assert md.state_dict_metadata["w"].chunks[0].sizes == (3, 4)


@pytest.mark.parametrize("case", record_cases(), ids=lambda c: c.name)
def test_record_case_is_a_clean_problem(case: Case) -> None:
    findings, _ = check_record(case.data)
    assert findings.problems, case.why


def test_truncated_directory_is_a_format_error() -> None:
    from ckptctl.core.verify.records import RecordFormatError

    tail = b"PK\x01\x02" + b"\0" * 10 + b"PK\x05\x06" + b"\0" * 4 + b"\x01\x00\x01\x00" + b"\x0e\0\0\0" + b"\0" * 6
    with pytest.raises(RecordFormatError) as e:
        parse_directory(tail, len(tail))
    assert e.value.code == "record-corrupt"  # a directory that lies about its size is damage


@pytest.mark.parametrize(
    ("tail", "code"),
    [
        (b"PK\x03\x04" + b"\x01" * 100 + b"\0" * 22, "record-truncated"),  # ends in zeros: cut short
        (b"PK\x03\x04" + b"\0" * 10, "record-truncated"),  # fewer bytes than any archive
        (b"PK\x03\x04" + b"\x01" * 100 + b"\0" * 21, "record-corrupt"),  # no end record, not zeros
    ],
)
def test_missing_archive_end_is_typed(tail: bytes, code: str) -> None:
    from ckptctl.core.verify.records import RecordFormatError

    with pytest.raises(RecordFormatError) as e:
        parse_directory(tail, len(tail))
    assert e.value.code == code, str(e.value)


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"", "empty"),
        (b"\x80\x02Nr\xff\xff\xff\x0f.", "shape"),  # LONG_BINPUT past the file size
        (b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00trueK\x01.", "hostile"),  # a foreign global
        (b"\x80\x02ctorch.distributed.checkpoint.metadata\nMetadata\n.", "invalid"),  # a class, not an instance
        (b"\x80\x02X\x01\x00\x00\x00aQ.", "malformed"),  # a persistent id
    ],
)
def test_metadata_error_kind_is_typed(data: bytes, kind: str) -> None:
    """Callers decide on ``MetadataError.kind`` (``hostile`` -> ``hostile-pickle``), never on the text."""
    with pytest.raises(MetadataError) as e:
        read_index(data)
    assert e.value.kind == kind, str(e.value)
    assert e.value.hostile == (kind == "hostile")


def test_class_build_is_hostile_by_kind(real_step: Path) -> None:
    """BUILD onto a class object (issue 9's cross-checkpoint poisoning) is refused as hostile."""
    cls = b"ctorch.distributed.checkpoint.metadata\nChunkStorageMetadata\n"
    data = b"\x80\x02" + cls + b"N}X\x0c\x00\x00\x00__setstate__Ns\x86b."
    with pytest.raises(MetadataError) as e:
        read_index(data)
    assert e.value.kind == "hostile", str(e.value)


def test_zstd_bomb_stops_at_the_cap() -> None:
    zstandard = pytest.importorskip("zstandard")
    from ckptctl.adapters.transforms import TransformLimitError, decode_cap, decoder_for

    bomb = zstandard.ZstdCompressor().compress(b"\0" * (64 << 20))  # ~2 KiB -> 64 MiB
    decode, _ = decoder_for(["stream.zstd/1"])
    assert decode is not None
    with pytest.raises(TransformLimitError):
        decode(bomb)
    assert decode_cap(len(bomb)) < 64 << 20
    plain = b"x" * 1000
    assert decode(zstandard.ZstdCompressor().compress(plain)) == plain


def test_deflate_member_is_inflated_within_caps() -> None:
    import zlib

    from ckptctl.core.verify.records import RecordFormatError, inflate_capped

    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = raw.compress(b"\0" * (8 << 20)) + raw.flush()
    with pytest.raises(RecordFormatError, match="inflates past"):
        inflate_capped(packed, 8 << 20)  # honest size, but 1000x: over the ratio cap
    with pytest.raises(RecordFormatError):
        inflate_capped(packed, 100)  # more than it declared
    small = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = bytes(range(256)) * 4
    assert inflate_capped(small.compress(data) + small.flush(), len(data)) == data


def test_zstd_record_of_zeros_is_checked_within_what_the_index_declares(tmp_path: Path) -> None:
    """A genuine zstd record of zeros decodes far past the ratio cap (~24,000x), but not past
    what `.metadata` declares the tensor holds: it is decoded and checked, and complete."""
    pytest.importorskip("zstandard")
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._extension import ZStandard

    step = tmp_path / "step_10"
    sd = {"zeros": torch.zeros(6 << 20)}  # 24 MiB of zeros: ~1 KiB compressed
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(step), _extensions=[ZStandard()]))
    r = verify_checkpoint(str(step), deep=True)
    assert r.status == "complete", r.problems
    assert any("decoded and checked inside" in n for n in r.notes), r.notes
    assert r.members_crc_checked >= 1


def test_zstd_record_decoding_past_its_declared_size_is_refused(tmp_path: Path) -> None:
    """The cap follows what the index declares: a real record of 24 MiB of zeros decodes when
    its tensor is declared that large, and is refused when the index declares 64 bytes."""
    pytest.importorskip("zstandard")
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._extension import ZStandard

    from ckptctl.adapters.dcp_metadata import read_index
    from ckptctl.adapters.transforms import TransformLimitError, decoder_for
    from ckptctl.runroot.deep import declared_record_bytes

    step = tmp_path / "step_10"
    dcp.save({"zeros": torch.zeros(6 << 20)}, storage_writer=dcp.FileSystemWriter(str(step), _extensions=[ZStandard()]))
    index = read_index((step / ".metadata").read_bytes())
    (item,) = index.items
    declared = declared_record_bytes(index, item)
    assert declared == 4 * (6 << 20)
    record = (step / item.relative_path).read_bytes()[item.offset : item.offset + item.length]
    decode, _ = decoder_for(item.transforms)
    assert decode is not None
    assert len(decode(record, declared)) > declared  # the archive around the raw bytes
    with pytest.raises(TransformLimitError):
        decode(record, 64)  # past the ratio cap, and nothing declared allows it


def _directory_outcome(fn: Callable[[Any, int], object], rec: bytes) -> object:
    from ckptctl.core.verify.records import RecordFormatError

    try:
        return fn(rec, len(rec))
    except RecordFormatError as e:
        return (type(e).__name__, str(e), e.code)


def test_record_directory_from_a_short_tail_is_the_long_tails() -> None:
    """check_record parses a record's directory from its last 4 KiB first (``_record_directory``):
    the members, or the error, must be those of the 64 KiB tail, on genuine torch.save records
    and on thousands of damaged ones (bytes flipped or cut near the end, zip comments that push
    the directory out of the last 4 KiB, zip64 sizes, crafted corpus records)."""
    import io
    import random
    import zipfile

    import torch

    from ckptctl.core.verify.records import TAIL_READ_BYTES, _record_directory

    def saved(obj: object) -> bytes:
        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.getvalue()

    bases = [saved(torch.arange(n, dtype=torch.float32)) for n in (1, 3000, 300_000)]
    bases.append(saved({f"w{i}": torch.ones(4) for i in range(200)}))  # a long directory (> 4 KiB)
    for comment in (b"x" * 5000, b"y" * 65535):
        buf = io.BytesIO(bases[1])
        with zipfile.ZipFile(buf, "a") as z:
            z.comment = comment
        bases.append(buf.getvalue())
    bases += [c.data for c in record_cases()]
    rng = random.Random(26)
    records = list(bases)
    for base in bases:
        for _ in range(150):
            data = bytearray(base)
            for _ in range(rng.randint(1, 4)):
                data[len(data) - 1 - rng.randrange(min(len(data), 6000))] = rng.randrange(256)
            records.append(bytes(data))
            records.append(base[: len(base) - rng.randrange(1, min(len(base), 6000))])
    for rec in records:
        long_tail = _directory_outcome(lambda r, n: parse_directory(r[-TAIL_READ_BYTES:], n), rec)
        assert _directory_outcome(lambda r, n: _record_directory(memoryview(r)), rec) == long_tail
