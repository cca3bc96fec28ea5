"""TFRecord framing (TensorBoard event files), read with every length and checksum checked.

A record is ``uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked
CRC-32C of the data``. TensorBoard's own loader stops silently at the first bad record, so
whatever follows it (the spike after a resume) went unread and unnoticed. This reader:

- checks the length's CRC before trusting it, and the length against ``MAX_RECORD_BYTES``
  and the bytes left (never an allocation sized by the input);
- skips a record whose data fails its CRC (its length was sound) and reads on, counting it;
- stops at a header that fails its CRC (nothing after it can be framed), saying at which byte;
- tells apart a last record cut short (a writer stopped mid-write: common after a crash) from
  damage in the middle.

``damage`` (what was not read, and why) is for the caller's verdict; ``notes`` are facts
that change nothing. Local files only; special files refused (``open_regular``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

from ckptctl.adapters.localfile import open_regular
from ckptctl.core.verify.crc import masked_crc32c

#: The largest record read (a scalar event is ~50 bytes; images and histograms are KiBs to MiBs).
MAX_RECORD_BYTES = 16 << 20
_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")


class RecordReader:
    """Iterate the data of every sound record of ``path``; then read ``damage`` and ``notes``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.damage: list[str] = []
        """Bytes not read or records dropped in the middle of the file: a verdict must not pass them."""
        self.notes: list[str] = []
        self.records = 0

    def __iter__(self) -> Iterator[bytes]:
        name = os.path.basename(self.path)
        with open_regular(self.path) as f:
            size = os.fstat(f.fileno()).st_size
            pos = 0
            while pos < size:
                head = f.read(_HEADER.size)
                if len(head) < _HEADER.size:
                    self.notes.append(f"{name}: the last record is cut short at byte {pos} (a writer stopped mid-record)")
                    return
                length, length_crc = _HEADER.unpack(head)
                if masked_crc32c(head[:8]) != length_crc:
                    self.damage.append(f"{name}: the record header at byte {pos} fails its CRC-32C; the "
                                       f"{size - pos} byte(s) after it were not read")  # fmt: skip
                    return
                if length > MAX_RECORD_BYTES:
                    self.damage.append(f"{name}: the record at byte {pos} claims {length} bytes (cap "
                                       f"{MAX_RECORD_BYTES >> 20} MiB); the {size - pos} byte(s) after it were not read")
                    return
                end = pos + _HEADER.size + length + _CRC.size
                if end > size:
                    self.notes.append(f"{name}: the last record is cut short at byte {pos} (a writer stopped mid-record)")
                    return
                data = f.read(length)
                tail = f.read(_CRC.size)
                if len(data) < length or len(tail) < _CRC.size:  # the file shrank under us
                    self.notes.append(f"{name}: the file ended at byte {pos} while it was read")
                    return
                if masked_crc32c(data) != _CRC.unpack(tail)[0]:
                    self.damage.append(f"{name}: the record at byte {pos} ({length} bytes) fails its CRC-32C: skipped")
                else:
                    self.records += 1
                    yield data
                pos = end
