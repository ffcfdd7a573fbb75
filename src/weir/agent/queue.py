"""One topic-partition's queue: a `DiskRing` plus the policy of its durability class.

Durability classes:
- `events`: an append returns only after an msync covered it. Concurrent callers share one msync
  (group commit: the first waiter becomes the leader, waits `group_commit_ms` for company, then
  flushes for everyone). A full queue blocks up to `full_timeout_ms`, then raises `QueueFullError`;
  nothing accepted is ever dropped.
- `logs`: an append returns once the record is in the mapping (it survives kill -9 through the page
  cache); a flusher msyncs every `flush_interval_ms`. A full queue overwrites its oldest records and
  counts them in `dropped`.

Thread-safety: any thread may append; one sender thread peeks and acknowledges.
"""

from __future__ import annotations

import enum
import threading
from pathlib import Path

from weir.agent.ring import DiskRing, RecordBatchView, RingFull, RingState
from weir.clock import Clock


class Durability(enum.Enum):
    EVENTS = "events"
    LOGS = "logs"


class QueueFullError(Exception):
    """An `events` queue stayed full for longer than the caller may wait."""


class GroupCommit:
    """Leader-based group commit of a ring's msync across concurrent callers."""

    def __init__(self, ring: DiskRing, window_ms: float) -> None:
        self._ring = ring
        self._window_s = window_ms / 1000
        self._condition = threading.Condition()
        self._requested = 0
        self._flushed = 0
        self._flushing = False

    def wait_durable(self) -> None:
        with self._condition:
            self._requested += 1
            ticket = self._requested
            while self._flushed < ticket:
                if not self._flushing:
                    self._lead()
                else:
                    self._condition.wait()

    def _lead(self) -> None:
        self._flushing = True
        if self._window_s > 0:
            self._condition.wait(self._window_s)
        covered = self._requested
        self._condition.release()
        try:
            self._ring.flush()
        finally:
            self._condition.acquire()
            self._flushing = False
        self._flushed = covered
        self._condition.notify_all()


class PartitionQueue:
    """The queue of one topic-partition with its durability class applied."""

    def __init__(
        self,
        path: Path,
        *,
        topic: str,
        partition: int,
        durability: Durability,
        capacity: int,
        clock: Clock,
        group_commit_ms: float = 0.5,
        full_timeout_ms: int = 0,
    ) -> None:
        self.topic, self.partition, self.durability = topic, partition, durability
        self.ring = DiskRing(path, capacity)
        self._clock = clock
        self._commit = GroupCommit(self.ring, group_commit_ms)
        self._full_timeout_ms = full_timeout_ms
        self._space = threading.Condition()
        self._data = threading.Condition()
        self._oldest_ms: int | None = None

    def append(self, payloads: list[bytes]) -> None:
        """Store the payloads per the durability class; see the module docstring."""
        if self.durability is Durability.LOGS:
            self.ring.append(payloads, overwrite=True)
        else:
            self._append_or_wait(payloads)
            self._commit.wait_durable()
        self._note_data()

    def _append_or_wait(self, payloads: list[bytes]) -> None:
        deadline = self._clock.monotonic_ms() + self._full_timeout_ms
        while True:
            try:
                self.ring.append(payloads, overwrite=False)
                return
            except RingFull as exc:
                remaining = deadline - self._clock.monotonic_ms()
                if remaining <= 0:
                    raise QueueFullError(
                        f"queue {self.topic}-{self.partition} is full: {exc}"
                    ) from exc
                with self._space:
                    self._space.wait(min(remaining, 100) / 1000)

    def _note_data(self) -> None:
        with self._data:
            if self._oldest_ms is None:
                self._oldest_ms = self._clock.milliseconds()
            self._data.notify_all()

    def wait_for_data(self, timeout_s: float) -> None:
        with self._data:
            if self.ring.state().depth == 0:
                self._data.wait(timeout_s)

    def peek(self, max_records: int, max_bytes: int) -> RecordBatchView:
        return self.ring.peek(max_records, max_bytes)

    def acknowledge(self, batch: RecordBatchView) -> None:
        self.ring.acknowledge(batch)
        with self._data:
            self._oldest_ms = None if self.ring.state().depth == 0 else self._clock.milliseconds()
        with self._space:
            self._space.notify_all()

    def oldest_age_ms(self) -> int:
        oldest = self._oldest_ms
        return 0 if oldest is None else max(0, self._clock.milliseconds() - oldest)

    def state(self) -> RingState:
        return self.ring.state()

    def flush(self) -> None:
        self.ring.flush()

    def close(self) -> None:
        self.ring.close()
