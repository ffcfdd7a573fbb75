"""`weir group lag` against a real broker: a group that read everything is OK with lag 0; a
group whose committed offset stays put while a producer keeps writing is STALL, its group
ERROR, and the command exits 1; `--watch --count` prints a table per look."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess, table_rows, weir
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

TOPIC = "lagging"
TIMEOUT = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("lag") / "broker")
    process.start()
    created = weir("topic", "create", TOPIC, "--partitions", "1", "--bootstrap-server",
                   process.bootstrap)  # fmt: skip
    assert created.returncode == 0, created.stderr
    producer = Producer({"bootstrap.servers": process.bootstrap, "log_level": 0})
    for i in range(20):
        producer.produce(TOPIC, b"r%d" % i, partition=0)
    assert producer.flush(TIMEOUT) == 0
    yield process
    if process.process is not None:
        process.stop()


def commit(broker: BrokerProcess, group: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "log_level": 0})  # fmt: skip
    try:
        consumer.commit(offsets=[KafkaTopicPartition(TOPIC, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def test_a_caught_up_group_is_ok_and_a_stuck_one_stalls(broker: BrokerProcess) -> None:
    commit(broker, "caught-up", 20)
    commit(broker, "stuck", 5)
    stop = threading.Event()

    def keep_writing() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        for i in range(200):  # bounded: about twenty seconds at most
            if stop.is_set():
                break
            producer.produce(TOPIC, b"more-%d" % i, partition=0)
            producer.flush(TIMEOUT)
            time.sleep(0.1)

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    try:
        stuck = weir("group", "lag", "stuck", "--interval", "0.5", "--samples", "5",
                     "--bootstrap-server", broker.bootstrap)  # fmt: skip
    finally:
        stop.set()
        writer.join(TIMEOUT)
    assert stuck.returncode == 1, stuck.stdout + stuck.stderr
    [row] = table_rows(stuck.stdout.strip(), "GROUP  TOPIC")
    assert row["CURRENT-OFFSET"] == "5" and int(row["LAG"]) > 15 and row["STATUS"] == "STALL"
    assert "GROUP stuck  STATUS ERROR" in stuck.stdout

    commit(broker, "caught-up", int(row["LOG-END-OFFSET"]) + 1000)  # past the end: lag 0
    fine = weir("group", "lag", "caught-up", "--interval", "0.2", "--samples", "2", "--watch",
                "--count", "2", "--bootstrap-server", broker.bootstrap)  # fmt: skip
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert fine.stdout.count("GROUP caught-up  STATUS OK  TOTAL-LAG 0") == 2, fine.stdout
