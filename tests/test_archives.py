"""adapters/archives.py on hostile and broken files: a clear verdict, never an exception or a hang."""

from __future__ import annotations

import io
import random
import zipfile
from pathlib import Path

import pytest

from ckptctl.adapters import archives
from ckptctl.adapters.storage import Storage


def _storage_for(path: Path) -> tuple[Storage, str]:
    return Storage.for_url(str(path))


def _torch_like_zip(path: Path, pkl: bytes, *, deflate: bool = False, extra: dict[str, bytes] | None = None) -> None:
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method) as z:
        z.writestr("archive/data.pkl", pkl)
        for name, data in (extra or {}).items():
            z.writestr(f"archive/{name}", data)


def test_hostile_global_in_a_side_file_is_reported_and_not_run(tmp_path: Path) -> None:
    f = tmp_path / "training_args.bin"
    # GLOBAL os.system, the argument, REDUCE: running it would print
    _torch_like_zip(f, b"\x80\x02cos\nsystem\nX\x0b\x00\x00\x00echo pwned!\x85R.")
    storage, path = _storage_for(f)
    quick = archives.check_torch_zip(storage, path, f.stat().st_size, shown=f.name, want_top=True)
    assert quick.problems == []  # structure is fine: only the deep scan reads globals
    deep = archives.check_torch_zip(storage, path, f.stat().st_size, shown=f.name, deep=True,
                                    writer_globals=frozenset({("transformers.training_args", "TrainingArguments")}))
    assert [p.code for p in deep.problems] == ["hostile-pickle"]
    assert "os.system" in deep.problems[0].message
    # exact (module, name) pairs: another name of the module is no pass
    near = archives.check_torch_zip(storage, path, f.stat().st_size, shown=f.name, deep=True,
                                    writer_globals=frozenset({("os", "getcwd")}))
    assert [p.code for p in near.problems] == ["hostile-pickle"]
    trusted = archives.check_torch_zip(storage, path, f.stat().st_size, shown=f.name, deep=True,
                                       writer_globals=frozenset({("os", "system")}))
    assert trusted.problems == [] and "writer's own classes" in trusted.notes[0]


def test_deflate_bomb_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archives, "MAX_PICKLE_BYTES", 1 << 20)
    f = tmp_path / "bomb.pt"
    _torch_like_zip(f, b"\x80\x02}q\x00." + b"\x00" * (8 << 20), deflate=True)
    storage, path = _storage_for(f)
    res = archives.check_torch_zip(storage, path, f.stat().st_size, shown=f.name, want_top=True)
    assert [p.code for p in res.problems] == ["file-corrupt"] and "inflates past" in res.problems[0].message


def test_random_damage_never_raises(tmp_path: Path) -> None:
    import torch

    buf = io.BytesIO()
    torch.save({"model": {"w": torch.zeros(64)}, "optimizer": {"lr": 0.1}}, buf)
    good = buf.getvalue()
    rng = random.Random(11)
    for i in range(150):
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if i % 3 == 0:
            data = data[: rng.randrange(len(data))]
        f = tmp_path / f"f{i}.pt"
        f.write_bytes(bytes(data))
        storage, path = _storage_for(f)
        size = f.stat().st_size
        for deep in (False, True):
            res = archives.check_torch_zip(storage, path, size, shown=f.name, deep=deep, want_top=True)
            assert all(p.code for p in res.problems)
        archives.read_safetensors_header(storage, path, size, shown=f.name)
        archives.check_json(storage, path, size, shown=f.name)
