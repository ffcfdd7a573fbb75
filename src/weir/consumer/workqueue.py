"""The bounded queue between fetchers and workers, in lanes that carry the ordering guarantee.

Owns `WorkQueue`, `Lane` and `Run`. Fetchers `put` a partition's fetched records; workers
`take` a run of records of one lane, handle them in order and call `done`. A lane is the unit
of order: under partition ordering a partition is one lane, under key ordering each key of a
partition is one (keyless records share one unordered lane), and without ordering each
partition has one unordered lane. An *exclusive* lane is handed to one worker at a time, so
its records are handled one after the other; an unordered lane is split among workers.

The queue does not block producers: it counts what is buffered (queued plus running); the fetcher
waits for room, and pauses its partitions when none comes (see fetcher.py). Thread-safety
(docs/threads.md): all state is guarded by one lock; `buffered` and `finished` may be read without
it.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from weir.consumer.partition import OwnedPartition
from weir.consumer.record import Record
from weir.consumer.settings import Ordering


@dataclass(slots=True, eq=False)
class Lane:
    partition: OwnedPartition
    key: object
    exclusive: bool
    records: deque[Record] = field(default_factory=deque)
    busy: bool = False  # an exclusive lane's records are being handled
    ready: bool = False  # listed in the queue's ready lanes
    dropped: bool = False


@dataclass(frozen=True, slots=True)
class Run:
    """Records of one lane, in offset order, taken by one worker."""

    lane: Lane
    records: list[Record]

    @property
    def partition(self) -> OwnedPartition:
        return self.lane.partition


UNORDERED_LANE = object()  # key of a partition's lane for records in no particular order


class WorkQueue:
    def __init__(self, ordering: Ordering, workers: int, max_run: int) -> None:
        self._ordering = ordering
        self._workers = workers
        self._max_run = max_run
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # workers wait here for ready lanes
        self._progress = threading.Condition(self._lock)  # fetchers wait here for done runs
        self._lanes: dict[OwnedPartition, dict[object, Lane]] = {}
        self._ready: deque[Lane] = deque()
        self._queued = 0
        self._running = 0
        self.finished = 0  # records done since the queue was made (a pace for the fetcher)
        self._closed = False

    @property
    def buffered(self) -> int:
        """Records fetched and not done: queued or being handled."""
        return self._queued + self._running

    @property
    def queued(self) -> int:
        return self._queued

    def put(self, partition: OwnedPartition, records: Sequence[Record]) -> None:
        with self._lock:
            lanes = self._lanes.setdefault(partition, {})
            if self._ordering is Ordering.KEY:
                woken = self._put_by_key(partition, lanes, records)
            else:
                lane = self._lane(partition, lanes, UNORDERED_LANE)
                lane.records.extend(records)
                woken = self._make_ready(lane)
            self._queued += len(records)
            wake = len(records) if self._ordering is Ordering.UNORDERED else woken
            if wake:
                self._work.notify(min(wake, self._workers))

    def _put_by_key(
        self,
        partition: OwnedPartition,
        lanes: dict[object, Lane],
        records: Iterable[Record],
    ) -> int:
        woken = 0
        for record in records:
            key = UNORDERED_LANE if record.key is None else record.key
            lane = lanes.get(key) or self._lane(partition, lanes, key)
            lane.records.append(record)
            woken += self._make_ready(lane)
        return woken

    def _lane(self, partition: OwnedPartition, lanes: dict[object, Lane], key: object) -> Lane:
        lane = lanes.get(key)
        if lane is None:
            exclusive = key is not UNORDERED_LANE or self._ordering is Ordering.PARTITION
            lane = lanes[key] = Lane(partition, key, exclusive)
        return lane

    def _make_ready(self, lane: Lane) -> int:
        if lane.ready or lane.busy or not lane.records:
            return 0
        lane.ready = True
        self._ready.append(lane)
        return 1

    def take(self, timeout_s: float | None = None) -> Run | None:
        """The next run to handle; blocks until there is one (or `timeout_s` passed). None once
        the queue is closed and nothing is ready, or on timeout."""
        with self._lock:
            while True:
                if not self._work.wait_for(lambda: self._ready or self._closed, timeout_s):
                    return None
                if not self._ready:
                    return None
                lane = self._ready.popleft()
                lane.ready = False
                if not lane.dropped and lane.records:
                    return self._start_run(lane)

    def _start_run(self, lane: Lane) -> Run:
        records = lane.records
        count = min(len(records), self._run_size(lane))
        if count == len(records):
            taken = list(records)
            records.clear()
        else:
            taken = [records.popleft() for _ in range(count)]
        if lane.exclusive:
            lane.busy = True
        else:
            self._make_ready(lane)
        self._queued -= count
        self._running += count
        lane.partition.running += count
        return Run(lane, taken)

    def _run_size(self, lane: Lane) -> int:
        if lane.exclusive:
            return self._max_run
        return min(self._max_run, max(1, math.ceil(len(lane.records) / self._workers)))

    def done(self, run: Run) -> None:
        """The worker is through with `run` (handled, or given up because the partition went)."""
        lane, count = run.lane, len(run.records)
        with self._lock:
            self._running -= count
            self.finished += count
            lane.partition.running -= count
            if lane.exclusive:
                lane.busy = False
                if self._make_ready(lane):
                    self._work.notify()
                elif lane.key is not UNORDERED_LANE and not lane.records:
                    self._forget(lane)
            self._progress.notify_all()

    def _forget(self, lane: Lane) -> None:
        lanes = self._lanes.get(lane.partition)
        if lanes is not None and lanes.get(lane.key) is lane:
            del lanes[lane.key]

    def drop(self, partition: OwnedPartition) -> int:
        """Forget a partition's queued records (running ones finish); returns how many."""
        with self._lock:
            dropped = 0
            for lane in self._lanes.pop(partition, {}).values():
                lane.dropped = True
                dropped += len(lane.records)
                lane.records.clear()
            self._queued -= dropped
            return dropped

    def wait_idle(self, partitions: Sequence[OwnedPartition], timeout_s: float) -> bool:
        """Wait until no worker runs records of these partitions; False if time ran out."""
        with self._lock:
            return self._progress.wait_for(
                lambda: all(p.running == 0 for p in partitions), timeout_s
            )

    def wait_for_room(self, limit: int, timeout_s: float) -> bool:
        """Wait until fewer than `limit` records are buffered; False if time ran out."""
        with self._lock:
            return self._progress.wait_for(lambda: self.buffered < limit, timeout_s)

    def close(self) -> None:
        """Wake every waiting worker; `take` returns None once nothing is ready."""
        with self._lock:
            self._closed = True
            self._work.notify_all()
