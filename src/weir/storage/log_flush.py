"""The flush bookkeeping of one partition log: what is unflushed, what a flush in progress will
make durable, and who waits for it.

A flush runs in three steps (Kafka's `UnifiedLog.flush`): under the log's lock it takes the log
end offset to flush to and pins the segments to sync (`FlushPlan`); without the lock it syncs
them; under the lock again it moves the recovery point. Appends and reads go on during the sync.
A truncation between the first and the last step bumps `generation`, and the flush begun before
it then moves nothing: the offsets it synced may no longer hold what they held.

Nothing here touches a file. Thread-safety (docs/threads.md): none; every method runs under its
log's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from weir.storage.segment import LogSegment
from weir.storage.txn_index import TransactionIndex, sync_index_file

log = logging.getLogger(__name__)

#: told True once the offsets it waits for are on disk, False if a flush failed first
FlushCallback = Callable[[bool], object]


@dataclass(frozen=True, slots=True, kw_only=True)
class FlushPlan:
    """What one flush syncs: `segments` (pinned until it ends), the `.txnindex` files with
    entries not yet synced, and the directory if a segment was created since the last sync."""

    end_offset: int
    segments: list[LogSegment]
    txn_indexes: list[UnsyncedIndex]
    directory: bool
    generation: int


@dataclass(frozen=True, slots=True)
class UnsyncedIndex:
    """A `.txnindex` with changes not yet synced, and the mark that says how far a sync of its
    file reaches (`TransactionIndex.note_synced`)."""

    index: TransactionIndex
    path: Path
    mark: int

    @classmethod
    def of(cls, index: TransactionIndex) -> UnsyncedIndex | None:
        unsynced = index.take_unsynced()
        return None if unsynced is None else cls(index, *unsynced)


def sync_indexes(indexes: list[UnsyncedIndex]) -> None:
    """fsync their files (without the log's lock)."""
    for unsynced in indexes:
        sync_index_file(unsynced.path)


def note_synced(indexes: list[UnsyncedIndex]) -> None:
    """Under the log's lock, once `sync_indexes` succeeded."""
    for unsynced in indexes:
        unsynced.index.note_synced(unsynced.mark)


@dataclass(slots=True)
class FlushState:
    last_flush_ms: int
    unflushed_records: int = 0
    #: a flush handed to another thread (`flush.messages`) has not begun yet
    requested: bool = False
    #: appends below this offset asked for a sync before their acknowledgement
    sync_wanted_to: int = 0
    generation: int = 0
    waiters: list[tuple[int, FlushCallback]] = field(default_factory=list)

    def due(self, end_offset: int) -> bool:
        """The records appended (`unflushed_records`, which the append counts itself) reached
        `flush.messages`: those below `end_offset` want a sync before their acknowledgement."""
        self.sync_wanted_to = end_offset
        return True

    def request(self) -> bool:
        """Whether a flush must be requested (none is pending already)."""
        requested, self.requested = self.requested, True
        return not requested

    def begin(self) -> int:
        self.unflushed_records = 0
        self.requested = False
        return self.generation

    def reached(self, recovery_point: int) -> list[FlushCallback]:
        """The callbacks of those waiting for offsets the recovery point now covers."""
        done = [callback for offset, callback in self.waiters if offset <= recovery_point]
        self.waiters = [(o, c) for o, c in self.waiters if o > recovery_point]
        return done

    def fail_all(self) -> list[FlushCallback]:
        done = [callback for _, callback in self.waiters]
        self.waiters = []
        return done


def notify(callbacks: list[FlushCallback], flushed: bool) -> None:
    """Tell each waiter; one that fails (its event loop closed meanwhile) does not stop the
    flush that told it."""
    for callback in callbacks:
        try:
            callback(flushed)
        except Exception:
            log.exception("a waiter for a flush failed")
