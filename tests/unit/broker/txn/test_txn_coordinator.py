"""The transaction coordinator on fake time: producer ids and epochs, the life of a
transaction, Kafka's error codes, fencing, timeouts, marker retries."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
from txn_harness import ABORT_CHECK_MS, TIMEOUT_MS, MarkerCall, TxnWorld

from weir.broker.txn.coordinator import InitResult
from weir.broker.txn.state import EMPTY, ONGOING, PREPARE_ABORT, PREPARE_COMMIT
from weir.broker.txn.store import TRANSACTION_STATE_TOPIC

T = TypeVar("T")
ORDERS_0, ORDERS_1, PAYMENTS_0 = ("orders", 0), ("orders", 1), ("payments", 0)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_new_transactional_id_gets_a_producer_id_and_epoch_0(world: TxnWorld) -> None:
    async def scenario() -> None:
        first = await world.init()
        assert first == InitResult(ErrorCode.none, first.producer_id, 0)
        again = await world.init()
        assert (again.producer_id, again.producer_epoch) == (first.producer_id, 1)
        other = await world.init("other")
        assert other.producer_id != first.producer_id
        assert world.state() == "Empty"

    run(scenario())


def test_timeouts_above_the_maximum_are_refused(world: TxnWorld) -> None:
    async def scenario() -> None:
        assert (await world.init(timeout_ms=900_001)).error is ErrorCode.invalid_transaction_timeout
        assert (await world.init(timeout_ms=0)).error is ErrorCode.invalid_transaction_timeout
        assert (await world.init("")).error is ErrorCode.invalid_request
        assert "t" not in world.coordinator.transactions

    run(scenario())


def test_commit_prepares_writes_markers_then_completes(world: TxnWorld) -> None:
    async def scenario() -> None:
        producer = await world.init()
        assert await world.add(producer, ORDERS_0, ORDERS_1) is ErrorCode.none
        assert await world.add(producer, ORDERS_1, PAYMENTS_0) is ErrorCode.none
        assert world.state() == "Ongoing"
        world.markers.gate = asyncio.Event()
        assert await world.end(producer, commit=True) is ErrorCode.none
        await asyncio.sleep(0)
        assert world.state() == "PrepareCommit"
        # the producer must wait for the markers before its next transaction
        assert await world.add(producer, ORDERS_0) is ErrorCode.concurrent_transactions
        assert await world.end(producer, commit=True) is ErrorCode.concurrent_transactions
        assert await world.end(producer, commit=False) is ErrorCode.invalid_txn_state
        world.markers.gate.set()
        await world.coordinator.settle()
        assert world.state() == "CompleteCommit"
        assert world.markers.calls == [
            MarkerCall(producer.producer_id, 0, 0, True, (ORDERS_0, ORDERS_1, PAYMENTS_0))
        ]
        assert world.coordinator.transactions["t"].partitions == set()
        # a retried EndTxn is answered as the first one was
        assert await world.end(producer, commit=True) is ErrorCode.none
        assert await world.end(producer, commit=False) is ErrorCode.invalid_txn_state

    run(scenario())


def test_abort_writes_abort_markers(world: TxnWorld) -> None:
    async def scenario() -> None:
        producer = await world.init()
        await world.add(producer, PAYMENTS_0)
        assert await world.end(producer, commit=False) is ErrorCode.none
        await world.coordinator.settle()
        assert world.state() == "CompleteAbort"
        assert world.markers.calls[-1].commit is False
        # and the next transaction starts from CompleteAbort
        assert await world.add(producer, ORDERS_0) is ErrorCode.none
        assert world.state() == "Ongoing"

    run(scenario())


def test_bad_requests_get_kafkas_errors(world: TxnWorld) -> None:
    async def scenario() -> None:
        producer = await world.init()
        assert await world.end(producer, commit=True) is ErrorCode.invalid_txn_state  # Empty
        stranger = InitResult(ErrorCode.none, producer.producer_id + 7, 0)
        assert await world.add(stranger, ORDERS_0) is ErrorCode.invalid_producer_id_mapping
        assert await world.end(stranger, True) is ErrorCode.invalid_producer_id_mapping
        unknown = await world.add(producer, ORDERS_0, txn_id="nobody")
        assert unknown is ErrorCode.invalid_producer_id_mapping
        stale = InitResult(ErrorCode.none, producer.producer_id, producer.producer_epoch + 1)
        assert await world.add(stale, ORDERS_0) is ErrorCode.producer_fenced
        assert await world.add(producer, ORDERS_0, txn_id="") is ErrorCode.invalid_request

    run(scenario())


def test_a_new_producer_fences_the_old_and_aborts_its_transaction(world: TxnWorld) -> None:
    async def scenario() -> None:
        old = await world.init()
        await world.add(old, ORDERS_0)
        assert (await world.init()).error is ErrorCode.concurrent_transactions
        await world.coordinator.settle()
        assert world.state() == "CompleteAbort"
        abort = world.markers.calls[-1]
        assert (abort.commit, abort.producer_epoch, abort.partitions) == (False, 1, (ORDERS_0,))
        new = await world.init()
        assert (new.producer_id, new.producer_epoch) == (old.producer_id, 2)
        # the zombie hears it is fenced, whatever it tries
        assert await world.add(old, ORDERS_1) is ErrorCode.producer_fenced
        assert await world.end(old, commit=True) is ErrorCode.producer_fenced
        assert (await world.init(producer_id=old.producer_id, producer_epoch=0)).error is (
            ErrorCode.producer_fenced
        )
        assert await world.add(new, ORDERS_1) is ErrorCode.none

    run(scenario())


def test_kip_360_reinitialisation(world: TxnWorld) -> None:
    async def scenario() -> None:
        first = await world.init()
        bumped = await world.init(producer_id=first.producer_id, producer_epoch=0)
        assert (bumped.error, bumped.producer_epoch) == (ErrorCode.none, 1)
        # the same request again (its answer was lost): the same epoch, no second bump
        retried = await world.init(producer_id=first.producer_id, producer_epoch=0)
        assert (retried.error, retried.producer_epoch) == (ErrorCode.none, 1)
        other_id = await world.init(producer_id=first.producer_id + 1, producer_epoch=1)
        assert other_id.error is ErrorCode.producer_fenced

    run(scenario())


def test_an_exhausted_epoch_gets_a_new_producer_id(world: TxnWorld) -> None:
    async def scenario() -> None:
        first = await world.init()
        world.coordinator.transactions["t"].producer_epoch = 2**15 - 2
        renewed = await world.init()
        assert renewed.error is ErrorCode.none
        assert renewed.producer_id != first.producer_id and renewed.producer_epoch == 0
        assert world.coordinator.transactions["t"].previous_producer_id == first.producer_id

    run(scenario())


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
    world: TxnWorld,
) -> None:
    async def scenario() -> None:
        producer = await world.init(timeout_ms=5_000)
        await world.add(producer, ORDERS_0)
        await world.advance(4_000)
        assert world.state() == "Ongoing"
        assert world.coordinator.abort_timed_out() == []
        await world.advance(ABORT_CHECK_MS)
        assert world.state() == "CompleteAbort"
        txn = world.coordinator.transactions["t"]
        assert txn.producer_epoch == producer.producer_epoch + 1
        assert world.markers.calls[-1] == MarkerCall(
            producer.producer_id, producer.producer_epoch + 1, 0, False, (ORDERS_0,)
        )
        assert await world.end(producer, commit=True) is ErrorCode.producer_fenced

    run(scenario())


def test_markers_are_retried_and_vanished_partitions_dropped(world: TxnWorld) -> None:
    async def scenario() -> None:
        producer = await world.init()
        await world.add(producer, ORDERS_0, ORDERS_1, PAYMENTS_0)
        world.markers.answers = [
            {ORDERS_0: ErrorCode.not_leader_or_follower,
             PAYMENTS_0: ErrorCode.unknown_topic_or_partition},
            {ORDERS_0: ErrorCode.request_timed_out},
        ]  # fmt: skip
        await world.end(producer, commit=True)
        await world.coordinator.settle()
        assert [c.partitions for c in world.markers.calls] == [
            (ORDERS_0, ORDERS_1, PAYMENTS_0), (ORDERS_0,), (ORDERS_0,),
        ]  # fmt: skip
        assert world.state() == "CompleteCommit"

    run(scenario())


def test_requests_during_a_state_write_are_concurrent(world: TxnWorld) -> None:
    async def scenario() -> None:
        producer = await world.init()
        world.coordinator.transactions["t"].pending = ONGOING
        assert await world.add(producer, ORDERS_0) is ErrorCode.concurrent_transactions
        assert (await world.init()).error is ErrorCode.concurrent_transactions
        assert await world.end(producer, True) is ErrorCode.concurrent_transactions

    run(scenario())


def test_describe_and_list(world: TxnWorld, clock: Any) -> None:
    async def scenario() -> None:
        a = await world.init("a")
        await world.add(a, ORDERS_0, PAYMENTS_0, txn_id="a")
        b = await world.init("b")
        clock.advance(500)
        coordinator = world.coordinator
        described = coordinator.describe("a")
        assert (described.error, described.state, described.partitions) == (
            ErrorCode.none, ONGOING, (ORDERS_0, PAYMENTS_0),
        )  # fmt: skip
        assert described.producer_id == a.producer_id and described.timeout_ms == TIMEOUT_MS
        assert coordinator.describe("zzz").error is ErrorCode.transactional_id_not_found
        assert coordinator.describe("b").start_ms == -1
        listed = coordinator.list_transactions
        assert [t.transactional_id for t in listed()] == ["a", "b"]
        assert [t.transactional_id for t in listed([EMPTY])] == ["b"]
        assert [t.transactional_id for t in listed(producer_ids=[b.producer_id])] == ["b"]
        assert [t.transactional_id for t in listed(min_duration_ms=100)] == ["a"]
        assert listed(min_duration_ms=1_000) == []
        assert [t.transactional_id for t in listed(transactional_id_pattern="^b")] == ["b"]
        assert sorted(coordinator.ongoing_partitions()) == [ORDERS_0, PAYMENTS_0]

    run(scenario())


def test_idle_transactional_ids_expire(make_world: Any) -> None:
    world = make_world(transactional_id_expiration_ms=10_000, remove_expired_interval_ms=1_000)

    async def scenario() -> None:
        await world.init("idle")
        busy = await world.init("busy")
        await world.add(busy, ORDERS_0, txn_id="busy")
        await world.advance(9_000)
        assert "idle" in world.coordinator.transactions
        await world.advance(1_000)
        assert "idle" not in world.coordinator.transactions
        assert "busy" in world.coordinator.transactions  # an open transaction never expires

    run(scenario())
    assert "idle" not in world.reopen().transactions  # the tombstone is durable


def test_state_survives_a_restart(world: TxnWorld) -> None:
    async def before() -> tuple[InitResult, InitResult]:
        done = await world.init("done")
        await world.add(done, ORDERS_0, txn_id="done")
        await world.end(done, True, txn_id="done")
        await world.coordinator.settle()
        open_ = await world.init("open", timeout_ms=5_000)
        await world.add(open_, ORDERS_1, PAYMENTS_0, txn_id="open")
        return done, open_

    done, open_ = run(before())
    coordinator = world.reopen()
    assert coordinator.transactions["done"].state.value == "CompleteCommit"
    reloaded = coordinator.transactions["open"]
    assert (reloaded.state, reloaded.partitions) == (ONGOING, {ORDERS_1, PAYMENTS_0})
    assert (reloaded.producer_id, reloaded.producer_epoch, reloaded.timeout_ms) == (
        open_.producer_id, open_.producer_epoch, 5_000,
    )  # fmt: skip

    async def after() -> None:
        assert (await world.init("done")).producer_epoch == done.producer_epoch + 1
        await world.advance(5_000)  # the reloaded transaction still times out
        assert world.state("open") == "CompleteAbort"

    run(after())


def test_a_transaction_prepared_at_a_crash_is_completed_after_restart(world: TxnWorld) -> None:
    async def before() -> InitResult:
        producer = await world.init()
        await world.add(producer, ORDERS_0, PAYMENTS_0)
        world.markers.gate = asyncio.Event()  # the markers never get written
        assert await world.end(producer, commit=True) is ErrorCode.none
        await asyncio.sleep(0)
        await world.coordinator.close()
        return producer

    producer = run(before())
    world.markers.gate = None
    coordinator = world.reopen()
    assert coordinator.transactions["t"].state is PREPARE_COMMIT

    async def after() -> None:
        await world.advance(0)
        assert world.state() == "CompleteCommit"
        assert world.markers.calls[-1] == MarkerCall(
            producer.producer_id, producer.producer_epoch, 0, True, (ORDERS_0, PAYMENTS_0)
        )

    run(after())
    assert world.reopen().transactions["t"].state.value == "CompleteCommit"


def test_unloading_a_partition_forgets_its_ids_and_loading_restores_them(
    world: TxnWorld,
) -> None:
    async def scenario() -> None:
        producer = await world.init()
        await world.add(producer, ORDERS_0)
        coordinator = world.coordinator
        index = coordinator.store.partition_for("t")
        coordinator.unload_partition((index + 1) % coordinator.store.partitions)
        assert "t" in coordinator.transactions
        coordinator.unload_partition(index)
        assert "t" not in coordinator.transactions
        coordinator.load_partition(index)
        assert coordinator.transactions["t"].state is ONGOING
        world.markers.gate = asyncio.Event()
        await world.end(producer, commit=False)
        assert coordinator.transactions["t"].state is PREPARE_ABORT
        coordinator.load_partition(index)  # leadership lost and regained mid-completion
        world.markers.gate.set()
        await world.advance(0)
        assert world.state() == "CompleteAbort"

    run(scenario())


def test_a_state_topic_of_another_size_places_ids_by_its_own_partitions(world: TxnWorld) -> None:
    """`__transaction_state` made after the coordinator started, with fewer partitions than
    transaction.state.log.num.partitions: every id's state is written and read back."""
    world.topics.create_now(TRANSACTION_STATE_TOPIC, 1, {"cleanup.policy": "compact"})
    ids = [f"txn-{i}" for i in range(8)]

    async def scenario() -> None:
        for txn_id in ids:
            producer = await world.init(txn_id)
            assert producer.error is ErrorCode.none
            assert await world.add(producer, ORDERS_0, txn_id=txn_id) is ErrorCode.none

    run(scenario())
    assert {world.store.partition_for(txn_id) for txn_id in ids} == {0}
    coordinator = world.reopen()
    assert {coordinator.transactions[txn_id].state for txn_id in ids} == {ONGOING}


def test_stop_replica_of_a_transaction_state_partition_unloads_its_transactions(
    world: TxnWorld,
) -> None:
    """As a cluster's broker has it: the replica manager tells the coordinator of every
    leadership of `__transaction_state` lost, StopReplica's included."""

    async def scenario() -> None:
        producer = await world.init()
        await world.init("elsewhere")
        assert await world.add(producer, ORDERS_0) is ErrorCode.none

    run(scenario())
    world.replicas.coordinators[TRANSACTION_STATE_TOPIC] = world.coordinator
    mine = world.store.partition_for("t")
    assert world.store.partition_for("elsewhere") != mine
    errors = world.replicas.stop_replicas([(TRANSACTION_STATE_TOPIC, mine, False)])
    assert errors == {(TRANSACTION_STATE_TOPIC, mine): ErrorCode.none}
    assert "t" not in world.coordinator.transactions
    assert "elsewhere" in world.coordinator.transactions
