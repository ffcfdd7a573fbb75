"""The leader epoch cache: for each leader epoch, the first offset written in it.

Persisted in `<partition dir>/leader-epoch-checkpoint` as `0`, count, then `epoch start_offset`
lines, rewritten atomically on every change (changes are rare: once per leadership change).
Replication uses it to answer "where does epoch N end?" and to truncate divergent followers.

A new epoch is on disk before the cache answers with it: `assign` raises if the file cannot be
written and leaves the cache as it was. Truncations may be written later (`flush_if_dirty`): a
file that still lists epochs before the log start or past the log end is pruned on load.

Thread-safety (docs/threads.md): none; owned by one PartitionLog.
"""

from __future__ import annotations

import logging
from pathlib import Path

from weir.storage.checkpoint import parse_versioned, write_versioned

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[tuple[int, int]] = []
        self.dirty = False
        try:
            self.entries = [(int(e), int(o)) for e, o in parse_versioned(path, 2)]
        except ValueError:
            log.warning("%s is damaged; rebuilding the leader epoch cache from the log", path)
            self.entries = []

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (no-op unless it is a newer epoch)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        entries = [(e, o) for e, o in self.entries if o < start_offset]
        entries.append((epoch, start_offset))
        write_versioned(self.path, list(entries))
        self.entries = entries
        self.dirty = False

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, the offset where it ends): OffsetsForLeaderEpoch's answer."""
        if not self.entries or epoch < self.entries[0][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        for i, (e, _) in enumerate(self.entries):
            if e > epoch:
                return self.entries[i - 1][0], self.entries[i][1]
        return self.entries[-1][0], log_end_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after `end_offset` (the log was truncated there)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._flush_tolerantly()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch covering it starts there."""
        kept = [(e, o) for e, o in self.entries if o > start_offset]
        covering = [(e, o) for e, o in self.entries if o <= start_offset]
        if covering:
            kept.insert(0, (covering[-1][0], start_offset))
        if kept != self.entries:
            self.entries = kept
            self._flush_tolerantly()

    def clear(self) -> None:
        self.entries = []
        self._flush_tolerantly()

    def flush_if_dirty(self) -> None:
        if self.dirty:
            self._flush_tolerantly()

    def _flush_tolerantly(self) -> None:
        try:
            write_versioned(self.path, list(self.entries))
            self.dirty = False
        except OSError as exc:
            self.dirty = True
            log.warning("%s not written (kept in memory, written later): %s", self.path, exc)
