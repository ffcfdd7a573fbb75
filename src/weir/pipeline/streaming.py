"""``spark.readStream.format("weir")``: topics as a micro-batch stream.

An offset is ``{"topic": {"partition": next_offset}}``; Spark stores the offsets of each
micro-batch in its checkpoint before the batch runs, so a restarted query replays exactly the
ranges of an unfinished batch and then continues. Options are the batch source's, except that
``startingOffsets`` defaults to ``latest`` (as in Spark's Kafka source) and applies only when a
query starts without a checkpoint; ``endingOffsets`` does not apply. ``maxRecordsPerTrigger``
caps the records of one micro-batch, shared among partitions in proportion to their backlog;
with ``Trigger.AvailableNow`` the query processes what is there when it starts, in batches of
that size, then stops.

Partitions that appear while the query runs (a topic grows, or a new topic matches
``subscribePattern``) are read from offset 0. When records are deleted (retention or
DeleteRecords) before the query read them, ``failOnDataLoss=true`` stops the query with a
message naming the partition and the lost offsets; ``false`` logs that message as a warning and
continues from the partition's log start offset.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import Consumer
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from weir.pipeline.kafka_io import watermarks
from weir.pipeline.offsets import (
    LATEST,
    TopicPartition,
    Watermarks,
    admit,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    resolve,
    split_ranges,
)
from weir.pipeline.options import SourceOptions
from weir.pipeline.planning import (
    as_partitions,
    open_consumer,
    read_partition,
    starting_spec,
    subscribed_watermarks,
)

log = logging.getLogger(__name__)

NEW_PARTITION_START = 0


class WeirStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans each micro-batch on the driver from the partitions' watermarks; executors read.

    Spark keeps one instance on the driver for the life of the query; it holds one consumer
    for metadata and watermarks, opened on first use.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._consumer: Consumer | None = None
        self._target: dict[TopicPartition, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_consumer"] = None
        return state

    def initialOffset(self) -> dict[str, dict[str, int]]:
        consumer = self._metadata_consumer()
        marks = subscribed_watermarks(consumer, self.options)
        spec = starting_spec(consumer, self.options, sorted(marks), default=LATEST)
        return offsets_to_json(resolve(spec, marks, option="startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        marks = subscribed_watermarks(self._metadata_consumer(), self.options)
        self._target = {tp: m.high for tp, m in marks.items()}

    def latestOffset(
        self, start: Mapping[str, Mapping[str, int]], limit: ReadLimit
    ) -> dict[str, dict[str, int]]:
        starts = offsets_from_json(start)
        marks = subscribed_watermarks(self._metadata_consumer(), self.options)
        begins = readable_starts(starts, marks)
        ends = {tp: max(begins[tp], self._high(tp, m)) for tp, m in marks.items()}
        if isinstance(limit, ReadMaxRows):
            ends = admit(begins, ends, limit.max_rows)
        # Partitions no longer subscribed keep their offsets, so nothing is read twice if
        # they come back.
        return offsets_to_json({**starts, **ends})

    def reportLatestOffset(self) -> dict[str, dict[str, int]]:
        marks = subscribed_watermarks(self._metadata_consumer(), self.options)
        return offsets_to_json({tp: m.high for tp, m in marks.items()})

    def partitions(
        self, start: Mapping[str, Mapping[str, int]], end: Mapping[str, Mapping[str, int]]
    ) -> Sequence[InputPartition]:
        starts, ends = offsets_from_json(start), offsets_from_json(end)
        moving = sorted(
            tp for tp, offset in ends.items() if offset > starts.get(tp, NEW_PARTITION_START)
        )
        if not moving:
            return []
        marks = watermarks(self._metadata_consumer(), moving)
        begins = {tp: starts.get(tp, NEW_PARTITION_START) for tp in moving}
        ranges, warnings = plan_ranges(
            begins,
            {tp: ends[tp] for tp in moving},
            {tp: marks[tp] for tp in moving},
            fail_on_data_loss=self.options.fail_on_data_loss,
        )
        for message in warnings:
            log.warning("%s", message)
        return as_partitions(split_ranges(ranges, self.options.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _high(self, tp: TopicPartition, marks: Watermarks) -> int:
        if self._target is None:
            return marks.high
        # After prepareForTriggerAvailableNow nothing written later is read, not even in a
        # partition that appeared since.
        return min(marks.high, self._target.get(tp, NEW_PARTITION_START))

    def _metadata_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = open_consumer(self.options)
        return self._consumer


def readable_starts(
    starts: Mapping[TopicPartition, int], marks: Mapping[TopicPartition, Watermarks]
) -> dict[TopicPartition, int]:
    """Where each subscribed partition's next batch begins: its stored offset (offset 0 for a
    partition new to the query), moved up to the log start offset if records were deleted."""
    return {tp: max(starts.get(tp, NEW_PARTITION_START), m.log_start) for tp, m in marks.items()}
