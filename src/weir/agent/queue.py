"""One topic-partition's queue: the policy of its durability class over a ring.

`PartitionQueue` is what the registry, the senders and status see; `DiskQueue` holds the two disk
classes below, `weir.agent.memory.SpillingQueue` the `memory` and `shm` classes.

Durability classes:
- `events`: an append returns only after a flush of the ring (`DiskRing.flush`) that started after
  its records were written has completed. Concurrent callers share one flush (group commit: the
  first waiter becomes the leader, waits at most `group_commit_ms` for callers still appending,
  then flushes for everyone; see `GroupCommit`). A full queue blocks up to `full_timeout_ms`,
  then raises `QueueFullError`; nothing accepted is ever dropped.
- `logs`: an append returns once the record is in the mapping (it survives kill -9 through the page
  cache); a flusher flushes the ring every `flush_interval_ms`. A full queue overwrites its
  oldest records and counts them in `dropped`.
- `memory`, `shm`: an in-memory queue (process memory, or a ring file under /dev/shm that survives
  a restart of the agent) that spills to disk while the cluster is unreachable; see
  `weir.agent.memory`.

Thread-safety (docs/threads.md): any thread may append; one sender thread peeks and acknowledges.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from pathlib import Path

from weir.agent.ring import DiskRing, RecordBatchView, RingFull, RingState
from weir.clock import Clock


class Durability(enum.Enum):
    EVENTS = "events"
    LOGS = "logs"
    MEMORY = "memory"
    SHM = "shm"


class QueueFullError(Exception):
    """An `events` queue stayed full for longer than the caller may wait."""


class GroupCommit:
    """Leader-based group commit: one flush of a ring answers every caller whose records it covers.

    A caller announces itself with `begin` before it appends and takes a ticket with `end` once
    its records are in the ring; `wait_durable(ticket)` returns only after a flush that started
    after that ticket was issued has completed. The first waiter finding no flush under way leads:
    it waits (at most `window_ms`) while callers are still between `begin` and `end`, or until as
    many callers wait as the previous flush answered (they are likely on their way back), then
    flushes for every ticket issued so far and wakes its whole group at once.
    A failed flush acknowledges nobody: its error reaches the leader, and a waiter leads again.
    """

    def __init__(self, flush: Callable[[], None], window_ms: float) -> None:
        self._flush = flush
        self._window_s = window_ms / 1000
        self._lock = threading.Lock()
        self._gathered = threading.Condition(self._lock)
        self._waiters: list[threading.Lock] = []
        self._appending = 0
        self._issued = 0
        self._durable = 0
        self._flushing = False
        self._last_group = 0
        self.flushes = 0

    def begin(self) -> None:
        with self._lock:
            self._appending += 1

    def end(self, appended: bool) -> int:
        """The caller's records are in the ring (or it gave up); returns its ticket."""
        with self._lock:
            self._appending -= 1
            if appended:
                self._issued += 1
            if self._company_arrived():
                self._gathered.notify()
            return self._issued

    def wait_durable(self, ticket: int) -> None:
        while True:
            with self._lock:
                if self._durable >= ticket:
                    return
                if not self._flushing:
                    self._lead()
                    continue
                # A lock of its own per waiter: the leader wakes each directly, and a woken
                # waiter whose ticket was covered returns without touching the shared lock.
                waiter = threading.Lock()
                waiter.acquire()
                self._waiters.append(waiter)
            waiter.acquire()
            if self._durable >= ticket:
                return

    def _company_arrived(self) -> bool:
        return self._appending == 0 and self._issued - self._durable >= self._last_group

    def _lead(self) -> None:
        self._flushing = True
        try:
            if self._window_s > 0 and not self._company_arrived():
                self._gathered.wait_for(self._company_arrived, self._window_s)
            covered = self._issued
            self._lock.release()
            try:
                self._flush()
            finally:
                self._lock.acquire()
            self._last_group = covered - self._durable
            self._durable = max(self._durable, covered)
            self.flushes += 1
        finally:
            self._flushing = False
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter.release()


class PartitionQueue:
    """The queue of one topic-partition: what every durability class has in common."""

    def __init__(self, *, topic: str, partition: int, durability: Durability, clock: Clock) -> None:
        self.topic, self.partition, self.durability = topic, partition, durability
        self._clock = clock
        self._space = threading.Condition()
        self._data = threading.Condition()
        self._oldest_ms: int | None = None

    def append(self, payloads: list[bytes]) -> None:
        """Store the payloads per the durability class; raises `QueueFullError` if refused."""
        raise NotImplementedError

    def peek(self, max_records: int, max_bytes: int) -> RecordBatchView:
        raise NotImplementedError

    def _acknowledge(self, batch: RecordBatchView) -> None:
        raise NotImplementedError

    def state(self) -> RingState:
        raise NotImplementedError

    def flush(self) -> None:
        """Make what was appended durable (no-op where the class keeps nothing on disk)."""

    def close(self) -> None:
        raise NotImplementedError

    def note_delivery(self, delivered: bool) -> None:
        """The sender's last delivery succeeded or failed (the memory classes spill on failure)."""

    @property
    def spilled(self) -> int:
        return 0

    def _note_data(self) -> None:
        if self._oldest_ms is not None:
            # The sender saw data and will look again before it waits: acknowledge() resets
            # this only after finding the queue empty, and appends write before they read it.
            return
        with self._data:
            if self._oldest_ms is None:
                self._oldest_ms = self._clock.milliseconds()
            self._data.notify_all()

    def wait_for_data(self, timeout_s: float) -> None:
        with self._data:
            if self.state().depth == 0:
                self._data.wait(timeout_s)

    def acknowledge(self, batch: RecordBatchView) -> None:
        self._acknowledge(batch)
        with self._data:
            self._oldest_ms = None if self.state().depth == 0 else self._clock.milliseconds()
        with self._space:
            self._space.notify_all()

    def oldest_age_ms(self) -> int:
        oldest = self._oldest_ms
        return 0 if oldest is None else max(0, self._clock.milliseconds() - oldest)


class DiskQueue(PartitionQueue):
    """An `events` or `logs` queue on a `DiskRing` in the spool directory."""

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
        super().__init__(topic=topic, partition=partition, durability=durability, clock=clock)
        self.ring = DiskRing(path, capacity)
        self._commit = GroupCommit(self.ring.flush, group_commit_ms)
        self._full_timeout_ms = full_timeout_ms

    def append(self, payloads: list[bytes]) -> None:
        if self.durability is Durability.LOGS:
            self.ring.append(payloads, overwrite=True)
        else:
            self._commit.begin()
            appended = False
            try:
                self._append_or_wait(payloads)
                appended = True
            finally:
                ticket = self._commit.end(appended)
            self._commit.wait_durable(ticket)
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

    @property
    def flushes(self) -> int:
        """How many group-commit flushes answered `events` callers so far."""
        return self._commit.flushes

    def peek(self, max_records: int, max_bytes: int) -> RecordBatchView:
        return self.ring.peek(max_records, max_bytes)

    def _acknowledge(self, batch: RecordBatchView) -> None:
        self.ring.acknowledge(batch)

    def state(self) -> RingState:
        return self.ring.state()

    def flush(self) -> None:
        self.ring.flush()

    def close(self) -> None:
        self.ring.close()
