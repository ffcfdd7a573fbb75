"""Loading one partition's log from its directory, and recovering what an unclean stop left.

Kafka's LogLoader: before a `PartitionLog` serves anything, its directory is put back in order —
leftovers of compaction and deletion removed, interrupted compaction swaps completed, indexes
whose log is gone removed — and its segments opened in base-offset order. Segments at or above
the recovery point (all of them after an unclean stop, none after a clean one), and any whose
indexes are missing or damaged, are scanned batch by batch: the first invalid batch cuts its
segment there, and every later segment is deleted. The leader-epoch cache is rebuilt from the
scanned batches, and `txn_state.py` decides which producer snapshots and `.txnindex` files the
load trusts. What it found goes to the `LoadReport` (`weir log check` prints it).

It never writes a record and never runs while the log serves: the loader is done before the
`PartitionLog` it builds exists for anyone else.

Thread-safety (docs/threads.md): none; it runs on the thread that opens the log, before the log is
shared.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from weir.clock import Clock
from weir.durable import TEMP_SUFFIX
from weir.records import BatchHeader
from weir.storage.config import LogConfig
from weir.storage.errors import CorruptIndexError
from weir.storage.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    NEXT_SUFFIX,
    PRODUCER_SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_base_offset,
)
from weir.storage.leader_epoch import LeaderEpochCache
from weir.storage.segment import LogSegment, open_new_segment
from weir.storage.txn_state import TransactionFiles

log = logging.getLogger(__name__)

#: where the last segment ends while the log end offset is not known yet
_OPEN_END = 2**63 - 1


@dataclass
class LoadReport:
    """What loading found: the segments it scanned and everything it dropped or rebuilt."""

    recovered_segments: int = 0
    truncated_bytes: int = 0
    #: batches read to rebuild producer state (those after the snapshot it started from)
    replayed_batches: int = 0
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedLog:
    """A loaded log's segments (the last one active) and the offsets that bound them."""

    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int


class LogLoader:
    """Loads the directory of one partition (format: see `partition_log.py` and `segment.py`).
    `recovery_point` is the checkpointed one; `clean_shutdown` says the last stop was clean."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        *,
        epoch_cache: LeaderEpochCache,
        txn_files: TransactionFiles,
        report: LoadReport,
    ) -> None:
        self.directory = directory
        self.config = config
        self._clock = clock
        self._epoch_cache = epoch_cache
        self._txn_files = txn_files
        self.report = report
        self._segments: list[LogSegment] = []

    def load(
        self, *, recovery_point: int, log_start_offset: int, clean_shutdown: bool
    ) -> LoadedLog:
        self._remove_leftovers()
        self._complete_swaps()
        self._remove_orphan_indexes()
        for path in sorted(self.directory.glob(f"*{LOG_SUFFIX}"), key=parse_base_offset):
            self._segments.append(self._open(parse_base_offset(path)))
        self._check_segments(None if clean_shutdown else recovery_point)
        if not self._segments:
            self._segments.append(self._open_new(log_start_offset))
        self._activate_last()
        for problem in self.report.problems:
            log.warning("%s: %s", self.directory.name, problem)
        end = self._segments[-1].next_offset()
        ends = [self._segment_end(i) for i in range(len(self._segments))]
        self._txn_files.check_at_load(
            self._segments, ends, end, None if clean_shutdown else recovery_point
        )
        start = max(log_start_offset, self._segments[0].base_offset)
        return LoadedLog(segments=self._segments, log_start_offset=start, log_end_offset=end)

    def _open(self, base_offset: int, transit: str = "") -> LogSegment:
        return LogSegment(self.directory, base_offset, self.config, self._clock, transit=transit)

    def _open_new(self, base_offset: int) -> LogSegment:
        return open_new_segment(self.directory, base_offset, self.config, self._clock)

    def _activate_last(self) -> None:
        active = self._segments[-1]
        active.make_active()
        if active.rolling_timestamp is None and active.size:
            active.reload_tail_state()
            active.rolling_timestamp = next(active.batches()).max_timestamp

    # ---- putting the directory in order ------------------------------------------------------

    def _remove_leftovers(self) -> None:
        for suffix in (CLEANED_SUFFIX, DELETED_SUFFIX, NEXT_SUFFIX, TEMP_SUFFIX):
            for path in self.directory.glob(f"*{suffix}"):
                path.unlink(missing_ok=True)

    def _remove_orphan_indexes(self) -> None:
        """Index files whose log is gone (a crash between the renames of one segment's files)."""
        logs = {p.name.split(".", 1)[0] for p in self.directory.glob(f"*{LOG_SUFFIX}")}
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            for path in self.directory.glob(f"*{suffix}"):
                if path.name.split(".", 1)[0] not in logs:
                    self.report.problems.append(f"removed {path.name}: its log is gone")
                    path.unlink(missing_ok=True)
            for path in self.directory.glob(f"*{suffix}{SWAP_SUFFIX}"):
                path.unlink(missing_ok=True)

    def _complete_swaps(self) -> None:
        """Finish compaction swaps a crash interrupted: the `.swap` segment replaces the
        segments whose base offsets fall in its range."""
        for path in sorted(self.directory.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
            swap = self._open(parse_base_offset(path), SWAP_SUFFIX)
            swap.recover(lambda _: None)
            end = swap.next_offset()
            for old in self.directory.glob(f"*{LOG_SUFFIX}"):
                if swap.base_offset <= parse_base_offset(old) < end:
                    self._unlink_segment_files(parse_base_offset(old))
            swap.change_transit("")
            swap.close()

    def _unlink_segment_files(self, base_offset: int) -> None:
        for path in self.directory.glob(f"{base_offset:020d}.*"):
            if not path.name.endswith((SWAP_SUFFIX, PRODUCER_SNAPSHOT_SUFFIX)):
                path.unlink(missing_ok=True)

    # ---- recovery ------------------------------------------------------------------------------

    def _check_segments(self, recovery_point: int | None) -> None:
        """`recovery_point`: None after a clean shutdown (only damaged indexes force a scan)."""
        for i, segment in enumerate(self._segments):
            unflushed = recovery_point is not None and self._segment_end(i) > recovery_point
            if not unflushed and self._indexes_sound(segment):
                continue
            if self._recover_segment(segment):
                self._drop_from(i + 1, f"segments after the damage in {segment.log_path.name}")
                return

    def _segment_end(self, i: int) -> int:
        if i + 1 < len(self._segments):
            return self._segments[i + 1].base_offset
        return _OPEN_END

    def _indexes_sound(self, segment: LogSegment) -> bool:
        indexes = (segment.offset_index, segment.time_index)
        missing = [index.path.name for index in indexes if index.newly_created]
        if segment.size and missing:
            self.report.problems.append(f"rebuilding missing index {', '.join(missing)}")
            return False
        try:
            segment.validate_indexes()
        except CorruptIndexError as exc:
            self.report.problems.append(f"rebuilding indexes of {segment.log_path.name}: {exc}")
            return False
        return True

    def _recover_segment(self, segment: LogSegment) -> bool:
        """Scan one segment; True if it had to be truncated."""
        result = segment.recover(self._assign_epoch_from)
        segment.flush()
        self.report.recovered_segments += 1
        if not result.truncated_bytes:
            return False
        self.report.truncated_bytes += result.truncated_bytes
        self.report.problems.append(
            f"{segment.log_path.name}: dropped {result.truncated_bytes} bytes from position "
            f"{result.valid_bytes}: {result.reason}"
        )
        return True

    def _assign_epoch_from(self, header: BatchHeader) -> None:
        self._epoch_cache.assign(header.partition_leader_epoch, header.base_offset)

    def _drop_from(self, index: int, why: str) -> None:
        for segment in self._segments[index:]:
            self.report.truncated_bytes += segment.size
            self.report.problems.append(f"deleted {segment.log_path.name}: {why}")
            segment.delete()
        del self._segments[index:]
