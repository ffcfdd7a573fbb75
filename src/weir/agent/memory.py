"""The `memory` and `shm` durability classes: an in-memory queue that spills to disk only while the
cluster is unreachable, and replays the spill when it returns.

Callers are answered as soon as the event is in memory: a process-memory queue (`memory`), or a
ring file under /dev/shm (`shm`, the format of `weir.agent.ring`), which survives a restart of the
agent, kill -9 included, but not a reboot. While the cluster is unreachable (the link says so, or
this queue's last delivery failed), new events go to a spill ring in the spool directory instead;
the spill is msynced on the `logs` interval. A full memory queue spills too, and a full spill
refuses with `QueueFullError`: nothing accepted is dropped.

Order: an event goes to memory only while the spill is empty, so everything in memory is older
than everything in the spill; the sender drains memory first, then the spill, and new events keep
going to the spill until it is empty. Events of one partition therefore reach it in the order
they were accepted.

On a clean stop a process-memory queue writes what it still holds to `<partition>.held` in the
spool directory and loads it back first on the next start. A crash loses what was in process
memory (never the spill, never an `shm` queue): that is the trade-off of the `memory` class.

Thread-safety (docs/threads.md): any thread may append; one sender thread peeks and acknowledges.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from weir.agent.queue import Durability, PartitionQueue, QueueFullError
from weir.agent.ring import RECORD_OVERHEAD, DiskRing, RecordBatchView, RingFull, RingState
from weir.clock import Clock

HELD_SUFFIX = ".held"


class MemoryRing:
    """Records in process memory with the ring's interface (peek, acknowledge by sequence)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._records: deque[bytes] = deque()
        self._bytes = 0
        self._read_sequence = 0

    def append(self, payloads: list[bytes], *, overwrite: bool = False) -> int:
        needed = sum(RECORD_OVERHEAD + len(p) for p in payloads)
        with self._lock:
            if self._bytes + needed > self.capacity:
                raise RingFull(f"memory queue full ({self.capacity} bytes)")
            self._records.extend(payloads)
            self._bytes += needed
        return 0

    def peek(self, max_records: int, max_bytes: int) -> RecordBatchView:
        with self._lock:
            payloads: list[bytes] = []
            size = 0
            for payload in itertools.islice(self._records, max_records):
                payloads.append(payload)
                size += len(payload)
                if size >= max_bytes:
                    break
            return RecordBatchView(
                payloads=payloads, first_sequence=self._read_sequence, end_position=0
            )

    def acknowledge(self, batch: RecordBatchView) -> None:
        with self._lock:
            for _ in range(max(0, batch.end_sequence - self._read_sequence)):
                self._bytes -= RECORD_OVERHEAD + len(self._records.popleft())
            self._read_sequence = max(self._read_sequence, batch.end_sequence)

    def state(self) -> RingState:
        with self._lock:
            return RingState(
                read_position=0,
                read_sequence=self._read_sequence,
                write_position=self._bytes,
                write_sequence=self._read_sequence + len(self._records),
                dropped=0,
                capacity=self.capacity,
            )

    def drain(self) -> list[bytes]:
        with self._lock:
            records = list(self._records)
            self._read_sequence += len(records)
            self._records.clear()
            self._bytes = 0
            return records

    def flush(self) -> None:
        """Nothing to make durable: process memory."""

    def close(self) -> None:
        """Nothing to release."""


class SpillingQueue(PartitionQueue):
    """A `memory` or `shm` queue: memory first, a disk spill while the cluster is unreachable."""

    def __init__(
        self,
        spill_path: Path,
        *,
        topic: str,
        partition: int,
        durability: Durability,
        capacity: int,
        clock: Clock,
        reachable: Callable[[], bool],
        shm_path: Path | None = None,
    ) -> None:
        super().__init__(topic=topic, partition=partition, durability=durability, clock=clock)
        self._spill_path, self._capacity, self._reachable = spill_path, capacity, reachable
        self._lock = threading.Lock()
        self.memory: MemoryRing | DiskRing = (
            MemoryRing(capacity) if shm_path is None else DiskRing(shm_path, capacity)
        )
        self._spill = DiskRing(spill_path, capacity) if spill_path.exists() else None
        self._failing = False
        self._spilled = 0
        self._in_flight: tuple[RecordBatchView, bool] | None = None
        self._load_held()
        if self.state().depth:
            self._note_data()

    # -- accepting --------------------------------------------------------------------------

    def append(self, payloads: list[bytes]) -> None:
        with self._lock:
            if not self._must_spill():
                try:
                    self.memory.append(payloads, overwrite=False)
                except RingFull:
                    self._append_to_spill(payloads)
            else:
                self._append_to_spill(payloads)
        self._note_data()

    def _must_spill(self) -> bool:
        spill_waiting = self._spill is not None and self._spill.state().depth > 0
        return spill_waiting or self._failing or not self._reachable()

    def _append_to_spill(self, payloads: list[bytes]) -> None:
        if self._spill is None:
            self._spill = DiskRing(self._spill_path, self._capacity)
        try:
            self._spill.append(payloads, overwrite=False)
        except RingFull as exc:
            raise QueueFullError(f"queue {self.topic}-{self.partition} is full: {exc}") from exc
        self._spilled += len(payloads)

    @property
    def spilled(self) -> int:
        return self._spilled

    # -- sending ----------------------------------------------------------------------------

    def peek(self, max_records: int, max_bytes: int) -> RecordBatchView:
        with self._lock:
            batch, from_spill = self.memory.peek(max_records, max_bytes), False
            if not batch.payloads and self._spill is not None:
                batch, from_spill = self._spill.peek(max_records, max_bytes), True
            self._in_flight = (batch, from_spill)
            return batch

    def _acknowledge(self, batch: RecordBatchView) -> None:
        with self._lock:
            in_flight = self._in_flight
            from_spill = in_flight is not None and in_flight[0] is batch and in_flight[1]
            if from_spill and self._spill is not None:
                self._spill.acknowledge(batch)
            else:
                self.memory.acknowledge(batch)
            self._in_flight = None

    def note_delivery(self, delivered: bool) -> None:
        self._failing = not delivered

    # -- state and lifecycle ----------------------------------------------------------------

    def state(self) -> RingState:
        parts = [self.memory.state()] + ([self._spill.state()] if self._spill else [])
        return RingState(
            read_position=0,
            read_sequence=0,
            write_position=sum(p.used_bytes for p in parts),
            write_sequence=sum(p.depth for p in parts),
            dropped=0,
            capacity=sum(p.capacity for p in parts),
        )

    def flush(self) -> None:
        if self._spill is not None:
            self._spill.flush()

    def close(self) -> None:
        with self._lock:
            if isinstance(self.memory, MemoryRing):
                self._hold(self.memory.drain())
            self.memory.close()
            if self._spill is not None:
                self._spill.close()

    def _held_path(self) -> Path:
        return self._spill_path.with_suffix(HELD_SUFFIX)

    def _hold(self, records: list[bytes]) -> None:
        """Keep what process memory still holds across a clean stop."""
        if not records:
            return
        needed = sum(RECORD_OVERHEAD + len(r) for r in records)
        self._held_path().unlink(missing_ok=True)
        held = DiskRing(self._held_path(), needed)
        held.append(records, overwrite=False)
        held.close()

    def _load_held(self) -> None:
        path = self._held_path()
        if not path.exists() or not isinstance(self.memory, MemoryRing):
            return
        held = DiskRing(path, 0)
        records = held.peek(held.state().depth, 1 << 62).payloads
        held.close()
        needed = sum(RECORD_OVERHEAD + len(r) for r in records)
        self.memory = MemoryRing(max(self._capacity, needed))
        self.memory.append(records)
        path.unlink()
