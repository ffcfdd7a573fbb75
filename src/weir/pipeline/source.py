"""The ``weir`` format: topics read and written by Spark as Spark's Kafka connector does.

``spark.read.format("weir")`` and ``spark.readStream.format("weir")`` (see
``weir.pipeline.streaming``) take options modelled on Spark's Kafka source:
``bootstrap.servers`` (or ``kafka.bootstrap.servers``), ``subscribe`` (comma-separated topics)
or ``subscribePattern`` (a regex over topic names), ``startingOffsets`` / ``endingOffsets``
(``earliest``, ``latest`` or per-partition JSON), ``startingTimestamp`` (milliseconds since the
epoch: each partition starts at its first record stamped at or after it, or at its end if there
is none; it takes precedence over ``startingOffsets``), ``failOnDataLoss`` (default true),
``minPartitions`` (default: this machine's cores), ``maxRecordsPerTrigger`` (streaming only),
``includeHeaders`` (default true) and ``pollTimeoutMs``. Other ``kafka.``-prefixed options go to
librdkafka unchanged. Columns: key, value, topic, partition, offset, timestamp, timestampType,
headers.

``df.write.format("weir")`` and ``df.writeStream.format("weir")`` produce rows; see
``weir.pipeline.sink``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
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
from weir.pipeline.options import SourceOptions, flag
from weir.pipeline.planning import (
    as_partitions,
    open_consumer,
    read_partition,
    starting_spec,
    subscribed_watermarks,
)
from weir.pipeline.sink import WeirStreamWriter, WeirWriter
from weir.pipeline.streaming import WeirStreamReader

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


class WeirDataSource(DataSource):
    """The ``weir`` format: topics read as Spark's Kafka source reads them, and written."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        include = flag(
            next((v for k, v in self.options.items() if k.lower() == "includeheaders"), None),
            default=True,
        )
        headers = [StructField("headers", HEADERS_TYPE)] if include else []
        return StructType(RECORD_FIELDS + headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return WeirBatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return WeirStreamReader(SourceOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return WeirWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return WeirStreamWriter(dict(self.options), schema)


class WeirBatchReader(DataSourceReader):
    """Plans offset ranges on the driver; each task reads its range with its own consumer."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return as_partitions(self.plan())

    def plan(self) -> list[OffsetRange]:
        o = self.options
        ending = parse_offset_spec(o.ending, default=LATEST, option="endingOffsets")
        if ending == EARLIEST:
            raise OffsetOptionError("endingOffsets cannot be earliest")
        consumer = open_consumer(o)
        try:
            marks = subscribed_watermarks(consumer, o)
            starting = starting_spec(consumer, o, sorted(marks), default=EARLIEST)
        finally:
            consumer.close()
        starts = resolve(starting, marks, option="startingOffsets")
        ends = resolve(ending, marks, option="endingOffsets")
        ranges, lost = plan_ranges(starts, ends, marks, fail_on_data_loss=o.fail_on_data_loss)
        for message in lost:
            log.warning("%s", message)
        return split_ranges(ranges, o.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)
