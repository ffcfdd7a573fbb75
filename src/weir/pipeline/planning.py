"""What the batch and the streaming reader share: the input partition, the driver's view of the
subscribed partitions, the starting offsets, and the executor's read of one offset range."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import Consumer
from pyspark.sql.datasource import InputPartition

from weir.pipeline.kafka_io import (
    RangeReader,
    offsets_for_timestamp,
    reader_config,
    subscribed_partitions,
    watermarks,
)
from weir.pipeline.offsets import (
    OffsetRange,
    OffsetSpec,
    TopicPartition,
    Watermarks,
    parse_offset_spec,
)
from weir.pipeline.options import SourceOptions


class OffsetRangePartition(InputPartition):
    """One Spark input partition: an offset range of one topic-partition."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(offsets)
        self.offsets = offsets


def as_partitions(ranges: Sequence[OffsetRange]) -> list[InputPartition]:
    return [OffsetRangePartition(r) for r in ranges]


def open_consumer(options: SourceOptions) -> Consumer:
    """A consumer for metadata and watermarks; it never joins a group or commits."""
    return Consumer(reader_config(options.client))


def subscribed_watermarks(
    consumer: Consumer, options: SourceOptions
) -> dict[TopicPartition, Watermarks]:
    """Log start offset and high watermark of every partition the options subscribe to."""
    found = subscribed_partitions(consumer, topics=options.topics, pattern=options.pattern)
    return watermarks(consumer, found)


def starting_spec(
    consumer: Consumer,
    options: SourceOptions,
    partitions: Sequence[TopicPartition],
    *,
    default: int,
) -> OffsetSpec:
    """``startingTimestamp`` if set (it takes precedence, as in Spark), else ``startingOffsets``."""
    if options.starting_timestamp_ms is not None:
        return offsets_for_timestamp(consumer, partitions, options.starting_timestamp_ms)
    return parse_offset_spec(options.starting, default=default, option="startingOffsets")


def read_partition(
    options: SourceOptions,
    partition: InputPartition,
    *,
    include_timestamps: bool = True,
    header_values: Sequence[str] = (),
) -> Iterator[pa.RecordBatch]:
    """The records of one planned partition, as Arrow batches (runs on an executor), with a
    column per header of ``header_values`` (``kafka_io.header_column``)."""
    if not isinstance(partition, OffsetRangePartition):
        # With nothing to read, Spark still runs one task with a placeholder partition.
        return iter(())
    reader = RangeReader(
        options.client,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_s=options.poll_timeout_s,
        include_timestamps=include_timestamps,
        header_values=header_values,
    )
    return reader.read(partition.offsets)
