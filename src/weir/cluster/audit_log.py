"""Who reads and who writes a topic, from the audit topic `__audit`.

`read_entries` reads `__audit` to its end through a Kafka consumer and keeps the latest count of
each key (`weir.protocol.audit_records`: counts only grow, so the latest is the largest; taking
the largest makes the answer independent of the order the partitions are read in, and of
whether compaction has run). `who` sums a topic's entries of one API per client (principal,
client id, address) over its partitions, the brokers that served them and the minutes asked
for, biggest first. `weir audit` prints them. The module speaks only the Kafka protocol (a
consumer given by the caller); it sits here, below both the command line and `weir.ops`, so
that the console can call the same two functions.

Reading from `since`, each partition starts at its first record stamped at or after it
(`offsets_for_times`): a broker stamps a minute's records when it writes them, after the
minute began, so nothing of a minute at or after `since` is skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from weir.protocol.audit_records import (
    AUDIT_TOPIC,
    AuditEntry,
    AuditRecordError,
    decode_value,
    minute_of,
)

log = logging.getLogger(__name__)

#: how long reading may go without a record before it gives up
IDLE_TIMEOUT_S = 30.0
POLL_RECORDS = 1000
#: errors of a partition that has no leader yet, or a new one not yet sure of its watermark
_NOT_YET_LED = frozenset({
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.OFFSET_NOT_AVAILABLE,
})  # fmt: skip


class AuditReadError(Exception):
    """`__audit` could not be read to its end."""


@dataclass(frozen=True, slots=True)
class ClientTraffic:
    """One client's bytes and records on a topic, and the first and last minute counted."""

    principal: str
    client_id: str
    address: str
    bytes: int
    records: int
    first_minute_ms: int
    last_minute_ms: int


def read_entries(
    consumer: Consumer,
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    timeout_s: float = IDLE_TIMEOUT_S,
) -> list[AuditEntry]:
    """Every count in `__audit` (the latest of each key) whose minute overlaps [since, until);
    none if the topic does not exist. `consumer` has reached the cluster; its assignment is
    replaced."""
    marks = _watermarks(consumer, timeout_s)
    starts = _start_offsets(consumer, marks, since_ms, timeout_s)
    wanted = {p: end for p, (_, end) in marks.items() if starts[p] < end}
    latest: dict[bytes, AuditEntry] = {}
    if wanted:
        consumer.assign([KafkaTopicPartition(AUDIT_TOPIC, p, starts[p]) for p in wanted])
        try:
            _read_to_end(consumer, wanted, latest, timeout_s)
        finally:
            consumer.unassign()
    return in_minutes(latest.values(), since_ms, until_ms)


def in_minutes(
    entries: Iterable[AuditEntry], since_ms: int | None, until_ms: int | None
) -> list[AuditEntry]:
    """The entries whose minute overlaps [since, until) (either end open when None)."""
    first = minute_of(since_ms) if since_ms is not None else None
    return [e for e in entries if (first is None or e.minute_ms >= first)
            and (until_ms is None or e.minute_ms < until_ms)]  # fmt: skip


def who(entries: Iterable[AuditEntry], topic: str, api: str) -> list[ClientTraffic]:
    """Each client's traffic of `api` ("Produce", "Fetch") on `topic`, by bytes, biggest first."""
    totals: dict[tuple[str, str, str], list[int]] = {}
    for e in entries:
        if e.topic != topic or e.api != api:
            continue
        key = (e.principal, e.client_id, e.address)
        total = totals.get(key)
        if total is None:
            totals[key] = [e.bytes, e.records, e.minute_ms, e.minute_ms]
            continue
        total[0] += e.bytes
        total[1] += e.records
        total[2] = min(total[2], e.minute_ms)
        total[3] = max(total[3], e.minute_ms)
    clients = [ClientTraffic(*key, *total) for key, total in totals.items()]
    return sorted(clients, key=lambda c: (-c.bytes, c.principal, c.client_id, c.address))


def _watermarks(consumer: Consumer, timeout_s: float) -> dict[int, tuple[int, int]]:
    """Each partition of `__audit` and its (start, end) offsets; none without the topic. A
    topic just created by a broker has partitions not yet led (the client knows of no leader:
    "unknown partition"); they are asked again until they are, for up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = consumer.list_topics(AUDIT_TOPIC, timeout=timeout_s).topics.get(AUDIT_TOPIC)
        if metadata is None or metadata.error is not None:
            if metadata is not None and metadata.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaException(metadata.error)
            return {}
        try:
            return {p: consumer.get_watermark_offsets(KafkaTopicPartition(AUDIT_TOPIC, p),
                                                      timeout=timeout_s)
                    for p in sorted(metadata.partitions)}  # fmt: skip
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_YET_LED or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def _start_offsets(
    consumer: Consumer, marks: dict[int, tuple[int, int]], since_ms: int | None, timeout_s: float
) -> dict[int, int]:
    """Where each partition is read from: its first record stamped at or after `since_ms`
    (its end if there is none), or else its start."""
    if since_ms is None or not marks:
        return {p: start for p, (start, _) in marks.items()}
    asked = [KafkaTopicPartition(AUDIT_TOPIC, p, minute_of(since_ms)) for p in marks]
    found = consumer.offsets_for_times(asked, timeout=timeout_s)
    return {tp.partition: tp.offset if tp.offset >= 0 else marks[tp.partition][1]
            for tp in found}  # fmt: skip


def _read_to_end(
    consumer: Consumer, ends: dict[int, int], latest: dict[bytes, AuditEntry], timeout_s: float
) -> None:
    """Poll until every partition has been read up to its end offset."""
    remaining = dict(ends)
    idle_since = time.monotonic()
    while remaining:
        messages = consumer.consume(POLL_RECORDS, timeout=0.5)
        if not messages and time.monotonic() - idle_since > timeout_s:
            raise AuditReadError(
                f"no record of {AUDIT_TOPIC} for {timeout_s:g}s; partitions not read to their "
                f"end: {', '.join(map(str, sorted(remaining)))}"
            )
        for message in messages:
            idle_since = time.monotonic()
            error = message.error()
            if error is not None:
                raise KafkaException(error)
            keep_latest(latest, message.key(), message.value())
            partition, offset = message.partition(), message.offset()
            if partition in remaining and offset is not None and offset + 1 >= remaining[partition]:
                del remaining[partition]
        _drop_read(consumer, remaining)


def _drop_read(consumer: Consumer, remaining: dict[int, int]) -> None:
    """Partitions whose position reached their end (their last offsets compacted away or
    being transaction markers, no record of theirs reaches the end offset)."""
    if not remaining:
        return
    positions = consumer.position([KafkaTopicPartition(AUDIT_TOPIC, p) for p in remaining])
    for tp in positions:
        if tp.offset >= 0 and tp.offset >= remaining.get(tp.partition, tp.offset + 1):
            del remaining[tp.partition]


def keep_latest(latest: dict[bytes, AuditEntry], key: bytes | None, value: bytes | None) -> None:
    """Keep a record's count in `latest` (by key) if it is the largest of its key so far;
    records that are not audit counts are skipped with a warning."""
    if key is None:
        return
    try:
        entry = decode_value(value)
    except AuditRecordError as exc:
        log.warning("skipping a record of %s that is not an audit count: %s", AUDIT_TOPIC, exc)
        return
    kept = latest.get(key)
    if kept is None or (entry.bytes, entry.records) >= (kept.bytes, kept.records):
        latest[key] = entry
