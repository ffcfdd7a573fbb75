"""The message browser: up to N records of one partition, from an offset, from the first record
at or after a timestamp (ListOffsets by time, as `offsets_for_times` asks it), or the last N.

Each browse makes its own consumer, assigned to the one partition (no group joins, nothing is
committed), reads until it has N records, reaches the end the browse began with, or times out,
and closes it: request threads never share it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from weir.cli.kafka_errors import error_line
from weir.ops.console.errors import BadRequest, ClusterError
from weir.ops.console.reader import ClientSettings, reading_consumer

#: the records shown by default, and at most
DEFAULT_LIMIT = 20
MAX_LIMIT = 500
READ_TIMEOUT_S = 10.0
POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Browse:
    """Where to start: at `offset`, at the first record at or after `timestamp_ms`, or (neither
    given) the last `limit` records."""

    topic: str
    partition: int
    offset: int | None = None
    timestamp_ms: int | None = None
    limit: int = DEFAULT_LIMIT


@dataclass(frozen=True, slots=True)
class Page:
    """What a browse found: the records, the offset it started at (None when no record is at or
    after the timestamp), and the partition's log start and end offsets when it began."""

    records: tuple[Record, ...]
    start: int | None
    log_start: int
    log_end: int


def browse(settings: ClientSettings, request: Browse, timeout_s: float = READ_TIMEOUT_S) -> Page:
    if not 1 <= request.limit <= MAX_LIMIT:
        raise BadRequest(f"the number of records must be between 1 and {MAX_LIMIT}")
    consumer = reading_consumer(settings, "weir-console-browser")
    try:
        return _browse(consumer, request, time.monotonic() + timeout_s)
    except KafkaException as exc:
        raise ClusterError(f"reading {request.topic}-{request.partition}: {exc}") from None
    finally:
        consumer.close()


def _browse(consumer: Consumer, request: Browse, deadline: float) -> Page:
    tp = KafkaTopicPartition(request.topic, request.partition)
    low, high = consumer.get_watermark_offsets(tp, timeout=_left(deadline))
    start = _start(consumer, request, low, high, deadline)
    if start is None or start >= high:
        return Page((), start, low, high)
    consumer.assign([KafkaTopicPartition(request.topic, request.partition, start)])
    records = _read(consumer, min(request.limit, high - start), high, deadline)
    return Page(tuple(records), start, low, high)


def _start(consumer: Consumer, request: Browse, low: int, high: int, deadline: float) -> int | None:
    if request.timestamp_ms is not None:
        query = KafkaTopicPartition(request.topic, request.partition, request.timestamp_ms)
        [found] = consumer.offsets_for_times([query], timeout=_left(deadline))
        return None if found.offset < 0 else int(found.offset)
    if request.offset is not None:
        return max(low, min(high, request.offset))
    return max(low, high - request.limit)


def _read(consumer: Consumer, limit: int, high: int, deadline: float) -> list[Record]:
    records: list[Record] = []
    while len(records) < limit and time.monotonic() < deadline:
        message = consumer.poll(min(POLL_S, _left(deadline)))
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                break
            raise ClusterError(error_line(error))
        records.append(_record(message))
        if records[-1].offset >= high - 1:
            break
    return records


def _record(message: Any) -> Record:
    kind, timestamp = message.timestamp()
    headers = tuple((name, value) for name, value in message.headers() or ())
    return Record(
        offset=message.offset(),
        timestamp_ms=None if kind == TIMESTAMP_NOT_AVAILABLE else timestamp,
        key=message.key(),
        value=message.value(),
        headers=headers,
    )


def _left(deadline: float) -> float:
    return max(0.01, deadline - time.monotonic())
