"""The log ETL job: raw log lines in a topic to a Parquet warehouse of logs, quarantine, metrics.

Each record's value is one raw line (UTF-8); its key, when present, names the source format
(``hdfs``, ``apache``, ``linux``, ... or an alias, see ``weir.pipeline.parsing``); without a key
the format is detected from the line. Parsing runs in the executors' Python workers over Arrow
batches. A line that does not parse goes to ``quarantine`` with the reason, never dropped.

The job is one Structured Streaming query: ``readStream.format("weir")`` from the earliest
offsets, parsed, and written batch by batch with ``foreachBatch``. Spark records each
micro-batch's offsets in the checkpoint before it runs and replays an unfinished batch after a
restart; ``weir.pipeline.warehouse.BatchCommits`` makes the replay replace, never duplicate, what
the batch wrote. So each input line lands in the warehouse exactly once, even across a kill -9
of the driver. Each batch's per-minute metrics also go, as JSON, to a metrics topic; there a
replayed batch may publish its rows again (at-least-once; each row carries its ``batch``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from weir.pipeline.kafka_io import ensure_topic
from weir.pipeline.parsing import LineParser, ParsedLine
from weir.pipeline.source import FORMAT
from weir.pipeline.warehouse import BatchCommits

ERROR_LEVELS = ("ERROR", "CRITICAL", "FATAL")
TABLES = ("logs", "quarantine", "metrics_minute")
TRIGGER_INTERVAL = "1 second"
STOP_POLL_S = 1
PARSED = StructType(
    [
        StructField("parsed", IntegerType()),
        StructField("source", StringType()),
        StructField("timestamp", TimestampType()),
        StructField("level", StringType()),
        StructField("component", StringType()),
        StructField("pid", LongType()),
        StructField("message", StringType()),
        StructField("template", StringType()),
        StructField("line", StringType()),
        StructField("reason", StringType()),
        StructField("detail", StringType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
    ]
)
PARSED_ARROW = pa.schema(
    [
        ("parsed", pa.int32()),
        ("source", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("level", pa.string()),
        ("component", pa.string()),
        ("pid", pa.int64()),
        ("message", pa.string()),
        ("template", pa.string()),
        ("line", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)
PARSED_FIELDS = ("source", "level", "component", "pid", "message", "template")
QUARANTINE_FIELDS = ("source", "line", "reason", "detail")
LOGS_PARTITIONING = ("source", "date", "hour")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogsJob:
    """Where the job reads and writes, and how it runs."""

    bootstrap: str
    topic: str
    warehouse: Path
    checkpoint: Path
    metrics_topic: str | None = None
    once: bool = False
    max_records_per_trigger: int | None = None

    @property
    def metrics_topic_name(self) -> str:
        return self.metrics_topic or f"{self.topic}.metrics"


@dataclass(slots=True)
class RunSummary:
    """What the micro-batches committed by this run read and wrote."""

    batches: int = 0
    records: int = 0
    logs: int = 0
    quarantined: int = 0
    replayed: list[int] = field(default_factory=list)

    def add(self, marker: dict[str, Any]) -> None:
        self.batches += 1
        self.records += marker["records"]
        self.logs += marker["logs"]
        self.quarantined += marker["quarantined"]


def parse_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Raw records (key, value, topic, partition, offset) to one row per line, parsed or not."""
    parser = LineParser(year=date.today().year)
    for batch in batches:
        yield _parse_batch(parser, batch)


def _parse_batch(parser: LineParser, batch: pa.RecordBatch) -> pa.RecordBatch:
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    rows: dict[str, list[object]] = {name: [] for name in PARSED_ARROW.names}
    for key, value in zip(keys, values, strict=True):
        source = key.decode("utf-8", "replace") if key is not None else None
        line = (value or b"").decode("utf-8", "replace")
        outcome = parser.parse(source, line)
        if isinstance(outcome, ParsedLine):
            rows["parsed"].append(1)
            rows["timestamp"].append(outcome.timestamp)
            fields: tuple[str, ...] = PARSED_FIELDS
        else:
            rows["parsed"].append(0)
            rows["timestamp"].append(None)
            fields = QUARANTINE_FIELDS
        for name in PARSED_FIELDS + QUARANTINE_FIELDS[1:]:
            rows[name].append(getattr(outcome, name) if name in fields else None)
    columns = [
        pa.array(rows[name], PARSED_ARROW.field(name).type)
        for name in PARSED_ARROW.names
        if name not in ("topic", "partition", "offset", "timestamp")
    ]
    naive = pa.array(rows["timestamp"], pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC"))
    columns.insert(2, naive)
    columns += [batch.column("topic"), batch.column("partition"), batch.column("offset")]
    return pa.RecordBatch.from_arrays(columns, schema=PARSED_ARROW)


def logs_table(parsed: DataFrame) -> DataFrame:
    return parsed.where("parsed = 1").select(
        "timestamp", "level", "component", "pid", "message", "template",
        "topic", "partition", "offset", "source",
        F.date_format("timestamp", "yyyy-MM-dd").alias("date"),
        F.hour("timestamp").alias("hour"),
    )  # fmt: skip


def quarantine_table(parsed: DataFrame) -> DataFrame:
    return parsed.where("parsed = 0").select(
        "source", "line", "reason", "detail", "topic", "partition", "offset"
    )


def metrics_minute_table(logs: DataFrame, batch_id: int) -> DataFrame:
    """Lines per (source, minute, level) in one batch, with the source-minute's total and
    error rate in that batch."""
    minute = F.date_trunc("minute", "timestamp").alias("minute")
    counts = logs.groupBy("source", minute, "level").agg(
        F.count(F.lit(1)).alias("lines"),
    )
    per_minute = Window.partitionBy("source", "minute")
    is_error = F.col("level").isin(*ERROR_LEVELS)
    errors = F.sum(F.when(is_error, F.col("lines")).otherwise(0)).over(per_minute)
    total = F.sum("lines").over(per_minute)
    return counts.select(
        "source", "minute", "level", "lines",
        total.alias("source_lines"), (errors / total).alias("error_rate"),
        F.lit(batch_id).cast("long").alias("batch"),
    )  # fmt: skip


def run_logs_job(
    spark: SparkSession, job: LogsJob, *, stop: threading.Event | None = None
) -> RunSummary:
    """Runs the streaming query until it finishes (``once``) or ``stop`` is set, then stops it.

    A failed query raises its StreamingQueryException.
    """
    ensure_topic({"bootstrap.servers": job.bootstrap}, job.metrics_topic_name)
    writer = BatchWriter(job)
    query = start_query(spark, job, writer)
    try:
        while query.isActive and not (stop is not None and stop.is_set()):
            query.awaitTermination(STOP_POLL_S)
    finally:
        query.stop()
    query.awaitTermination()
    return writer.summary


def start_query(spark: SparkSession, job: LogsJob, writer: BatchWriter) -> StreamingQuery:
    reader = (
        spark.readStream.format(FORMAT)
        .option("bootstrap.servers", job.bootstrap)
        .option("subscribe", job.topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "false")
    )
    if job.max_records_per_trigger is not None:
        reader = reader.option("maxRecordsPerTrigger", str(job.max_records_per_trigger))
    parsed = (
        reader.load()
        .select("key", "value", "topic", "partition", "offset")
        .mapInArrow(parse_batches, PARSED)
    )
    stream = parsed.writeStream.foreachBatch(writer).option(
        "checkpointLocation", str(job.checkpoint)
    )
    if job.once:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=TRIGGER_INTERVAL)
    return stream.start()


class BatchWriter:
    """The ``foreachBatch`` function: one micro-batch of parsed rows into the three tables.

    Runs on the driver. A batch whose marker exists (it was committed before Spark recorded it
    done) is skipped; otherwise its tables are staged, its metrics published to the metrics
    topic, and its files committed into the warehouse.
    """

    def __init__(self, job: LogsJob) -> None:
        self.job = job
        self.summary = RunSummary()
        self._commits: BatchCommits | None = None

    def __call__(self, parsed: DataFrame, batch_id: int) -> None:
        commits = self._batch_commits()
        if commits.committed(batch_id) is not None:
            self.summary.replayed.append(batch_id)
            return
        staging = commits.stage(batch_id)
        parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts = write_tables(parsed, staging, batch_id)
        finally:
            parsed.unpersist()
        self._publish_metrics(parsed.sparkSession, staging / "metrics_minute")
        self.summary.add(commits.commit(batch_id, counts))

    def _publish_metrics(self, spark: SparkSession, staged: Path) -> None:
        metrics = spark.read.parquet(str(staged))
        rows = metrics.select(
            F.col("source").cast("binary").alias("key"),
            F.to_json(F.struct(*metrics.columns)).cast("binary").alias("value"),
        )
        rows.write.format(FORMAT).option("bootstrap.servers", self.job.bootstrap).option(
            "topic", self.job.metrics_topic_name
        ).mode("append").save()

    def _batch_commits(self) -> BatchCommits:
        if self._commits is None:
            self._commits = BatchCommits(self.job.warehouse, checkpoint_query_id(self.job))
        return self._commits


def checkpoint_query_id(job: LogsJob) -> str:
    """The query id Spark keeps in the checkpoint's ``metadata`` file; it outlives restarts."""
    document = json.loads((job.checkpoint / "metadata").read_text())
    query_id: str = document["id"]
    return query_id


def write_tables(parsed: DataFrame, staging: Path, batch_id: int) -> dict[str, int]:
    """Writes the batch's three tables under ``staging`` and counts its rows.

    The logs are shuffled by their table partition first, so each ``source/date/hour``
    directory gets one file per batch rather than one per input task.
    """
    logs = logs_table(parsed)
    by_directory = logs.repartition(*LOGS_PARTITIONING)
    by_directory.write.partitionBy(*LOGS_PARTITIONING).parquet(str(staging / "logs"))
    quarantine_table(parsed).write.parquet(str(staging / "quarantine"))
    metrics_minute_table(logs, batch_id).write.parquet(str(staging / "metrics_minute"))
    counts = {row["parsed"]: row["count"] for row in parsed.groupBy("parsed").count().collect()}
    return {
        "records": sum(counts.values()),
        "logs": counts.get(1, 0),
        "quarantined": counts.get(0, 0),
    }
