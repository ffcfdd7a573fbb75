"""One partition while a fetcher owns it, from assignment until it is released or abandoned.

Owns `OwnedPartition` and its states:

    ACTIVE --revoked--> REVOKING --work finished in time, final commit--> RELEASED
       |                    +------deadline passed, final commit---------> ABANDONED
       +--lost or fenced (nothing committed)----------------------------> ABANDONED

A new `OwnedPartition` is made for every assignment, so a worker that finishes an abandoned
record late can never move a later owner's offsets: `finish` on a released or abandoned
partition changes nothing. `TRANSITIONS[state]` is the set of states it may move to.
"""

from __future__ import annotations

import bisect
import enum
import threading
from collections.abc import Sequence
from operator import itemgetter
from types import MappingProxyType
from typing import Any, cast

from weir.consumer.offsets import OffsetTracker
from weir.consumer.record import OFFSET_INDEX, Record
from weir.consumer.sink import ResultRow

_offset = itemgetter(OFFSET_INDEX)


class PartitionState(enum.Enum):
    ACTIVE = "active"  # records are fetched and handled
    REVOKING = "revoking"  # no new records; running ones may finish until the deadline
    RELEASED = "released"  # everything finished was committed; the partition is gone
    ABANDONED = "abandoned"  # gone; late finishes are ignored, nothing more is committed


ACTIVE = PartitionState.ACTIVE
REVOKING = PartitionState.REVOKING
RELEASED = PartitionState.RELEASED
ABANDONED = PartitionState.ABANDONED

TRANSITIONS = MappingProxyType({
    ACTIVE: frozenset({REVOKING, ABANDONED}),
    REVOKING: frozenset({RELEASED, ABANDONED}),
    RELEASED: frozenset(),
    ABANDONED: frozenset(),
})  # fmt: skip


class IllegalTransitionError(Exception):
    pass


class OwnedPartition:
    """A partition's offset tracker, the results awaiting an exactly-once commit, and the offset
    last committed (to Kafka or the sink; None while unknown).

    Thread-safety (docs/threads.md): workers call `finish`, the owning fetcher everything else;
    `_lock` guards the tracker, the results and the state. `running` belongs to the WorkQueue and
    its lock.
    """

    def __init__(self, topic: str, partition: int, committed: int | None, keep_results: bool):
        self.topic = topic
        self.partition = partition
        self.committed = committed
        self.state = ACTIVE
        self.gone = threading.Event()  # set when no longer ACTIVE: cuts retry waits short
        self.running = 0  # records taken by workers and not yet done
        self._keep_results = keep_results
        self._tracker = OffsetTracker(start=committed)
        self._results: list[ResultRow] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<OwnedPartition {self.topic}-{self.partition} {self.state.value}>"

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def active(self) -> bool:
        return self.state is ACTIVE

    def transition(self, target: PartitionState) -> None:
        with self._lock:
            if target not in TRANSITIONS[self.state]:
                raise IllegalTransitionError(
                    f"{self.topic}-{self.partition} cannot go from {self.state.value} to "
                    f"{target.value}"
                )
            self.state = target
        self.gone.set()

    def already_committed(self, offsets: Sequence[int]) -> int:
        """How many of these fetched offsets (ascending) lie below the committed offset. They
        were handled by an earlier owner (or before a restart) and must not be handled again:
        librdkafka can resume a partition paused before its first fetch from the group's
        Kafka offset, which an exactly-once sink's offset may be ahead of."""
        if self.committed is None:
            return 0
        return bisect.bisect_left(offsets, self.committed)

    def fetched(self, offsets: Sequence[int]) -> None:
        with self._lock:
            self._tracker.fetched(offsets)

    def finish(self, records: Sequence[Record], results: Sequence[bytes | None]) -> None:
        """Mark records handled (results are kept for an exactly-once commit)."""
        offsets = list(map(_offset, cast(Sequence[tuple[Any, ...]], records)))
        with self._lock:
            if self.state is RELEASED or self.state is ABANDONED:
                return
            self._tracker.finished(offsets)
            if self._keep_results:
                self._results.extend(
                    ResultRow(r.topic, r.partition, r.offset, r.key, result)
                    for r, result in zip(records, results, strict=True)
                    if result is not None
                )

    def commit_target(self) -> int | None:
        """Where a commit may move the committed offset now (None: nowhere yet)."""
        with self._lock:
            target = self._tracker.committable()
        if target is None or (self.committed is not None and target <= self.committed):
            return None
        return target

    def results_below(self, offset: int) -> list[ResultRow]:
        """The results to commit with a move of the committed offset to `offset`: those from
        the committed offset up, one per record (a record delivered twice is stored once).
        Rows below the committed offset were stored by an earlier commit and are never
        written again, so a sink's offset check covers every row a commit writes."""
        low = -1 if self.committed is None else self.committed
        with self._lock:
            rows = {row.offset: row for row in self._results if low <= row.offset < offset}
        return [rows[key] for key in sorted(rows)]

    @property
    def pending_results(self) -> int:
        return len(self._results)

    @property
    def buffered(self) -> int:
        """Records fetched and not finished, plus results waiting for their commit."""
        with self._lock:
            return self._tracker.unfinished + len(self._results)

    def committed_to(self, offset: int) -> None:
        """A commit up to `offset` succeeded: its results are stored, drop them."""
        with self._lock:
            self.committed = offset
            if self._results:
                self._results = [row for row in self._results if row.offset >= offset]
