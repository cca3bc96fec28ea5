"""The regression corpus: every hostile or pathological input issue 9 lists, generated here.

Nothing binary is committed: each case is built from a small real checkpoint written by
``dcp.save`` (``write_small_checkpoint``) or from raw pickle/zip opcodes. A case names
where its bytes go (``target``) and what a correct reader must say (``expect``):

- ``metadata``: the bytes replace the checkpoint's ``.metadata``; ``expect`` is the
  verdict quick verify must give (never ``complete`` for these).
- ``record``: the bytes are one record (a ``torch.save`` zip) for ``check_record``.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "CKPTCTL-FUZZ-SPLICE"


@dataclass(frozen=True)
class Case:
    name: str
    target: str
    data: bytes
    expect: str
    """``corrupt`` / ``incomplete``: the verdict; ``error``: a clean ckptctl error."""
    why: str


def write_small_checkpoint(path: Path) -> Path:
    """A real single-process DCP checkpoint: two tensors, an int and an optimizer dict (about 7 KiB)."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp

    warnings.filterwarnings("ignore")
    sd = {
        "w": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "b": torch.ones(5, dtype=torch.bfloat16),
        "step": 7,
        "optimizer": {"lr": 0.1},  # optimizer state: a resume point, not a model-only export
    }
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(path)))
    return path


def _load_trusted(metadata: bytes) -> Any:
    # our own file, written by dcp.save above: plain pickle is fine here (and only here)
    return pickle.loads(metadata)


def _mutate(metadata: bytes, edit: Callable[[Any], None], protocol: int = 4) -> bytes:
    md = _load_trusted(metadata)
    edit(md)
    return pickle.dumps(md, protocol=protocol)


def _tensor(md: Any, fqn: str = "w") -> Any:
    return md.state_dict_metadata[fqn]


def _item(md: Any, fqn: str = "w") -> tuple[Any, Any]:
    for k, v in md.storage_data.items():
        if k.fqn == fqn:
            return k, v
    raise KeyError(fqn)


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # some DCP dataclasses are frozen


def splice(metadata: bytes, edit: Callable[[Any, str], None], raw: bytes) -> bytes:
    """Put ``raw`` opcodes where ``edit`` put the marker string (protocol 2, no framing)."""
    md = _load_trusted(metadata)
    edit(md, MARKER)
    data = pickle.dumps(md, protocol=2)
    enc = MARKER.encode()
    op = b"X" + struct.pack("<I", len(enc)) + enc
    assert data.count(op) == 1, "marker must appear once"
    return data.replace(op, raw)


def nested_lists(depth: int) -> bytes:
    """Opcodes pushing a list nested ``depth`` deep: ``[[[...]]]`` (no recursion to build)."""
    return b"]" * depth + b"a" * (depth - 1)


def shared_bomb(levels: int, width: int = 2, base: int = 1000) -> bytes:
    """A list whose repr doubles per level (shared references): tiny file, huge repr.

    Memo slots from ``base`` up, clear of the ones the surrounding pickle uses.
    """

    def put(i: int) -> bytes:
        return b"r" + struct.pack("<I", base + i)

    def get(i: int) -> bytes:
        return b"j" + struct.pack("<I", base + i)

    out = bytearray(b"]" + put(0) + b"0")  # L0 = [], memoized, popped
    for i in range(1, levels + 1):
        # L_i = [L_(i-1)] * width, memoized and popped
        out += b"](" + get(i - 1) * width + b"e" + put(i) + b"0"
    return bytes(out + get(levels))


def class_build_prefix() -> bytes:
    """Opcodes that BUILD a slot-state dict onto the ChunkStorageMetadata *class*, then POP it."""
    return (
        b"\x80\x02"
        b"ctorch.distributed.checkpoint.metadata\nChunkStorageMetadata\n"
        b"N}X\x0c\x00\x00\x00__setstate__"
        b"ctorch.serialization\n_get_layout\n"
        b"s\x86b0"
    )


def metadata_cases(real: bytes) -> list[Case]:
    """Every ``.metadata`` finding of issue 9, built from a real ``.metadata``."""
    cases: list[Case] = []

    def add(name: str, data: bytes, expect: str, why: str) -> None:
        cases.append(Case(name, "metadata", data, expect, why))

    body = real[2:] if real[:1] == b"\x80" else real  # drop PROTO: the prefix brings its own
    add("class_build_poison", class_build_prefix() + body, "corrupt",
        "BUILD onto a class object: must be refused, not reported complete")
    add("memo_huge_index", b"\x80\x02Nr\xff\xff\xff\x0f.", "corrupt",
        "9 bytes, LONG_BINPUT 2**28-1: the C unpickler would allocate 4 GB")
    add("memo_put_text", b"\x80\x02Np268435455\n.", "corrupt", "PUT with a huge decimal index")
    add("binbytes_huge", b"\x80\x03B\xff\xff\xff\x7f" + b"x" * 8, "corrupt",
        "BINBYTES claims 2 GiB in a 13-byte file")
    add("binbytes8_huge", b"\x80\x04\x8e" + struct.pack("<Q", 1 << 33) + b"x", "corrupt",
        "BINBYTES8 claims 8 GiB")
    add("long4_huge", b"\x80\x02\x8b" + struct.pack("<i", 1 << 30) + b"x", "corrupt",
        "LONG4 claims 1 GiB of digits")
    add("shared_refs_bomb",
        splice(real, lambda md, m: _set(_tensor(md), "size", m), shared_bomb(40)),
        "corrupt", "shared references: a repr of 2**40 elements in a message")
    add("nesting_1000", splice(real, lambda md, m: _set(_tensor(md), "size", m), nested_lists(1000)),
        "corrupt", "size nested 1,000 deep (RecursionError)")
    add("nesting_100k", splice(real, lambda md, m: _set(_tensor(md), "size", m), nested_lists(100_000)),
        "corrupt", "size nested 100,000 deep")
    add("nesting_chunks_5000",
        splice(real, lambda md, m: _set(_tensor(md), "chunks", m), nested_lists(5000)),
        "corrupt", "chunks nested 5,000 deep")
    add("properties_int", _mutate(real, lambda md: _set(_tensor(md), "properties", 5)), "corrupt",
        "properties=5 (AttributeError)")
    add("int_over_4300_digits", _mutate(real, lambda md: _set(_item(md)[1], "length", 10**5000)),
        "corrupt", "a length with 5,001 digits cannot even be printed")
    add("offset_over_4300_digits", _mutate(real, lambda md: _set(_item(md)[1], "offset", -(10**5000))),
        "corrupt", "a huge negative offset")
    add("length_2_64", _mutate(real, lambda md: _set(_item(md)[1], "length", 2**64)), "corrupt",
        "length=2**64 (overflows seek/struct under --deep)")
    add("size_dim_huge", _mutate(real, lambda md: _set(_tensor(md), "size", (2**70, 4))), "corrupt",
        "a tensor dimension over int64")
    add("dtype_list", _mutate(real, lambda md: _set(_tensor(md).properties, "dtype", [1, 2])), "corrupt",
        "a dtype replaced by a list (TypeError)")
    add("dtype_str", _mutate(real, lambda md: _set(_tensor(md).properties, "dtype", "float32")), "corrupt",
        "dtype stored as the string 'float32': DCP cannot load it")
    add("transforms_str",
        _mutate(real, lambda md: _set(_item(md)[1], "transform_descriptors", "stream.zstd/1")),
        "corrupt", "transform_descriptors as a string: DCP cannot load it")
    add("transforms_int_list",
        _mutate(real, lambda md: _set(_item(md)[1], "transform_descriptors", [5])),
        "corrupt", "transform_descriptors holding an int")
    def point_at_metadata(md: Any) -> None:
        info = _item(md, "step")[1]  # a bytes record: no raw-size check applies
        _set(info, "relative_path", ".metadata")
        _set(info, "offset", 0)
        _set(info, "length", 16)

    add("relative_path_metadata", _mutate(real, point_at_metadata),
        "corrupt", "a record inside .metadata itself: DCP cannot load it")
    add("relative_path_bytes",
        _mutate(real, lambda md: _set(_item(md)[1], "relative_path", b"__0_0.distcp")),
        "corrupt", "relative_path as bytes")
    add("chunk_sizes_str",
        _mutate(real, lambda md: _set(_tensor(md).chunks[0], "sizes", "34")),
        "corrupt", "chunk sizes as a string")
    add("storage_meta_int", _mutate(real, lambda md: _set(md, "storage_meta", 0)), "corrupt",
        "storage_meta not a StorageMeta: dcp.load sets its load_id (found by the fuzzer)")

    def index_hint_str(md: Any) -> None:
        key, info = _item(md)
        md.storage_data.pop(key)
        _set(key, "index", "0")
        md.storage_data[key] = info

    add("index_hint_str", _mutate(real, index_hint_str), "corrupt", "MetadataIndex.index as a string")
    add("fqn_huge_repr",
        _mutate(real, lambda md: md.state_dict_metadata.__setitem__(("k",) * 200_000, 5)),
        "corrupt", "a 200,000-element key must not be printed whole")
    add("truncated_half", real[: len(real) // 2], "corrupt", "truncated in the middle")
    add("empty_file", b"", "corrupt", "0 bytes")
    return cases


def _zip_record(payload: bytes = b"\x80\x02}q\x00.") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def _eocd(n: int, cd_size: int, cd_offset: int) -> bytes:
    return b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, n, n, cd_size, cd_offset, 0)


def record_cases() -> list[Case]:
    """Crafted records (zip archives) for the deep check."""
    good = _zip_record()
    cases: list[Case] = []

    def add(name: str, data: bytes, why: str) -> None:
        cases.append(Case(name, "record", data, "corrupt", why))

    add("cd_entry_truncated", b"PK\x01\x02" + b"\0" * 10 + _eocd(1, 14, 0),
        "a central directory entry cut after 14 bytes (struct.error)")
    add("cd_count_too_big", good[: good.rfind(b"PK\x05\x06")] + _eocd(60000, 46, 0),
        "the end record claims 60,000 entries")
    add("zip64_locator_truncated", b"PK\x06\x07" + b"\0" * 4 + _eocd(0xFFFF, 0, 0),
        "a zip64 locator cut short (struct.error)")
    eocd = good.rfind(b"PK\x05\x06")
    cd_off = struct.unpack_from("<I", good, eocd + 16)[0]
    # a zip64 extra field of 3 bytes on an entry whose sizes say 0xFFFFFFFF
    cd = bytearray(good[cd_off:eocd])
    struct.pack_into("<II", cd, 20, 0xFFFFFFFF, 0xFFFFFFFF)
    add("zip64_extra_short", good[:cd_off] + bytes(cd) + good[eocd:],
        "sizes say zip64 but the extra field is missing")
    # a deflate member that inflates far past its declared size
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\0" * (64 << 20))
    add("deflate_bomb", bomb.getvalue(), "64 MiB of zeros in a 64 KiB deflate member")
    return cases


def many_members_zip(n: int, *, distinct: bool = False) -> bytes:
    """A torch.save-like zip whose directory lists ``n`` members: all pointing at the same local
    header (``distinct=False``), or each with its own tiny local header and data."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/version", b"3\n")
    good = buf.getvalue()
    eocd = good.rfind(b"PK\x05\x06")
    cd_off = struct.unpack_from("<I", good, eocd + 16)[0]
    cd = good[cd_off:eocd]
    n1, x1, c1 = struct.unpack_from("<HHH", cd, 28)
    first, second = cd[: 46 + n1 + x1 + c1], cd[46 + n1 + x1 + c1 :]
    body, entries = bytearray(good[:cd_off]), [first, second]
    if distinct:
        for i in range(n - 2):
            name = f"archive/data/{i}".encode()
            lho = len(body)
            body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0) + name
            e = bytearray(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0, 0, 0, 0, 0, lho))
            entries.append(bytes(e) + name)
        cd_off = len(body)
    else:
        entries += [second] * (n - 2)
    newcd = b"".join(entries)
    out = bytes(body) + newcd
    out += b"PK\x06\x06" + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, n, n, len(newcd), cd_off)
    out += b"PK\x06\x07" + struct.pack("<IQI", 0, cd_off + len(newcd), 1)
    out += b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return out


def config_cases() -> list[Case]:
    """The config findings of issue 9 (fixed where the config loader lives: core/config.py)."""
    deep = "a: " + "[" * 100_000 + "]" * 100_000 + "\n"
    return [
        Case("yaml_nested_100k", "config", deep.encode(), "error", "YAML nested 100,000 deep (RecursionError)"),
        Case("duplicate_keys", "config", b"run_root: /a\nrun_root: /b\n", "error", "a key given twice"),
        Case("run_root_int", "config", b"run_root: 5\n", "error", "run_root must be a string"),
        Case("grace_inf", "config", b"launch:\n  stop_grace_s: .inf\n", "error", "a non-finite number"),
    ]


def log_cases() -> list[Case]:
    """Logs for the readers: terminal escapes, NULs, a long single line, invalid UTF-8."""
    return [
        Case("escapes", "log", b"step 1 | loss 2.0\n\x1b]0;pwned\x07\x1b[2J step 2 | loss 1.9\n", "ok",
             "terminal escape sequences in a log line"),
        Case("nul_and_invalid_utf8", "log", b"step 1 | loss 2.0\n\x00\xff\xfe step 2 | loss nan\n", "ok",
             "NULs and bytes that are not UTF-8"),
        Case("single_line_4mb", "log", b"loss 1.0 " * ((4 << 20) // 9), "ok",
             "a 4 MB line without a newline (the 200 MB case is the watch branch's)"),
    ]  # fmt: skip
