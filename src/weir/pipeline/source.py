"""`spark.read.format("weir")` and `df.write.format("weir")`: weir topics as a PySpark data source.

Options follow Spark's Kafka source: ``bootstrap.servers`` (or ``kafka.bootstrap.servers``),
``subscribe`` (comma-separated topics) or ``subscribePattern`` (a regex over topic names),
``startingOffsets`` / ``endingOffsets`` (``earliest``, ``latest`` or per-partition JSON),
``failOnDataLoss`` (default true), ``minPartitions`` (default: this machine's cores),
``includeHeaders`` (default true) and ``pollTimeoutMs``. Other ``kafka.``-prefixed options go to
librdkafka unchanged. Columns: key, value, topic, partition, offset, timestamp, timestampType,
headers.

The sink writes columns ``value`` (required), ``key``, ``headers``, ``topic`` (unless the
``topic`` option is set) and ``partition`` with an idempotent producer and acks=all; each Spark
task flushes before it reports success, so a finished write is durable. Like Spark's Kafka sink
it is at-least-once: a retried task may write its records twice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from weir.pipeline.kafka_io import RangeReader, reader_config, subscribed_partitions, watermarks
from weir.pipeline.offsets import (
    EARLIEST,
    LATEST,
    OffsetOptionError,
    OffsetRange,
    parse_offset_spec,
    plan_ranges,
    resolve,
    split_ranges,
)

log = logging.getLogger(__name__)

FORMAT = "weir"
HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
RECORD_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]


def register(spark: SparkSession) -> None:
    """Make ``format("weir")`` available in ``spark``."""
    spark.dataSource.register(WeirDataSource)


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    """The source's options, checked once on the driver."""

    client: dict[str, str]
    topics: tuple[str, ...] | None
    pattern: str | None
    starting: str | None
    ending: str | None
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int
    poll_timeout_s: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        lowered = {k.lower(): v for k, v in options.items()}
        subscribe, pattern = lowered.get("subscribe"), lowered.get("subscribepattern")
        if (subscribe is None) == (pattern is None):
            raise OffsetOptionError("set exactly one of the options subscribe, subscribePattern")
        return cls(
            client=client_options(options),
            topics=tuple(t.strip() for t in subscribe.split(",") if t.strip())
            if subscribe
            else None,
            pattern=pattern,
            starting=lowered.get("startingoffsets"),
            ending=lowered.get("endingoffsets"),
            fail_on_data_loss=_flag(lowered.get("failondataloss"), default=True),
            include_headers=_flag(lowered.get("includeheaders"), default=True),
            min_partitions=int(lowered.get("minpartitions") or os.cpu_count() or 1),
            poll_timeout_s=int(lowered.get("polltimeoutms") or 120_000) / 1000,
        )


def client_options(options: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings: ``bootstrap.servers`` and every ``kafka.``-prefixed option."""
    client = {k[len("kafka.") :]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    servers = next((v for k, v in options.items() if k.lower() == "bootstrap.servers"), None)
    if servers is not None:
        client["bootstrap.servers"] = servers
    if "bootstrap.servers" not in client:
        raise OffsetOptionError("the option bootstrap.servers is required")
    return client


def _flag(value: str | None, *, default: bool) -> bool:
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise OffsetOptionError(f"expected true or false, got {value!r}")
    return value.strip().lower() == "true"


class WeirDataSource(DataSource):
    """The ``weir`` format: topics read as Spark's Kafka source reads them, and written."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        include = _flag(
            next((v for k, v in self.options.items() if k.lower() == "includeheaders"), None),
            default=True,
        )
        headers = [StructField("headers", HEADERS_TYPE)] if include else []
        return StructType(RECORD_FIELDS + headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return WeirBatchReader(SourceOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return WeirWriter(dict(self.options), schema)


class OffsetRangePartition(InputPartition):
    """One Spark input partition: an offset range of one topic-partition."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(offsets)
        self.offsets = offsets


class WeirBatchReader(DataSourceReader):
    """Plans offset ranges on the driver; each task reads its range with its own consumer."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return [OffsetRangePartition(r) for r in self.plan()]

    def plan(self) -> list[OffsetRange]:
        o = self.options
        starting = parse_offset_spec(o.starting, default=EARLIEST, option="startingOffsets")
        ending = parse_offset_spec(o.ending, default=LATEST, option="endingOffsets")
        if ending == EARLIEST:
            raise OffsetOptionError("endingOffsets cannot be earliest")
        consumer = Consumer(reader_config(o.client))
        try:
            found = subscribed_partitions(consumer, topics=o.topics, pattern=o.pattern)
            marks = watermarks(consumer, found)
        finally:
            consumer.close()
        starts = resolve(starting, marks, option="startingOffsets")
        ends = resolve(ending, marks, option="endingOffsets")
        ranges, lost = plan_ranges(starts, ends, marks, fail_on_data_loss=o.fail_on_data_loss)
        for message in lost:
            log.warning("%s", message)
        return split_ranges(ranges, o.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRangePartition):
            # With nothing to read, Spark still runs one task with a placeholder partition.
            return iter(())
        o = self.options
        reader = RangeReader(
            o.client,
            include_headers=o.include_headers,
            fail_on_data_loss=o.fail_on_data_loss,
            poll_timeout_s=o.poll_timeout_s,
        )
        return reader.read(partition.offsets)


@dataclass
class ProducedCount(WriterCommitMessage):
    records: int


class WeirWriter(DataSourceArrowWriter):
    """Produces each row with an idempotent, acks=all producer per task."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.client = client_options(options)
        self.topic = next((v for k, v in options.items() if k.lower() == "topic"), None)
        names = set(schema.fieldNames())
        if "value" not in names:
            raise OffsetOptionError("writing to weir needs a value column")
        if self.topic is None and "topic" not in names:
            raise OffsetOptionError("writing to weir needs a topic column or the topic option")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedCount:
        producer = Producer({"acks": "all", "enable.idempotence": True, **self.client})
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: Any) -> None:
            if error is not None:
                failures.append(error)

        count = 0
        for batch in iterator:
            for row in _rows(batch, self.topic):
                _produce(producer, row, delivered)
                count += 1
        remaining = producer.flush(120)
        if failures or remaining:
            raise KafkaException(failures[0] if failures else KafkaError(KafkaError._TIMED_OUT))
        return ProducedCount(records=count)


def _rows(batch: pa.RecordBatch, topic: str | None) -> Iterator[dict[str, Any]]:
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    size = batch.num_rows
    for i in range(size):
        yield {
            "topic": topic if topic is not None else columns["topic"][i],
            "value": _bytes(columns["value"][i]),
            "key": _bytes(columns["key"][i]) if "key" in columns else None,
            "partition": columns["partition"][i] if "partition" in columns else None,
            "headers": _header_list(columns["headers"][i]) if "headers" in columns else None,
        }


def _produce(producer: Producer, row: dict[str, Any], delivered: Any) -> None:
    kwargs = {k: v for k, v in row.items() if v is not None and k != "topic"}
    while True:
        try:
            producer.produce(row["topic"], on_delivery=delivered, **kwargs)
            break
        except BufferError:
            producer.poll(0.1)
    producer.poll(0)


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _header_list(headers: list[dict[str, Any]] | None) -> list[tuple[str, bytes | None]] | None:
    if not headers:
        return None
    return [(h["key"], _bytes(h["value"])) for h in headers]
