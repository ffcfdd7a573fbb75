"""Sparse indexes of one segment.

`.index` (OffsetIndex): 8-byte entries `relative_offset:int32 | position:int32`, both strictly
increasing; an entry says "the batch starting at this offset begins at this file position".
`.timeindex` (TimeIndex): 12-byte entries `max_timestamp:int64 | relative_offset:int32`, both
strictly increasing; an entry says "batches up to this offset have timestamps up to this one".

Files are pre-allocated (sparse) to `max_index_size` while their segment is active and trimmed
to the valid entries when it rolls. Entries are written with `pwrite` and looked up in a copy
kept in memory while the segment is active, through a read-only mapping once it is trimmed:
a store into a mapped page that a full disk cannot back, or on tmpfs any touch of a mapped
hole, kills the process (SIGBUS), where `pwrite` fails with ENOSPC and leaves the index as it
was. On open, the valid entries are the prefix before the first all-zero entry: no index records
position 0 or timestamp 0 at its base offset, so an all-zero entry is unused space. `validate`
checks the entries before they are trusted after an unclean shutdown.

Thread-safety (docs/threads.md): none. The owning LogSegment serialises access.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
from pathlib import Path

from weir import diskio
from weir.storage.errors import CorruptIndexError


class _MappedIndex:
    """Held in one of two ways. While its segment takes appends, the index keeps its file
    descriptor (entries are written with pwrite) and a copy of its entries in memory for
    lookups. Once trimmed, it is a read-only mapping and keeps no descriptor of its own: a
    partition's closed segments cost one descriptor each (the log) beyond what the mapping's
    own duplicate holds, so thousands of partitions fit a process's limit."""

    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.newly_created = not path.exists()
        existed = not self.newly_created and path.stat().st_size > 0
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._mmap: mmap.mmap | None = None
        self._entries_copy: bytearray | None = None
        self._view: bytes | bytearray | mmap.mmap = b""
        try:
            if self.newly_created:
                diskio.truncate(self._fd, self._rounded(max_index_size), diskio.INDEX)
            self.capacity = os.fstat(self._fd).st_size // self.entry_size
            self.entries = self._count_valid_entries() if existed else 0
            if self.newly_created:
                self._hold_for_appends()  # a new index belongs to a segment about to take appends
            else:
                self._hold_mapped()
        except BaseException:
            self.close()
            raise

    @property
    def entry_size(self) -> int:
        return self.ENTRY.size

    def _rounded(self, size: int) -> int:
        return size - size % self.entry_size

    def _descriptor(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR)
        return self._fd

    def _hold_mapped(self) -> None:
        """Read-only mapping of the file, no descriptor of our own."""
        self._unmap()
        fd = self._descriptor()
        size = os.fstat(fd).st_size
        self.capacity = size // self.entry_size
        self._mmap = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
        self._view = self._mmap if self._mmap is not None else b""
        self._entries_copy = None
        os.close(fd)
        self._fd = -1

    def _hold_for_appends(self) -> None:
        """Descriptor open for writes, entries copied into memory for lookups."""
        self._unmap()
        fd = self._descriptor()
        self.capacity = os.fstat(fd).st_size // self.entry_size
        self._entries_copy = bytearray(os.pread(fd, self.entries * self.entry_size, 0))
        self._view = self._entries_copy

    @property
    def is_full(self) -> bool:
        return self.entries >= self.capacity

    def _raw(self, i: int) -> tuple[int, int]:
        pair: tuple[int, int] = self.ENTRY.unpack_from(self._view, i * self.entry_size)
        return pair

    def _count_valid_entries(self) -> int:
        """Entries before the first all-zero entry (after entry 0), found by binary search.
        Reads with pread, not through a mapping: the unused tail may be a hole, and on tmpfs
        touching a mapped hole allocates a page, which a full file system answers with SIGBUS."""
        lo, hi = 1, self.capacity
        if hi == 0:
            return 0
        while lo < hi:
            mid = (lo + hi) // 2
            if self._read_entry(mid) == (0, 0):
                hi = mid
            else:
                lo = mid + 1
        if lo == 1 and self._read_entry(0) == (0, 0):
            return 0  # an index never records position 0 / timestamp 0 at the base offset
        return lo

    def _read_entry(self, i: int) -> tuple[int, int]:
        raw = os.pread(self._descriptor(), self.entry_size, i * self.entry_size)
        pair: tuple[int, int] = self.ENTRY.unpack(raw)
        return pair

    def _write(self, i: int, a: int, b: int) -> None:
        if i >= self.capacity:
            raise CorruptIndexError(f"index {self.path} is full")
        self._pwrite(self.ENTRY.pack(a, b), i * self.entry_size)

    def _pwrite(self, data: bytes, position: int) -> None:
        written = diskio.pwrite(self._descriptor(), data, position, diskio.INDEX)
        if written != len(data):
            raise OSError(errno.ENOSPC, f"short write to {self.path}: {written} of {len(data)}")
        if self._entries_copy is not None:
            copy = self._entries_copy
            if position > len(copy):
                copy.extend(bytes(position - len(copy)))
            copy[position : position + len(data)] = data

    def truncate_to_entries(self, n: int) -> None:
        """Keep only the first `n` entries; zero the rest so a reopen counts them right."""
        n = max(0, min(n, self.entries))
        if n < self.entries:
            start, end = n * self.entry_size, self.entries * self.entry_size
            self._pwrite(bytes(end - start), start)
            if self._entries_copy is not None:
                del self._entries_copy[start:]
        self.entries = n

    def reset(self) -> None:
        """Forget every entry: the file is cut to nothing and grown again, sparse (no write, so
        a full disk can still rebuild the index it is about to fill)."""
        self.entries = 0
        self.resize(0)
        self.resize(self.max_index_size)

    def trim(self) -> None:
        """Shrink the file to its valid entries (done when the segment stops being active) and
        hold it mapped from then on."""
        self.resize(self.entries * self.entry_size, mapped=True)

    def resize(self, size: int, *, mapped: bool = False) -> None:
        """Set the file's size (never below its entries); held for appends unless `mapped`."""
        size = max(self._rounded(size), self.entries * self.entry_size)
        fd = self._descriptor()
        try:
            if os.fstat(fd).st_size != size:
                self._unmap()
                diskio.truncate(fd, size, diskio.INDEX)
        finally:
            if mapped:
                self._hold_mapped()
            else:
                self._hold_for_appends()

    def flush(self) -> None:
        diskio.sync(self._descriptor(), diskio.INDEX, data_only=True)
        if self._mmap is not None:
            os.close(self._fd)
            self._fd = -1

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        self._view = self._entries_copy if self._entries_copy is not None else b""

    def close(self) -> None:
        self._unmap()
        self._entries_copy = None
        self._view = b""
        self.capacity = 0
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def _search(self, key_of: int, target: int) -> int:
        """Index of the last entry whose field `key_of` is <= target, or -1."""
        lo, hi = 0, self.entries
        while lo < hi:
            mid = (lo + hi) // 2
            if self._raw(mid)[key_of] <= target:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def _check_increasing(self) -> None:
        previous: tuple[int, int] | None = None
        for i in range(self.entries):
            entry = self._raw(i)
            if previous is not None and (entry[0] <= previous[0] or entry[1] <= previous[1]):
                raise CorruptIndexError(f"{self.path}: entry {i} {entry} not after {previous}")
            previous = entry


class OffsetIndex(_MappedIndex):
    ENTRY = struct.Struct(">ii")

    @property
    def last_offset(self) -> int:
        return (
            self.base_offset + self._raw(self.entries - 1)[0] if self.entries else self.base_offset
        )

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self.entries and relative <= self._raw(self.entries - 1)[0]:
            raise CorruptIndexError(f"offset {offset} not after the last indexed offset")
        self._write(self.entries, relative, position)
        self.entries += 1

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before `offset`, else (base, 0)."""
        i = self._search(0, offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        relative, position = self._raw(i)
        return self.base_offset + relative, position

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before file `position`, else (base, 0)."""
        i = self._search(1, position)
        if i < 0:
            return self.base_offset, 0
        relative, pos = self._raw(i)
        return self.base_offset + relative, pos

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        self.truncate_to_entries(self._search(0, offset - self.base_offset - 1) + 1)

    def validate(self, log_size: int) -> None:
        for i in range(self.entries):
            relative, position = self._raw(i)
            if relative < 0 or position < 0 or position >= max(log_size, 1):
                raise CorruptIndexError(f"{self.path}: entry {i} points outside the log")
        self._check_increasing()


class TimeIndex(_MappedIndex):
    ENTRY = struct.Struct(">qi")

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(max timestamp, offset) of the last entry."""
        if not self.entries:
            return None
        timestamp, relative = self._raw(self.entries - 1)
        return timestamp, self.base_offset + relative

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Index `timestamp` at `offset` if both are past the last entry (-1: no timestamp)."""
        last = self.last_entry
        if timestamp < 0:
            return
        if last is not None and (timestamp <= last[0] or offset <= last[1]):
            return
        self._write(self.entries, timestamp, offset - self.base_offset)
        self.entries += 1

    def append_final(self, timestamp: int, offset: int) -> None:
        """Index the segment's largest timestamp when it stops taking appends (roll, close,
        recovery), growing the file by one entry if it is full, so a reload learns it."""
        if self.is_full:
            self.resize((self.entries + 1) * self.entry_size)
        self.maybe_append(timestamp, offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= target, else (-1, base)."""
        i = self._search(0, timestamp)
        if i < 0:
            return -1, self.base_offset
        ts, relative = self._raw(i)
        return ts, self.base_offset + relative

    def truncate_to(self, offset: int) -> None:
        keep = 0
        while keep < self.entries and self._raw(keep)[1] < offset - self.base_offset:
            keep += 1
        self.truncate_to_entries(keep)

    def validate(self, log_size: int) -> None:
        for i in range(self.entries):
            timestamp, relative = self._raw(i)
            if relative < 0 or timestamp < 0:
                raise CorruptIndexError(f"{self.path}: entry {i} is not a valid time entry")
        self._check_increasing()
