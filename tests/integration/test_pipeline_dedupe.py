"""The log ETL's deduplication against a real broker: range reads that end in transaction markers
(the agent's exactly-once records), and `weir pipeline logs --dedupe` writing each record that
reached the topic twice (a client's retry, another producer's copy) once, across micro-batches
and runs, by the agent's headers and by declared fields."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from pipeline_spark import (
    create_topic,
    produce,
    require_spark,
    run_logs_job_command,
    warehouse_rows,
)

from weir.pipeline.kafka_io import RangeReader, header_column
from weir.pipeline.offsets import OffsetRange

pytestmark = pytest.mark.slow


def json_line(number: int, host: str = "app-1") -> bytes:
    document = {"timestamp": f"2026-01-02T03:{number // 60 % 60:02d}:{number % 60:02d}Z",
                "level": "info", "host": host, "message": f"event e{number}",
                "seq": number}  # fmt: skip
    return json.dumps(document).encode()


def agent_record(partition: int, position: int, line: bytes) -> dict[str, Any]:
    headers = [("weir.agent", b"agent-1"), ("weir.pos", str(position).encode())]
    return {"value": line, "partition": partition, "headers": headers}


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    finally:
        consumer.close()
    return int(high)


def test_a_range_read_ends_past_transaction_markers_and_aborted_records(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "transactional", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "range"})
    producer.init_transactions(30)
    for values, commit in ((["a", "b", "c"], True), (["aborted"], False), (["d", "e"], True)):
        producer.begin_transaction()
        for position, value in enumerate(values):
            producer.produce("transactional", value.encode(), partition=0,
                             headers=[("weir.pos", str(position).encode())])  # fmt: skip
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    end = high_watermark(broker.bootstrap, "transactional", 0)
    assert end == 9  # six records, one aborted, three markers
    reader = RangeReader({"bootstrap.servers": broker.bootstrap}, include_headers=False,
                         fail_on_data_loss=True, poll_timeout_s=30,
                         header_values=("weir.pos", "absent"))  # fmt: skip
    started = time.monotonic()
    batches = list(reader.read(OffsetRange(topic="transactional", partition=0, start=0, end=end)))
    assert time.monotonic() - started < 10  # not the poll timeout
    values = [v for batch in batches for v in batch.column("value").to_pylist()]
    assert values == [b"a", b"b", b"c", b"d", b"e"]
    positions = [v for b in batches for v in b.column(header_column("weir.pos")).to_pylist()]
    assert positions == [b"0", b"1", b"2", b"0", b"1"]
    assert {v for b in batches for v in b.column(header_column("absent")).to_pylist()} == {None}


def run_dedupe(bootstrap: str, topic: str, root: Path, *extra: str) -> dict[str, Any]:
    return run_logs_job_command([
        "--topic", topic, "--warehouse", str(root / "warehouse"), "--checkpoint",
        str(root / "checkpoint"), "--bootstrap-server", bootstrap, "--once",
        "--master", "local[2]", "--max-records-per-trigger", "150", *extra,
    ])  # fmt: skip


def landed(root: Path) -> tuple[Counter[str], Counter[str]]:
    """The messages in ``logs`` and the lines in ``quarantine``, each with how often."""
    logs = warehouse_rows(root / "warehouse", "logs", ["message"])
    quarantine = warehouse_rows(root / "warehouse", "quarantine", ["line"])
    return Counter(r["message"] for r in logs), Counter(r["line"] for r in quarantine)


def test_records_that_reached_the_topic_twice_are_written_once_across_batches_and_runs(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    require_spark()
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "twice", 2)

    def line(partition: int, position: int) -> bytes:
        number = partition * 1000 + position
        return f"e{number} ~ no format reads this ~".encode() if position % 40 == 7 else (
            json_line(number))  # fmt: skip

    first = [agent_record(p, n, line(p, n)) for n in range(200) for p in (0, 1)]
    produce(bootstrap, "twice", first)
    # A client's retry: records sent again, after their originals, some in the same micro-batch
    # (at most 150 records each), most in later ones. Records without the headers are kept as
    # they are, twice.
    plain = [{"value": json_line(5000), "partition": 0}] * 2
    produce(bootstrap, "twice", first[380:] + plain + first[100:300])
    report = run_dedupe(bootstrap, "twice", tmp_path, "--dedupe")
    assert report["duplicates"] == 220
    assert report["records"] == 622 and report["logs"] + report["quarantined"] == 402

    # A second run resumes from the high waters committed with the last batch.
    more = [agent_record(p, n, line(p, n)) for n in range(200, 260) for p in (0, 1)]
    produce(bootstrap, "twice", more + first[:50] + more[:30])
    report = run_dedupe(bootstrap, "twice", tmp_path, "--dedupe")
    assert report["duplicates"] == 80 and report["records"] == 200

    messages, lines = landed(tmp_path)
    expected = [line(p, n) for n in range(260) for p in (0, 1)]
    parsed = [json.loads(v)["message"] for v in expected if v.startswith(b"{")]
    bad = [v.decode() for v in expected if not v.startswith(b"{")]
    assert messages == Counter(parsed) + Counter({"event e5000": 2})
    assert lines == Counter(bad) and len(bad) == 14


def test_a_declared_key_drops_copies_by_the_lines_fields(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    require_spark()
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "fields", 1)
    lines = [json_line(n, host=f"app-{n % 3}") for n in range(300)]
    produce(bootstrap, "fields", [{"value": v} for v in lines + lines[250:] + lines[:10]])
    report = run_dedupe(bootstrap, "fields", tmp_path, "--dedupe", "host:seq")
    assert report["duplicates"] == 60 and report["logs"] == 300
    messages, _ = landed(tmp_path)
    assert messages == Counter(f"event e{n}" for n in range(300))
