"""Lookups over the segments of one partition log, in base-offset order (Kafka's LogSegments).

Functions of the list a `PartitionLog` hands in: which segment holds an offset, where each ends,
a read across segments up to a bound, the batches from an offset on, offsets by timestamp, and
the segments retention lets go. They never change the list or a file.

Thread-safety (docs/threads.md): none; the owning log calls them under its lock, or on a copy of
its list taken under it (the batch iterators, which read pinned-open segments without it).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator, Sequence

from weir.records import HEADER_SIZE, BatchHeader, HeaderFields
from weir.records.batch import CONTROL_BIT
from weir.records.control import marker_commits
from weir.storage.config import LogConfig
from weir.storage.segment import FileSlice, LogSegment

#: where the last segment ends, as far as lookups by offset go
OPEN_END = 2**63 - 1


def index_for(segments: Sequence[LogSegment], offset: int) -> int:
    """The index of the segment holding `offset` (the first one for offsets below it)."""
    return max(0, bisect.bisect_right(segments, offset, key=lambda s: s.base_offset) - 1)


def end_of(segments: Sequence[LogSegment], i: int) -> int:
    return segments[i + 1].base_offset if i + 1 < len(segments) else OPEN_END


def read(
    segments: Sequence[LogSegment],
    offset: int,
    max_bytes: int,
    *,
    bound: int,
    log_end_offset: int,
    min_one: bool,
) -> FileSlice | None:
    """Whole batches from the one holding `offset`, below the offset `bound`."""
    for i in range(index_for(segments, offset), len(segments)):
        segment = segments[i]
        end = min(end_of(segments, i), log_end_offset)
        max_position = None
        if bound < end:
            located = segment.translate_offset(bound)
            if located is not None:
                max_position, end = located.position, located.base_offset
        start = max(offset, segment.base_offset)
        data = segment.read(start, max_bytes, max_position, min_one, bound_offset=end)
        if data is not None or max_position is not None:
            return data
    return None


def batches(segments: Sequence[LogSegment], start_offset: int) -> Iterator[BatchHeader]:
    """Every batch from `start_offset` on, read into memory."""
    for segment in segments:
        for located in segment.batches():
            if located.last_offset >= start_offset:
                yield BatchHeader(os.pread(segment.fd, located.size, located.position))


def batch_headers(segments: Sequence[LogSegment], start_offset: int) -> Iterator[HeaderFields]:
    """The header fields of every batch from `start_offset` on, without reading records."""
    for segment in segments:
        for located in segment.batches():
            if located.last_offset >= start_offset:
                raw = os.pread(segment.fd, HEADER_SIZE, located.position)
                yield BatchHeader(raw).fields()


def batch_headers_and_markers(
    segments: Sequence[LogSegment], start_offset: int
) -> Iterator[tuple[HeaderFields, bool | None]]:
    """`batch_headers`, each with what a control batch's marker says (True COMMIT, False
    ABORT; None for other batches): only control batches are read whole."""
    for i, segment in enumerate(segments):
        position = segment.offset_index.lookup(start_offset)[1] if i == 0 else 0
        for located in segment.batches(position):
            if located.last_offset < start_offset:
                continue
            fields = BatchHeader(os.pread(segment.fd, HEADER_SIZE, located.position)).fields()
            commit = None
            if fields.attributes & CONTROL_BIT:
                whole = BatchHeader(os.pread(segment.fd, located.size, located.position))
                commit = marker_commits(whole)
            yield fields, commit


def offset_for_timestamp(
    segments: Sequence[LogSegment], timestamp: int, log_start_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with timestamp >= `timestamp`, or None."""
    for segment in segments:
        if segment.max_timestamp >= timestamp:
            found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
            if found is not None:
                return found
    return None


def max_timestamp_offset(segments: Sequence[LogSegment], log_start_offset: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record with the largest timestamp, or (-1, -1)."""
    best: LogSegment | None = None
    for segment in segments:
        if segment.max_timestamp > (best.max_timestamp if best else -1):
            best = segment
    if best is None:
        return -1, -1
    found = best.find_offset_by_timestamp(best.max_timestamp, log_start_offset)
    return found if found is not None else (best.offset_of_max_timestamp, best.max_timestamp)


def expired(
    segments: Sequence[LogSegment],
    config: LogConfig,
    *,
    now_ms: int,
    log_start_offset: int,
    log_end_offset: int,
    retention: bool,
) -> list[LogSegment]:
    """The oldest segments wholly below the log start offset and, with `retention`, those past
    the time and size limits; never the active one while it holds records not deleted."""
    remaining = sum(s.size for s in segments)
    doomed = []
    for i, segment in enumerate(segments):
        if segment.size == 0:
            break
        active = i == len(segments) - 1
        end = log_end_offset if active else end_of(segments, i)
        below_start = end <= log_start_offset
        if active and not below_start:
            break  # retention keeps the active segment; records deleted up to the LEO do not
        too_old = config.delete and 0 <= config.retention_ms < now_ms - segment.largest_timestamp
        too_big = config.delete and 0 <= config.retention_bytes <= remaining - segment.size
        if not (below_start or (retention and (too_old or too_big))):
            break
        doomed.append(segment)
        remaining -= segment.size
    return doomed
