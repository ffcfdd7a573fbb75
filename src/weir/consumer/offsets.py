"""Per-partition offset tracking: which fetched records are done, and how far a commit may go.

Owns `OffsetTracker`. Workers finish records out of order; a commit must never pass a record
that is not finished, or a crash would lose it. The tracker keeps the fetched offsets in fetch
order and the finished ones above the contiguous finished prefix; the committable offset is the
first fetched offset that is not finished, or one past the last fetched one when all are (the
"global offset map" of SEEDS.md §3 is the set of these trackers, one per owned partition).
Fetched offsets may have gaps (compaction, transaction markers): only fetched offsets count.

It knows nothing about threads, Kafka or sinks.
"""

from __future__ import annotations

from collections.abc import Sequence

COMPACT_AFTER = 4096  # finished offsets kept at the front before the list is trimmed


class OffsetTracker:
    """The fetched-but-not-committable offsets of one partition.

    Thread-safety (docs/threads.md): none; its owner (`OwnedPartition`) serialises every call.
    """

    def __init__(self, start: int | None = None) -> None:
        self._fetched: list[int] = []  # in fetch order; [_head:] are at or above the prefix
        self._head = 0
        self._finished: set[int] = set()  # finished offsets above the prefix
        self._start = start  # where fetching starts, when known
        self._last_fetched: int | None = None

    def fetched(self, offsets: Sequence[int]) -> None:
        """Record newly fetched offsets; they must be increasing and above any fetched before."""
        if not offsets:
            return
        if self._last_fetched is not None and offsets[0] <= self._last_fetched:
            raise ValueError(f"offset {offsets[0]} fetched after {self._last_fetched}")
        self._fetched.extend(offsets)
        self._last_fetched = offsets[-1]

    def finished(self, offsets: list[int]) -> None:
        """Mark fetched offsets finished, in any order."""
        head = self._head
        if self._fetched[head : head + len(offsets)] == offsets:  # in order: the common case
            head += len(offsets)
        else:
            head = self._finish_out_of_order(head, offsets)
        if self._finished:
            head = self._advance_over_finished(head)
        self._head = head
        if head > COMPACT_AFTER and head * 2 > len(self._fetched):
            del self._fetched[:head]
            self._head = 0

    def _finish_out_of_order(self, head: int, offsets: list[int]) -> int:
        fetched, end = self._fetched, len(self._fetched)
        for offset in offsets:
            if head < end and fetched[head] == offset:
                head += 1
            else:
                self._finished.add(offset)
        return head

    def _advance_over_finished(self, head: int) -> int:
        fetched, finished, end = self._fetched, self._finished, len(self._fetched)
        while head < end and fetched[head] in finished:
            finished.discard(fetched[head])
            head += 1
        return head

    def committable(self) -> int | None:
        """The offset a commit may store now: every fetched offset below it is finished.
        None before anything was fetched when the start was unknown."""
        if self._head < len(self._fetched):
            return self._fetched[self._head]
        return self._start if self._last_fetched is None else self._last_fetched + 1

    @property
    def unfinished(self) -> int:
        """How many fetched records are not finished yet."""
        return len(self._fetched) - self._head - len(self._finished)
