"""One segment: a `.log` file of whole record batches plus its offset and time indexes, and
the index of transactions aborted in it (`.txnindex`, see `txn_index.py`).

The `.log` file is the batches exactly as appended (after offset assignment), back to back, each
`12 + batch_length` bytes; nothing else. Positions handed out by reads are always batch starts.

Thread-safety (docs/threads.md): none. A LogSegment belongs to one PartitionLog, which serialises
access; a flush syncs the descriptor of a pinned segment without the log's lock.
"""

from __future__ import annotations

import dataclasses
import logging
import mmap
import os
import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from weir import diskio
from weir.clock import Clock
from weir.records import HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, BatchHeader
from weir.records.record import iter_records
from weir.storage.config import LogConfig
from weir.storage.errors import CorruptIndexError, LogDirectoryError
from weir.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_path,
)
from weir.storage.index import OffsetIndex, TimeIndex
from weir.storage.txn_index import TransactionIndex

log = logging.getLogger(__name__)

_SCAN_CHUNK = 8 * 1024
_HEADER_FIELDS = struct.Struct(">qi")  # base offset, batch length
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_MAX_RELATIVE_OFFSET = 2**31 - 1


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Whole batches `[position, position + size)` of an open segment file, ready for sendfile.

    A slice read with `retain` owns `fd`, a duplicate of the segment's descriptor, so the bytes
    stay readable after the segment is closed or deleted (a topic deletion, retention): its
    holder must `close()` it. Otherwise `fd` is the segment's own and `close()` does nothing."""

    fd: int
    path: Path
    position: int
    size: int
    first_offset: int
    next_offset: int  # the offset after the slice's last batch: where the next read starts
    owned: bool = False

    def read_bytes(self) -> bytes:
        return os.pread(self.fd, self.size, self.position)

    def retained(self) -> FileSlice:
        """The same bytes through a descriptor of their own."""
        return dataclasses.replace(self, fd=os.dup(self.fd), owned=True)

    def close(self) -> None:
        if self.owned:
            os.close(self.fd)


@dataclass(frozen=True, slots=True)
class BatchLocation:
    """What a header scan learns about one batch without reading its records."""

    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class _TailState:
    """What an append changes, kept so that a failed one can be undone."""

    size: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_last_index_entry: int
    rolling_timestamp: int | None
    offset_entries: int
    time_entries: int


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    reason: str | None


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        clock: Clock,
        *,
        transit: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self._clock = clock
        self.transit = transit
        self.log_path = segment_path(directory, base_offset, LOG_SUFFIX, transit)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.created_ms = clock.milliseconds()
        max_index = config.segment_index_bytes
        try:
            self.offset_index = OffsetIndex(
                segment_path(directory, base_offset, INDEX_SUFFIX, transit), base_offset, max_index
            )
            try:
                self.time_index = TimeIndex(
                    segment_path(directory, base_offset, TIME_INDEX_SUFFIX, transit),
                    base_offset,
                    max_index,
                )
            except BaseException:
                self.offset_index.close()
                raise
        except BaseException:
            os.close(self.fd)
            raise
        self.txn_index = TransactionIndex(
            segment_path(directory, base_offset, TXN_INDEX_SUFFIX, transit), base_offset
        )
        self.bytes_since_last_index_entry = 0
        last_time = self.time_index.last_entry
        self.max_timestamp, self.offset_of_max_timestamp = last_time or (-1, base_offset)
        self.rolling_timestamp: int | None = None
        self.roll_jitter_ms = _roll_jitter(config)
        self._pins = 0
        self._close_deferred = False
        self._warned_index_skipped = False
        if config.preallocate and self.size == 0 and not transit:
            self._reserve_space()

    def _reserve_space(self) -> None:
        """`preallocate`: claim the segment's space now, so that a full disk refuses a new
        segment rather than a write in the middle of one. The file's size stays 0."""
        try:
            diskio.reserve(self.fd, self.config.segment_bytes, diskio.SEGMENT)
        except BaseException:
            self.close()
            raise

    # ---- append -------------------------------------------------------------------------------

    def append(
        self,
        batch: bytes | bytearray | memoryview,
        base_offset: int,
        last_offset: int,
        max_timestamp: int,
    ) -> None:
        """Append one batch whose offsets are already assigned. Indexes follow the interval.

        All or nothing: when a write fails (a full disk, a short write, an I/O error) the log and
        its indexes are cut back to where they were and the OSError is raised; nothing is ever
        appended after bytes that recovery would cut. If the cut-back fails too, the segment's
        state is unknown: LogDirectoryError."""
        before = self._tail_state()
        try:
            diskio.write_all(self.fd, batch, diskio.SEGMENT)
            self.size += len(batch)
            if self.rolling_timestamp is None:
                self.rolling_timestamp = max_timestamp
            self._track(before.size, base_offset, last_offset, len(batch), max_timestamp)
        except Exception as exc:
            self._restore(before, exc)
            raise

    def _tail_state(self) -> _TailState:
        return _TailState(
            self.size,
            self.max_timestamp,
            self.offset_of_max_timestamp,
            self.bytes_since_last_index_entry,
            self.rolling_timestamp,
            self.offset_index.entries,
            self.time_index.entries,
        )

    def _restore(self, state: _TailState, cause: Exception) -> None:
        """Undo a failed append: cut the log and indexes back to `state`."""
        try:
            diskio.truncate(self.fd, state.size, diskio.SEGMENT)
            self.offset_index.truncate_to_entries(state.offset_entries)
            self.time_index.truncate_to_entries(state.time_entries)
        except OSError as exc:
            raise LogDirectoryError(
                f"{self.log_path}: cannot undo a failed append ({cause}): {exc}"
            ) from exc
        self.size = state.size
        self.max_timestamp = state.max_timestamp
        self.offset_of_max_timestamp = state.offset_of_max_timestamp
        self.bytes_since_last_index_entry = state.bytes_since_last_index_entry
        self.rolling_timestamp = state.rolling_timestamp

    def _track(self, position: int, base: int, last: int, size: int, max_ts: int) -> None:
        if max_ts > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_ts, last
        due = self.bytes_since_last_index_entry > self.config.index_interval_bytes
        if due and self._index_entry(base, position):
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def _index_entry(self, base: int, position: int) -> bool:
        """Index the batch at `position`; False if a full disk had no page for the entry.
        Indexes only shorten scans (a lookup reads on from the entry before), so a full disk
        skips entries rather than refusing the batch or the recovery that rebuilds them."""
        try:
            self.offset_index.append(base, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        except OSError as exc:
            self._index_skipped(exc)
            return False
        return True

    def _index_final_timestamp(self) -> None:
        """The segment's largest timestamp as its last time-index entry, if the disk has room."""
        try:
            self.time_index.append_final(self.max_timestamp, self.offset_of_max_timestamp)
        except OSError as exc:
            self._index_skipped(exc)

    def _index_skipped(self, exc: OSError) -> None:
        if not diskio.is_out_of_space(exc):
            raise exc
        if not self._warned_index_skipped:
            log.warning("%s: index entries skipped, no space: %s", self.log_path, exc)
            self._warned_index_skipped = True

    def should_roll(self, batch_size: int, batch_max_ts: int, last_offset: int) -> bool:
        if self.size == 0:
            return False
        if self.size > self.config.segment_bytes - batch_size:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        if last_offset - self.base_offset > _MAX_RELATIVE_OFFSET:
            return True
        if self.rolling_timestamp is not None and self.rolling_timestamp >= 0:
            waited = batch_max_ts - self.rolling_timestamp
        else:
            waited = self._clock.milliseconds() - self.created_ms
        return waited > self.config.max_segment_ms - self.roll_jitter_ms

    def halfway_to_roll(self, now_ms: int) -> bool:
        """Whether it has used half of what it may hold (bytes, index entries or time): the
        time to prepare the segment that follows it."""
        if self.size * 2 >= self.config.segment_bytes:
            return True
        if self.offset_index.entries * 2 >= self.offset_index.capacity:
            return True
        if self.time_index.entries * 2 >= self.time_index.capacity:
            return True
        return (now_ms - self.created_ms) * 2 >= self.config.max_segment_ms - self.roll_jitter_ms

    def rebase(self, base_offset: int) -> None:
        """Give an empty segment made ahead of time (in transit, see `segment_spare.py`) its
        base offset and its live file names."""
        assert self.size == 0, self
        self.base_offset = base_offset
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.base_offset = base_offset
        self.offset_of_max_timestamp = base_offset
        self.created_ms = self._clock.milliseconds()
        self.change_transit("")

    def reserve_space(self) -> None:
        """`preallocate` for a segment made in transit (a live one reserves when created)."""
        if self.config.preallocate and self.size == 0:
            self._reserve_space()

    # ---- scanning -----------------------------------------------------------------------------

    def batches(
        self, start: int = 0, end: int | None = None, chunk_size: int = _SCAN_CHUNK
    ) -> Iterator[BatchLocation]:
        """Batch headers from file position `start` (a batch start) up to `end` or the file end.
        Reads headers in chunks; batch bodies larger than a chunk are skipped, not read."""
        end = self.size if end is None else min(end, self.size)
        position = start
        while position + HEADER_SIZE <= end:
            chunk = os.pread(self.fd, min(chunk_size, end - position), position)
            offset = 0
            while offset + HEADER_SIZE <= len(chunk):
                base, length = _HEADER_FIELDS.unpack_from(chunk, offset)
                size = LOG_OVERHEAD + length
                if length < HEADER_SIZE - LOG_OVERHEAD or position + offset + size > end:
                    return
                (delta,) = _INT32.unpack_from(chunk, offset + 23)
                (max_ts,) = _INT64.unpack_from(chunk, offset + 35)
                yield BatchLocation(position + offset, base, base + delta, size, max_ts)
                offset += size
            position += offset

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchLocation | None:
        """The first batch at or after `start_position` whose last offset is >= `offset`."""
        _, position = self.offset_index.lookup(offset)
        for batch in self.batches(max(position, start_position)):
            if batch.last_offset >= offset:
                return batch
        return None

    def next_offset(self) -> int:
        """One past the last offset in this segment (its base offset if empty)."""
        _, position = self.offset_index.lookup(2**63 - 1)
        last = None
        for last in self.batches(position, chunk_size=256 * 1024):  # noqa: B007
            pass
        return self.base_offset if last is None else last.last_offset + 1

    # ---- read ---------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_batch: bool = True,
        bound_offset: int | None = None,
    ) -> FileSlice | None:
        """Whole batches from the one holding `offset`, at most `max_bytes` unless the first is
        larger and `min_one_batch` (KIP-74). None when `offset` is past the segment or bound.
        `bound_offset` is the offset at `max_position` (or at the end), if the caller knows it."""
        bound = self.size if max_position is None else min(max_position, self.size)
        first = self.translate_offset(offset)
        if first is None or first.position >= bound:
            return None
        end, next_offset = self._whole_batch_end(first.position, first.position + max_bytes, bound)
        if end == first.position:
            if not min_one_batch:
                return None
            end, next_offset = first.position + first.size, first.last_offset + 1
        if next_offset is None:
            next_offset = self.next_offset() if bound_offset is None else bound_offset
        size = end - first.position
        return FileSlice(self.fd, self.log_path, first.position, size, offset, next_offset)

    def _whole_batch_end(self, start: int, limit: int, bound: int) -> tuple[int, int | None]:
        """The last batch boundary <= min(limit, bound) at or after `start` (a boundary), with
        the offset that follows it when known (None at the bound itself)."""
        if limit >= bound:
            return bound, None
        indexed_offset, position = self.offset_index.lookup_position(limit)
        end, next_offset = start, None
        if position > start:
            end, next_offset = position, indexed_offset
        for batch in self.batches(end, limit):
            end, next_offset = batch.position + batch.size, batch.last_offset + 1
        return end, next_offset

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `start_offset` with a timestamp >=
        `timestamp`, or None."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, start_offset))
        for batch in self.batches(position):
            if batch.max_timestamp < timestamp or batch.last_offset < start_offset:
                continue
            header = BatchHeader(os.pread(self.fd, batch.size, batch.position))
            for record in iter_records(header):
                if record.offset >= start_offset and record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        return None

    # ---- recovery and truncation ----------------------------------------------------------------

    def recover(self, on_batch: Callable[[BatchHeader], None]) -> RecoveryResult:
        """Rebuild the indexes from the log; cut the log at the first torn or damaged batch."""
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.bytes_since_last_index_entry = 0
        self.rolling_timestamp = None
        valid, reason = self._scan_valid_prefix(on_batch)
        truncated = self.size - valid
        if truncated:
            diskio.truncate(self.fd, valid, diskio.SEGMENT)
            self.size = valid
        self._index_final_timestamp()
        return RecoveryResult(valid, truncated, reason)

    def _scan_valid_prefix(self, on_batch: Callable[[BatchHeader], None]) -> tuple[int, str | None]:
        if self.size == 0:
            return 0, None
        with mmap.mmap(self.fd, self.size, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                return self._scan_view(view, on_batch)
            finally:
                view.release()

    def _scan_view(
        self, view: memoryview, on_batch: Callable[[BatchHeader], None]
    ) -> tuple[int, str | None]:
        position = 0
        expected = self.base_offset
        while position < len(view):
            reason = _batch_problem(view, position, expected)
            if reason is not None:
                return position, reason
            header = BatchHeader(view, position)
            if self.rolling_timestamp is None:
                self.rolling_timestamp = header.max_timestamp
            self._track(
                position, header.base_offset, header.last_offset, header.size, header.max_timestamp
            )
            on_batch(header)
            expected = header.last_offset + 1
            position += header.size
        return position, None

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding `offset` and all after it; return the bytes removed."""
        batch = self.translate_offset(offset)
        if batch is None:
            return 0
        position = batch.position
        self.offset_index.truncate_to(batch.base_offset)
        self.time_index.truncate_to(batch.base_offset)
        self.txn_index.truncate_to(batch.base_offset)
        removed = self.size - position
        diskio.truncate(self.fd, position, diskio.SEGMENT)
        self.size = position
        self.reload_tail_state()
        return removed

    def reload_tail_state(self) -> None:
        last = self.time_index.last_entry
        self.max_timestamp, self.offset_of_max_timestamp = last or (-1, self.base_offset)
        _, position = self.offset_index.lookup(2**63 - 1)
        self.bytes_since_last_index_entry = self.size - position
        for batch in self.batches(position):
            if batch.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = (
                    batch.max_timestamp,
                    batch.last_offset,
                )
        if self.size == 0:
            self.rolling_timestamp = None

    def validate_indexes(self) -> None:
        """Raise CorruptIndexError unless both indexes are consistent with the log."""
        self.offset_index.validate(self.size)
        self.time_index.validate(self.size)
        if self.offset_index.entries:
            offset, position = self.offset_index.lookup(2**63 - 1)
            located = next(self.batches(position), None)
            if located is None or located.base_offset != offset:
                raise CorruptIndexError(
                    f"{self.offset_index.path}: last entry is not a batch start"
                )

    # ---- lifecycle ----------------------------------------------------------------------------

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's modification time when it has none (retention)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.fd).st_mtime * 1000)

    def on_become_inactive(self) -> None:
        """Called when a newer segment takes over appends: index the final max timestamp, trim
        the indexes, and give back space reserved past the end of the log."""
        self._index_final_timestamp()
        self.offset_index.trim()
        self.time_index.trim()
        if self.config.preallocate:
            diskio.release_reserved(self.fd, self.size, diskio.SEGMENT)

    def make_active(self) -> None:
        self.offset_index.resize(self.config.segment_index_bytes)
        self.time_index.resize(self.config.segment_index_bytes)

    def flush(self) -> None:
        diskio.sync(self.fd, diskio.SEGMENT)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def change_transit(self, transit: str) -> None:
        """Rename all its files to carry `transit` (e.g. "", ".swap", ".deleted")."""
        new_log = segment_path(self.directory, self.base_offset, LOG_SUFFIX, transit)
        os.rename(self.log_path, new_log)
        self.log_path = new_log
        for index, suffix in (
            (self.offset_index, INDEX_SUFFIX),
            (self.time_index, TIME_INDEX_SUFFIX),
        ):
            index.rename(segment_path(self.directory, self.base_offset, suffix, transit))
        txn_path = segment_path(self.directory, self.base_offset, TXN_INDEX_SUFFIX, transit)
        self.txn_index.rename(txn_path)
        self.transit = transit

    def follow_directory(self, directory: Path) -> None:
        """Its partition directory was renamed to `directory` (a move between log
        directories): its open files stay, their paths change."""
        self.directory = directory
        self.log_path = directory / self.log_path.name
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.path = directory / index.path.name

    def pin(self) -> None:
        """Keep the log file open until `unpin`, even if the segment is closed or deleted
        meanwhile (the cleaner reads segments outside the log's lock). Under the log's lock."""
        self._pins += 1

    def unpin(self) -> None:
        self._pins -= 1
        if self._pins == 0 and self._close_deferred:
            self._close_log_file()

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        if self._pins:
            self._close_deferred = True
            return
        self._close_log_file()

    def _close_log_file(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.path.unlink(missing_ok=True)
        self.time_index.path.unlink(missing_ok=True)
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size})"


def open_new_segment(
    directory: Path, base_offset: int, config: LogConfig, clock: Clock
) -> LogSegment:
    """A new, empty segment at `base_offset`; if it cannot be created, the files it began are
    removed again (unless a log file with data was already there) and the error is raised."""
    try:
        return LogSegment(directory, base_offset, config, clock)
    except BaseException:
        log_path = segment_path(directory, base_offset, LOG_SUFFIX)
        if not log_path.exists() or log_path.stat().st_size == 0:
            for suffix in SEGMENT_SUFFIXES:
                segment_path(directory, base_offset, suffix).unlink(missing_ok=True)
        raise


def _roll_jitter(config: LogConfig) -> int:
    """How much earlier than segment.ms this segment rolls (segment.jitter.ms, as Kafka draws it):
    segments created together do not all roll at once."""
    if config.segment_jitter_ms <= 0:
        return 0
    return random.randrange(min(config.segment_jitter_ms, config.max_segment_ms))


def _batch_problem(view: memoryview, position: int, expected_offset: int) -> str | None:
    """Why the batch at `position` cannot be kept, or None if it is whole and intact."""
    remaining = len(view) - position
    if remaining < HEADER_SIZE:
        return f"torn batch header ({remaining} bytes) at position {position}"
    header = BatchHeader(view, position)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.size > remaining:
        return f"torn batch at position {position}: {header.size} bytes claimed, {remaining} left"
    if header.magic != MAGIC_V2:
        return f"unknown magic {header.magic} at position {position}"
    if header.base_offset < expected_offset or header.last_offset_delta < 0:
        return f"offset {header.base_offset} at position {position} goes backwards"
    if not header.crc_ok():
        return f"CRC mismatch in batch at offset {header.base_offset} (position {position})"
    return None
