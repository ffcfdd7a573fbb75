"""Reading the audit (weir.cluster.audit_log) without a broker: the latest count of each key
kept whatever order the records come in, the minutes asked for, and each client's totals."""

from __future__ import annotations

import dataclasses
import logging
import random
import types

import pytest
from confluent_kafka import KafkaError, KafkaException

from weir.cluster.audit_log import ClientTraffic, in_minutes, keep_latest, read_entries, who
from weir.protocol.audit_records import FETCH, PRODUCE, AuditEntry, encode_key, encode_value

MINUTE = 1_700_000_040_000


def entry(**fields: object) -> AuditEntry:
    base = AuditEntry(
        minute_ms=MINUTE, broker=1, broker_started_ms=1, principal="User:alice",
        client_id="billing", address="10.0.0.1", api=PRODUCE, topic="orders", partition=0,
        bytes=100, records=1,
    )  # fmt: skip
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def test_the_largest_count_of_a_key_is_kept_in_any_order() -> None:
    """A broker writes a minute's running counts again as they grow; partitions and replays
    may hand them over in any order."""
    counts = [entry(bytes=b, records=r) for b, r in ((100, 1), (300, 3), (200, 2))]
    other = entry(partition=1, bytes=50, records=1)
    records = [(encode_key(e), encode_value(e)) for e in [*counts, other]]
    for _ in range(5):
        random.shuffle(records)
        latest: dict[bytes, AuditEntry] = {}
        for key, value in records:
            keep_latest(latest, key, value)
        assert sorted((e.partition, e.bytes, e.records) for e in latest.values()) == [
            (0, 300, 3), (1, 50, 1)]  # fmt: skip


def test_records_that_are_not_counts_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    latest: dict[bytes, AuditEntry] = {}
    with caplog.at_level(logging.WARNING, logger="weir.cluster.audit_log"):
        keep_latest(latest, b"k", b"not json")
        keep_latest(latest, None, encode_value(entry()))  # no key: not written by a broker
        keep_latest(latest, b"k", None)
    assert latest == {}
    assert caplog.text.count("not an audit count") == 2


def test_the_minutes_that_overlap_since_and_until() -> None:
    entries = [entry(minute_ms=MINUTE + 60_000 * n) for n in range(4)]
    minutes = [(e.minute_ms - MINUTE) // 60_000 for e in
               in_minutes(entries, MINUTE + 60_000 + 30_000, MINUTE + 3 * 60_000)]  # fmt: skip
    assert minutes == [1, 2]  # since falls in minute 1; until is the start of minute 3
    assert len(in_minutes(entries, None, None)) == 4


def test_who_sums_a_topics_clients_over_partitions_brokers_and_minutes() -> None:
    entries = [
        entry(partition=0, bytes=100, records=1),
        entry(partition=1, broker=2, bytes=200, records=2, minute_ms=MINUTE + 60_000),
        entry(partition=0, broker_started_ms=2, bytes=50, records=1, minute_ms=MINUTE - 60_000),
        entry(principal="User:bob", client_id="reports", bytes=1000, records=9),
        entry(principal="User:bob", client_id="reports", api=FETCH, bytes=5000, records=50),
        entry(topic="payments", bytes=7000, records=70),
        entry(address="10.0.0.2", bytes=1, records=1),  # another machine: another client
    ]
    assert who(entries, "orders", PRODUCE) == [
        ClientTraffic("User:bob", "reports", "10.0.0.1", 1000, 9, MINUTE, MINUTE),
        ClientTraffic("User:alice", "billing", "10.0.0.1", 350, 4, MINUTE - 60_000,
                      MINUTE + 60_000),
        ClientTraffic("User:alice", "billing", "10.0.0.2", 1, 1, MINUTE, MINUTE),
    ]  # fmt: skip
    assert who(entries, "orders", FETCH) == [
        ClientTraffic("User:bob", "reports", "10.0.0.1", 5000, 50, MINUTE, MINUTE)]  # fmt: skip
    assert who(entries, "nobody-reads-this", FETCH) == []


class _JustCreatedAudit:
    """A consumer that sees `__audit` as a broker has just created it: listed, its partitions
    not yet led for the first `unled` watermark asks (librdkafka: "unknown partition")."""

    def __init__(self, unled: int) -> None:
        self.unled = unled

    def list_topics(self, topic: str, timeout: float) -> object:
        partitions = {0: object(), 1: object()}
        topic_metadata = types.SimpleNamespace(error=None, partitions=partitions)
        return types.SimpleNamespace(topics={topic: topic_metadata})

    def get_watermark_offsets(self, tp: object, timeout: float) -> tuple[int, int]:
        if self.unled:
            self.unled -= 1
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        return (0, 0)


def test_a_just_created_audit_topic_is_waited_for_until_led() -> None:
    assert read_entries(_JustCreatedAudit(unled=3), timeout_s=5) == []  # type: ignore[arg-type]


def test_an_audit_topic_never_led_fails_after_the_timeout() -> None:
    with pytest.raises(KafkaException):
        read_entries(_JustCreatedAudit(unled=10**6), timeout_s=0.3)  # type: ignore[arg-type]
