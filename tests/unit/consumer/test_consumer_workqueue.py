"""The WorkQueue's lanes: the ordering guarantee, the buffered count, drops and waits."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import pytest
from consumer_unit_records import owned, record
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.consumer.partition import OwnedPartition
from weir.consumer.record import Record
from weir.consumer.settings import Ordering
from weir.consumer.workqueue import Run, WorkQueue

KEYS = [b"a", b"b", b"c", None]


def lane_of(ordering: Ordering, r: Record) -> object | None:
    """The lane a record belongs to when its lane is exclusive, else None."""
    if ordering is Ordering.PARTITION:
        return r.partition
    if ordering is Ordering.KEY and r.key is not None:
        return (r.partition, r.key)
    return None


class Model:
    """Drives a WorkQueue on one thread and checks every step against what must hold."""

    def __init__(self, ordering: Ordering, workers: int, max_run: int) -> None:
        self.ordering = ordering
        self.queue = WorkQueue(ordering, workers, max_run)
        self.partitions = [owned(p) for p in range(3)]
        self.next_offset = [0, 0, 0]
        self.outstanding: list[Run] = []
        self.queued: set[tuple[int, int]] = set()
        self.taken: dict[object, list[int]] = defaultdict(list)  # exclusive lane -> offsets
        self.dropped: set[int] = set()

    def put(self, partition: int, keys: list[bytes | None]) -> None:
        if partition in self.dropped:
            return
        start = self.next_offset[partition]
        records = [record(partition, start + i, key) for i, key in enumerate(keys)]
        self.next_offset[partition] += len(records)
        self.queue.put(self.partitions[partition], records)
        self.queued.update((r.partition, r.offset) for r in records)

    def take(self) -> None:
        run = self.queue.take(timeout_s=0)
        if run is None:
            assert not self.queued or self.outstanding, "records queued, no runs out, none taken"
            return
        assert run.records, "an empty run"
        partitions = {r.partition for r in run.records}
        assert len(partitions) == 1 and run.partition is self.partitions[partitions.pop()]
        for r in run.records:
            assert (r.partition, r.offset) in self.queued, f"{r} taken twice or after a drop"
            self.queued.discard((r.partition, r.offset))
        lanes = {lane_of(self.ordering, r) for r in run.records}
        assert len(lanes) == 1, "a run mixes lanes"
        lane = lanes.pop()
        if lane is not None:
            busy = {lane_of(self.ordering, out.records[0]) for out in self.outstanding}
            assert lane not in busy, f"lane {lane} handed to two workers at once"
            offsets = [r.offset for r in run.records]
            assert offsets == sorted(offsets) and offsets[0] > max(self.taken[lane], default=-1)
            self.taken[lane] += offsets
        self.outstanding.append(run)

    def done(self, index: int) -> None:
        if self.outstanding:
            self.queue.done(self.outstanding.pop(index % len(self.outstanding)))

    def drop(self, partition: int) -> None:
        dropped = self.queue.drop(self.partitions[partition])
        before = len(self.queued)
        self.queued = {(p, o) for p, o in self.queued if p != partition}
        assert dropped == before - len(self.queued)
        self.dropped.add(partition)

    def check_counts(self) -> None:
        running = sum(len(run.records) for run in self.outstanding)
        assert self.queue.queued == len(self.queued)
        assert self.queue.buffered == len(self.queued) + running
        for partition in self.partitions:
            assert partition.running == sum(
                len(run.records) for run in self.outstanding if run.partition is partition
            )


steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 2), st.lists(st.sampled_from(KEYS), max_size=8)),
        st.tuples(st.just("take"), st.just(0), st.just([])),
        st.tuples(st.just("done"), st.integers(0, 7), st.just([])),
        st.tuples(st.just("drop"), st.integers(0, 2), st.just([])),
    ),
    max_size=80,
)


@pytest.mark.parametrize("ordering", list(Ordering), ids=lambda o: o.value)
@settings(max_examples=150, deadline=None)
@given(steps=steps, workers=st.integers(1, 4), max_run=st.integers(1, 5))
def test_lanes_keep_their_order_and_the_counts_add_up(
    ordering: Ordering, steps: list[tuple[str, int, list[bytes | None]]], workers: int, max_run: int
) -> None:
    model = Model(ordering, workers, max_run)
    for action, number, keys in steps:
        if action == "put" and keys:
            model.put(number, keys)
        elif action == "take":
            model.take()
        elif action == "done":
            model.done(number)
        elif action == "drop":
            model.drop(number)
        model.check_counts()
    while model.outstanding or model.queued:  # everything left can be drained
        model.take()
        model.done(0)
        model.check_counts()


def test_an_unordered_partition_is_shared_among_workers() -> None:
    queue = WorkQueue(Ordering.UNORDERED, workers=4, max_run=100)
    partition = owned(0)
    queue.put(partition, [record(0, n) for n in range(40)])
    runs = [queue.take(timeout_s=0) for _ in range(4)]
    assert [len(run.records) for run in runs if run] == [10, 8, 6, 4]
    assert partition.running == 28


@pytest.mark.parametrize("ordering", [Ordering.PARTITION, Ordering.KEY], ids=lambda o: o.value)
def test_worker_threads_never_overlap_within_a_lane(ordering: Ordering) -> None:
    queue = WorkQueue(ordering, workers=4, max_run=3)
    partitions = [owned(p) for p in range(2)]
    active: dict[object, int] = defaultdict(int)
    seen: dict[object, list[int]] = defaultdict(list)
    overlaps: list[object] = []
    guard = threading.Lock()
    rng = random.Random(7)

    def work() -> None:
        while (run := queue.take()) is not None:
            lane = lane_of(ordering, run.records[0])
            with guard:
                active[lane] += 1
                if active[lane] > 1:
                    overlaps.append(lane)
                seen[lane] += [r.offset for r in run.records]
            time.sleep(rng.random() / 2000)
            with guard:
                active[lane] -= 1
            queue.done(run)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for batch in range(50):
        for p in partitions:
            keys = [rng.choice(KEYS[:3]) for _ in range(6)]
            queue.put(p, [record(p.partition, batch * 6 + i, k) for i, k in enumerate(keys)])
    assert queue.wait_for_room(1, timeout_s=30)
    queue.close()
    for thread in threads:
        thread.join(10)
    assert not overlaps
    assert sum(len(offsets) for offsets in seen.values()) == 600
    assert all(offsets == sorted(offsets) for offsets in seen.values())


def test_waits_end_when_running_work_is_done() -> None:
    queue = WorkQueue(Ordering.PARTITION, workers=1, max_run=10)
    partition: OwnedPartition = owned(0)
    queue.put(partition, [record(0, n) for n in range(5)])
    run = queue.take(timeout_s=0)
    assert run is not None
    assert not queue.wait_idle([partition], timeout_s=0.01)
    assert not queue.wait_for_room(5, timeout_s=0.01)
    threading.Timer(0.05, queue.done, [run]).start()
    assert queue.wait_idle([partition], timeout_s=5)
    assert queue.buffered == 0


def test_close_releases_waiting_workers() -> None:
    queue = WorkQueue(Ordering.PARTITION, workers=1, max_run=10)
    taken: list[Run | None] = []
    worker = threading.Thread(target=lambda: taken.append(queue.take()))
    worker.start()
    queue.close()
    worker.join(5)
    assert taken == [None]
