"""Log compaction for `cleanup.policy=compact`: keep the latest record of every key.

The cleaner looks at the non-active segments older than `min.compaction.lag.ms`, finds each key's
last offset there, and rewrites those segments in groups (each group fits one segment) keeping
only the latest record per key. Offsets never change: a batch keeps its base offset and offset
range even when records leave it, and a batch left empty disappears. Tombstones (null values) are
dropped once their batch's timestamp is older than `delete.retention.ms`, so consumers have that
long to see a delete. Records without a key and control batches are kept as they are.

A pass runs only when it is worth it, as in Kafka: the dirty part of the cleanable segments (those
at or past the first dirty offset, which each pass moves to where it stopped) is at least
`min.cleanable.dirty.ratio` of them, or the oldest dirty record is older than
`max.compaction.lag.ms`, or tombstones a pass had to keep are now past `delete.retention.ms`.
The cleaner keeps this per-log state itself (`CleaningState`, Kafka's LogCleanerManager keeps
it per log too), in memory: after a restart everything counts as dirty once.

Output goes through `PartitionLog.replace_segments` (`.cleaned` -> `.swap` -> live), which a
crash at any point leaves either undone or completed on the next load.

Thread-safety (docs/threads.md): `clean` takes the log's lock only to choose segments and to swap,
as Kafka's cleaner does; one cleaner thread per log manager (the storage scheduler's), which alone
touches the per-log state.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from weir.clock import Clock
from weir.records import BatchHeader, BatchSpec, Record, build_batch, iter_records
from weir.storage.files import CLEANED_SUFFIX
from weir.storage.partition_log import PartitionLog
from weir.storage.segment import LogSegment

_MAX_RELATIVE_OFFSET = 2**31 - 1


@dataclass(slots=True)
class CleaningState:
    """What the cleaner knows of one log between passes."""

    #: where compaction has not been yet: each pass moves it to where it stopped
    first_dirty_offset: int = 0
    #: when the tombstones a pass had to keep may go (None: it kept none)
    tombstones_due_ms: int | None = None


class LogCleaner:
    """`before_swap`, if given, runs after a group is rewritten and before it replaces the old
    segments (a test holds a pass there)."""

    def __init__(self, clock: Clock, before_swap: Callable[[PartitionLog], None] | None = None):
        self._clock = clock
        self._before_swap = before_swap
        self._states: weakref.WeakKeyDictionary[PartitionLog, CleaningState] = (
            weakref.WeakKeyDictionary()
        )

    def state_of(self, log: PartitionLog) -> CleaningState:
        """The cleaner's state for `log` (a new one, all dirty, for a log it has not seen)."""
        state = self._states.get(log)
        if state is None:
            state = self._states[log] = CleaningState()
        return state

    def clean(self, log: PartitionLog) -> int:
        """Compact `log` once; return how many segments were rewritten. The log's lock is held
        only to choose the segments and to swap each rewritten group in: appends, reads and
        other logs go on while the pass reads and writes (its segments are pinned open)."""
        with log.lock():
            if log.closed:
                return 0
            candidates = self._cleanable_segments(log)
            if not candidates or not self._worth_cleaning(log, candidates):
                return 0
            dirty_from = log.segments[len(candidates)].base_offset
            for segment in candidates:
                segment.pin()
        try:
            return self._clean_pinned(log, candidates, dirty_from)
        finally:
            with log.lock():
                for segment in candidates:
                    segment.unpin()

    def _clean_pinned(
        self, log: PartitionLog, candidates: list[LogSegment], dirty_from: int
    ) -> int:
        config = log.config
        latest = _latest_offsets(candidates)
        horizon = self._clock.milliseconds() - config.delete_retention_ms
        rewritten = 0
        newest_tombstone = -1
        for group in _group(candidates, config.segment_bytes):
            cleaned, tombstone = self._rewrite(log, group, latest, horizon)
            newest_tombstone = max(newest_tombstone, tombstone)
            if cleaned is None:
                continue
            if self._before_swap is not None:
                self._before_swap(log)
            if not self._swap(log, cleaned, group):
                return rewritten
            rewritten += len(group)
        state = self.state_of(log)
        state.first_dirty_offset = dirty_from
        state.tombstones_due_ms = None
        if newest_tombstone >= 0:
            state.tombstones_due_ms = newest_tombstone + config.delete_retention_ms + 1
        return rewritten

    @staticmethod
    def _swap(log: PartitionLog, cleaned: LogSegment, group: list[LogSegment]) -> bool:
        """Put `cleaned` in place of `group`, unless the log changed under the pass (closed,
        deleted, truncated): then the pass's output is dropped. It is synced, with the aborted
        transactions of `group` in its `.txnindex`, before the log's lock is taken."""
        try:
            cleaned.txn_index.replace([t for s in group for t in s.txn_index.entries()])
            cleaned.flush()
        except OSError:
            if not LogCleaner._still_holds(log, group):  # deleted meanwhile: its files are gone
                cleaned.delete()
                return False
            raise
        with log.lock():
            if not LogCleaner._still_holds(log, group):
                cleaned.delete()
                return False
            log.replace_segments(cleaned, group)
            return True

    @staticmethod
    def _still_holds(log: PartitionLog, group: list[LogSegment]) -> bool:
        with log.lock():
            return not log.closed and all(segment in log.segments for segment in group)

    def _worth_cleaning(self, log: PartitionLog, candidates: list[LogSegment]) -> bool:
        state = self.state_of(log)
        ends = [s.base_offset for s in log.segments[1 : len(candidates) + 1]]
        dirty_from = state.first_dirty_offset
        dirty = [s for s, end in zip(candidates, ends, strict=True) if end > dirty_from]
        now = self._clock.milliseconds()
        if state.tombstones_due_ms is not None and now >= state.tombstones_due_ms:
            return True
        if not dirty:
            return False
        oldest = next(dirty[0].batches(), None)
        if oldest is not None and now - oldest.max_timestamp > log.config.max_compaction_lag_ms:
            return True
        total = sum(s.size for s in candidates)
        return sum(s.size for s in dirty) >= log.config.min_cleanable_dirty_ratio * total

    def _cleanable_segments(self, log: PartitionLog) -> list[LogSegment]:
        newest_allowed = self._clock.milliseconds() - log.config.min_compaction_lag_ms
        out = []
        for segment in log.segments[:-1]:
            if segment.max_timestamp > newest_allowed:
                break
            out.append(segment)
        return out

    def _rewrite(
        self, log: PartitionLog, group: list[LogSegment], latest: dict[bytes, int], horizon: int
    ) -> tuple[LogSegment | None, int]:
        """Write the kept records of `group` into a `.cleaned` segment (None if nothing changes),
        and the newest timestamp of a batch whose tombstones had to stay (-1: none)."""
        cleaned = LogSegment(
            log.directory, group[0].base_offset, log.config, self._clock, transit=CLEANED_SUFFIX
        )
        changed = False
        tombstone = -1
        for header in _batches(group):
            kept, dropped, has_tombstone = _filter(header, latest, horizon)
            changed |= dropped
            if has_tombstone:
                tombstone = max(tombstone, header.max_timestamp)
            if kept is not None:
                cleaned.append(kept.buf, kept.base_offset, kept.last_offset, kept.max_timestamp)
        if not changed:
            cleaned.delete()
            return None, tombstone
        cleaned.on_become_inactive()
        return cleaned, tombstone


def _batches(segments: list[LogSegment]) -> list[BatchHeader]:
    return [
        BatchHeader(os.pread(segment.fd, located.size, located.position))
        for segment in segments
        for located in segment.batches()
    ]


def _latest_offsets(segments: list[LogSegment]) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for header in _batches(segments):
        if header.is_control:
            continue
        for record in iter_records(header):
            if record.key is not None:
                latest[record.key] = record.offset
    return latest


def _filter(
    header: BatchHeader, latest: dict[bytes, int], horizon: int
) -> tuple[BatchHeader | None, bool, bool]:
    """(the batch to keep — `header` itself if unchanged, a rebuilt one, or None; whether any
    record was dropped; whether it keeps a tombstone)."""
    if header.is_control:
        return header, False, False
    records = list(iter_records(header))
    kept = [r for r in records if _keep(r, latest, horizon, header.max_timestamp)]
    has_tombstone = any(r.value is None and r.key is not None for r in kept)
    if len(kept) == len(records):
        return header, False, has_tombstone
    if not kept:
        return None, True, False
    rebuilt = build_batch(
        kept,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        spec=BatchSpec.of(header),
    )
    return BatchHeader(rebuilt), True, has_tombstone


def _keep(record: Record, latest: dict[bytes, int], horizon: int, batch_max_ts: int) -> bool:
    if record.key is None:
        return True
    if latest.get(record.key) != record.offset:
        return False
    return record.value is not None or batch_max_ts >= horizon


def _group(segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    """Runs of consecutive segments whose total size fits one segment."""
    groups: list[list[LogSegment]] = []
    size = 0
    for segment in segments:
        if (
            groups
            and size + segment.size <= max_bytes
            and (segment.base_offset - groups[-1][0].base_offset < _MAX_RELATIVE_OFFSET)
        ):
            groups[-1].append(segment)
            size += segment.size
        else:
            groups.append([segment])
            size = segment.size
    return groups
