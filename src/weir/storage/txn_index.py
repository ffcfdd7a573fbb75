"""The aborted-transaction index of one segment (`.txnindex`, Kafka's layout).

On disk, back-to-back 34-byte entries, one per transaction aborted in the segment (its ABORT
marker lies in the segment), in marker order:

    version:int16 (0) | producer_id:int64 | first_offset:int64 | last_offset:int64 |
    last_stable_offset:int64

`first_offset` is the transaction's first record on the partition (possibly in an earlier
segment), `last_offset` its marker's offset, `last_stable_offset` the partition's last stable
offset once it was aborted. No header; the file exists only once an entry was written, so a
segment without aborted transactions costs nothing. Entries are read from the file when asked
for (a read_committed fetch, truncation, a check at load), never kept in memory, so memory does
not grow with the number of aborted transactions over the log's life.

Writes append with `write` and are made durable by `flush`, or by `take_unsynced`, a sync of
the file without the log's lock and `note_synced` (the owning log syncs them before it moves its
recovery point past them). A crash can leave a torn last entry: `validate` reports it
and the log rebuilds the index from the log.

Thread-safety (docs/threads.md): none. The owning LogSegment (and so its PartitionLog) serialises
access.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from weir import diskio
from weir.storage.errors import CorruptIndexError

VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """A transaction aborted on a partition: its records lie in [first_offset, last_offset]."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(
        _ENTRY.pack(VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
        for e in entries
    )


def decode_entries(data: bytes, where: str = "txnindex") -> list[AbortedTxn]:
    """Every entry of an index file's bytes; CorruptIndexError for a torn entry or an unknown
    version."""
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(f"{where}: {len(data)} bytes is not a whole number of entries")
    entries = []
    for version, producer_id, first, last, stable in _ENTRY.iter_unpack(data):
        if version != VERSION:
            raise CorruptIndexError(f"{where}: entry of unknown version {version}")
        entries.append(AbortedTxn(producer_id, first, last, stable))
    return entries


class TransactionIndex:
    """One segment's `.txnindex`: 34-byte entries version:int16 | producer_id:int64 |
    first_offset:int64 | last_offset:int64 | last_stable_offset:int64, in marker order; no file
    while empty. Not thread-safe: its segment's PartitionLog serialises access."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.size = path.stat().st_size if path.exists() else 0
        if self.size == 0:
            path.unlink(missing_ok=True)  # an empty file is no index: none is kept
        self._writes = 0  # changes made to the file, and how many of them are synced
        self._synced_writes = 0
        self._last_offset: int | None = None

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def append(self, txn: AbortedTxn) -> None:
        """Add one entry; its marker must follow every marker already indexed here."""
        last = self._last_indexed_offset()
        if last is not None and txn.last_offset <= last:
            raise ValueError(
                f"{self.path.name}: marker offset {txn.last_offset} does not follow {last}"
            )
        self._write(encode_entries([txn]))
        self._last_offset = txn.last_offset

    def _last_indexed_offset(self) -> int | None:
        if self._last_offset is None and self.size >= ENTRY_SIZE:
            self._last_offset = self.entries()[-1].last_offset
        return self._last_offset

    def _write(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            diskio.write_all(fd, data, diskio.INDEX)
        finally:
            os.close(fd)
        self.size += len(data)
        self._writes += 1

    def entries(self) -> list[AbortedTxn]:
        if self.size == 0:
            return []
        with self.path.open("rb") as file:
            return decode_entries(file.read(), self.path.name)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The entries whose records overlap [fetch_offset, upper_bound), and whether the
        search is complete: once an entry's last stable offset reaches the upper bound, every
        transaction with records below it had ended, so later segments can add nothing."""
        found = []
        for txn in self.entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of transactions aborted at or after `offset`."""
        if self.size == 0:
            return
        kept = [txn for txn in self.entries() if txn.last_offset < offset]
        if len(kept) * ENTRY_SIZE == self.size:
            return
        self._cut(len(kept) * ENTRY_SIZE)
        self._last_offset = kept[-1].last_offset if kept else None

    def _cut(self, size: int) -> None:
        if size == 0:
            self.path.unlink(missing_ok=True)
        else:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                diskio.truncate(fd, size, diskio.INDEX)
            finally:
                os.close(fd)
            self._writes += 1
        self.size = size

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Make the index hold exactly `entries` (compaction output inherits its inputs')."""
        self.reset()
        if entries:
            self._write(encode_entries(entries))
            self._last_offset = entries[-1].last_offset

    def reset(self) -> None:
        self.path.unlink(missing_ok=True)
        self.size = 0
        self._last_offset = None
        self._synced_writes = self._writes

    def validate(self, end_offset: int) -> None:
        """Raise CorruptIndexError unless every entry is whole, of a known version and has its
        marker in [base offset, `end_offset`), in increasing order."""
        previous = self.base_offset - 1
        for txn in self.entries():
            if not previous < txn.last_offset < end_offset or txn.first_offset > txn.last_offset:
                raise CorruptIndexError(
                    f"{self.path.name}: entry ({txn.first_offset}, {txn.last_offset}) is out of "
                    f"order or outside [{self.base_offset}, {end_offset})"
                )
            previous = txn.last_offset

    def flush(self) -> None:
        unsynced = self.take_unsynced()
        if unsynced is not None:
            sync_index_file(unsynced[0])
            self.note_synced(unsynced[1])

    def take_unsynced(self) -> tuple[Path, int] | None:
        """The file to sync for the changes not yet synced, and the mark to pass `note_synced`
        once it is (None: nothing to sync). The sync itself may run without the log's lock."""
        if self._writes == self._synced_writes:
            return None
        if not self.size:
            self._synced_writes = self._writes
            return None
        return self.path, self._writes

    def note_synced(self, mark: int) -> None:
        self._synced_writes = max(self._synced_writes, mark)

    def rename(self, path: Path) -> None:
        if self.size:
            os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self.size = 0


def sync_index_file(path: Path) -> None:
    """fsync an index file by its path; one renamed or deleted meanwhile is not synced (its
    segment is being replaced or deleted, and its replacement is synced by whoever made it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        diskio.sync(fd, diskio.INDEX)
    finally:
        os.close(fd)
