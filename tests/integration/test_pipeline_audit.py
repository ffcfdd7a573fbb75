"""`weir pipeline audit`: the brokers' audit topic loaded into the warehouse table `audit` by a
real Spark job, row for row what `weir audit` reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from broker_process import weir
from confluent_kafka import Consumer, Producer, TopicPartition
from pipeline_spark import create_topic, require_spark

from waiting import poll
from weir.cluster.audit_log import read_entries
from weir.protocol.audit_records import FETCH, FIELD_TYPES, PRODUCE

pytestmark = pytest.mark.slow

TOPIC = "events"
RECORDS = 400
#: (api, partition) of every count the clients make
EVERY_COUNT = {(api, partition) for api in (PRODUCE, FETCH) for partition in (0, 1)}


def produce_and_read(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "loader", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(TOPIC, b"event-%05d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": "etl",
                         "group.id": "etl", "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in (0, 1)])
    read = 0
    while read < RECORDS:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        read += 1
    consumer.close()


def audit_rows(bootstrap: str) -> set[tuple[Any, ...]] | None:
    """The counts of TOPIC in `__audit`, read as `weir audit` reads them, once they name the
    produce and the fetch of both partitions; None before."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-audit"})
    try:
        entries = [e for e in read_entries(consumer) if e.topic == TOPIC]
    finally:
        consumer.close()
    if {(e.api, e.partition) for e in entries} != EVERY_COUNT:
        return None
    return {tuple(getattr(e, name) for name in FIELD_TYPES) for e in entries}


def test_the_audit_topic_is_loaded_into_the_warehouse(broker_factory: Any, tmp_path: Path) -> None:
    require_spark()
    broker = broker_factory(**{"audit.enable": True, "audit.flush.interval.ms": 200})
    create_topic(broker.bootstrap, TOPIC, 2)
    produce_and_read(broker.bootstrap)
    expected = poll(lambda: audit_rows(broker.bootstrap), 30,
                    "the produce and the fetch of both partitions in __audit")  # fmt: skip

    done = weir("pipeline", "audit", "--warehouse", tmp_path / "warehouse", "--master",
                "local[1]", "--bootstrap-server", broker.bootstrap, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["table"] == str(tmp_path / "warehouse" / "audit")

    table = pq.read_table(report["table"]).to_pylist()
    assert report["rows"] == len(table)
    assert set(table[0]) == {*FIELD_TYPES, "minute"}
    loaded = {tuple(row[name] for name in FIELD_TYPES) for row in table if row["topic"] == TOPIC}
    assert loaded == expected
    produced = [row for row in table if row["topic"] == TOPIC and row["api"] == PRODUCE]
    assert sum(row["records"] for row in produced) == RECORDS
    assert {row["client_id"] for row in produced} == {"loader"}
    assert all(row["minute"].timestamp() * 1000 == row["minute_ms"] for row in table)
