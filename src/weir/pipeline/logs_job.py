"""The log ETL job: raw log lines in a topic to a Parquet warehouse of logs, quarantine, metrics.

Each record's value is one raw line (UTF-8); its key, when present, names the source format
(``hdfs``, ``apache``, ``linux``, ... or an alias, see ``weir.pipeline.parsing``); without a key
the format is detected from the line. Parsing runs in the executors' Python workers over Arrow
batches. A line that does not parse goes to ``quarantine`` with the reason, never dropped.

``run_once`` reads everything from the offsets stored in the checkpoint directory (or from the
earliest offsets) up to the high watermarks at start, writes the three tables, and then stores
the new offsets. If it dies between the writes and that store, the next run writes the same
records again: exactly-once needs the streaming mode, which is not built yet.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import Consumer
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from weir.pipeline.kafka_io import reader_config, subscribed_partitions, watermarks
from weir.pipeline.parsing import LineParser, ParsedLine
from weir.pipeline.source import FORMAT

ERROR_LEVELS = ("ERROR", "CRITICAL", "FATAL")
OFFSETS_FILE = "offsets.json"
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


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """What one ``run_once`` read and wrote."""

    records: int
    logs: int
    quarantined: int
    offsets: dict[str, dict[str, int]]


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


def metrics_minute_table(logs: DataFrame) -> DataFrame:
    """Lines per (source, minute, level), with the source-minute's total and error rate."""
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
    )  # fmt: skip


def run_once(
    spark: SparkSession, *, bootstrap: str, topic: str, warehouse: Path, checkpoint: Path
) -> RunSummary:
    """Everything from the checkpoint's offsets to the high watermarks at start, to Parquet."""
    starting = _stored_offsets(checkpoint)
    ending = _high_watermarks(bootstrap, topic)
    raw = (
        spark.read.format(FORMAT)
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps(starting) if starting else "earliest")
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "false")
        .load()
    )
    parsed = raw.select("key", "value", "topic", "partition", "offset").mapInArrow(
        parse_batches, PARSED
    )
    parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        summary = _write_tables(parsed, warehouse, ending)
    finally:
        parsed.unpersist()
    _store_offsets(checkpoint, ending)
    return summary


def _write_tables(
    parsed: DataFrame, warehouse: Path, ending: dict[str, dict[str, int]]
) -> RunSummary:
    logs = logs_table(parsed)
    quarantine = quarantine_table(parsed)
    logs.write.mode("append").partitionBy("source", "date", "hour").parquet(str(warehouse / "logs"))
    quarantine.write.mode("append").parquet(str(warehouse / "quarantine"))
    metrics_minute_table(logs).write.mode("append").parquet(str(warehouse / "metrics_minute"))
    counts = {row["parsed"]: row["count"] for row in parsed.groupBy("parsed").count().collect()}
    return RunSummary(
        records=sum(counts.values()),
        logs=counts.get(1, 0),
        quarantined=counts.get(0, 0),
        offsets=ending,
    )


def _high_watermarks(bootstrap: str, topic: str) -> dict[str, dict[str, int]]:
    consumer = Consumer(reader_config({"bootstrap.servers": bootstrap}))
    try:
        marks = watermarks(consumer, subscribed_partitions(consumer, topics=[topic], pattern=None))
    finally:
        consumer.close()
    return {topic: {str(p): m.high for (_, p), m in sorted(marks.items())}}


def _stored_offsets(checkpoint: Path) -> dict[str, dict[str, int]] | None:
    path = checkpoint / OFFSETS_FILE
    if not path.exists():
        return None
    stored: dict[str, dict[str, int]] = json.loads(path.read_text())
    return stored


def _store_offsets(checkpoint: Path, offsets: dict[str, dict[str, int]]) -> None:
    checkpoint.mkdir(parents=True, exist_ok=True)
    temporary = checkpoint / f"{OFFSETS_FILE}.tmp"
    temporary.write_text(json.dumps(offsets, sort_keys=True))
    temporary.replace(checkpoint / OFFSETS_FILE)
