"""A partition's replica on one broker: its role transitions, and the one place per role that
moves its high watermark (the leader from its ISR, a follower from its leader)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from weir.broker.partition import (
    FOLLOWER,
    LEADER,
    NEW,
    OFFLINE,
    STOPPED,
    TRANSITIONS,
    IllegalRoleTransitionError,
    Partition,
    PartitionState,
    ReplicaRole,
    alone,
    check_transition,
)
from weir.broker.producer_state import ProducerStateManager
from weir.clock import FakeClock, FakeScheduler
from weir.records import Record, build_batch
from weir.storage import LogConfig, PartitionLog
from weir.storage.config import HW_FLUSHED

NODE = 1
TOPIC = "orders"

MakePartition = Callable[..., Partition]


@pytest.fixture
def make_partition(tmp_path: Path) -> Iterator[MakePartition]:
    clock = FakeClock()
    logs: list[PartitionLog] = []

    def make(config: LogConfig | None = None, high_watermark: int | None = None) -> Partition:
        directory = tmp_path / f"{TOPIC}-{len(logs)}"
        log = PartitionLog(directory, config or LogConfig(), clock, FakeScheduler(clock),
                           high_watermark=high_watermark)  # fmt: skip
        logs.append(log)
        return Partition(TOPIC, len(logs) - 1, log, ProducerStateManager())

    yield make
    for log in logs:
        if not log.closed:
            log.close()


def append(partition: Partition, count: int = 1) -> None:
    """Append `count` records as this broker's leader does, before any high watermark move."""
    records = [Record(offset=i, timestamp=0, key=None, value=b"v") for i in range(count)]
    partition.log.append(bytearray(build_batch(records)), leader_epoch=partition.leader_epoch)


def led_with(replicas: tuple[int, ...], isr: tuple[int, ...], epoch: int = 1) -> PartitionState:
    return PartitionState(TOPIC, 0, NODE, epoch, replicas, isr)


# ---- the role state machine --------------------------------------------------------------------


@pytest.mark.parametrize(("current", "target"), list(itertools.product(ReplicaRole, ReplicaRole)))
def test_only_the_tables_transitions_are_allowed(current: ReplicaRole, target: ReplicaRole) -> None:
    if target in TRANSITIONS[current]:
        check_transition(current, target)
    else:
        with pytest.raises(IllegalRoleTransitionError):
            check_transition(current, target)


def test_offline_is_left_only_by_a_restart() -> None:
    assert TRANSITIONS[OFFLINE] == {OFFLINE}
    assert all(OFFLINE in TRANSITIONS[role] for role in ReplicaRole)
    assert NEW not in set().union(*TRANSITIONS.values())  # nothing goes back to New


def test_a_replica_moves_between_leader_follower_and_stopped(
    make_partition: MakePartition,
) -> None:
    partition = make_partition()
    assert partition.role is NEW and not partition.serving
    assert partition.make_leader(led_with((1, 2), (1, 2)), NODE, 0)  # leadership gained
    assert partition.role is LEADER and partition.serving and partition.leader_state
    assert not partition.make_leader(led_with((1, 2), (1, 2)), NODE, 0)  # the same epoch again
    partition.make_follower(2)
    assert (partition.role, partition.leader_epoch, partition.leader_state) == (FOLLOWER, 2, None)
    assert not partition.serving
    partition.stop()
    assert partition.role is STOPPED and not partition.serving
    assert partition.make_leader(led_with((1, 2), (1, 2), epoch=3), NODE, 0)
    assert partition.role is LEADER and partition.leader_epoch == 3


def test_a_failed_log_directory_makes_the_replica_offline_for_good(
    make_partition: MakePartition,
) -> None:
    partition = make_partition()
    partition.make_leader(alone(TOPIC, 0, NODE), NODE, 0)
    partition.log.take_offline("disk gone")  # as the storage thread may do
    assert partition.role is OFFLINE and not partition.serving
    with pytest.raises(IllegalRoleTransitionError):
        partition.make_leader(led_with((1, 2), (1, 2), epoch=2), NODE, 0)
    with pytest.raises(IllegalRoleTransitionError):
        partition.make_follower(2)
    with pytest.raises(IllegalRoleTransitionError):
        partition.stop()
    assert partition.role is OFFLINE


def test_losing_leadership_answers_waiting_acks_all_produces(
    make_partition: MakePartition,
) -> None:
    async def scenario() -> None:
        partition = make_partition()
        partition.make_leader(led_with((1, 2), (1, 2)), NODE, 0)
        append(partition)
        partition.advance_high_watermark()
        waiting: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        partition.produce_waiters.append((1, waiting))
        partition.make_follower(2)
        assert waiting.result() is ErrorCode.not_leader_or_follower

    asyncio.run(scenario())


# ---- the high watermark: a leader alone --------------------------------------------------------


def test_a_leader_alone_moves_its_high_watermark_to_its_log_end(
    make_partition: MakePartition,
) -> None:
    partition = make_partition()
    partition.make_leader(alone(TOPIC, 0, NODE), NODE, 0)
    assert partition.leader_state is not None and partition.leader_state.isr == {NODE}
    append(partition, 3)
    assert partition.log.high_watermark == 0  # the log does not move it by itself
    partition.advance_high_watermark()
    assert partition.log.high_watermark == 3 and partition.replicated(3)


def test_a_leader_alone_starts_at_its_log_end_whatever_was_checkpointed(
    make_partition: MakePartition,
) -> None:
    first = make_partition()
    append(first, 5)
    first.log.close()
    clock = FakeClock()
    log = PartitionLog(first.log.directory, LogConfig(), clock, FakeScheduler(clock),
                       high_watermark=2)  # fmt: skip
    restarted = Partition(TOPIC, 0, log, ProducerStateManager())
    try:
        assert restarted.log.high_watermark == 2
        restarted.make_leader(alone(TOPIC, 0, NODE), NODE, 0)
        assert restarted.log.high_watermark == 5
    finally:
        log.close()


def test_under_the_flushed_policy_the_high_watermark_waits_for_the_flush(
    make_partition: MakePartition,
) -> None:
    partition = make_partition(LogConfig(high_watermark_policy=HW_FLUSHED, flush_messages=3))
    partition.make_leader(alone(TOPIC, 0, NODE), NODE, 0)
    append(partition, 1)
    append(partition, 1)
    partition.advance_high_watermark()
    assert (partition.log.high_watermark, partition.log.recovery_point) == (0, 0)
    assert partition.replicated(2)  # acks=all waits for the ISR, not for the disk
    append(partition, 1)  # the third record: flush.messages syncs the log
    partition.advance_high_watermark()
    assert (partition.log.high_watermark, partition.log.recovery_point) == (3, 3)


# ---- the high watermark: a leader with followers and a follower ---------------------------------


def test_a_leaders_high_watermark_is_the_smallest_isr_log_end(
    make_partition: MakePartition,
) -> None:
    partition = make_partition()
    partition.make_leader(led_with((1, 2, 3), (1, 2)), NODE, 0)
    append(partition, 4)
    partition.advance_high_watermark()
    assert partition.log.high_watermark == 0 and not partition.replicated(1)
    partition.follower_fetched(3, 1, 0)  # outside the ISR: does not count
    assert partition.log.high_watermark == 0
    partition.follower_fetched(2, 3, 0)
    assert partition.log.high_watermark == 3 and partition.replicated(3)
    partition.isr_answered(frozenset({1}), 1)  # the controller shrank the ISR to the leader
    assert partition.log.high_watermark == 4


def test_a_newer_partition_epoch_updates_the_isr_the_leader_counts(
    make_partition: MakePartition,
) -> None:
    partition = make_partition()
    partition.make_leader(led_with((1, 2), (1, 2)), NODE, 0)
    append(partition, 2)
    partition.advance_high_watermark()
    assert partition.log.high_watermark == 0
    newer = PartitionState(TOPIC, 0, NODE, 1, (1, 2), (1,), partition_epoch=1)
    assert not partition.make_leader(newer, NODE, 0)
    assert partition.log.high_watermark == 2


def test_a_follower_takes_its_leaders_high_watermark_up_to_its_own_log_end(
    make_partition: MakePartition,
) -> None:
    partition = make_partition()
    partition.make_follower(1)
    append(partition, 3)
    partition.follow_leader_high_watermark(2)
    assert partition.log.high_watermark == 2
    partition.follow_leader_high_watermark(10)
    assert partition.log.high_watermark == 3
    partition.advance_high_watermark()  # the leader's way does nothing on a follower
    assert partition.log.high_watermark == 3


def test_a_late_fetch_response_does_not_move_a_new_leaders_high_watermark(
    make_partition: MakePartition,
) -> None:
    partition = make_partition()
    partition.make_follower(1)
    append(partition, 3)
    partition.make_leader(led_with((1, 2), (1, 2), epoch=2), NODE, 0)
    partition.follow_leader_high_watermark(3)
    assert partition.log.high_watermark == 0


def test_a_new_leader_answers_a_clients_list_offsets_only_once_its_high_watermark_caught_up(
    make_partition: MakePartition,
) -> None:
    """As Kafka's: until the high watermark reaches the start of the leader's epoch (its
    followers have fetched), a client's ListOffsets gets OFFSET_NOT_AVAILABLE rather than an
    offset behind records already acknowledged; a follower's (not a client's) is answered."""
    partition = make_partition()
    partition.make_leader(alone(TOPIC, 0, NODE), NODE, 0)
    append(partition, 5)
    partition.make_leader(led_with((1, 2), (1, 2), epoch=2), NODE, 0)  # a new epoch from 5
    assert partition.log.high_watermark < 5
    latest = -1
    assert partition.offset_for(latest, read_committed=False, client=True) == (
        ErrorCode.offset_not_available, -1, -1)  # fmt: skip
    assert partition.offset_for(latest, read_committed=False)[0] is ErrorCode.none
    partition.make_leader(led_with((1,), (1,), epoch=3), NODE, 0)  # alone: the HW is the end
    assert partition.offset_for(latest, read_committed=False, client=True) == (
        ErrorCode.none, 5, -1)  # fmt: skip
