"""The records of `__audit`: a key that names a count and not its value, values that carry
every field and round-trip, and values that are not audit counts refused."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weir.protocol.audit_records import (
    FETCH,
    KEY_FIELDS,
    PRODUCE,
    AuditEntry,
    AuditRecordError,
    decode_value,
    encode_key,
    encode_value,
    minute_of,
)

ENTRY = AuditEntry(
    minute_ms=1_700_000_040_000, broker=2, broker_started_ms=1_699_999_000_123,
    principal="User:alice", client_id="billing", address="10.0.0.7", api=PRODUCE,
    topic="orders", partition=3, bytes=4096, records=40,
)  # fmt: skip

texts = st.text(max_size=30)
counts = st.integers(min_value=0, max_value=2**53)
entries = st.builds(
    AuditEntry, minute_ms=counts.map(minute_of), broker=st.integers(0, 2**31 - 1),
    broker_started_ms=counts, principal=texts, client_id=texts, address=texts,
    api=st.sampled_from([PRODUCE, FETCH]), topic=texts, partition=st.integers(0, 2**31 - 1),
    bytes=counts, records=counts,
)  # fmt: skip


def test_the_key_is_the_identifying_fields_in_declared_order_and_not_the_counts() -> None:
    assert KEY_FIELDS == ("minute_ms", "broker", "broker_started_ms", "principal", "client_id",
                          "address", "api", "topic", "partition")  # fmt: skip
    assert json.loads(encode_key(ENTRY)) == [1_700_000_040_000, 2, 1_699_999_000_123,
                                             "User:alice", "billing", "10.0.0.7", "Produce",
                                             "orders", 3]  # fmt: skip
    grown = dataclasses.replace(ENTRY, bytes=9000, records=90)
    assert encode_key(grown) == encode_key(ENTRY)  # a later count of the minute overwrites


@pytest.mark.parametrize(
    "change",
    [{"minute_ms": 1_700_000_100_000}, {"broker": 3}, {"broker_started_ms": 1},
     {"principal": "User:bob"}, {"client_id": "reports"}, {"address": "10.0.0.8"},
     {"api": FETCH}, {"topic": "payments"}, {"partition": 4}],
)  # fmt: skip
def test_each_identifying_field_makes_another_key(change: dict[str, object]) -> None:
    assert encode_key(dataclasses.replace(ENTRY, **change)) != encode_key(ENTRY)  # type: ignore[arg-type]


@given(entries)
def test_a_value_round_trips_and_its_key_is_stable(entry: AuditEntry) -> None:
    assert decode_value(encode_value(entry)) == entry
    assert encode_key(entry) == encode_key(decode_value(encode_value(entry)))
    encode_key(entry).decode("ascii")  # compact ASCII, whatever the names


def test_the_value_is_a_json_object_of_every_field() -> None:
    assert json.loads(encode_value(ENTRY)) == dataclasses.asdict(ENTRY)


@pytest.mark.parametrize(
    "value",
    [None, b"", b"\xff\xfe", b"not json", b"[1, 2]", b"{}",
     json.dumps({**dataclasses.asdict(ENTRY), "bytes": "4096"}).encode(),
     json.dumps({**dataclasses.asdict(ENTRY), "partition": True}).encode(),
     json.dumps({**dataclasses.asdict(ENTRY), "principal": None}).encode()],
)  # fmt: skip
def test_values_that_are_not_audit_counts_are_refused(value: bytes | None) -> None:
    with pytest.raises(AuditRecordError):
        decode_value(value)


def test_minute_of() -> None:
    assert minute_of(1_700_000_040_000) == 1_700_000_040_000
    assert minute_of(1_700_000_099_999) == 1_700_000_040_000
    assert minute_of(1_700_000_100_000) == 1_700_000_100_000
