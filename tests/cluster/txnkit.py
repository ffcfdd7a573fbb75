"""Transactions checked in the spirit of Jepsen's Kafka workload: a transactional writer, a
read_committed reader and the checker, and a run of kill -9 faults on a three-broker cluster
(faultkit's) that aims at the transaction coordinator's broker and at partition leaders. Used
by tests/integration/test_transaction_faults.py (one broker), tests/cluster/
test_cluster_txn_faults.py and bench/txn_faults.py; it imports no pytest.

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
from dataclasses import asdict, dataclass, field
from typing import Any

import faultkit as fk
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.static.primitive import i8

TIMEOUT = 30
PARTITIONS = 3
PER_PARTITION = 2
#: what a fault round kills: the broker coordinating the writer's transactional id, or the
#: leader of one of the topic's partitions (chosen at random)
TXN_FAULT_KINDS = ("kill_coordinator", "kill_leader")
FIND_COORDINATOR, TRANSACTION_KEY = 10, 1


@dataclass
class Outcomes:
    committed: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)
    unknown: set[int] = field(default_factory=set)


class TransactionalWriter(threading.Thread):
    """Transactions 1, 2, ... with transactional id = the topic, until `stopping` is set."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="txn-writer", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.outcomes = Outcomes()
        self.stopping = threading.Event()
        self.errors: Counter[str] = Counter()
        self.producer: Producer | None = None  # the one in use, closed when the thread ends

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

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        producer = self._producer()
        try:
            self._write(producer)
        finally:
            fk.close_client(self.producer)

    def _write(self, producer: Producer) -> None:
        self.producer = producer
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
                        producer = self._replace(producer)
                else:
                    producer = self._replace(producer)  # fatal, or a state it cannot leave

    def _replace(self, producer: Producer) -> Producer:
        fk.close_client(producer)
        self.producer = self._producer()
        return self.producer


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


# ---- on a three-broker cluster -------------------------------------------------------------------


def transaction_coordinator(address: tuple[str, int], transactional_id: str) -> int | None:
    """The node id the broker at `address` names as `transactional_id`'s coordinator."""
    body = FindCoordinatorRequest(key=transactional_id, key_type=i8(TRANSACTION_KEY))
    response = fk.raw_call(address, FIND_COORDINATOR, 3, body, timeout=5)
    return int(response.node_id) if response.error_code == 0 else None


def choose_target(cluster: fk.FaultCluster, kind: str, topic: str, rng: random.Random) -> int:
    """The broker a round kills: the coordinator of the writer's id (= the topic), or the
    leader of a random partition."""
    if kind == "kill_coordinator":

        def found() -> int | None:
            for node in cluster.healthy():
                coordinator = transaction_coordinator(cluster.brokers[node].address, topic)
                if coordinator in cluster.brokers:
                    return coordinator
            return None

        return fk.poll(found, 30, f"the coordinator of {topic!r}")
    return cluster.partition_state(topic, rng.randrange(PARTITIONS)).leader


@dataclass
class TxnRound:
    number: int
    kind: str
    target: int
    target_roles: list[str]
    recovered: bool = False
    seconds: float = 0.0
    commits_during: int = 0
    note: str = ""


@dataclass
class TxnRun:
    seed: int
    rounds: list[TxnRound]
    outcomes: Outcomes
    anomalies: dict[str, list[int]]
    client_errors: dict[str, int]
    values_read: int
    seconds: float
    #: commits per second before the first fault (when measured)
    quiet_commits_per_s: float | None = None

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "rounds": [asdict(r) for r in self.rounds],
            "faults": dict(Counter(r.kind for r in self.rounds)),
            "not_recovered": sum(not r.recovered for r in self.rounds),
            "committed": len(self.outcomes.committed),
            "aborted": len(self.outcomes.aborted),
            "unknown": len(self.outcomes.unknown),
            "values_read": self.values_read,
            "anomalies": {kind: len(found) for kind, found in self.anomalies.items()},
            "anomaly_examples": {kind: found[:10] for kind, found in self.anomalies.items()},
            "client_errors": self.client_errors,
            "seconds": self.seconds,
            "commits_per_s": round(len(self.outcomes.committed) / max(self.seconds, 0.001), 2),
            "quiet_commits_per_s": _rounded(self.quiet_commits_per_s),
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run_txn_faults(
    cluster: fk.FaultCluster,
    topic: str,
    *,
    rounds: int,
    seed: int,
    time_limit_s: float = 600.0,
    recover_timeout: float = 60.0,
    quiet_s: float = 0.0,
    log: Callable[[str], None] = print,
) -> TxnRun:
    """Create `topic` (RF 3, min.insync.replicas 2), run the transactional writer for `quiet_s`
    seconds without faults (its commit rate is the baseline), then through up to `rounds`
    kill -9 rounds (no new round after `time_limit_s`), then read with read_committed and
    check."""
    started = time.monotonic()
    rng = random.Random(seed)
    log(f"transaction fault seed {seed}")
    cluster.create_topic(topic, PARTITIONS, 3, fk.TOPIC_CONFIG)
    writer = cluster.track(TransactionalWriter(cluster.bootstrap, topic))
    writer.start()
    records: list[TxnRound] = []
    quiet_rate: float | None = None
    try:
        fk.eventually(lambda: len(writer.outcomes.committed) >= 3, 30)
        before = len(writer.outcomes.committed)
        time.sleep(quiet_s)
        quiet_rate = (len(writer.outcomes.committed) - before) / quiet_s if quiet_s else None
        for number, kind in enumerate(fk.fault_plan(rounds, rng, TXN_FAULT_KINDS), 1):
            if time.monotonic() - started > time_limit_s:
                log(f"time limit reached after {number - 1} rounds")
                break
            records.append(_round(cluster, number, kind, topic, writer, rng, recover_timeout, log))
        time.sleep(rng.uniform(1.0, 2.0))  # transactions after the last fault
    finally:
        writer.stopping.set()
        writer.join(3 * TIMEOUT)
    values = read_committed(cluster.bootstrap, topic)
    seconds = round(time.monotonic() - started, 1)
    anomalies = check(writer.outcomes, values)
    return TxnRun(seed, records, writer.outcomes, anomalies, dict(writer.errors), len(values),
                  seconds, quiet_rate)  # fmt: skip


def _round(
    cluster: fk.FaultCluster,
    number: int,
    kind: str,
    topic: str,
    writer: TransactionalWriter,
    rng: random.Random,
    recover_timeout: float,
    log: Callable[[str], None],
) -> TxnRound:
    target = choose_target(cluster, kind, topic, rng)
    record = TxnRound(number, kind, target, fk.roles(cluster, topic, PARTITIONS, target))
    log(f"round {number}: {kind} on broker {target} ({', '.join(record.target_roles)})")
    start, commits = time.monotonic(), len(writer.outcomes.committed)
    recovery = fk.fault_and_recover(cluster, kind, target, topic, PARTITIONS, rng,
                                    recover_timeout=recover_timeout, log=log)  # fmt: skip
    record.recovered, record.note = recovery.recovered, recovery.note
    record.seconds = round(time.monotonic() - start, 2)
    record.commits_during = len(writer.outcomes.committed) - commits
    log(f"  recovered={record.recovered} in {record.seconds}s, "
        f"{record.commits_during} commits meanwhile")  # fmt: skip
    return record
