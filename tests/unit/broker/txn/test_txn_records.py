"""`__transaction_state` keys and values in Kafka's layouts (TransactionLogKey v0,
TransactionLogValue v0 and v1): hand-built bytes from the schema, and round trips."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weir.broker.txn.records import (
    TxnLogValue,
    key_bytes,
    parse_key,
    parse_value,
    value_bytes,
)
from weir.broker.txn.state import EMPTY, ONGOING, TxnState

ONGOING_VALUE = TxnLogValue(
    producer_id=1234, producer_epoch=5, timeout_ms=60_000, state=ONGOING,
    partitions=(("t", 0), ("t", 3)), last_update_ms=10, start_ms=7,
)  # fmt: skip


def _i16(v: int) -> bytes:
    return struct.pack(">h", v)


def _i32(v: int) -> bytes:
    return struct.pack(">i", v)


def _i64(v: int) -> bytes:
    return struct.pack(">q", v)


def test_key_is_version_0_and_the_transactional_id() -> None:
    assert key_bytes("my-txn") == b"\x00\x00" + b"\x00\x06my-txn"
    assert parse_key(b"\x00\x00\x00\x06my-txn") == "my-txn"
    assert parse_key(b"\x00\x01\x00\x06my-txn") is None  # a key version we do not know


def test_value_v0_bytes_follow_kafkas_schema() -> None:
    expected = (
        _i16(0) + _i64(1234) + _i16(5) + _i32(60_000) + b"\x01"
        + _i32(1) + _i16(1) + b"t" + _i32(2) + _i32(0) + _i32(3)
        + _i64(10) + _i64(7)
    )  # fmt: skip
    assert value_bytes(ONGOING_VALUE) == expected
    assert parse_value(expected) == ONGOING_VALUE


def test_value_v1_is_flexible_with_tagged_fields() -> None:
    value = TxnLogValue(
        producer_id=1234, producer_epoch=5, timeout_ms=60_000, state=ONGOING,
        partitions=(("t", 0), ("t", 3)), last_update_ms=10, start_ms=7,
        previous_producer_id=99, client_transaction_version=2,
    )  # fmt: skip
    expected = (
        _i16(1) + _i64(1234) + _i16(5) + _i32(60_000) + b"\x01"
        + b"\x02" + b"\x02t" + b"\x03" + _i32(0) + _i32(3) + b"\x00"
        + _i64(10) + _i64(7)
        + b"\x02" + b"\x00\x08" + _i64(99) + b"\x02\x02" + _i16(2)
    )  # fmt: skip
    assert value_bytes(value, version=1) == expected
    assert parse_value(expected) == value


def test_empty_state_stores_null_partitions() -> None:
    value = TxnLogValue(producer_id=1, producer_epoch=0, timeout_ms=1000, state=EMPTY,
                        last_update_ms=5, start_ms=-1)  # fmt: skip
    v0 = value_bytes(value)
    assert v0[2 + 8 + 2 + 4 + 1 :][:4] == _i32(-1)
    v1 = value_bytes(value, version=1)
    assert v1[2 + 8 + 2 + 4 + 1] == 0  # a null compact array
    assert parse_value(v0) == value == parse_value(v1)


def test_unknown_value_versions_and_truncation_are_refused() -> None:
    with pytest.raises(ValueError):
        parse_value(_i16(2) + value_bytes(ONGOING_VALUE)[2:])
    with pytest.raises((ValueError, struct.error)):
        parse_value(value_bytes(ONGOING_VALUE)[:-3])
    with pytest.raises(ValueError):
        value_bytes(ONGOING_VALUE, version=2)


def test_unknown_tags_are_skipped() -> None:
    data = value_bytes(ONGOING_VALUE, version=1)
    with_tag = data[:-1] + b"\x01" + b"\x09\x03abc"  # tag 9, three bytes
    assert parse_value(with_tag) == ONGOING_VALUE


_partitions = st.lists(
    st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=8,
    unique=True,
).map(lambda tps: tuple(sorted(tps)))  # fmt: skip


@given(
    producer_id=st.integers(0, 2**63 - 1),
    epoch=st.integers(-1, 2**15 - 1),
    timeout=st.integers(1, 2**31 - 1),
    state=st.sampled_from([s for s in TxnState if s is not EMPTY]),
    partitions=_partitions,
    stamps=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**62)),
    previous=st.integers(-1, 2**62),
    version=st.sampled_from([0, 1]),
)
def test_round_trip(
    producer_id: int, epoch: int, timeout: int, state: TxnState,
    partitions: tuple[tuple[str, int], ...], stamps: tuple[int, int], previous: int, version: int,
) -> None:  # fmt: skip
    value = TxnLogValue(
        producer_id=producer_id, producer_epoch=epoch, timeout_ms=timeout, state=state,
        partitions=partitions, last_update_ms=stamps[0], start_ms=stamps[1],
        previous_producer_id=previous if version else -1,
    )  # fmt: skip
    assert parse_value(value_bytes(value, version)) == value
