"""Checks of a loaded log that do not trust the log's own bookkeeping, shared by the fault tests.

`read_all` serves the whole log through `PartitionLog.read` and insists on whole, CRC-valid,
contiguous batches up to the log end offset. `check_indexes` parses the `.index` and `.timeindex`
files byte by byte and holds every entry against the batches actually served. `TimestampScan` is
the linear-scan answer to "first record with a timestamp at or after T" and "the record with the
largest timestamp", which `offset_for_timestamp` and `max_timestamp_offset` must agree with.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from weir.records import BatchHeader, iter_batches
from weir.storage import PartitionLog

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, file position
TIME_ENTRY = struct.Struct(">qi")  # max timestamp so far, relative offset


@dataclass(frozen=True, slots=True)
class ServedBatch:
    """One batch as a read served it, and where it lives."""

    raw: bytes
    segment: str  # the `.log` file name
    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int

    @property
    def header(self) -> BatchHeader:
        return BatchHeader(self.raw)


def read_all(
    log: PartitionLog, max_bytes: int = 256 * 1024, *, gaps: bool = False
) -> list[ServedBatch]:
    """Every batch from the log start offset to the log end offset, through `log.read`. Offsets
    run on without gaps unless `gaps` (compaction leaves them where batches went)."""
    served: list[ServedBatch] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes, max_offset=log.log_end_offset).data
        assert data is not None, f"nothing served at offset {offset} < LEO {log.log_end_offset}"
        buf = data.read_bytes()
        assert len(buf) == data.size, f"short read of {data.path.name} at {data.position}"
        for header in iter_batches(buf, verify_crc=True):
            contiguous = header.base_offset == offset
            assert contiguous or (gaps and header.base_offset > offset), (
                f"{data.path.name}@{data.position + header.position}: batch at "
                f"{header.base_offset}, expected the next offset {offset}"
            )
            start = header.position
            served.append(
                ServedBatch(
                    raw=bytes(buf[start : start + header.size]),
                    segment=data.path.name,
                    position=data.position + start,
                    base_offset=header.base_offset,
                    last_offset=header.last_offset,
                    max_timestamp=header.max_timestamp,
                )
            )
            offset = header.next_offset
    assert offset == log.log_end_offset, f"batches end at {offset}, LEO is {log.log_end_offset}"
    return served


def index_entries(path: Path, entry: struct.Struct) -> list[tuple[int, int]]:
    """The entries of an index file: those before the first all-zero entry. Everything after it
    must be zero too (pre-allocated space), or the file is not what the index thinks it is."""
    data = path.read_bytes()
    data = data[: len(data) - len(data) % entry.size]
    entries = list(entry.iter_unpack(data))
    zero = (0, 0)
    used = entries.index(zero) if zero in entries else len(entries)
    assert all(e == zero for e in entries[used:]), f"{path.name}: entries after the unused space"
    return entries[:used]


def check_indexes(log: PartitionLog, served: list[ServedBatch]) -> None:
    """Every offset-index entry points at the start of a batch with that base offset; time-index
    entries rise, stay inside their segment, and carry the largest batch timestamp up to their
    offset."""
    by_segment: dict[str, list[ServedBatch]] = {}
    for batch in served:
        by_segment.setdefault(batch.segment, []).append(batch)
    for i, segment in enumerate(log.segments):
        end = log.segments[i + 1].base_offset if i + 1 < len(log.segments) else log.log_end_offset
        batches = by_segment.get(segment.log_path.name, [])
        _check_offset_index(segment.offset_index.path, segment.base_offset, batches)
        _check_time_index(segment.time_index.path, segment.base_offset, end, batches)


def _check_offset_index(path: Path, base: int, batches: list[ServedBatch]) -> None:
    starts = {b.position: b.base_offset for b in batches}
    entries = index_entries(path, OFFSET_ENTRY)
    for (relative, position), (next_relative, next_position) in itertools.pairwise(entries):
        assert next_relative > relative and next_position > position, f"{path.name}: not rising"
    for relative, position in entries:
        assert starts.get(position) == base + relative, (
            f"{path.name}: entry ({relative}, {position}) is not the start of batch "
            f"{base + relative} (batch there: {starts.get(position)})"
        )


def _check_time_index(path: Path, base: int, end: int, batches: list[ServedBatch]) -> None:
    entries = index_entries(path, TIME_ENTRY)
    for (ts, relative), (next_ts, next_relative) in itertools.pairwise(entries):
        assert next_ts > ts and next_relative > relative, f"{path.name}: not rising"
    remaining = iter(batches)
    largest: int | None = None
    for timestamp, relative in entries:  # rising offsets: one pass over the batches
        offset = base + relative
        assert base <= offset < end, f"{path.name}: offset {offset} outside [{base}, {end})"
        for batch in remaining:
            largest = batch.max_timestamp if largest is None else max(largest, batch.max_timestamp)
            if batch.last_offset >= offset:
                break
        assert largest == timestamp, (
            f"{path.name}: entry ({timestamp}, {offset}) but the largest timestamp up to "
            f"{offset} is {largest}"
        )


class TimestampScan:
    """Records' (offset, timestamp) in offset order, answering timestamp queries by scanning."""

    def __init__(self, records: Iterable[tuple[int, int]] = ()) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self._running_max: list[int] = []  # running_max[i] = max(timestamps[: i + 1])
        self.extend(records)

    def extend(self, records: Iterable[tuple[int, int]]) -> None:
        for offset, timestamp in records:
            top = max(timestamp, self._running_max[-1]) if self._running_max else timestamp
            self.offsets.append(offset)
            self.timestamps.append(timestamp)
            self._running_max.append(top)

    def first_at_or_after(self, timestamp: int, end_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record below `end_offset` with a timestamp >= the
        given one: the first place the running maximum reaches it."""
        i = bisect.bisect_left(self._running_max, timestamp)
        if i == len(self.offsets) or self.offsets[i] >= end_offset:
            return None
        return self.offsets[i], self.timestamps[i]

    def max_entry(self, end_offset: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record below `end_offset` with the largest timestamp,
        or (-1, -1) if there is none."""
        n = bisect.bisect_left(self.offsets, end_offset)
        if n == 0:
            return -1, -1
        top = self._running_max[n - 1]
        i = bisect.bisect_left(self._running_max, top, hi=n)
        return self.offsets[i], self.timestamps[i]


def check_timestamps(log: PartitionLog, scan: TimestampScan, targets: Iterable[int]) -> None:
    end = log.log_end_offset
    for target in targets:
        found, expected = log.offset_for_timestamp(target), scan.first_at_or_after(target, end)
        assert found == expected, f"offset_for_timestamp({target}): {found}, scan: {expected}"
    found, expected = log.max_timestamp_offset(), scan.max_entry(end)
    assert found == expected, f"max_timestamp_offset(): {found}, scan: {expected}"


def abandon(log: PartitionLog) -> None:
    """Stop using `log` as a killed process would: close its files, flush and trim nothing."""
    for segment in log.segments:
        segment.close()
