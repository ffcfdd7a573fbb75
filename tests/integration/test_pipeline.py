"""The Spark pipeline against a real broker: format("weir") read and write, the log ETL job."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
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
    run_logs_job_command,
    stream,
)
from security_setup import make_certificates, sasl_ssl_settings, start_scram_broker

from weir.pipeline.logs_job import read_logs, read_templates

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


def test_write_and_read_over_sasl_ssl(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The security settings by their own names (the write) and with Spark's `kafka.` prefix
    (the read), on a SASL_SSL listener with SCRAM-SHA-512."""
    directory = tmp_path_factory.mktemp("secure-pipeline")
    certs = make_certificates(directory / "certs")
    broker = start_scram_broker(directory / "broker", certs)
    try:
        secured = f"127.0.0.1:{broker.listeners['SASL_SSL']}"
        create_topic(f"127.0.0.1:{broker.listeners['PLAINTEXT']}", "secured", 2)
        rows = [(f"k{i}".encode(), f"value {i}".encode()) for i in range(100)]
        frame = spark.createDataFrame(rows, "key binary, value binary")
        frame.write.format("weir").option("bootstrap.servers", secured).options(
            topic="secured", **sasl_ssl_settings(certs)
        ).mode("append").save()
        prefixed = {f"kafka.{k}": v for k, v in sasl_ssl_settings(certs).items()}
        back = read(spark, secured, subscribe="secured", **prefixed).collect()
        assert sorted((bytes(r["key"]), bytes(r["value"])) for r in back) == sorted(rows)
    finally:
        broker.stop()


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


ORDERS_FORMAT = """\
name = "orders"
pattern = '%{TIMESTAMP_ISO8601:ts} \\[%{WORD:level}\\] order=%{NOTSPACE:id} %{GREEDYDATA:message}'
[timestamp]
field = "ts"
format = "ISO8601"
"""
# What the warehouse's logs files held before host, thread, raw_level and fields were added.
OLD_LOGS_SCHEMA = pa.schema(
    [("timestamp", pa.timestamp("us", tz="UTC")), ("level", pa.string()),
     ("component", pa.string()), ("pid", pa.int64()), ("message", pa.string()),
     ("template", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
     ("offset", pa.int64())]
)  # fmt: skip


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
    orders = [f"2024-07-01T09:30:0{n}Z [info] order=ORD-{n} paid" for n in range(5)]
    records += [{"key": b"orders", "value": line.encode()} for line in orders]
    # Yearless lines without a key: detected, and dated in their record's year.
    stamped = 1_704_412_800_000  # 2024-01-05: their "Dec 10" is in 2023
    records += [{"value": line.encode(), "timestamp": stamped} for line in lines["openssh"][:10]]
    produce(bootstrap, "loglines", records)
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"
    old_file = warehouse / "logs" / "source=hdfs" / "date=2008-11-09" / "hour=20" / "old.parquet"
    old_file.parent.mkdir(parents=True)
    old_row = [datetime(2008, 11, 9, 20, tzinfo=UTC), "INFO", "dfs.Old", 1, "old", "old",
               "loglines", 0, -1]  # fmt: skip
    columns = {name: [value] for name, value in zip(OLD_LOGS_SCHEMA.names, old_row, strict=True)}
    pq.write_table(pa.Table.from_pydict(columns, schema=OLD_LOGS_SCHEMA), old_file)
    formats = tmp_path / "formats"
    formats.mkdir()
    (formats / "orders.toml").write_text(ORDERS_FORMAT)

    report = run_etl(bootstrap, warehouse, checkpoint, "--formats", str(formats))

    logs = read_logs(spark, warehouse).where("offset >= 0")
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
    expected.update({"orders": len(orders), "openssh": 10})
    assert per_source == expected
    reasons = {r["reason"] for r in quarantine.select("reason").collect()}
    assert {"unknown-source", "empty"} <= reasons
    assert set(logs.columns) >= {
        "timestamp", "level", "component", "pid", "message", "template",
        "topic", "partition", "offset", "source", "date", "hour",
        "raw_level", "host", "thread", "fields",
    }  # fmt: skip
    assert logs.where("timestamp is null").count() == 0
    ssh = logs.where("source = 'openssh'")
    assert {r["host"] for r in ssh.select("host").collect()} == {"LabSZ"}
    # Yearless lines are never dated after their record (the old default year put them there).
    assert 2023 in {r["year"] for r in ssh.selectExpr("year(timestamp) as year").collect()}
    latest = ssh.selectExpr("max(timestamp) as latest").collect()[0]["latest"]
    assert latest <= datetime.now() + timedelta(days=1)
    keeper = logs.where("source = 'zookeeper'").select("fields", "thread").collect()
    assert all(r["fields"]["line"].isdigit() and r["thread"] for r in keeper)
    order_rows = logs.where("source = 'orders'").select("fields", "level").collect()
    assert sorted(r["fields"]["id"] for r in order_rows) == [f"ORD-{n}" for n in range(5)]
    old = read_logs(spark, warehouse).where("offset = -1").collect()
    assert [(r["message"], r["host"], r["fields"]) for r in old] == [("old", None, None)]
    metrics = spark.read.parquet(str(warehouse / "metrics_minute"))
    assert metrics.groupBy().sum("lines").collect()[0][0] == total_logs
    assert metrics.where("error_rate < 0 or error_rate > 1").count() == 0
    assert old[0]["template_id"] is None
    templates = read_templates(spark, warehouse)
    assert set(templates.columns) >= {"id", "template", "first_seen", "last_seen", "count"}
    assert logs.where("template_id is null").count() == 0
    per_id = {r["template_id"]: r["count"] for r in logs.groupBy("template_id").count().collect()}
    assert {r["id"]: r["count"] for r in templates.collect()} == per_id
    # One template per HDFS event of the sample: "Receiving block blk_<*> src: ... dest: ..."
    receiving = logs.where("source = 'hdfs' and message like 'Receiving block %'")
    assert receiving.select("template_id").distinct().count() == 1

    # The same job from a config file (relative paths from its directory), flags beside it.
    config = tmp_path / "logs.toml"
    config.write_text(
        f'"bootstrap.servers" = "{bootstrap}"\nsubscribe = "loglines"\nwarehouse = "warehouse"\n'
        'checkpointLocation = "checkpoint"\nformats = ["formats"]\n"spark.master" = "local[2]"\n'
    )
    again = run_logs_job_command(["--config", str(config), "--once"])
    assert again["records"] == 0 and again["warehouse"] == str(warehouse)
    assert read_logs(spark, warehouse).count() == total_logs + 1
    assert read_templates(spark, warehouse).count() == len(per_id)


KEPT_FORMAT = """\
name = "{name}"
detect = false
pattern = '%{{NOTSPACE:ts}} %{{GREEDYDATA:message}}'
[timestamp]
field = "ts"
format = "%Y-%m-%dT%H:%M:%S"
on_error = "{on_error}"
"""


def test_logs_etl_keeps_lines_whose_timestamp_it_cannot_read_when_their_format_says_so(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "unreadable", 1)
    stamped = 1_704_412_800_000  # the records' time: 2024-01-05T00:00:00Z
    lines = [(b"timed", b"2024-03-01T10:00:00 own time"), (b"timed", b"?? record's time"),
             (b"untimed", b"?? no time"), (b"quarantined", b"?? quarantined")]  # fmt: skip
    produce(bootstrap, "unreadable",
            [{"key": key, "value": value, "timestamp": stamped} for key, value in lines])
    formats = tmp_path / "formats"
    formats.mkdir()
    for name, on_error in (("timed", "record_time"), ("untimed", "null"),
                           ("quarantined", "quarantine")):  # fmt: skip
        (formats / f"{name}.toml").write_text(KEPT_FORMAT.format(name=name, on_error=on_error))
    warehouse = tmp_path / "warehouse"
    report = run_logs_job_command([
        "--topic", "unreadable", "--warehouse", str(warehouse), "--checkpoint",
        str(tmp_path / "checkpoint"), "--bootstrap-server", bootstrap, "--once",
        "--master", "local[2]", "--formats", str(formats),
    ])  # fmt: skip
    assert (report["logs"], report["quarantined"]) == (3, 1)
    rows = read_logs(spark, warehouse).selectExpr(
        "message", "timestamp_inferred", "unix_millis(timestamp) as ms", "date", "hour"
    ).collect()
    found = {r["message"]: (r["timestamp_inferred"], r["ms"], r["date"], r["hour"]) for r in rows}
    own = datetime(2024, 3, 1, 10, tzinfo=UTC)
    assert found == {
        "own time": (False, int(own.timestamp() * 1000), own.date(), 10),
        "record's time": (True, stamped, date(2024, 1, 5), 0),
        "no time": (True, None, None, None),
    }
    quarantine = spark.read.parquet(str(warehouse / "quarantine")).collect()
    assert [(r["source"], r["reason"]) for r in quarantine] == [("quarantined", "bad-timestamp")]


def run_etl(bootstrap: str, warehouse: Path, checkpoint: Path, *extra: str) -> dict[str, Any]:
    return run_logs_job_command([
        "--topic", "loglines", "--warehouse", str(warehouse), "--checkpoint", str(checkpoint),
        "--bootstrap-server", bootstrap, "--once", "--master", "local[2]", *extra,
    ])  # fmt: skip


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
        batches_before_kill = {marker["batch"] for marker in job.committed()}

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
    # Masked messages recur across the kill: each has the same template id in the batches
    # committed before the kill as in those after the restart (the miner was restored).
    stamped = spark.read.parquet(f"{warehouse}/logs").selectExpr(
        "source", "message", "template", "template_id",
        "cast(regexp_extract(input_file_name(), 'batch-([0-9]+)-', 1) as int) as batch",
    ).collect()  # fmt: skip
    assert all(row["template_id"] is not None for row in stamped)
    before = {(r["source"], r["template"]): r["template_id"] for r in stamped
              if r["batch"] in batches_before_kill}  # fmt: skip
    after = {(r["source"], r["template"]): r["template_id"] for r in stamped
             if r["batch"] not in batches_before_kill}  # fmt: skip
    both = before.keys() & after.keys()
    assert len(both) >= 5, (len(before), len(after))
    assert {key: before[key] for key in both} == {key: after[key] for key in both}
    ids_of_message: dict[tuple[str, str], set[int]] = {}
    for r in stamped:
        ids_of_message.setdefault((r["source"], r["message"]), set()).add(r["template_id"])
    assert all(len(ids) == 1 for ids in ids_of_message.values())
