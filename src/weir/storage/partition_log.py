"""The log of one partition: segments sorted by base offset, and the offsets that bound them.

On disk, a directory `<topic>-<partition>/` holding segments (see `segment.py`), producer-state
snapshots (see `producer_snapshot.py`) and the `leader-epoch-checkpoint`. In memory:

    log start offset <= high watermark <= log end offset,   recovery point <= log end offset

The log end offset (LEO) is the next offset to assign. The high watermark (HW) is what consumers
may read. The log stores it; the partition's owner decides it (`weir.broker.partition`: the
leader from its ISR, a follower from its leader). The recovery point is the
offset below which everything is known to be on disk; after an unclean shutdown only segments
at or above it are scanned.

Failures: an append that fails for want of space (ENOSPC and the like) leaves the log exactly as
it was and raises LogWriteError; writes succeed again once space returns. Any other failed write,
flush or undo raises LogDirectoryError: the log's state on disk is unknown, and its owner takes
the log directory offline (`take_offline`), after which appends and reads refuse with
KAFKA_STORAGE_ERROR until a restart recovers the log from disk.

Producer state (kept by the broker, which sets `producer_state_source`) is snapshotted when a
segment rolls on append and at close; aborted transactions go to the `.txnindex` of the segment
holding their ABORT marker (`index_aborted_txn`), and read_committed fetches collect them from
there (`collect_aborted_txns`). `txn_state.py` decides which of these files a load trusts and
where the replay of producer state starts.

Thread-safety (docs/threads.md): every public method holds the log's lock, so background tasks
(retention, compaction, flush) may run on the storage thread while one owner appends and reads;
no sync runs under it: a flush takes its offset under the lock, syncs without it and moves the
recovery point under it again (`log_flush.py`), so an append never waits behind a disk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from weir import diskio
from weir.clock import Clock, Scheduler
from weir.durable import fsync_directory
from weir.records import (
    BatchHeader,
    HeaderFields,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from weir.storage import log_segments
from weir.storage.config import TIMESTAMP_LOG_APPEND_TIME, LogConfig
from weir.storage.errors import (
    InvalidOffsetError,
    LogDirectoryError,
    LogWriteError,
    OffsetOutOfRangeError,
)
from weir.storage.files import (
    DELETED_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    SWAP_SUFFIX,
    TRANSACTIONS_MARKER,
)
from weir.storage.flush_stats import FLUSHES
from weir.storage.leader_epoch import LeaderEpochCache
from weir.storage.log_flush import (
    FlushCallback,
    FlushPlan,
    FlushState,
    UnsyncedIndex,
    note_synced,
    notify,
    sync_indexes,
)
from weir.storage.log_loader import LoadReport, LogLoader
from weir.storage.producer_snapshot import ProducerSnapshotEntry, ProducerSnapshots
from weir.storage.segment import FileSlice, LogSegment, open_new_segment
from weir.storage.segment_spare import SpareSegment
from weir.storage.txn_index import AbortedTxn
from weir.storage.txn_state import ProducerStateReplay, ProducerStateSource, TransactionFiles

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class ReadInfo:
    """A read's data (None when there is nothing to return yet) and the log's bounds at the time."""

    data: FileSlice | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        scheduler: Scheduler,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        clean_shutdown: bool = False,
    ) -> None:
        """`high_watermark`: the one checkpointed before a restart (the log end offset if
        none). It moves only by `update_high_watermark`: the partition's owner decides it."""
        self.directory = directory
        self.config = config
        self._clock = clock
        self._scheduler = scheduler
        self._lock = threading.RLock()
        #: serialises flushes (never taken by an append): taken before `_lock`, never after
        self._flush_lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        self.epoch_cache = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT)
        self.load_report = LoadReport()
        self.offline_reason: str | None = None
        self.closed = False
        self._directory_unsynced = False
        #: called after a flush moved the recovery point, on the flushing thread under the lock
        self.on_flushed: Callable[[], None] | None = None
        #: whether transactional batches were ever appended here (a marker file says so)
        self.has_transactions = (directory / TRANSACTIONS_MARKER).exists()
        self._txn_files = TransactionFiles(directory, self.load_report.problems)
        loaded = LogLoader(
            directory, config, clock,
            epoch_cache=self.epoch_cache, txn_files=self._txn_files, report=self.load_report,
        ).load(
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            clean_shutdown=clean_shutdown,
        )  # fmt: skip
        self.segments = loaded.segments
        self.log_start_offset = loaded.log_start_offset
        self.log_end_offset = loaded.log_end_offset
        self.recovery_point = self.log_end_offset  # clean, or recovered segments were fsynced
        restored = self.log_end_offset if high_watermark is None else high_watermark
        self.high_watermark = max(self.log_start_offset, min(restored, self.log_end_offset))
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self._flushes = FlushState(clock.monotonic_ms())
        self._spares = SpareSegment(directory, clock, scheduler, self._lock, lambda: self.config)
        #: hands a due flush (`flush.messages`) to another thread; None: it runs in the append
        self.flush_requester: Callable[[], object] | None = None

    # ---- properties ---------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def snapshots(self) -> ProducerSnapshots:
        return self._txn_files.snapshots

    @property
    def producer_state_source(self) -> ProducerStateSource | None:
        """What the log snapshots when a segment rolls on append and at close (its owner's
        producer state); None: no snapshots are taken."""
        return self._txn_files.source

    @producer_state_source.setter
    def producer_state_source(self, source: ProducerStateSource | None) -> None:
        self._txn_files.source = source

    @property
    def latest_epoch(self) -> int:
        return self.epoch_cache.latest_epoch

    def _segment_index_for(self, offset: int) -> int:
        return log_segments.index_for(self.segments, offset)

    def _segments_from(self, offset: int) -> list[LogSegment]:
        with self._lock:
            return self.segments[self._segment_index_for(offset) :]

    # ---- append -------------------------------------------------------------------------------

    def append(
        self, batch: bytes | bytearray | memoryview, *, leader_epoch: int, defer_sync: bool = False
    ) -> AppendInfo:
        """Append one validated batch as leader: assign offsets from the LEO, stamp the leader
        epoch (and LogAppendTime if configured), write it. Batch-level work only. When the
        records reach `flush.messages`, the log is flushed before this returns, or with
        `defer_sync` handed to `flush_requester` (the caller then waits on `when_flushed`
        before it acknowledges the batch, while `awaits_sync` says so)."""
        buf = batch if not memoryview(batch).readonly else bytearray(batch)
        assert not isinstance(buf, bytes)
        with self._lock:
            self._check_online()
            first = self.log_end_offset
            set_base_offset(buf, first)
            set_partition_leader_epoch(buf, leader_epoch)
            append_time = -1
            if self.config.message_timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
                append_time = self._clock.milliseconds()
                set_log_append_time(buf, append_time)
            fields = BatchHeader(buf).fields()
            sync_due = self._append_located(buf, fields)
            last = first + fields.last_offset_delta
            info = AppendInfo(first, last, fields.max_timestamp, append_time, self.log_start_offset)
        if sync_due:
            self._sync_appended(defer_sync)
        return info

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> int:
        """Append batches that already carry offsets (replication). Returns the new LEO. A due
        flush (`flush.messages`) runs before this returns: the follower's next fetch tells the
        leader it has the records."""
        sync_due = False
        with self._lock:
            self._check_online()
            for header in iter_batches(batches):
                if header.base_offset < self.log_end_offset:
                    raise InvalidOffsetError(
                        f"batch at {header.base_offset} is below the log end offset "
                        f"{self.log_end_offset}"
                    )
                view = memoryview(batches)[header.position : header.position + header.size]
                sync_due |= self._append_located(view, header.fields())
            end = self.log_end_offset
        if sync_due:
            self._sync_appended(defer=False)
        return end

    def _append_located(self, buf: bytes | bytearray | memoryview, fields: HeaderFields) -> bool:
        """Write one batch at the LEO; True if a flush is due (`flush.messages`)."""
        last = fields.base_offset + fields.last_offset_delta
        try:
            self.epoch_cache.assign(fields.partition_leader_epoch, fields.base_offset)
            segment = self._maybe_roll(len(buf), fields.max_timestamp, last)
            segment.append(buf, fields.base_offset, last, fields.max_timestamp)
        except OSError as exc:
            if diskio.is_out_of_space(exc):
                raise LogWriteError(f"{self.directory.name}: append failed: {exc}") from exc
            raise LogDirectoryError(f"{self.directory.name}: append failed: {exc}") from exc
        self.log_end_offset = last + 1
        if segment.size >= self._spares.check_from:
            self._spares.after_append(segment, self.log_end_offset)
        flushes = self._flushes
        flushes.unflushed_records += fields.records_count
        return flushes.unflushed_records >= self.config.flush_messages and flushes.due(
            self.log_end_offset
        )

    def _sync_appended(self, defer: bool) -> None:
        """A due flush: handed over (`defer` and a requester is set), or run here."""
        if defer and self.flush_requester is not None:
            with self._lock:
                request = self._flushes.request()
            if request:
                self.flush_requester()
            return
        self.flush()

    def _check_online(self) -> None:
        if self.offline_reason is not None:
            raise LogDirectoryError(f"{self.directory.name} is offline: {self.offline_reason}")

    def assign_leader_epoch(self, epoch: int) -> None:
        """Becoming leader in `epoch`: it starts at the log end offset (written at once, as
        Kafka does when a replica becomes leader, so that appends need not write it)."""
        with self._lock:
            self.epoch_cache.assign(epoch, self.log_end_offset)

    def take_offline(self, reason: str) -> None:
        """Refuse appends and reads from now on (its log directory failed); whoever waits on
        `when_flushed` hears that no flush will come."""
        with self._lock:
            self.offline_reason = reason
            waiting = self._flushes.fail_all()
        notify(waiting, False)

    # ---- roll ---------------------------------------------------------------------------------

    def _maybe_roll(self, size: int, max_timestamp: int, last_offset: int) -> LogSegment:
        active = self.active_segment
        if active.should_roll(size, max_timestamp, last_offset):
            segment = self._roll()
            if segment is not active:
                self._snapshot_at_roll()
            return segment
        return active

    def roll(self) -> LogSegment:
        with self._lock:
            return self._roll()

    def _roll(self) -> LogSegment:
        """A new active segment at the LEO: the spare one prepared on the scheduler if there is
        one (see `segment_spare.py`), else one created here. If it cannot be had, the previous
        one stays active and the error is raised."""
        previous = self.active_segment
        if previous.size == 0:
            return previous
        previous.on_become_inactive()
        try:
            segment = self._spares.take(self.log_end_offset)
        except BaseException:
            previous.make_active()
            raise
        self.segments.append(segment)
        self._directory_unsynced = True
        self._scheduler.schedule(f"sync-{self.directory.name}", self.sync_directory, 0)
        return segment

    def _snapshot_at_roll(self) -> None:
        """Producer state as of the new segment's base offset, taken now and written and
        fsynced on the scheduler (a crash before then leaves a torn file or none, which a load
        detects and skips)."""
        offset = self.log_end_offset
        entries = self._txn_files.capture()
        if entries is None:
            return
        self._scheduler.schedule(
            f"snapshot-{self.directory.name}-{offset}",
            lambda: self._write_snapshot(offset, entries),
            0,
        )

    def _write_snapshot(self, offset: int, entries: Sequence[ProducerSnapshotEntry]) -> None:
        """A durable snapshot vouches for the `.txnindex` entries below it, so those are synced
        first (as a flush does, one flush at a time). The log's lock is held only to choose the
        files and to register the snapshot: appends go on meanwhile, and a snapshot that a
        truncation made stale meanwhile is removed again."""
        try:
            with self._flush_lock:
                with self._lock:
                    if self.closed:
                        return
                    generation = self._flushes.generation
                    indexes = self._unsynced_txn_indexes()
                sync_indexes(indexes)
                with self._lock:
                    note_synced(indexes)
            self.snapshots.write_file(offset, entries)
            with self._lock:
                if self.closed or generation != self._flushes.generation:
                    self.snapshots.remove_file(offset)
                else:
                    self.snapshots.add(offset)
        except OSError as exc:
            log.warning("%s: producer snapshot %d not written: %s", self.directory.name, offset,
                        exc)  # fmt: skip

    def _unsynced_txn_indexes(self) -> list[UnsyncedIndex]:
        return [u for s in self.segments if (u := UnsyncedIndex.of(s.txn_index)) is not None]

    def sync_directory(self) -> None:
        """Make new segments' directory entries durable: on the scheduler after a roll (as
        Kafka flushes a rolled log in the background), and before any flush relies on them.
        The fsync runs without the log's lock."""
        with self._flush_lock:
            with self._lock:
                unsynced = self._directory_unsynced and not self.closed
                self._directory_unsynced = False
            if unsynced:
                self._fsync_directory()

    def _fsync_directory(self) -> None:
        try:
            fsync_directory(self.directory)
        except OSError as exc:
            raise LogDirectoryError(f"{self.directory.name}: fsync failed: {exc}") from exc

    # ---- flush --------------------------------------------------------------------------------

    def flush(self) -> None:
        """fdatasync what is not yet on disk and move the recovery point (and, under
        `high.watermark.policy=flushed`, the high watermark) to where the log ended when the
        flush began, as Kafka's `UnifiedLog.flush` does: the log's lock is held only to take
        that offset and to move the recovery point, so appends and reads go on during the sync
        (see `log_flush.py`). A failed sync may have lost written pages, so it is never retried
        as if nothing happened: LogDirectoryError."""
        with self._flush_lock:
            with self._lock:
                if self.closed:
                    return
                plan = self._begin_flush()
            self._run_flush(plan)

    def flush_if_due(self) -> None:
        with self._lock:
            due = self._clock.monotonic_ms() - self._flushes.last_flush_ms >= self.config.flush_ms
        if due:
            self.flush()

    def when_flushed(self, offset: int, callback: FlushCallback) -> None:
        """`callback(True)` once everything below `offset` is on disk (now, if it is), from the
        thread that flushed it; `callback(False)` if the log goes offline first."""
        with self._lock:
            if self.offline_reason is None and self.recovery_point < offset:
                self._flushes.waiters.append((offset, callback))
                return
            flushed = self.recovery_point >= offset
        callback(flushed)

    def awaits_sync(self, offset: int) -> bool:
        """Whether records below `offset` wait for a flush `flush.messages` asked for."""
        with self._lock:
            return self.recovery_point < offset <= self._flushes.sync_wanted_to

    def _begin_flush(self) -> FlushPlan:
        segments = self.segments[self._segment_index_for(self.recovery_point) :]
        for segment in segments:
            segment.pin()
        directory, self._directory_unsynced = self._directory_unsynced, False
        return FlushPlan(
            end_offset=self.log_end_offset,
            segments=segments,
            txn_indexes=self._unsynced_txn_indexes(),
            directory=directory,
            generation=self._flushes.begin(),
        )

    def _run_flush(self, plan: FlushPlan) -> None:
        """Sync what `plan` names (without the log's lock, unless the caller holds it), then
        move the recovery point and tell those waiting."""
        started = time.perf_counter_ns()
        try:
            self._sync(plan)
            FLUSHES.observe(time.perf_counter_ns() - started)
        except OSError as exc:
            with self._lock:
                waiting = self._flushes.fail_all()
            notify(waiting, False)
            raise LogDirectoryError(f"{self.directory.name}: flush failed: {exc}") from exc
        finally:
            with self._lock:
                for segment in plan.segments:
                    segment.unpin()
        with self._lock:
            waiting = self._end_flush(plan)
        notify(waiting, True)

    def _sync(self, plan: FlushPlan) -> None:
        for segment in plan.segments:
            diskio.sync(segment.fd, diskio.SEGMENT, data_only=True)
        sync_indexes(plan.txn_indexes)
        if plan.directory:
            fsync_directory(self.directory)

    def _end_flush(self, plan: FlushPlan) -> list[FlushCallback]:
        note_synced(plan.txn_indexes)
        self._flushes.last_flush_ms = self._clock.monotonic_ms()
        if plan.generation == self._flushes.generation:
            self.recovery_point = max(self.recovery_point, plan.end_offset)
            if self.on_flushed is not None:
                self.on_flushed()
        return self._flushes.reached(self.recovery_point)

    # ---- read ---------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        retain: bool = False,
    ) -> ReadInfo:
        """Whole batches starting with the one that holds `offset`, below `max_offset` (the HW
        unless given). Raises OffsetOutOfRangeError outside [log start offset, LEO]. With
        `retain` the slice owns a descriptor of its own (see FileSlice), taken under the lock so
        that no deletion can close the segment's in between."""
        with self._lock:
            self._check_online()
            bound = self.high_watermark if max_offset is None else max_offset
            if offset < self.log_start_offset or offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
                )
            data = None
            if offset < bound:
                data = log_segments.read(
                    self.segments, offset, max_bytes,
                    bound=bound, log_end_offset=self.log_end_offset, min_one=min_one_batch,
                )  # fmt: skip
            if retain and data is not None:
                data = data.retained()
            return ReadInfo(data, self.high_watermark, self.log_start_offset, self.log_end_offset)

    def batches(self, start_offset: int = 0) -> Iterator[BatchHeader]:
        """Every batch from `start_offset` on, read into memory (tools, compaction, tests)."""
        return log_segments.batches(self._segments_from(start_offset), start_offset)

    def batch_headers(self, start_offset: int = 0) -> Iterator[HeaderFields]:
        """The header fields of every batch from `start_offset` on, without reading records."""
        return log_segments.batch_headers(self._segments_from(start_offset), start_offset)

    def batch_headers_and_markers(
        self, start_offset: int = 0
    ) -> Iterator[tuple[HeaderFields, bool | None]]:
        """`batch_headers`, each with what a control batch's marker says (True COMMIT, False
        ABORT; None for other batches): only control batches are read whole."""
        segments = self._segments_from(start_offset)
        return log_segments.batch_headers_and_markers(segments, start_offset)

    # ---- transactions and producer state --------------------------------------------------------

    def index_aborted_txn(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction in the `.txnindex` of the segment holding its marker
        (appended already). LogDirectoryError if it cannot be written."""
        with self._lock:
            self._check_online()
            segment = self.segments[self._segment_index_for(txn.last_offset)]
            try:
                self._txn_files.index_aborted(segment, txn)
            except OSError as exc:
                raise LogDirectoryError(
                    f"{self.directory.name}: aborted transaction not indexed: {exc}"
                ) from exc

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [fetch_offset, upper_bound), from the
        indexes of the fetch offset's segment on, until one says no later one can add any."""
        with self._lock:
            segments = self.segments[self._segment_index_for(fetch_offset) :]
            return TransactionFiles.collect(segments, fetch_offset, upper_bound)

    def producer_state_replay(self) -> ProducerStateReplay:
        """How to rebuild producer state: from the newest sound snapshot (or the log's start,
        see `txn_state.py`), replaying the batches after it."""
        with self._lock:
            snapshot, start = self._txn_files.replay_from(
                self.segments, self.log_end_offset, self.has_transactions
            )
            batches = self._counted(self.batch_headers_and_markers(start))
            return ProducerStateReplay(snapshot, start, batches)

    def _counted(
        self, batches: Iterator[tuple[HeaderFields, bool | None]]
    ) -> Iterator[tuple[HeaderFields, bool | None]]:
        for batch in batches:
            self.load_report.replayed_batches += 1
            yield batch

    def take_producer_snapshot(self) -> None:
        """Snapshot producer state at the log end offset, durably (after a load that replayed
        batches, and at close). OSError if it cannot be written."""
        with self._lock:
            if self.offline_reason is None and self.producer_state_source is not None:
                for segment in self.segments:
                    segment.txn_index.flush()
                self._txn_files.snapshot(self.log_end_offset)

    # ---- offsets by time ----------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, or None."""
        with self._lock:
            return log_segments.offset_for_timestamp(
                self.segments, timestamp, self.log_start_offset
            )

    def max_timestamp_offset(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record with the largest timestamp (ListOffsets -3),
        or (-1, -1) for an empty log."""
        with self._lock:
            return log_segments.max_timestamp_offset(self.segments, self.log_start_offset)

    # ---- truncation (replication) -------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after `offset` (a follower whose log diverged)."""
        with self._lock:
            if offset >= self.log_end_offset:
                return
            if offset <= self.segments[0].base_offset:
                self._truncate_fully(offset)
                return
            while self.active_segment.base_offset >= offset:
                self.segments.pop().delete()
            self.active_segment.truncate_to(offset)
            self.snapshots.delete_above(offset)
            self.active_segment.make_active()
            self._after_truncation(self.active_segment.next_offset())

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self._lock:
            self._truncate_fully(offset)

    def _truncate_fully(self, offset: int) -> None:
        for segment in self.segments:
            segment.delete()
        self.snapshots.delete_all()
        self.segments = [open_new_segment(self.directory, offset, self.config, self._clock)]
        self.log_start_offset = offset
        self.epoch_cache.clear()
        self._after_truncation(offset)

    def _after_truncation(self, end: int) -> None:
        self._flushes.generation += 1  # a flush begun before now must not move the recovery point
        self.log_end_offset = end
        self.high_watermark = min(self.high_watermark, end)
        self.recovery_point = min(self.recovery_point, end)
        self.epoch_cache.truncate_from_end(end)
        fsync_directory(self.directory)

    def note_transactions(self) -> None:
        """Record, durably and before the first transactional batch is appended, that this
        log holds transactions: their state is then rebuilt from the whole log at start-up,
        not only from its last segments. Raises OSError if the marker cannot be written."""
        if self.has_transactions:
            return
        with self._lock:
            (self.directory / TRANSACTIONS_MARKER).touch()
            fsync_directory(self.directory)
            self.has_transactions = True

    def update_high_watermark(self, offset: int) -> None:
        with self._lock:
            self.high_watermark = max(self.log_start_offset, min(offset, self.log_end_offset))

    # ---- retention ----------------------------------------------------------------------------

    def increment_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: records below `offset` become unreadable; whole segments go later."""
        with self._lock:
            if offset > self.high_watermark:
                raise OffsetOutOfRangeError(f"{offset} is above the high watermark")
            if offset > self.log_start_offset:
                self.log_start_offset = offset
                self.epoch_cache.truncate_from_start(offset)

    def delete_old_segments(self, *, retention: bool = True) -> int:
        """Delete segments wholly below the log start offset and, with `retention`, those past
        the time and size limits; return how many were deleted."""
        with self._lock:
            doomed = self._segments_to_delete(retention)
            if doomed and doomed[-1] is self.active_segment:
                self._roll()
            for segment in doomed:
                self._delete_segment(segment)
            if doomed:
                self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
                self.epoch_cache.truncate_from_start(self.log_start_offset)
                self.snapshots.delete_below(self.segments[0].base_offset)
            return len(doomed)

    def _segments_to_delete(self, retention: bool) -> list[LogSegment]:
        return log_segments.expired(
            self.segments, self.config,
            now_ms=self._clock.milliseconds(), log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset, retention=retention,
        )  # fmt: skip

    def _delete_segment(self, segment: LogSegment) -> None:
        self.segments.remove(segment)
        segment.change_transit(DELETED_SUFFIX)
        self._scheduler.schedule(
            f"delete-{segment.log_path.name}", segment.delete, self.config.file_delete_delay_ms
        )

    # ---- compaction support -------------------------------------------------------------------

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment]) -> None:
        """Swap compacted output in for `old` (a run of non-active segments), crash-safely:
        `.cleaned` -> `.swap` (commit point), old -> `.deleted`, `.swap` -> live. `cleaned`
        is synced already (with the aborted transactions of `old` in its `.txnindex`)."""
        with self._lock:
            cleaned.change_transit(SWAP_SUFFIX)
            fsync_directory(self.directory)
            start = self.segments.index(old[0])
            for segment in old:
                self._delete_segment(segment)
            cleaned.change_transit("")
            self.segments.insert(start, cleaned)
            fsync_directory(self.directory)

    def lock(self) -> threading.RLock:
        return self._lock

    # ---- moving between log directories -------------------------------------------------------

    def hand_over_flushes(self, successor: PartitionLog) -> None:
        """`successor` holds the same records and replaces this log (a move between log
        directories): the syncs asked for here (`flush.messages`) are asked of it, and those
        waiting for them wait for its next flush."""
        with self._lock:
            waiting, self._flushes.waiters = self._flushes.waiters, []
            wanted = self._flushes.sync_wanted_to
        with successor._lock:
            flushes = successor._flushes
            flushes.sync_wanted_to = max(flushes.sync_wanted_to, wanted)
            flushes.waiters.extend(waiting)

    def rename_dir(self, directory: Path) -> None:
        """Rename the partition directory to `directory` (in the same file system or another
        directory of it) with the log open: segments, indexes, snapshots and the epoch
        checkpoint follow. The spare segment is dropped first (the next roll makes one).
        The parent directories are not synced here (its owner does it off the loop)."""
        with self._lock:
            self._spares.close()
            self.directory.rename(directory)
            self.directory = directory
            for segment in self.segments:
                segment.follow_directory(directory)
            self.epoch_cache.path = directory / LEADER_EPOCH_CHECKPOINT
            self._txn_files.follow_directory(directory)
            self._spares = SpareSegment(
                directory, self._clock, self._scheduler, self._lock, lambda: self.config
            )

    # ---- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close every segment; indexes are trimmed so a restart need not rescan.
        Raises LogDirectoryError (after closing everything) if data may not be on disk."""
        with self._flush_lock, self._lock:
            self.closed = True
            self._spares.close()
            if self.offline_reason is not None:
                self._close_segments()
                return
            self._snapshot_at_close()
            try:
                self._run_flush(self._begin_flush())
                for segment in self.segments:
                    self._finish_segment(segment)
            finally:
                self._close_segments()

    def _snapshot_at_close(self) -> None:
        try:
            self.take_producer_snapshot()
        except OSError as exc:  # the next load replays from an older snapshot instead
            log.warning("%s: no producer snapshot at close: %s", self.directory.name, exc)

    def _finish_segment(self, segment: LogSegment) -> None:
        try:
            segment.on_become_inactive()
        except OSError as exc:
            # Only the active segment's final time entry is lost: a load reads it from the log.
            log.warning("%s: indexes not trimmed at close: %s", segment.log_path, exc)
        try:
            segment.flush()
        except OSError as exc:
            raise LogDirectoryError(f"{segment.log_path}: flush at close failed: {exc}") from exc

    def _close_segments(self) -> None:
        for segment in self.segments:
            segment.close()

    def close_for_deletion(self) -> None:
        """Stop for good without a flush: the files are about to be deleted. A segment being
        read (sendfile) closes when the read ends."""
        with self._lock:
            self.closed = True
            self._spares.close()
            for segment in self.segments:
                segment.close()
            self.segments = []

    def delete(self) -> None:
        with self._lock:
            self.closed = True
            self._spares.close()
            for segment in self.segments:
                segment.delete()
            self.segments = []
