"""Producer-state snapshots of one partition (`<20-digit offset>.snapshot`, Kafka's layout).

A snapshot named N holds the producer state of every batch below offset N, so a load reads the
newest usable one and replays only the batches from N on. The file is:

    version:int16 (1) | crc:uint32 | count:int32 | count x entry
    entry = producer_id:int64 | epoch:int16 | last_sequence:int32 | last_offset:int64 |
            offset_delta:int32 | timestamp:int64 | coordinator_epoch:int32 |
            current_txn_first_offset:int64

The CRC (CRC32C) covers everything after itself. An entry describes the producer's last batch
(its last sequence and offset, and `offset_delta` = last offset - first offset; -1, -1 and 0 when
it wrote none, only markers or offsets of a transaction), and the first offset of its open
transaction here (-1 when none). A torn, truncated or otherwise damaged file fails its CRC and is
deleted rather than trusted: the state is rebuilt from an older snapshot or from the log.

What the entries mean belongs to the broker's producer state; this module only stores them.

Thread-safety (docs/threads.md): none; the owning PartitionLog serialises access (under its lock),
except `write_file`, which touches no state of the instance and runs without it.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c

from weir.durable import write_bytes_atomically
from weir.storage.errors import StorageError
from weir.storage.files import PRODUCER_SNAPSHOT_SUFFIX, segment_name

VERSION = 1
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_CRC_START = 6  # the CRC covers the count and the entries
_ENTRY = struct.Struct(">qhiqiqiq")
NO_OFFSET = -1


class CorruptSnapshotError(StorageError):
    """A snapshot file that cannot be trusted (torn, damaged, unknown version)."""


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    producer_id: int
    epoch: int
    last_sequence: int = -1
    last_offset: int = NO_OFFSET
    offset_delta: int = 0
    timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_OFFSET


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    """The producer state of every batch below `offset`."""

    offset: int
    entries: tuple[ProducerSnapshotEntry, ...]


def encode_snapshot(entries: Sequence[ProducerSnapshotEntry]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(_pack_entry(e) for e in entries)
    return struct.pack(">hI", VERSION, crc32c.crc32c(body)) + body


def _pack_entry(e: ProducerSnapshotEntry) -> bytes:
    return _ENTRY.pack(
        e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta,
        e.timestamp, e.coordinator_epoch, e.current_txn_first_offset,
    )  # fmt: skip


def decode_snapshot(data: bytes, where: str = "snapshot") -> tuple[ProducerSnapshotEntry, ...]:
    """The entries of a snapshot file's bytes; CorruptSnapshotError unless it is whole."""
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"{where}: {len(data)} bytes is too short for a snapshot")
    version, crc, count = _HEADER.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"{where}: unknown snapshot version {version}")
    if crc32c.crc32c(data[_CRC_START:]) != crc:
        raise CorruptSnapshotError(f"{where}: CRC mismatch")
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{where}: {count} entries do not fill {len(data)} bytes")
    return tuple(
        ProducerSnapshotEntry(*fields)
        for fields in _ENTRY.iter_unpack(memoryview(data)[_HEADER.size :])
    )


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{segment_name(offset)}{PRODUCER_SNAPSHOT_SUFFIX}"


class ProducerSnapshots:
    """The `<offset>.snapshot` files of one partition directory (version:int16 | crc:uint32 |
    count:int32 | entries, see the module docstring), by offset: only their offsets are kept in
    memory, a file is read when a load needs it. Not thread-safe: the owning PartitionLog
    serialises access."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.offsets: list[int] = sorted(
            int(p.name.split(".", 1)[0])
            for p in directory.glob(f"*{PRODUCER_SNAPSHOT_SUFFIX}")
            if p.name.split(".", 1)[0].isdigit()
        )

    @property
    def latest_offset(self) -> int | None:
        return self.offsets[-1] if self.offsets else None

    def write(
        self, offset: int, entries: Sequence[ProducerSnapshotEntry], *, sync: bool = True
    ) -> None:
        """Write the snapshot at `offset` (replacing one there): a temp file renamed into place.
        Without `sync` it is not fsynced: a crash can then leave it torn, which its CRC
        reveals."""
        self.write_file(offset, entries, sync=sync)
        self.add(offset)

    def write_file(
        self, offset: int, entries: Sequence[ProducerSnapshotEntry], *, sync: bool = True
    ) -> None:
        """Write the snapshot at `offset` without registering it (`add` does): the part that
        may run without the owning log's lock."""
        write_bytes_atomically(
            snapshot_path(self.directory, offset), encode_snapshot(entries), sync=sync
        )

    def add(self, offset: int) -> None:
        if offset not in self.offsets:
            bisect.insort(self.offsets, offset)

    def remove_file(self, offset: int) -> None:
        """Remove a snapshot written by `write_file` and never registered."""
        if offset not in self.offsets:
            snapshot_path(self.directory, offset).unlink(missing_ok=True)

    def read(self, offset: int) -> ProducerSnapshot:
        path = snapshot_path(self.directory, offset)
        return ProducerSnapshot(offset, decode_snapshot(path.read_bytes(), path.name))

    def delete(self, offset: int) -> None:
        snapshot_path(self.directory, offset).unlink(missing_ok=True)
        if offset in self.offsets:
            self.offsets.remove(offset)

    def delete_above(self, offset: int) -> None:
        """Delete the snapshots of offsets past `offset` (a truncation point)."""
        for doomed in self.offsets[bisect.bisect_right(self.offsets, offset) :]:
            self.delete(doomed)

    def delete_below(self, offset: int) -> None:
        """Delete the snapshots of offsets below `offset` (their segments are gone)."""
        for doomed in self.offsets[: bisect.bisect_left(self.offsets, offset)]:
            self.delete(doomed)

    def delete_all(self) -> None:
        for doomed in list(self.offsets):
            self.delete(doomed)
