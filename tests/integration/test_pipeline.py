"""The Spark pipeline against a real broker: format("weir") read and write, the log ETL job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pipeline_spark import (
    BatchCollector,
    LineFeeder,
    LogsJobProcess,
    create_topic,
    delete_records,
    demo_lines,
    local_session,
    produce,
    stream,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_session()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("pipeline") / "broker")
    process.start()
    yield process
    if process.process is not None:
        process.stop()


def read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("weir").option("bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def as_tuple(row: Any) -> tuple[Any, ...]:
    headers = tuple((h["key"], bytes(h["value"])) for h in row["headers"] or [])
    key = bytes(row["key"]) if row["key"] is not None else None
    return (row["partition"], row["offset"], key, bytes(row["value"]), headers)


def test_read_back_is_byte_identical_with_offset_ranges(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "raw", 2)
    records = [
        {
            "key": None if i % 7 == 0 else bytes([i % 256, 0, 255]),
            "value": bytes(range(256))[: i % 200] + i.to_bytes(4, "big"),
            "partition": i % 2,
            "headers": [("h", bytes([i % 256])), ("empty", b"")] if i % 5 == 0 else None,
        }
        for i in range(600)
    ]
    placed = produce(bootstrap, "raw", records)
    expected = {
        (p, o, r["key"], r["value"], tuple(r["headers"] or ()))
        for (p, o), r in zip(placed, records, strict=True)
    }

    everything = read(spark, bootstrap, subscribe="raw")
    rows = everything.collect()
    assert {as_tuple(row) for row in rows} == expected
    assert len(rows) == 600
    assert {row["topic"] for row in rows} == {"raw"}
    assert {row["timestampType"] for row in rows} == {0}
    assert everything.rdd.getNumPartitions() >= 2

    ranged = read(
        spark, bootstrap, subscribePattern="ra.*",
        startingOffsets=json.dumps({"raw": {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({"raw": {"0": 50, "1": -1}}),
    ).collect()  # fmt: skip
    want = {t for t in expected if (t[0] == 0 and 10 <= t[1] < 50) or t[0] == 1}
    assert {as_tuple(row) for row in ranged} == want


def test_one_partition_is_split_so_both_cores_read(
    spark: Any, shared_broker: BrokerProcess
) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "single", 1)
    produce(bootstrap, "single", [{"value": str(i).encode()} for i in range(1000)])
    frame = read(spark, bootstrap, subscribe="single", minPartitions="2")
    assert frame.rdd.getNumPartitions() == 2
    offsets = sorted(row["offset"] for row in frame.select("offset").collect())
    assert offsets == list(range(1000))


def test_sink_round_trip(spark: Any, shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "written", 3)
    rows = [
        (f"k{i}".encode(), f"value {i}".encode(), [("n", str(i).encode())], i % 3)
        for i in range(300)
    ]
    frame = spark.createDataFrame(
        rows, "key binary, value binary, headers array<struct<key:string,value:binary>>, "
        "partition int"
    )  # fmt: skip
    frame.write.format("weir").option("bootstrap.servers", bootstrap).option(
        "topic", "written"
    ).mode("append").save()

    back = read(spark, bootstrap, subscribe="written").collect()
    got = {(r["partition"], bytes(r["key"]), bytes(r["value"]), as_tuple(r)[4]) for r in back}
    assert got == {(p, k, v, tuple(h)) for k, v, h, p in rows}


def test_fail_on_data_loss(spark: Any, shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "retained", 1)
    produce(bootstrap, "retained", [{"value": str(i).encode()} for i in range(100)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deleted = admin.delete_records([TopicPartition("retained", 0, 60)])
    for future in deleted.values():
        future.result(30)
    starting = json.dumps({"retained": {"0": 10}})

    with pytest.raises(Exception, match=r"offsets 10\.\.59 were deleted before they were read"):
        read(spark, bootstrap, subscribe="retained", startingOffsets=starting).collect()

    rows = read(
        spark, bootstrap, subscribe="retained", startingOffsets=starting, failOnDataLoss="false"
    ).collect()
    assert sorted(row["offset"] for row in rows) == list(range(60, 100))


def run_available_now(frame: Any, checkpoint: Path, sink: Any) -> None:
    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300), "the available-now query did not finish"
    assert query.exception() is None


def test_read_stream_in_micro_batches_and_resume(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "streamed", 3)
    first = [{"value": f"a{i}".encode(), "partition": i % 3} for i in range(900)]
    placed = produce(bootstrap, "streamed", first)
    options = {"subscribe": "streamed", "startingOffsets": "earliest"}
    collector = BatchCollector()

    limited = stream(spark, bootstrap, maxRecordsPerTrigger="200", **options)
    run_available_now(limited, tmp_path / "checkpoint", collector)

    expected = {(p, o, r["value"]) for (p, o), r in zip(placed, first, strict=True)}
    assert sorted(collector.rows()) == sorted(expected)
    sizes = [len(batch) for batch in collector.batches if batch]
    assert len(sizes) >= 5 and max(sizes) <= 200

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_partitions([NewPartitions("streamed", 4)]).values():
        future.result(30)
    second = [{"value": f"b{i}".encode(), "partition": i % 4} for i in range(200)]
    placed = produce(bootstrap, "streamed", second)
    resumed = BatchCollector()

    run_available_now(stream(spark, bootstrap, **options), tmp_path / "checkpoint", resumed)

    assert sorted(resumed.rows()) == sorted(
        (p, o, r["value"]) for (p, o), r in zip(placed, second, strict=True)
    )


def test_starting_timestamp_in_batch_and_stream(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "stamped", 2)
    base = 1_700_000_000_000
    records = [
        {"value": str(i).encode(), "partition": i % 2, "timestamp": base + i * 1000}
        for i in range(100)
    ]
    produce(bootstrap, "stamped", records)
    since = str(base + 60 * 1000)
    wanted = [str(i).encode() for i in range(60, 100)]

    batch = read(spark, bootstrap, subscribe="stamped", startingTimestamp=since).collect()
    assert sorted(bytes(r["value"]) for r in batch) == sorted(wanted)

    collector = BatchCollector()
    streamed = stream(spark, bootstrap, subscribe="stamped", startingTimestamp=since)
    run_available_now(streamed, tmp_path / "checkpoint", collector)
    assert sorted(value for _, _, value in collector.rows()) == sorted(wanted)

    after_all = str(base + 1000 * 1000)
    assert read(spark, bootstrap, subscribe="stamped", startingTimestamp=after_all).count() == 0


def test_write_stream_round_trip(spark: Any, shared_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "stream-in", 2)
    create_topic(bootstrap, "stream-out", 2)
    records = [
        {"key": f"k{i}".encode(), "value": f"v{i}".encode(), "headers": [("n", str(i).encode())]}
        for i in range(500)
    ]
    produce(bootstrap, "stream-in", records)

    source = stream(
        spark, bootstrap, subscribe="stream-in", startingOffsets="earliest",
        maxRecordsPerTrigger="150",
    ).select("key", "value", "headers", "partition")  # fmt: skip
    query = (
        source.writeStream.format("weir")
        .option("bootstrap.servers", bootstrap)
        .option("topic", "stream-out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300), "the available-now query did not finish"
    assert query.exception() is None

    back = read(spark, bootstrap, subscribe="stream-out").collect()
    got = sorted((bytes(r["key"]), bytes(r["value"]), as_tuple(r)[4]) for r in back)
    assert got == sorted((r["key"], r["value"], tuple(r["headers"])) for r in records)


class DeleteAfterFirstBatch(BatchCollector):
    """Collects batches; after the first, produces 100 more records and deletes offsets up
    to 150, so the next batch finds offsets 100..149 gone before they were read."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__()
        self.bootstrap, self.topic = bootstrap, topic

    def __call__(self, frame: Any, batch_id: int) -> None:
        super().__call__(frame, batch_id)
        if len(self.batches) == 1:
            produce(self.bootstrap, self.topic, [{"value": b"late"} for _ in range(100)])
            delete_records(self.bootstrap, self.topic, 0, 150)


@pytest.mark.parametrize("fail", [True, False])
def test_stream_fail_on_data_loss(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path, fail: bool
) -> None:
    bootstrap = shared_broker.bootstrap
    topic = f"deleted-{str(fail).lower()}"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [{"value": b"early"} for _ in range(100)])
    sink = DeleteAfterFirstBatch(bootstrap, topic)
    frame = stream(
        spark, bootstrap, subscribe=topic, startingOffsets="earliest",
        failOnDataLoss=str(fail).lower(),
    )  # fmt: skip
    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        if fail:
            with pytest.raises(Exception, match=rf"{topic}-0: offsets 100\.\.149 were deleted"):
                query.processAllAvailable()
        else:
            query.processAllAvailable()
            offsets = sorted(offset for _, offset, _ in sink.rows())
            assert offsets == list(range(100)) + list(range(150, 200))
    finally:
        query.stop()


def test_logs_etl_once_over_demo_samples(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "loglines", 2)
    lines = demo_lines()
    junk = [("hdfs", "not an hdfs line"), ("nosuch", "whatever"), ("linux", "")]
    records = [
        {"key": s.encode(), "value": line.encode()} for s, ls in lines.items() for line in ls
    ]
    records += [{"key": s.encode(), "value": line.encode()} for s, line in junk]
    produce(bootstrap, "loglines", records)
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"

    report = run_etl(bootstrap, warehouse, checkpoint)

    logs = spark.read.parquet(str(warehouse / "logs"))
    quarantine = spark.read.parquet(str(warehouse / "quarantine"))
    total_logs, total_quarantine = logs.count(), quarantine.count()
    assert total_logs + total_quarantine == len(records) == report["records"]
    assert total_quarantine >= len(junk)
    per_source = Counter(
        {r["source"]: r["count"] for r in logs.groupBy("source").count().collect()}
    )
    per_source.update(
        {r["source"]: r["count"] for r in quarantine.groupBy("source").count().collect()}
    )
    expected = Counter({source: len(ls) for source, ls in lines.items()})
    expected.update(source for source, _ in junk)
    assert per_source == expected
    reasons = {r["reason"] for r in quarantine.select("reason").collect()}
    assert {"unknown-source", "empty"} <= reasons
    assert set(logs.columns) >= {
        "timestamp", "level", "component", "pid", "message", "template",
        "topic", "partition", "offset", "source", "date", "hour",
    }  # fmt: skip
    assert logs.where("timestamp is null").count() == 0
    metrics = spark.read.parquet(str(warehouse / "metrics_minute"))
    assert metrics.groupBy().sum("lines").collect()[0][0] == total_logs
    assert metrics.where("error_rate < 0 or error_rate > 1").count() == 0

    again = run_etl(bootstrap, warehouse, checkpoint)
    assert again["records"] == 0
    assert spark.read.parquet(str(warehouse / "logs")).count() == total_logs


def run_etl(bootstrap: str, warehouse: Path, checkpoint: Path) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "weir.cli.main", "pipeline", "logs", "--topic", "loglines",
        "--warehouse", str(warehouse), "--checkpoint", str(checkpoint),
        "--bootstrap-server", bootstrap, "--once", "--master", "local[2]",
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ}, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_logs_stream_is_exactly_once_across_kill_9(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "killed", 2)
    feeder = LineFeeder(bootstrap, "killed")
    job = LogsJobProcess(bootstrap, "killed", tmp_path)
    try:
        feeder.start()
        job.start()
        job.wait_for(lambda: len(job.committed()) >= 2, "two committed batches")
        job.kill()
        before_kill = len(job.committed())

        job.start()
        job.wait_for(lambda: len(job.committed()) > before_kill, "a batch after the restart")
        placed = set(feeder.stop())
        job.wait_for(
            lambda: sum(m["records"] for m in job.committed()) >= len(placed), "catching up"
        )
        assert job.terminate() == 0, job.output()
    finally:
        feeder.stop()
        job.close()

    warehouse = str(job.warehouse)
    logs = spark.read.parquet(f"{warehouse}/logs").select("topic", "partition", "offset")
    quarantine = spark.read.parquet(f"{warehouse}/quarantine")
    rows = logs.union(quarantine.select("topic", "partition", "offset")).collect()
    landed = [(r["partition"], r["offset"]) for r in rows]
    assert {r["topic"] for r in rows} == {"killed"}
    assert len(landed) == len(set(landed)), "some lines are in the warehouse twice"
    assert set(landed) == placed
    metrics = spark.read.parquet(f"{warehouse}/metrics_minute")
    assert metrics.groupBy().sum("lines").collect()[0][0] == logs.count()
    report = json.loads(job.output().strip().splitlines()[-1])
    assert report["records"] > 0
