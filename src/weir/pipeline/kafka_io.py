"""The confluent-kafka boundary of the Spark source and sink: metadata, watermarks, range reads.

Readers use explicit assignment (no consumer group, nothing committed): Spark owns the offsets.
Records come back as Arrow record batches in the column layout of Spark's Kafka source. This
module never imports Spark, so it runs unchanged on the driver and in executors' Python workers.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, cast

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from weir.pipeline.offsets import (
    LATEST,
    DataLossError,
    OffsetRange,
    Watermarks,
    data_loss_message,
)

log = logging.getLogger(__name__)

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
RECORD_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
]
TIMESTAMP_FIELDS = [pa.field("timestamp", TIMESTAMP_TYPE), pa.field("timestampType", pa.int32())]
HEADERS_FIELD = pa.field("headers", HEADER_TYPE)
HEADER_COLUMN_PREFIX = "header:"
# Records a range reader takes per poll and yields per Arrow batch. A poll's messages live in
# Python's small-object arenas until its batch is built, and the arenas they empty go back to
# the OS, to be faulted in (zeroed) again by the next poll: with ten thousand per poll instead
# of fifty, the log ETL's query over 3M records faulted in 190k pages instead of 250k.
BATCH_RECORDS = 10_000
FETCH_QUEUE_BACKOFF_MS = 1
# How long a range reader's poll waits for its records. A poll returns as soon as it has them
# all; it waits out the time when fewer come, as at the end of a range that ends with
# transaction markers, after which the reader sees from its position that it is done.
POLL_WAIT_S = 0.2
PARTITION_FETCH_BYTES = 16 << 20
FETCH_BYTES = 64 << 20
METADATA_TIMEOUT_S = 30.0
#: ListOffsets errors of a partition whose leader is moving or new, asked again
LEADER_MOVING = frozenset({
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError._UNKNOWN_PARTITION,
})  # fmt: skip
WATERMARK_RETRY_S = 0.2
PRODUCE_TIMEOUT_S = 120.0
OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
_NO_OFFSETS = np.empty(0, dtype=np.int64)


def record_schema(
    *, include_headers: bool, include_timestamps: bool = True, header_values: Sequence[str] = ()
) -> pa.Schema:
    """The Arrow schema of read batches: Spark's Kafka source columns (without the timestamp
    columns for a reader that has no use for them), then one binary column per header of
    ``header_values`` (``header_column``)."""
    fields = RECORD_FIELDS + (TIMESTAMP_FIELDS if include_timestamps else [])
    fields += [HEADERS_FIELD] if include_headers else []
    return pa.schema(
        fields + [pa.field(header_column(name), pa.binary()) for name in header_values]
    )


def header_column(name: str) -> str:
    """The column of a read batch that holds each record's value of header ``name`` (its last
    one; null for a record without it)."""
    return f"{HEADER_COLUMN_PREFIX}{name}"


def reader_config(client_options: Mapping[str, str]) -> dict[str, Any]:
    """A range reader's consumer. It drains its prefetch queue continuously, so librdkafka must
    not wait its default second (``fetch.queue.backoff.ms``) before fetching again once the
    queue was full: that wait dominated a range read. It reads a partition in large fetches
    (``max.partition.fetch.bytes``; librdkafka's default is 1 MiB), which costs both ends less
    per record."""
    return {
        "group.id": "weir-spark-reader",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
        "fetch.max.bytes": FETCH_BYTES,
        **client_options,
    }


def subscribed_partitions(
    consumer: Consumer, *, topics: Sequence[str] | None, pattern: str | None
) -> list[tuple[str, int]]:
    """Every partition of the named topics, or of the topics whose names match ``pattern``."""
    metadata = consumer.list_topics(timeout=METADATA_TIMEOUT_S)
    if pattern is not None:
        regex = re.compile(pattern)
        names = [t for t in metadata.topics if regex.fullmatch(t) and not t.startswith("__")]
    else:
        names = list(topics or [])
    found: list[tuple[str, int]] = []
    for name in names:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            raise KafkaException(
                topic.error if topic else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
            )
        found.extend((name, p) for p in topic.partitions)
    return sorted(found)


def watermarks(
    consumer: Consumer, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], Watermarks]:
    """Log start offset and high watermark of each partition, asked of its leader. A partition
    whose leader is moving, or is too new to know its high watermark (OFFSET_NOT_AVAILABLE), is
    asked again for up to METADATA_TIMEOUT_S."""
    marks: dict[tuple[str, int], Watermarks] = {}
    for topic, partition in partitions:
        deadline = time.monotonic() + METADATA_TIMEOUT_S
        while True:
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=METADATA_TIMEOUT_S, cached=False
                )
                break
            except KafkaException as exc:
                if exc.args[0].code() not in LEADER_MOVING or time.monotonic() > deadline:
                    raise
            time.sleep(WATERMARK_RETRY_S)
        marks[(topic, partition)] = Watermarks(log_start=low, high=high)
    return marks


def ensure_topic(client_options: Mapping[str, str], name: str, *, partitions: int = 1) -> None:
    """Creates the topic unless it exists (with the broker's default replication factor)."""
    admin = AdminClient(dict(client_options))
    future = admin.create_topics([NewTopic(name, partitions)])[name]
    try:
        future.result(METADATA_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


class MessagePublisher:
    """Produces batches of (key, value) pairs to a topic with acks=all and idempotence, over one
    producer kept for all of them (a new producer costs a connection and a producer id)."""

    def __init__(self, client_options: Mapping[str, str], topic: str) -> None:
        self.topic = topic
        self._producer = Producer({"acks": "all", "enable.idempotence": True, **client_options})
        self._failures: list[KafkaError] = []

    def publish(self, messages: Sequence[tuple[bytes, bytes]]) -> None:
        """Returns once every message is acknowledged; raises KafkaException if any failed."""
        self._failures.clear()
        for key, value in messages:
            while True:
                try:
                    self._producer.produce(self.topic, value, key, on_delivery=self._delivered)
                    break
                except BufferError:
                    self._producer.poll(0.1)
        remaining = self._producer.flush(PRODUCE_TIMEOUT_S)
        if self._failures or remaining:
            failure = self._failures[0] if self._failures else KafkaError(KafkaError._TIMED_OUT)
            raise KafkaException(failure)

    def close(self) -> None:
        self._producer.flush(PRODUCE_TIMEOUT_S)

    def _delivered(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._failures.append(error)


def offsets_for_timestamp(
    consumer: Consumer, partitions: Sequence[tuple[str, int]], timestamp_ms: int
) -> dict[tuple[str, int], int]:
    """Per partition, the first offset whose record timestamp is at or after ``timestamp_ms``.

    A partition with no such record gets LATEST: reading starts with the next record written.
    """
    if not partitions:
        return {}
    wanted = [TopicPartition(topic, partition, timestamp_ms) for topic, partition in partitions]
    found: dict[tuple[str, int], int] = {}
    for answer in consumer.offsets_for_times(wanted, timeout=METADATA_TIMEOUT_S):
        if answer.error is not None:
            raise KafkaException(answer.error)
        found[(answer.topic, answer.partition)] = answer.offset if answer.offset >= 0 else LATEST
    return found


class RangeReader:
    """Reads one OffsetRange with an assigned consumer and yields Arrow record batches.

    If the range's first offsets are deleted before they are fetched, it raises DataLossError
    when ``fail_on_data_loss``, and otherwise logs it and continues from the log start offset.
    Without ``include_timestamps`` the batches lack the timestamp columns; ``header_values``
    adds a column per named header (``header_column``), read without building the whole
    ``headers`` list of every record.

    Offsets that hold no record a consumer is given (transaction markers, and the records of
    aborted transactions, which a read_committed consumer skips, as librdkafka's is by default)
    end a range as often as not: a range planned up to the last stable offset ends with its
    last commit marker. When a poll brings nothing, the consumer's position tells how far it
    has read past such offsets; a range whose end it reached is done.
    """

    def __init__(
        self,
        client_options: Mapping[str, str],
        *,
        include_headers: bool,
        fail_on_data_loss: bool,
        poll_timeout_s: float,
        include_timestamps: bool = True,
        header_values: Sequence[str] = (),
    ) -> None:
        self.config = reader_config(client_options)
        self.include_headers = include_headers
        self.include_timestamps = include_timestamps
        self.header_values = tuple(header_values)
        self.fail_on_data_loss = fail_on_data_loss
        self.poll_timeout_s = poll_timeout_s
        self.schema = record_schema(
            include_headers=include_headers,
            include_timestamps=include_timestamps,
            header_values=self.header_values,
        )

    def read(self, r: OffsetRange) -> Iterator[pa.RecordBatch]:
        consumer = Consumer(self.config)
        try:
            yield from self._read(consumer, r)
        finally:
            consumer.close()

    def _read(self, consumer: Consumer, r: OffsetRange) -> Iterator[pa.RecordBatch]:
        next_offset = r.start
        consumer.assign([TopicPartition(r.topic, r.partition, next_offset)])
        last_progress = time.monotonic()
        while next_offset < r.end:
            wanted = min(BATCH_RECORDS, r.end - next_offset)
            with _collection_paused():
                messages, offsets, restart = self._poll(consumer, r, next_offset, wanted)
                batch = self._batch(r, messages, offsets) if messages else None
                del messages  # freed before the collector runs again
            if restart is not None:
                next_offset = restart
                consumer.assign([TopicPartition(r.topic, r.partition, next_offset)])
                continue
            if batch is not None:
                last_progress = time.monotonic()
                next_offset = int(offsets[-1]) + 1
                yield batch
            if next_offset < r.end and (position := _position(consumer, r)) > next_offset:
                last_progress = time.monotonic()
                next_offset = position  # past offsets that hold no record to give
            elif batch is None and time.monotonic() - last_progress > self.poll_timeout_s:
                raise TimeoutError(
                    f"{r.topic}-{r.partition}: no record at offset {next_offset} "
                    f"(reading up to {r.end}) within {self.poll_timeout_s}s"
                )

    def _poll(
        self, consumer: Consumer, r: OffsetRange, next_offset: int, wanted: int
    ) -> tuple[list[Message], np.ndarray, int | None]:
        """The next messages of the range (none past its end) and their offsets (int64), or
        where to restart after records were deleted. Per-message calls run in C (``map``); an
        error takes the slow path. One partition's offsets ascend, so when the first and the
        last are as far apart as the messages are many, the offsets between are every one."""
        polled = consumer.consume(num_messages=wanted, timeout=POLL_WAIT_S)
        if any(map(Message.error, polled)):
            for message in polled:
                error = message.error()
                if error is not None and error.code() in OUT_OF_RANGE:
                    return [], _NO_OFFSETS, self._after_data_loss(consumer, r, next_offset)
                if error is not None:
                    raise KafkaException(error)
        if not polled:
            return polled, _NO_OFFSETS, None
        first, last = cast(int, polled[0].offset()), cast(int, polled[-1].offset())
        if last - first + 1 == len(polled):
            offsets = np.arange(first, last + 1, dtype=np.int64)
        else:
            offsets = np.fromiter(map(Message.offset, polled), dtype=np.int64, count=len(polled))
        end = int(np.searchsorted(offsets, r.end))
        if end < len(offsets):
            del polled[end:]
            offsets = offsets[:end]
        return polled, offsets, None

    def _after_data_loss(self, consumer: Consumer, r: OffsetRange, next_offset: int) -> int:
        low, _ = consumer.get_watermark_offsets(
            TopicPartition(r.topic, r.partition), timeout=METADATA_TIMEOUT_S, cached=False
        )
        if low <= next_offset:
            raise KafkaException(KafkaError(KafkaError.OFFSET_OUT_OF_RANGE))
        message = data_loss_message((r.topic, r.partition), next_offset, low)
        if self.fail_on_data_loss:
            raise DataLossError(message)
        log.warning("%s", message)
        return min(low, r.end)

    def _batch(
        self, r: OffsetRange, messages: list[Message], offsets: np.ndarray
    ) -> pa.RecordBatch:
        """The messages of one partition as a batch; topic and partition are the range's."""
        size = len(messages)
        columns = [
            pa.array(list(map(Message.key, messages)), pa.binary()),
            pa.array(list(map(Message.value, messages)), pa.binary()),
            pa.repeat(pa.scalar(r.topic, pa.string()), size),
            pa.repeat(pa.scalar(r.partition, pa.int32()), size),
            pa.array(offsets, pa.int64()),
        ]
        if self.include_timestamps:
            pairs = chain.from_iterable(map(Message.timestamp, messages))  # (type, ms) each
            stamps = np.fromiter(pairs, dtype=np.int64, count=2 * size).reshape(size, 2)
            kinds = stamps[:, 0]
            columns += [
                pa.array(stamps[:, 1] * 1000, pa.int64(), mask=kinds == 0).cast(TIMESTAMP_TYPE),
                pa.array((kinds - 1).astype(np.int32), pa.int32()),
            ]
        if self.include_headers:
            columns.append(pa.array([_headers(m) for m in messages], HEADER_TYPE))
        if self.header_values:
            columns += _header_values(messages, self.header_values)
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused. A poll creates tens of thousands of Message
    objects, which the collector tracks; every few hundred allocations it would walk them
    again, to find no cycle (a message references none). Unpaused, that took about a sixth of
    a reading task's time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _position(consumer: Consumer, r: OffsetRange) -> int:
    """The offset the consumer reads next in the range's partition (-1 before it read any)."""
    (found,) = consumer.position([TopicPartition(r.topic, r.partition)])
    offset: int = found.offset
    return offset


def _header_values(messages: list[Message], names: tuple[str, ...]) -> list[pa.Array]:
    """Per name, each message's value of that header (its last one), null where it has none."""
    values: dict[str, list[Any]] = {name: [None] * len(messages) for name in names}
    for index, headers in enumerate(map(Message.headers, messages)):
        for name, value in cast(list[tuple[str, Any]], headers or []):
            column = values.get(name)
            if column is not None:
                column[index] = value
    return [pa.array(values[name], pa.binary()) for name in names]


def _headers(message: Message) -> list[dict[str, Any]] | None:
    headers = message.headers()
    if not headers:
        return None
    return [{"key": key, "value": value} for key, value in list(headers)]
