"""The transaction coordinator in a real broker process, driven by confluent-kafka's transactional
producer and by raw requests: commit and abort, fencing of a zombie producer, the abort of a
transaction left open past its timeout, coordinator state through kill -9, Kafka's errors for
bad requests, and `weir txn list|describe`."""

from __future__ import annotations

import dataclasses
import datetime
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i8, i16, i32, i64

from weir.cli.broker_socket import BrokerConnection
from weir.cli.txn import connect
from weir.protocol.apis import ApiKey

TIMEOUT = 30
BrokerFactory = Callable[..., BrokerProcess]
#: the broker checks for timed-out transactions this often (Kafka: every 10 s)
ABORT_CHECK_MS = 200
FENCED = {KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FENCED}


@pytest.fixture
def txn_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(
        "txn", **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": ABORT_CHECK_MS}
    )


@pytest.fixture
def topic(txn_broker: BrokerProcess) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": txn_broker.bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
    futures[name].result(TIMEOUT)
    return name


@pytest.fixture
def producers(txn_broker: BrokerProcess) -> Iterator[Callable[..., Producer]]:
    def make(transactional_id: str, **config: Any) -> Producer:
        return Producer({
            "bootstrap.servers": txn_broker.bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60_000,
            "linger.ms": 5,
            **config,
        })  # fmt: skip

    yield make


def describe(broker: BrokerProcess, transactional_id: str) -> Any:
    with connect("127.0.0.1", broker.port) as conn:
        response = conn.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(
            transactional_ids=(TransactionalId(transactional_id),)))  # fmt: skip
    [state] = response.transaction_states
    return state


def wait_for_state(broker: BrokerProcess, transactional_id: str, wanted: str) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while True:
        state = describe(broker, transactional_id)
        if state.transaction_state == wanted or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def end_offsets(broker: BrokerProcess, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "offsets"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT)[1]
                for p in range(2)]  # fmt: skip
    finally:
        consumer.close()


def produce(producer: Producer, topic: str, count: int, partition: int = 0) -> None:
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=partition)
    assert producer.flush(TIMEOUT) == 0


# ---- confluent-kafka's transactional producer ----------------------------------------------------


def test_commit_and_abort(txn_broker: BrokerProcess, topic: str, producers: Any) -> None:
    producer = producers("commit-abort")
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    produce(producer, topic, 3)
    producer.commit_transaction(TIMEOUT)
    assert wait_for_state(txn_broker, "commit-abort", "CompleteCommit").transaction_state == (
        "CompleteCommit"
    )
    producer.begin_transaction()
    produce(producer, topic, 2, partition=1)
    producer.abort_transaction(TIMEOUT)
    state = wait_for_state(txn_broker, "commit-abort", "CompleteAbort")
    assert (state.transaction_state, state.producer_epoch, state.topics) == ("CompleteAbort", 0, ())
    # each transaction's records and one marker per partition it touched
    assert end_offsets(txn_broker, topic) == [3 + 1, 2 + 1]


def test_a_second_producer_fences_the_first(
    txn_broker: BrokerProcess, topic: str, producers: Any
) -> None:
    zombie = producers("fenced")
    zombie.init_transactions(TIMEOUT)
    zombie.begin_transaction()
    produce(zombie, topic, 2)
    successor = producers("fenced")
    # the zombie's open transaction is aborted under epoch 1, then the successor gets epoch 2
    successor.init_transactions(TIMEOUT)
    state = describe(txn_broker, "fenced")
    assert (state.transaction_state, state.producer_epoch) == ("Empty", 2)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(TIMEOUT)
    assert raised.value.args[0].code() in FENCED
    successor.begin_transaction()
    produce(successor, topic, 1)
    successor.commit_transaction(TIMEOUT)
    assert wait_for_state(txn_broker, "fenced", "CompleteCommit").producer_epoch == 2


def test_a_transaction_past_its_timeout_is_aborted(
    txn_broker: BrokerProcess, topic: str, producers: Any
) -> None:
    producer = producers("slow", **{"transaction.timeout.ms": 2_000})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    produce(producer, topic, 1)
    assert describe(txn_broker, "slow").transaction_state == "Ongoing"
    state = wait_for_state(txn_broker, "slow", "CompleteAbort")
    assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", 1)
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(TIMEOUT)
    assert raised.value.args[0].code() in FENCED


def test_coordinator_state_survives_kill_9(
    txn_broker: BrokerProcess, topic: str, producers: Any
) -> None:
    done = producers("done")
    done.init_transactions(TIMEOUT)
    done.begin_transaction()
    produce(done, topic, 1)
    done.commit_transaction(TIMEOUT)
    wait_for_state(txn_broker, "done", "CompleteCommit")
    open_ = producers("open")
    open_.init_transactions(TIMEOUT)
    open_.begin_transaction()
    produce(open_, topic, 2, partition=1)
    before = describe(txn_broker, "open")
    txn_broker.kill()
    txn_broker.start()
    after = describe(txn_broker, "open")
    assert (after.transaction_state, after.producer_id, after.producer_epoch) == (
        "Ongoing", before.producer_id, before.producer_epoch,
    )  # fmt: skip
    assert [(t.topic, t.partitions) for t in after.topics] == [(topic, (1,))]
    assert after.transaction_start_time == before.transaction_start_time
    assert describe(txn_broker, "done").transaction_state == "CompleteCommit"


# ---- raw requests --------------------------------------------------------------------------------


def _init(conn: BrokerConnection, transactional_id: str, timeout_ms: int = 60_000) -> Any:
    return conn.call(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
        transactional_id=TransactionalId(transactional_id),
        transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
        producer_id=ProducerId(-1), producer_epoch=i16(-1),
    ))  # fmt: skip


def _end(conn: BrokerConnection, transactional_id: str, producer: Any, commit: bool = True) -> Any:
    return conn.call(ApiKey.END_TXN, 3, EndTxnRequest(
        transactional_id=TransactionalId(transactional_id), producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch, committed=commit,
    )).error_code  # fmt: skip


def _add(
    conn: BrokerConnection, transactional_id: str, producer: Any, topics: dict[str, list[int]]
) -> Any:
    return conn.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TransactionalId(transactional_id),
        v3_and_below_producer_id=producer.producer_id,
        v3_and_below_producer_epoch=producer.producer_epoch,
        v3_and_below_topics=tuple(
            AddPartitionsToTxnTopic(name=TopicName(t), partitions=tuple(i32(p) for p in ps))
            for t, ps in topics.items()
        ),
    ))  # fmt: skip


def _errors(response: Any) -> dict[tuple[str, int], ErrorCode]:
    topics = response.results_by_topic_v3_and_below
    return {(t.name, p.partition_index): p.partition_error_code
            for t in topics for p in t.results_by_partition}  # fmt: skip


def test_bad_requests_get_kafkas_errors(txn_broker: BrokerProcess, topic: str) -> None:
    with connect("127.0.0.1", txn_broker.port) as conn:
        found = conn.call(ApiKey.FIND_COORDINATOR, 3,
                          FindCoordinatorRequest(key="raw", key_type=i8(1)))  # fmt: skip
        assert (found.error_code, found.port) == (ErrorCode.none, txn_broker.port)
        too_long = _init(conn, "raw", timeout_ms=900_001)
        assert too_long.error_code is ErrorCode.invalid_transaction_timeout
        producer = _init(conn, "raw")
        assert (producer.error_code, producer.producer_epoch) == (ErrorCode.none, 0)
        assert _end(conn, "raw", producer) is ErrorCode.invalid_txn_state  # nothing to end
        assert _end(conn, "nobody", producer) is ErrorCode.invalid_producer_id_mapping
        unknown = _add(conn, "raw", producer, {topic: [0], "no-such-topic": [0], f"{topic}x": [1]})
        assert _errors(unknown) == {
            (topic, 0): ErrorCode.operation_not_attempted,
            ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
            (f"{topic}x", 1): ErrorCode.unknown_topic_or_partition,
        }
        beyond = _add(conn, "raw", producer, {topic: [2]})
        assert _errors(beyond) == {(topic, 2): ErrorCode.unknown_topic_or_partition}
        assert describe(txn_broker, "raw").transaction_state == "Empty"
        added = _add(conn, "raw", producer, {topic: [0, 1]})
        assert set(_errors(added).values()) == {ErrorCode.none}
        stale = dataclasses.replace(producer, producer_epoch=i16(5))
        fenced = _add(conn, "raw", stale, {topic: [0]})
        assert set(_errors(fenced).values()) == {ErrorCode.producer_fenced}
        listed = conn.call(ApiKey.LIST_TRANSACTIONS, 1, ListTransactionsRequest(
            state_filters=("Ongoing", "Sleeping"), producer_id_filters=(),
            duration_filter=i64(-1)))  # fmt: skip
        assert listed.unknown_state_filters == ("Sleeping",)
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
            ("raw", "Ongoing")
        ]
        missing = describe(txn_broker, "nobody")
        assert missing.error_code is ErrorCode.transactional_id_not_found


def test_weir_txn_list_and_describe(txn_broker: BrokerProcess, topic: str) -> None:
    with connect("127.0.0.1", txn_broker.port) as conn:
        producer = _init(conn, "cli-txn")
        _add(conn, "cli-txn", producer, {topic: [1]})
    listing = _weir(txn_broker, "list", "--state", "Ongoing")
    assert "cli-txn" in listing and "Ongoing" in listing
    assert "cli-txn" not in _weir(txn_broker, "list", "--state", "Empty")
    described = _weir(txn_broker, "describe", "--transactional-id", "cli-txn")
    lines = dict(line.split(None, 1) for line in described.splitlines())
    assert lines["ProducerId"] == str(producer.producer_id)
    assert lines["TransactionState"] == "Ongoing"
    assert lines["TopicPartitions"] == f"{topic}-1"


def _weir(broker: BrokerProcess, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "txn", *args, "--bootstrap-server",
         broker.bootstrap], capture_output=True, text=True, timeout=TIMEOUT, check=True,
    )  # fmt: skip
    return done.stdout
