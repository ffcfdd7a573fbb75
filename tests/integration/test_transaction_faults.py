"""Transactions checked in the spirit of Jepsen's Kafka workload while the broker is killed with
-9 and restarted under a transactional writer, round after round.

The writer's transactions each put two records on every partition; every fourth is aborted on
purpose, and one whose commit or abort raised has an unknown outcome. Afterwards a
read_committed reader reads everything, and the checker requires:
- no lost committed write: every record of a transaction whose commit returned is read;
- no aborted read: no record of a transaction aborted on purpose is read;
- no torn transaction: of any transaction, all records are read or none;
- no duplicate: no value is read twice.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 30
PARTITIONS = 3
PER_PARTITION = 2
BrokerFactory = Callable[..., BrokerProcess]


@dataclass
class Outcomes:
    committed: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)
    unknown: set[int] = field(default_factory=set)


class TransactionalWriter(threading.Thread):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="txn-writer", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.outcomes = Outcomes()
        self.stopping = threading.Event()
        self.errors: Counter[str] = Counter()

    def _producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.topic,
                             "transaction.timeout.ms": 10_000, "log_level": 0})  # fmt: skip
        while not self.stopping.is_set():
            try:
                producer.init_transactions(TIMEOUT)
                return producer
            except KafkaException as exc:
                self.errors[exc.args[0].name()] += 1
                time.sleep(0.5)
        return producer

    def run(self) -> None:
        producer = self._producer()
        txn = 0
        while not self.stopping.is_set():
            txn += 1
            try:
                producer.begin_transaction()
                for partition in range(PARTITIONS):
                    for i in range(PER_PARTITION):
                        producer.produce(self.topic, f"{txn}-{partition}-{i}".encode(),
                                         partition=partition)  # fmt: skip
                producer.flush(TIMEOUT)
                if txn % 4 == 0:
                    producer.abort_transaction(TIMEOUT)
                    self.outcomes.aborted.add(txn)
                else:
                    producer.commit_transaction(TIMEOUT)
                    self.outcomes.committed.add(txn)
            except KafkaException as exc:
                error = exc.args[0]
                self.errors[error.name()] += 1
                self.outcomes.unknown.add(txn)
                if error.txn_requires_abort():
                    try:
                        producer.abort_transaction(TIMEOUT)
                    except KafkaException:
                        producer = self._producer()
                else:
                    producer = self._producer()  # fatal, or a state the client cannot leave


def read_committed(bootstrap: str, topic: str) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "log_level": 0})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[str] = []
    quiet_since, deadline = time.monotonic(), time.monotonic() + 2 * TIMEOUT
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 4:
            for message in consumer.consume(1000, timeout=0.3):
                if message.error() is None:
                    values.append(message.value().decode())
                    quiet_since = time.monotonic()
    finally:
        consumer.close()
    return values


def check(outcomes: Outcomes, values: list[str]) -> dict[str, list[int]]:
    """The anomalies found, by kind (empty lists when there are none)."""
    per_txn = Counter(int(v.split("-")[0]) for v in set(values))
    size = PARTITIONS * PER_PARTITION
    return {
        "duplicated": sorted({int(v.split("-")[0]) for v, n in Counter(values).items() if n > 1}),
        "lost": sorted(t for t in outcomes.committed if per_txn[t] != size),
        "aborted_read": sorted(t for t in outcomes.aborted if per_txn[t]),
        "torn": sorted(t for t, n in per_txn.items() if n != size),
    }


@pytest.mark.slow
def test_killed_broker_never_shows_a_torn_lost_or_aborted_transaction(broker_factory):
    broker = broker_factory("txn-faults", **{"group.initial.rebalance.delay.ms": 0})
    topic = f"jepsen-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(TIMEOUT)
    writer = TransactionalWriter(broker.bootstrap, topic)
    writer.start()
    rng = random.Random(20261125)
    for _ in range(6):
        time.sleep(rng.uniform(1.0, 3.0))
        broker.kill()
        time.sleep(rng.uniform(0.0, 1.0))
        broker.start()
    time.sleep(3)
    writer.stopping.set()
    writer.join(3 * TIMEOUT)
    outcomes = writer.outcomes
    anomalies = check(outcomes, read_committed(broker.bootstrap, topic))
    summary = (f"committed {len(outcomes.committed)}, aborted {len(outcomes.aborted)}, unknown "
               f"{len(outcomes.unknown)}; client errors {dict(writer.errors)}")  # fmt: skip
    print(summary)
    assert len(outcomes.committed) > 20, summary
    assert anomalies == {"duplicated": [], "lost": [], "aborted_read": [], "torn": []}, summary


def test_the_checker_finds_each_anomaly():
    outcomes = Outcomes(committed={1, 2}, aborted={3}, unknown={4})
    whole = [f"{t}-{p}-{i}"
             for t in (1, 2) for p in range(PARTITIONS) for i in range(PER_PARTITION)]  # fmt: skip
    assert check(outcomes, whole) == {"duplicated": [], "lost": [], "aborted_read": [], "torn": []}
    broken = [*whole[1:], whole[2], "3-0-0", "4-1-1"]
    assert check(outcomes, broken) == {
        "duplicated": [1], "lost": [1], "aborted_read": [3], "torn": [1, 3, 4],
    }  # fmt: skip
