"""An owned partition: its states, late finishes after it is gone, exactly-once results."""

from __future__ import annotations

import itertools

import pytest
from consumer_unit_records import owned, record

from weir.consumer.partition import (
    ABANDONED,
    ACTIVE,
    RELEASED,
    REVOKING,
    TRANSITIONS,
    IllegalTransitionError,
    PartitionState,
)

ALLOWED = {
    (ACTIVE, REVOKING), (ACTIVE, ABANDONED), (REVOKING, RELEASED), (REVOKING, ABANDONED),
}  # fmt: skip


@pytest.mark.parametrize(
    "pair", list(itertools.product(PartitionState, PartitionState)), ids=lambda p: str(p)
)
def test_transitions_follow_the_table(pair: tuple[PartitionState, PartitionState]) -> None:
    current, target = pair
    assert (target in TRANSITIONS[current]) == (pair in ALLOWED)
    partition = owned(0)
    partition.state = current
    if pair in ALLOWED:
        partition.transition(target)
        assert partition.state is target and partition.gone.is_set()
    else:
        with pytest.raises(IllegalTransitionError, match=f"{current.value} to {target.value}"):
            partition.transition(target)


def test_commit_target_is_the_finished_prefix_beyond_the_committed_offset() -> None:
    partition = owned(0, committed=10)
    assert partition.commit_target() is None
    records = [record(0, n) for n in range(10, 15)]
    partition.fetched([r.offset for r in records])
    partition.finish(records[2:], [None] * 3)
    assert partition.commit_target() is None  # 10 and 11 are still running
    partition.finish(records[:2], [None, None])
    assert partition.commit_target() == 15
    partition.committed_to(15)
    assert partition.commit_target() is None


def test_finishing_after_the_partition_is_gone_changes_nothing() -> None:
    partition = owned(0, eos=True)
    records = [record(0, n) for n in range(3)]
    partition.fetched([0, 1, 2])
    partition.finish(records[:1], [b"r0"])
    partition.transition(REVOKING)
    partition.finish(records[1:2], [b"r1"])  # running work may still finish while revoking
    partition.transition(ABANDONED)
    partition.finish(records[2:], [b"r2"])
    assert partition.commit_target() == 2
    assert [row.result for row in partition.results_below(3)] == [b"r0", b"r1"]


def test_exactly_once_results_wait_until_their_offsets_are_committed() -> None:
    partition = owned(0, eos=True)
    records = [record(0, n, key=b"k") for n in range(4)]
    partition.fetched([0, 1, 2, 3])
    partition.finish([records[3], records[1], records[0]], [b"r3", None, b"r0"])
    assert partition.pending_results == 2
    target = partition.commit_target()
    assert target == 2
    rows = partition.results_below(target)
    assert [(row.offset, row.key, row.result) for row in rows] == [(0, b"k", b"r0")]
    partition.committed_to(target)
    assert partition.pending_results == 1  # offset 3's result waits for offset 2


def test_records_fetched_below_the_committed_offset_are_counted_as_already_committed() -> None:
    assert owned(0).already_committed([0, 1, 2]) == 0  # nothing committed yet
    partition = owned(0, committed=6, eos=True)
    assert partition.already_committed([0, 1, 2, 3, 4, 5]) == 6
    assert partition.already_committed([4, 5, 6, 7]) == 2
    assert partition.already_committed([6, 7]) == 0


def test_a_commit_never_writes_results_below_the_committed_offset_or_one_record_twice() -> None:
    """Whatever delivered them, results of records below the committed offset were stored by
    an earlier commit: the sink's offset check covers only rows from the committed offset up."""
    partition = owned(0, committed=6, eos=True)
    early = [record(0, n) for n in range(4, 8)]
    partition.fetched([r.offset for r in early])
    partition.finish(early, [b"r4", b"r5", b"r6", b"r7"])
    partition.finish(early[3:], [b"r7 again"])
    assert [(row.offset, row.result) for row in partition.results_below(8)] == [
        (6, b"r6"),
        (7, b"r7 again"),
    ]
