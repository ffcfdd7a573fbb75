"""Who reads and writes each topic, from the audit the brokers keep in `__audit`.

`__audit` is an internal compacted topic; each record's value is a JSON object counting one
client's use of one partition through one broker in one minute: the minute (`minute_ms`, its
start in epoch milliseconds, or `minute`), `broker`, `principal`, `client_id`, `address`, `api`
(Produce or Fetch), `topic`, `partition`, and the counts `bytes` and `records`. Every field but
the counts identifies what is counted; a later record with the same identity replaces an earlier
one (as compaction would), so counts are never added twice.

`read_audit_records` is the one place the console reads the topic; `who_reads_and_writes`
is pure arithmetic on what it read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from weir.ops.console.errors import ClusterError
from weir.ops.console.reader import ClientSettings, reading_consumer

AUDIT_TOPIC = "__audit"
READ_TIMEOUT_S = 15.0
POLL_S = 0.5
#: the fields a record counts; every other field says what it counts
COUNTS = ("bytes", "records")
WRITES, READS = "writes", "reads"


@dataclass(frozen=True, slots=True)
class AuditRead:
    """The audit records read (their JSON objects) and how many could not be decoded."""

    records: tuple[Mapping[str, Any], ...]
    unreadable: int


@dataclass(frozen=True, slots=True)
class Access:
    """One client's reads or writes of one topic over the audited minutes."""

    topic: str
    direction: str
    client_id: str
    principal: str
    addresses: tuple[str, ...]
    bytes: int
    records: int
    first_minute: Any
    last_minute: Any


def read_audit_records(
    settings: ClientSettings, timeout_s: float = READ_TIMEOUT_S
) -> AuditRead | None:
    """Every record of `__audit`, read from the start of each partition to its end; None when
    the topic does not exist (no broker has audited anything yet)."""
    consumer = reading_consumer(settings, "weir-console-audit")
    try:
        metadata = consumer.list_topics(AUDIT_TOPIC, timeout=timeout_s).topics.get(AUDIT_TOPIC)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return None
        partitions = sorted(metadata.partitions)
        consumer.assign([KafkaTopicPartition(AUDIT_TOPIC, p, OFFSET_BEGINNING) for p in partitions])
        return _read_to_end(consumer, set(partitions), time.monotonic() + timeout_s)
    except KafkaException as exc:
        raise ClusterError(f"reading {AUDIT_TOPIC}: {exc}") from None
    finally:
        consumer.close()


def _read_to_end(consumer: Consumer, partitions: set[int], deadline: float) -> AuditRead:
    records: list[Mapping[str, Any]] = []
    unreadable, at_end = 0, set[int]()
    while at_end < partitions and time.monotonic() < deadline:
        message = consumer.poll(POLL_S)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise ClusterError(f"reading {AUDIT_TOPIC}: {error.str()}")
            at_end.add(message.partition() or 0)
            continue
        decoded = _decoded(message.value())
        if decoded is None:
            unreadable += 1
        else:
            records.append(decoded)
    return AuditRead(tuple(records), unreadable)


def _decoded(value: bytes | None) -> Mapping[str, Any] | None:
    if value is None:  # a tombstone: compaction's deletion of a key
        return None
    try:
        decoded = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return decoded if isinstance(decoded, dict) and "topic" in decoded else None


def direction(api: object) -> str | None:
    """WRITES for Produce, READS for Fetch (by name or API key), None for anything else."""
    name = str(api).strip().lower()
    if name in ("produce", "0"):
        return WRITES
    if name in ("fetch", "1"):
        return READS
    return None


def who_reads_and_writes(records: Iterable[Mapping[str, Any]]) -> dict[str, list[Access]]:
    """Each topic's readers and writers, writers first, then by bytes, most first."""
    latest = {_identity(r): r for r in records}
    grouped: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = {}
    for record in latest.values():
        way = direction(record.get("api"))
        if way is not None:
            key = (str(record["topic"]), way, str(record.get("client_id", "")),
                   str(record.get("principal", "")))  # fmt: skip
            grouped.setdefault(key, []).append(record)
    by_topic: dict[str, list[Access]] = {}
    for key, entries in grouped.items():
        by_topic.setdefault(key[0], []).append(_access(key, entries))
    for accesses in by_topic.values():
        accesses.sort(key=lambda a: (a.direction != WRITES, -a.bytes, a.client_id))
    return dict(sorted(by_topic.items()))


def _access(key: tuple[str, str, str, str], entries: list[Mapping[str, Any]]) -> Access:
    minutes = sorted((e.get("minute_ms", e.get("minute")) for e in entries), key=_minute_order)
    return Access(
        topic=key[0], direction=key[1], client_id=key[2], principal=key[3],
        addresses=tuple(sorted({str(e.get("address", "")) for e in entries})),
        bytes=sum(_count(e.get("bytes")) for e in entries),
        records=sum(_count(e.get("records")) for e in entries),
        first_minute=minutes[0], last_minute=minutes[-1],
    )  # fmt: skip


def _identity(record: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, json.dumps(v)) for k, v in record.items() if k not in COUNTS))


def _minute_order(minute: object) -> tuple[int, float, str]:
    """Numbers (epoch minutes, seconds or milliseconds) by value, anything else as text."""
    if isinstance(minute, int | float) and not isinstance(minute, bool):
        return (0, float(minute), "")
    return (1, 0.0, str(minute))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
