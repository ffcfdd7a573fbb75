"""Leader-side replication on fake time: the high watermark over the ISR, ISR shrink and expand
proposals, follower versus consumer reads, acks=all produce, and leader epoch fencing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from weir.broker.partition import Partition, PartitionState
from weir.broker.replica_manager import ReplicaManager
from weir.broker.replication import LeaderState, preferred_read_replica
from weir.broker.results import AppendResult, FetchRequestPartition, release
from weir.clock import FakeClock, FakeScheduler
from weir.records import BatchSpec, Record, build_batch, iter_batches
from weir.storage import LogConfig, LogManager, LogManagerConfig

LEADER = 0
LAG_MS = 10_000
TOPIC = "orders"
CONSUMER = -1
ACKS_ALL = -1
MODEST = settings(max_examples=200, deadline=None)


@dataclass
class Leader:
    """Broker 0's replica manager, leading partitions as a controller told it to, with the ISR
    proposals it sends to the controller collected."""

    replicas: ReplicaManager
    clock: FakeClock
    proposals: list[frozenset[int]] = field(default_factory=list)

    def lead(
        self,
        replicas: tuple[int, ...] = (0, 1, 2),
        isr: tuple[int, ...] | None = None,
        *,
        epoch: int = 1,
        partition_epoch: int = 0,
        config: LogConfig | None = None,
    ) -> Partition:
        state = PartitionState(
            TOPIC, 0, LEADER, epoch, replicas, replicas if isr is None else isr, partition_epoch
        )
        self.replicas.become_leader(state, config or LogConfig())
        partition = self.replicas.get(TOPIC, 0)
        assert partition is not None
        return partition

    def produce(self, count: int = 1, *, acks: int = 1) -> AppendResult:
        now = self.clock.milliseconds()
        records = [
            Record(offset=i, timestamp=now, key=None, value=b"v%d" % i) for i in range(count)
        ]
        return self.replicas.append(TOPIC, 0, build_batch(records), acks=acks)

    @property
    def high_watermark(self) -> int:
        """What a consumer's ListOffsets(latest) answers."""
        error, offset, _ = self.replicas.list_offset(TOPIC, 0, -1)
        assert error is ErrorCode.none
        return offset

    async def fetch_async(
        self, replica_id: int, offset: int, *, current_leader_epoch: int = -1
    ) -> tuple[ErrorCode, int, list[int]]:
        """(error, high watermark, base offsets of the batches returned) for one fetch that
        does not wait."""
        request = FetchRequestPartition(TOPIC, 0, offset, 1 << 20, current_leader_epoch)
        results = await self.replicas.fetch(
            [request], max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, replica_id=replica_id
        )
        try:
            (result,) = results
            data = result.data.read_bytes() if result.data is not None else b""
            return result.error, result.high_watermark, [b.base_offset for b in iter_batches(data)]
        finally:
            release(results)

    def fetch(
        self, replica_id: int, offset: int, *, current_leader_epoch: int = -1
    ) -> tuple[ErrorCode, int, list[int]]:
        return asyncio.run(
            self.fetch_async(replica_id, offset, current_leader_epoch=current_leader_epoch)
        )

    def answer(self, isr: frozenset[int] | None, partition_epoch: int) -> None:
        partition = self.replicas.get(TOPIC, 0)
        assert partition is not None
        self.replicas.isr_answered(partition, isr, partition_epoch)


def follower_state(epoch: int) -> PartitionState:
    """Broker 0 follows broker 1's leadership of epoch `epoch`."""
    return PartitionState(TOPIC, 0, 1, epoch, (0, 1, 2), (0, 1, 2))


@pytest.fixture
def leader(tmp_path: Path, clock: FakeClock) -> Iterator[Leader]:
    logs = LogManager(tmp_path, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig(), {})
    replicas = ReplicaManager(logs, clock, node_id=LEADER, replica_lag_time_max_ms=LAG_MS)
    world = Leader(replicas, clock)
    replicas.on_isr_proposal = lambda _partition, isr: world.proposals.append(isr)
    yield world
    logs.close()


# ---- the high watermark ------------------------------------------------------------------------


def test_the_high_watermark_waits_for_every_isr_follower(leader: Leader) -> None:
    leader.lead(replicas=(0, 1, 2))
    for _ in range(3):
        assert leader.produce().error is ErrorCode.none
    assert leader.high_watermark == 0  # appends alone do not move it on a replicated partition

    leader.fetch(1, 3)
    assert leader.high_watermark == 0  # follower 2 has never fetched
    leader.fetch(2, 1)
    assert leader.high_watermark == 1  # min(leader 3, follower 1 at 3, follower 2 at 1)
    leader.fetch(2, 2)
    assert leader.high_watermark == 2
    leader.fetch(2, 3)
    assert leader.high_watermark == 3
    assert leader.proposals == []


def test_a_follower_outside_the_isr_does_not_hold_the_high_watermark(leader: Leader) -> None:
    leader.lead(replicas=(0, 1, 2), isr=(0, 1))
    leader.produce(4)
    leader.fetch(1, 4)
    assert leader.high_watermark == 4


def test_a_pending_shrink_holds_the_high_watermark_until_the_controller_answers(
    leader: Leader,
) -> None:
    leader.lead(replicas=(0, 1, 2), partition_epoch=3)
    leader.produce(2)
    leader.fetch(1, 2)
    leader.fetch(2, 0)
    leader.clock.advance(LAG_MS + 1)
    leader.fetch(1, 2)
    assert leader.proposals == [frozenset({0, 1})]
    assert leader.high_watermark == 0  # replica 2 is still counted while the shrink is pending

    leader.answer(frozenset({0, 1}), 4)
    assert leader.high_watermark == 2


def test_a_pending_expansion_counts_the_joining_replica(leader: Leader) -> None:
    leader.lead(replicas=(0, 1, 2), isr=(0, 1), partition_epoch=3)
    leader.produce(5)
    leader.fetch(1, 3)
    assert leader.high_watermark == 3
    leader.fetch(2, 3)
    assert leader.proposals == [frozenset({0, 1, 2})]

    leader.fetch(1, 5)
    assert leader.high_watermark == 3  # the ISR and the pending one: replica 2 is at 3

    leader.answer(None, 3)  # refused: replica 2 no longer counts
    assert leader.high_watermark == 5


# ---- ISR shrink and expand ---------------------------------------------------------------------


def test_a_follower_lagging_longer_than_the_lag_time_is_proposed_for_removal(
    leader: Leader,
) -> None:
    leader.lead(replicas=(0, 1, 2))
    leader.produce()
    leader.fetch(1, 1)
    leader.fetch(2, 1)  # both caught up at t=0
    leader.produce()
    for _ in range(LAG_MS // 1000):
        leader.clock.advance(1000)
        leader.fetch(1, 2)  # follower 1 stays caught up; follower 2 stays at 1
        leader.replicas.check_isr()
    assert leader.proposals == []  # exactly replica.lag.time.max.ms behind is still in sync

    leader.clock.advance(1)
    leader.replicas.check_isr()
    assert leader.proposals == [frozenset({0, 1})]
    leader.replicas.check_isr()
    assert leader.proposals == [frozenset({0, 1})]  # nothing more while one is pending


def test_a_follower_that_never_fetches_gets_the_lag_time_from_leadership_start(
    leader: Leader,
) -> None:
    leader.lead(replicas=(0, 1))
    leader.clock.advance(LAG_MS)
    leader.replicas.check_isr()
    assert leader.proposals == []
    leader.clock.advance(1)
    leader.replicas.check_isr()
    assert leader.proposals == [frozenset({0})]


def test_a_follower_keeping_up_under_steady_produce_stays_in_the_isr(leader: Leader) -> None:
    leader.lead(replicas=(0, 1))
    leader.fetch(1, 0)
    for _ in range(3 * LAG_MS // 1000):
        fetched_to = leader.produce().end_offset  # what the follower's next fetch will ask from
        leader.clock.advance(1000)
        leader.produce()  # a record arrives before the follower's next fetch
        leader.fetch(1, fetched_to)
        leader.replicas.check_isr()
    assert leader.proposals == []


def test_a_follower_that_fetches_but_falls_further_behind_is_proposed_for_removal(
    leader: Leader,
) -> None:
    leader.lead(replicas=(0, 1))
    leader.fetch(1, 0)
    for second in range(1, LAG_MS // 1000 + 3):
        leader.produce()
        leader.produce()
        leader.clock.advance(1000)
        leader.fetch(1, second)  # one record per second against two written: never caught up
        leader.replicas.check_isr()
    assert leader.proposals == [frozenset({0})]


def test_a_caught_up_follower_joins_only_past_the_leaders_epoch_start(leader: Leader) -> None:
    # Broker 0 was a follower that replicated offsets 0..3, and now leads from epoch 2 on.
    leader.replicas.become_follower(follower_state(epoch=1), LogConfig())
    partition = leader.replicas.get(TOPIC, 0)
    assert partition is not None
    records = [Record(offset=i, timestamp=0, key=None, value=b"x") for i in range(4)]
    partition.log.append(bytearray(build_batch(records)), leader_epoch=1)
    leader.lead(replicas=(0, 1, 2), isr=(0, 1), epoch=2)
    assert partition.leader_state is not None
    assert partition.leader_state.epoch_start_offset == 4

    leader.fetch(1, 2)
    assert leader.high_watermark == 2
    leader.fetch(2, 3)  # past the high watermark, but not at the epoch start
    assert leader.proposals == []
    leader.fetch(2, 4)
    assert leader.proposals == [frozenset({0, 1, 2})]


def test_a_follower_below_the_high_watermark_does_not_join(leader: Leader) -> None:
    leader.lead(replicas=(0, 1, 2), isr=(0, 1))
    leader.produce(4)
    leader.fetch(1, 4)
    leader.fetch(2, 3)
    assert leader.proposals == []
    leader.fetch(2, 4)
    assert leader.proposals == [frozenset({0, 1, 2})]
    leader.answer(frozenset({0, 1, 2}), 1)
    leader.produce()
    leader.fetch(1, 5)
    assert leader.high_watermark == 4  # replica 2 is in the ISR now
    leader.fetch(2, 5)
    assert leader.high_watermark == 5


# ---- follower and consumer reads ---------------------------------------------------------------


def test_a_consumer_reads_below_the_high_watermark_and_a_follower_to_the_log_end(
    leader: Leader,
) -> None:
    leader.lead(replicas=(0, 1))
    leader.produce()
    leader.produce()
    leader.fetch(1, 1)
    assert leader.high_watermark == 1

    assert leader.fetch(CONSUMER, 1) == (ErrorCode.none, 1, [])
    assert leader.fetch(CONSUMER, 0) == (ErrorCode.none, 1, [0])
    assert leader.fetch(1, 1) == (ErrorCode.none, 1, [1])


def test_a_fetch_from_a_broker_that_is_not_a_replica_is_refused(leader: Leader) -> None:
    leader.lead(replicas=(0, 1))
    leader.produce()
    error, _, batches = leader.fetch(7, 0)
    assert (error, batches) == (ErrorCode.not_leader_or_follower, [])


# ---- acks=all ----------------------------------------------------------------------------------


def test_an_acks_all_produce_completes_once_every_isr_follower_fetched_past_it(
    leader: Leader,
) -> None:
    async def scenario() -> None:
        leader.lead(replicas=(0, 1, 2), config=LogConfig(min_insync_replicas=2))
        result = leader.produce(3, acks=ACKS_ALL)
        assert (result.error, result.end_offset) == (ErrorCode.none, 3)
        assert leader.replicas.replicating(TOPIC, 0, 3)
        waiting = asyncio.ensure_future(leader.replicas.wait_replicated(TOPIC, 0, 3, 5_000))
        await asyncio.sleep(0)
        await leader.fetch_async(1, 3)
        await leader.fetch_async(2, 2)
        await asyncio.sleep(0)
        assert not waiting.done()
        await leader.fetch_async(2, 3)
        assert await asyncio.wait_for(waiting, 1) is ErrorCode.none
        assert not leader.replicas.replicating(TOPIC, 0, 3)

    asyncio.run(scenario())


def test_a_followers_parked_fetch_wakes_for_records_not_for_a_high_watermark_move(
    leader: Leader,
) -> None:
    async def scenario() -> None:
        leader.lead(replicas=(0, 1, 2))
        leader.produce(2)
        await leader.fetch_async(1, 2)
        request = FetchRequestPartition(TOPIC, 0, 2, 1 << 20, -1)

        def parked(replica_id: int) -> asyncio.Task[Any]:
            return asyncio.ensure_future(leader.replicas.fetch(
                [request], max_wait_ms=5_000, min_bytes=1, max_bytes=1 << 20,
                replica_id=replica_id))  # fmt: skip

        follower = parked(1)
        consumer = asyncio.ensure_future(leader.replicas.fetch(
            [FetchRequestPartition(TOPIC, 0, 0, 1 << 20, -1)], max_wait_ms=5_000, min_bytes=1,
            max_bytes=1 << 20))  # fmt: skip
        await asyncio.sleep(0)
        await leader.fetch_async(2, 2)  # the high watermark moves to 2
        async with asyncio.timeout(1):
            release(await consumer)  # the consumer's fetch has records below it now
        partition = leader.replicas.get(TOPIC, 0)
        assert partition is not None and partition.log.high_watermark == 2
        await asyncio.sleep(0.05)
        assert not follower.done()  # nothing new to the follower: still parked
        leader.produce()
        async with asyncio.timeout(1):
            (result,) = await follower
        assert result.data is not None
        release([result])

    asyncio.run(scenario())


def test_a_follower_fetch_that_moves_the_high_watermark_answers_the_produce_before_fetches(
    leader: Leader,
) -> None:
    async def scenario() -> None:
        leader.lead(replicas=(0, 1), config=LogConfig(min_insync_replicas=2))
        end = leader.produce(acks=ACKS_ALL).end_offset
        done: list[str] = []
        waiting = asyncio.ensure_future(leader.replicas.wait_replicated(TOPIC, 0, end, 5_000))
        waiting.add_done_callback(lambda _: done.append("produce"))
        consumer = asyncio.ensure_future(leader.replicas.fetch(
            [FetchRequestPartition(TOPIC, 0, 0, 1 << 20, -1)], max_wait_ms=5_000, min_bytes=1,
            max_bytes=1 << 20))  # fmt: skip
        consumer.add_done_callback(lambda _: done.append("consumer fetch"))
        await asyncio.sleep(0)
        await leader.fetch_async(1, end)
        async with asyncio.timeout(1):
            assert await waiting is ErrorCode.none
            release(await consumer)
        await asyncio.sleep(0)  # the done callbacks run
        assert done == ["produce", "consumer fetch"]

    asyncio.run(scenario())


def test_an_acks_all_produce_times_out_when_followers_do_not_fetch(leader: Leader) -> None:
    async def scenario() -> None:
        leader.lead(replicas=(0, 1))
        result = leader.produce(acks=ACKS_ALL)
        error = await leader.replicas.wait_replicated(TOPIC, 0, result.end_offset, 20)
        assert error is ErrorCode.request_timed_out

    asyncio.run(scenario())


def test_an_acks_all_produce_fails_when_leadership_moves_while_it_waits(leader: Leader) -> None:
    async def scenario() -> None:
        leader.lead(replicas=(0, 1))
        result = leader.produce(acks=ACKS_ALL)
        waiting = asyncio.ensure_future(
            leader.replicas.wait_replicated(TOPIC, 0, result.end_offset, 5_000)
        )
        await asyncio.sleep(0)
        leader.replicas.become_follower(follower_state(epoch=2), LogConfig())
        assert await asyncio.wait_for(waiting, 1) is ErrorCode.not_leader_or_follower

    asyncio.run(scenario())


def test_an_acks_all_produce_reports_an_isr_that_shrank_below_min_insync(leader: Leader) -> None:
    async def scenario() -> None:
        leader.lead(replicas=(0, 1, 2), config=LogConfig(min_insync_replicas=2))
        result = leader.produce(acks=ACKS_ALL)
        waiting = asyncio.ensure_future(
            leader.replicas.wait_replicated(TOPIC, 0, result.end_offset, 5_000)
        )
        await asyncio.sleep(0)
        leader.answer(frozenset({0}), 1)  # the controller shrank the ISR to the leader alone
        error = await asyncio.wait_for(waiting, 1)
        assert error is ErrorCode.not_enough_replicas_after_append

    asyncio.run(scenario())


def test_acks_all_is_refused_before_append_when_the_isr_is_below_min_insync(
    leader: Leader,
) -> None:
    partition = leader.lead(replicas=(0, 1, 2), isr=(0,), config=LogConfig(min_insync_replicas=2))
    result = leader.produce(acks=ACKS_ALL)
    assert result.error is ErrorCode.not_enough_replicas
    assert partition.log.log_end_offset == 0
    assert leader.produce(acks=1).error is ErrorCode.none  # acks=1 does not need the ISR


def idempotent_batch(sequence: int, count: int = 2, epoch: int = 0) -> bytes:
    records = [Record(offset=i, timestamp=0, key=None, value=b"v%d" % i) for i in range(count)]
    spec = BatchSpec(producer_id=7, producer_epoch=epoch, base_sequence=sequence)
    return build_batch(records, spec=spec)


def test_a_retry_of_a_written_batch_is_not_refused_as_unwritten_when_the_isr_shrank(
    leader: Leader,
) -> None:
    """The batch was appended, its acks=all wait answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, and
    the producer retries it: NOT_ENOUGH_REPLICAS would tell it the batch was never written
    (librdkafka then resends it under a new epoch, a duplicate), so it is answered as the
    original was, at its original offset."""
    partition = leader.lead(replicas=(0, 1, 2), config=LogConfig(min_insync_replicas=2))
    first = leader.replicas.append(TOPIC, 0, idempotent_batch(0), acks=ACKS_ALL)
    assert first.error is ErrorCode.none
    leader.answer(frozenset({0}), 1)  # the ISR shrinks to the leader alone
    retry = leader.replicas.append(TOPIC, 0, idempotent_batch(0), acks=ACKS_ALL)
    assert (retry.error, retry.base_offset) == (ErrorCode.none, first.base_offset)
    assert partition.log.log_end_offset == 2  # nothing appended twice
    next_batch = leader.replicas.append(TOPIC, 0, idempotent_batch(2), acks=ACKS_ALL)
    assert next_batch.error is ErrorCode.not_enough_replicas


def test_a_short_isr_is_reported_before_a_sequence_gap(leader: Leader) -> None:
    """Kafka's order: a producer whose batch was refused for a short ISR gets the same answer
    for the batch it pipelined behind it, not OUT_OF_ORDER_SEQUENCE_NUMBER."""
    leader.lead(replicas=(0, 1, 2), isr=(0,), config=LogConfig(min_insync_replicas=2))
    assert leader.replicas.append(TOPIC, 0, idempotent_batch(0), acks=1).error is ErrorCode.none
    assert leader.replicas.append(TOPIC, 0, idempotent_batch(2), acks=ACKS_ALL).error is (
        ErrorCode.not_enough_replicas
    )
    behind = leader.replicas.append(TOPIC, 0, idempotent_batch(4), acks=ACKS_ALL)
    assert behind.error is ErrorCode.not_enough_replicas


def test_a_batch_pipelined_behind_a_refused_one_gets_its_answer_after_the_isr_grew_back(
    leader: Leader,
) -> None:
    """R1 is refused for a short ISR, the ISR grows back, then R2 (sent behind R1) arrives: it
    gets R1's answer, not OUT_OF_ORDER_SEQUENCE_NUMBER, which makes librdkafka renumber under a
    new epoch every batch it has not had answered, on every partition, written or not. Once R1
    comes again both are written in order; a gap with no refused batch before it is still out
    of order."""
    config = LogConfig(min_insync_replicas=2)
    leader.lead(replicas=(0, 1, 2), isr=(0,), config=config)
    append = leader.replicas.append
    assert append(TOPIC, 0, idempotent_batch(0), acks=1).error is ErrorCode.none
    assert append(TOPIC, 0, idempotent_batch(2), acks=ACKS_ALL).error is (
        ErrorCode.not_enough_replicas
    )
    leader.lead(replicas=(0, 1, 2), isr=(0, 1, 2), partition_epoch=1, config=config)
    assert append(TOPIC, 0, idempotent_batch(4), acks=ACKS_ALL).error is (
        ErrorCode.not_enough_replicas
    )
    assert append(TOPIC, 0, idempotent_batch(4, epoch=1), acks=ACKS_ALL).error is (
        ErrorCode.out_of_order_sequence_number  # another epoch: not behind the refused batch
    )
    assert append(TOPIC, 0, idempotent_batch(2), acks=ACKS_ALL).error is ErrorCode.none
    assert append(TOPIC, 0, idempotent_batch(4), acks=ACKS_ALL).error is ErrorCode.none
    assert append(TOPIC, 0, idempotent_batch(10), acks=ACKS_ALL).error is (
        ErrorCode.out_of_order_sequence_number
    )


def test_a_batch_refused_by_a_follower_holds_back_those_behind_it_once_it_leads(
    leader: Leader,
) -> None:
    """Leadership can arrive between two pipelined batches: the one before it was refused
    NOT_LEADER_OR_FOLLOWER, and the one after it gets the same answer, not a sequence gap."""
    leader.lead(epoch=1)
    append = leader.replicas.append
    assert append(TOPIC, 0, idempotent_batch(0)).error is ErrorCode.none
    leader.replicas.become_follower(follower_state(epoch=2), LogConfig())
    assert append(TOPIC, 0, idempotent_batch(2)).error is ErrorCode.not_leader_or_follower
    leader.lead(epoch=3)
    assert append(TOPIC, 0, idempotent_batch(4)).error is ErrorCode.not_leader_or_follower
    assert append(TOPIC, 0, idempotent_batch(2)).error is ErrorCode.none
    assert append(TOPIC, 0, idempotent_batch(4)).error is ErrorCode.none


# ---- leader epochs -----------------------------------------------------------------------------


@pytest.mark.parametrize("replica_id", [CONSUMER, 1])
def test_fetch_fences_older_and_refuses_newer_leader_epochs(
    leader: Leader, replica_id: int
) -> None:
    leader.lead(replicas=(0, 1), isr=(0, 1), epoch=5)
    leader.produce()
    assert leader.fetch(replica_id, 0, current_leader_epoch=4)[0] is ErrorCode.fenced_leader_epoch
    assert leader.fetch(replica_id, 0, current_leader_epoch=6)[0] is ErrorCode.unknown_leader_epoch
    assert leader.fetch(replica_id, 0, current_leader_epoch=5)[0] is ErrorCode.none
    assert leader.fetch(replica_id, 0)[0] is ErrorCode.none


def test_a_fenced_follower_fetch_does_not_move_the_high_watermark(leader: Leader) -> None:
    leader.lead(replicas=(0, 1), epoch=5)
    leader.produce()
    leader.fetch(1, 1, current_leader_epoch=4)
    assert leader.high_watermark == 0
    leader.fetch(1, 1, current_leader_epoch=5)
    assert leader.high_watermark == 1


# ---- a single replica --------------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [(), (0,)])
def test_a_single_replica_leaders_high_watermark_follows_appends(
    leader: Leader, replicas: tuple[int, ...]
) -> None:
    async def scenario() -> None:
        leader.lead(replicas=replicas, isr=replicas)
        result = leader.produce(2, acks=ACKS_ALL)
        assert (result.error, leader.high_watermark) == (ErrorCode.none, 2)
        assert not leader.replicas.replicating(TOPIC, 0, 2)
        assert await leader.replicas.wait_replicated(TOPIC, 0, 2, 20) is ErrorCode.none
        assert await leader.fetch_async(CONSUMER, 0) == (ErrorCode.none, 2, [0])
        leader.replicas.check_isr()
        assert leader.proposals == []

    asyncio.run(scenario())


# ---- LeaderState properties --------------------------------------------------------------------

FOLLOWERS = (1, 2, 3)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 5)),
        st.tuples(st.just("fetch"), st.sampled_from(FOLLOWERS), st.integers(0, 5)),
        st.tuples(st.just("tick"), st.integers(0, 2 * LAG_MS)),
        st.tuples(st.just("answer"), st.booleans()),
    ),
    max_size=60,
)


@MODEST
@given(initial_isr=st.sets(st.sampled_from(FOLLOWERS)), steps=steps)
def test_the_high_watermark_never_decreases_nor_passes_an_isr_member(
    initial_isr: set[int], steps: list[tuple[object, ...]]
) -> None:
    """Followers fetch non-decreasing offsets no higher than the leader's LEO; the leader asks
    for ISR changes and the controller accepts or refuses them."""
    now = 0
    leader_end = 0
    state = LeaderState(
        node_id=LEADER,
        replicas=(LEADER, *FOLLOWERS),
        isr=frozenset(initial_isr | {LEADER}),
        partition_epoch=0,
        epoch_start_offset=0,
        started_ms=now,
    )
    log_high_watermark = 0  # the partition log's, which only moves forward
    previous = state.high_watermark(leader_end)
    for step in steps:
        match step:
            case ("append", int(count)):
                leader_end += count
            case ("fetch", int(replica), int(advance)):
                offset = min(leader_end, max(state.follower_end[replica], 0) + advance)
                state.follower_fetched(replica, offset, leader_end, now)
            case ("tick", int(ms)):
                now += ms
            case ("answer", bool(accepted)):
                if state.pending_isr is not None:
                    if accepted:
                        state.isr = state.pending_isr
                        state.partition_epoch += 1
                    state.pending_isr = None
        high_watermark = state.high_watermark(leader_end)
        isr_ends = [leader_end] + [state.follower_end[r] for r in state.isr if r != LEADER]
        assert high_watermark >= previous
        assert high_watermark <= min(isr_ends)
        previous = high_watermark
        log_high_watermark = max(log_high_watermark, high_watermark)
        proposed = state.isr_to_propose(log_high_watermark, now, LAG_MS)
        if proposed is not None:
            assert LEADER in proposed
            state.pending_isr = proposed


# ---- reads from followers (KIP-392) ------------------------------------------------------------

RACKS = {1: "a", 2: "b", 3: "b", 4: "c"}


def _state(isr: set[int], ends: dict[int, int]) -> LeaderState:
    state = LeaderState(node_id=1, replicas=(1, 2, 3, 4), isr=frozenset(isr), partition_epoch=0,
                        epoch_start_offset=0, started_ms=0)  # fmt: skip
    state.follower_end.update(ends)
    return state


def test_a_consumer_is_sent_to_the_furthest_in_sync_replica_of_its_rack() -> None:
    state = _state({1, 2, 3, 4}, {2: 90, 3: 100, 4: 100})
    assert preferred_read_replica(state, 50, "b", RACKS) == 3
    state.follower_end[2] = 100
    assert preferred_read_replica(state, 50, "b", RACKS) == 2  # a tie: the lower id


def test_the_leader_serves_its_rack_racks_without_replicas_and_consumers_with_no_rack() -> None:
    state = _state({1, 2, 3, 4}, {2: 100, 3: 100, 4: 100})
    assert preferred_read_replica(state, 50, "a", RACKS) == 1
    assert preferred_read_replica(state, 50, "z", RACKS) == 1
    assert preferred_read_replica(state, 50, "", RACKS) == 1


def test_replicas_out_of_sync_or_short_of_the_offset_are_not_chosen() -> None:
    state = _state({1, 2}, {2: 40, 3: 100, 4: 100})  # 3 is out of sync, 2 lacks offset 50
    assert preferred_read_replica(state, 50, "b", RACKS) == 1
    assert preferred_read_replica(state, 40, "b", RACKS) == 2
