"""Who reads and writes each topic, from `__audit` records."""

from __future__ import annotations

from weir.ops.console.audit import READS, WRITES, direction, who_reads_and_writes


def audited(minute: int, client: str, api: str, topic: str, partition: int, size: int, count: int,
            **more: object) -> dict[str, object]:  # fmt: skip
    return {"minute": minute, "broker": 1, "principal": "User:ANONYMOUS", "client_id": client,
            "address": "127.0.0.1", "api": api, "topic": topic, "partition": partition,
            "bytes": size, "records": count, **more}  # fmt: skip


def test_apis_by_name_or_key():
    assert [direction(a) for a in ("Produce", "PRODUCE", 0, "Fetch", "1", "Metadata")] == [
        WRITES, WRITES, WRITES, READS, READS, None]  # fmt: skip


def test_readers_and_writers_of_each_topic_with_their_totals():
    records = [
        audited(100, "billing", "Produce", "orders", 0, 1000, 10),
        audited(101, "billing", "Produce", "orders", 1, 500, 5),
        audited(101, "reporting", "Fetch", "orders", 0, 700, 7),
        audited(102, "reporting", "Fetch", "orders", 0, 300, 3),
        audited(101, "reporting", "Fetch", "clicks", 0, 50, 1),
        audited(101, "reporting", "Metadata", "clicks", 0, 9, 0),
    ]
    by_topic = who_reads_and_writes(records)
    assert list(by_topic) == ["clicks", "orders"]
    writes, reads = by_topic["orders"]
    assert (writes.direction, writes.client_id, writes.bytes, writes.records) == (
        WRITES, "billing", 1500, 15)  # fmt: skip
    assert (reads.direction, reads.client_id, reads.bytes, reads.records) == (
        READS, "reporting", 1000, 10)  # fmt: skip
    assert (reads.first_minute, reads.last_minute) == (101, 102)
    [clicks] = by_topic["clicks"]
    assert clicks.bytes == 50


def test_a_later_record_for_the_same_minute_replaces_the_earlier():
    records = [audited(100, "app", "Produce", "t", 0, 100, 1),
               audited(100, "app", "Produce", "t", 0, 250, 3)]  # fmt: skip
    [access] = who_reads_and_writes(records)["t"]
    assert (access.bytes, access.records) == (250, 3)


def test_no_records_no_topics():
    assert who_reads_and_writes([]) == {}


def test_minutes_in_milliseconds_and_every_other_field_identify_a_count():
    base = {"broker": 1, "principal": "User:alice", "client_id": "app", "address": "10.0.0.1",
            "api": "Fetch", "topic": "t", "partition": 0}  # fmt: skip
    records = [
        {**base, "minute_ms": 60_000, "broker_started_ms": 5, "bytes": 10, "records": 1},
        {**base, "minute_ms": 120_000, "broker_started_ms": 5, "bytes": 20, "records": 2},
        {**base, "minute_ms": 120_000, "broker_started_ms": 5, "bytes": 30, "records": 3},
        # the same minute counted again by the broker after a restart
        {**base, "minute_ms": 120_000, "broker_started_ms": 9, "bytes": 4, "records": 1},
    ]
    [access] = who_reads_and_writes(records)["t"]
    assert (access.bytes, access.records) == (44, 5)
    assert (access.first_minute, access.last_minute) == (60_000, 120_000)
