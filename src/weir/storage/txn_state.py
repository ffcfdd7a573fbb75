"""A partition log's transaction files: producer-state snapshots and aborted-transaction indexes.

What it decides, as Kafka's log does:

- **When snapshots are taken**: when a segment rolls on append (named by the new segment's base
  offset, the producer state as of that offset) and at close (at the log end offset). The state
  itself is the broker's; the log asks its `source` for it.
- **Which files a load trusts**: after an unclean shutdown only snapshots at or below the
  checkpointed recovery point (what is known to be on disk), never one past the log end or
  below the first segment; a damaged `.txnindex` is dropped together with every snapshot past
  its segment's start, so the replay that follows writes it again.
- **Where a replay starts**: at the newest snapshot that reads back sound; without one, at the
  first segment if the log ever held transactions (a log an older weir wrote, with the
  has-transactions marker and no snapshot), else at the last two segments (a producer idle for
  longer is forgotten). Index entries from the start on are dropped: the replay re-adds them.
- **Where an aborted transaction is indexed**: in the segment holding its ABORT marker. A
  read_committed fetch collects from the fetch offset's segment on, until an entry's last stable
  offset shows no later segment can add one.

Thread-safety (docs/threads.md): none. PartitionLog calls in under its lock.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from weir.records import HeaderFields
from weir.storage.errors import CorruptIndexError
from weir.storage.producer_snapshot import (
    CorruptSnapshotError,
    ProducerSnapshot,
    ProducerSnapshotEntry,
    ProducerSnapshots,
)
from weir.storage.segment import LogSegment
from weir.storage.txn_index import ENTRY_SIZE, AbortedTxn

log = logging.getLogger(__name__)

#: the producer state as of the log end offset, as snapshot entries (set by the log's owner)
ProducerStateSource = Callable[[], Sequence[ProducerSnapshotEntry]]


@dataclass(frozen=True, slots=True)
class ProducerStateReplay:
    """How to rebuild producer state: start from `snapshot` (None: empty) and apply `batches`,
    those from `start_offset` on, each with its marker's verdict if it is a control batch."""

    snapshot: ProducerSnapshot | None
    start_offset: int
    batches: Iterator[tuple[HeaderFields, bool | None]]


class TransactionFiles:
    """The `.snapshot` files of a partition directory and the policy over them and the
    segments' `.txnindex` files (formats: `producer_snapshot.py`, `txn_index.py`). Not
    thread-safe: PartitionLog calls in under its lock."""

    def __init__(self, directory: Path, problems: list[str]) -> None:
        self.name = directory.name
        self.snapshots = ProducerSnapshots(directory)
        self.source: ProducerStateSource | None = None
        self._problems = problems

    def follow_directory(self, directory: Path) -> None:
        """The partition directory was renamed (see `PartitionLog.rename_dir`)."""
        self.name = directory.name
        self.snapshots.directory = directory

    def check_at_load(
        self,
        segments: Sequence[LogSegment],
        ends: Sequence[int],
        log_end_offset: int,
        recovery_point: int | None,
    ) -> None:
        """`ends[i]`: where segment i ends; `recovery_point`: None after a clean shutdown."""
        limit = log_end_offset if recovery_point is None else min(recovery_point, log_end_offset)
        self.snapshots.delete_above(limit)
        self.snapshots.delete_below(segments[0].base_offset)
        for segment, end in zip(segments, ends, strict=True):
            index = segment.txn_index
            unflushed = recovery_point is not None and end > recovery_point
            try:
                if index.size % ENTRY_SIZE or unflushed:
                    index.validate(end)
            except CorruptIndexError as exc:
                self._problems.append(f"rebuilding {index.path.name}: {exc}")
                index.reset()
                self.snapshots.delete_above(segment.base_offset)

    def snapshot(self, offset: int) -> bool:
        """Write the source's state as the snapshot at `offset`, durably; False if there is no
        source. OSError if it cannot be written."""
        if self.source is None:
            return False
        self.snapshots.write(offset, self.source())
        return True

    def capture(self) -> Sequence[ProducerSnapshotEntry] | None:
        """The source's state now (for a snapshot written later), or None without a source."""
        return None if self.source is None else self.source()

    def replay_from(
        self, segments: Sequence[LogSegment], log_end_offset: int, has_transactions: bool
    ) -> tuple[ProducerSnapshot | None, int]:
        """The snapshot to start from and the offset the replay starts at (see the module
        docstring); index entries from there on are dropped."""
        snapshot = self._latest_sound_snapshot(segments[0].base_offset, log_end_offset)
        if snapshot is not None:
            start = snapshot.offset
        elif has_transactions:
            start = segments[0].base_offset
        else:
            start = segments[max(0, len(segments) - 2)].base_offset
        holding_start = max(0, bisect.bisect_right(segments, start, key=_base_offset) - 1)
        for segment in segments[holding_start:]:
            segment.txn_index.truncate_to(start)
        return snapshot, start

    def _latest_sound_snapshot(self, first: int, end: int) -> ProducerSnapshot | None:
        for offset in reversed(list(self.snapshots.offsets)):
            if not first <= offset <= end:
                continue
            try:
                return self.snapshots.read(offset)
            except (CorruptSnapshotError, OSError) as exc:
                self._problems.append(f"ignoring producer snapshot: {exc}")
                log.warning("%s: ignoring producer snapshot: %s", self.name, exc)
                self.snapshots.delete(offset)
        return None

    def index_aborted(self, segment: LogSegment, txn: AbortedTxn) -> None:
        """Index `txn` in `segment`, its marker's. OSError if it cannot be written."""
        try:
            segment.txn_index.append(txn)
        except ValueError as exc:  # a replay meeting an entry the index already has
            log.warning("%s: %s", self.name, exc)

    @staticmethod
    def collect(
        segments: Sequence[LogSegment], fetch_offset: int, upper_bound: int
    ) -> list[AbortedTxn]:
        """The aborted transactions with records in [fetch_offset, upper_bound), from
        `segments` (the fetch offset's and those after it)."""
        found: list[AbortedTxn] = []
        for segment in segments:
            if segment.txn_index.is_empty:
                continue
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound)
            found.extend(entries)
            if complete:
                break
        return found


def _base_offset(segment: LogSegment) -> int:
    return segment.base_offset
