"""Zig-zag varints: the encoding Kafka uses for every length, delta and count inside a record."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.records.errors import CorruptRecordError
from weir.records.varint import decode_varint, encode_varint

MODEST = settings(max_examples=200, deadline=None)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

# Protobuf's sint64 encodings, which Kafka's ByteUtils.writeVarlong produces byte for byte.
KNOWN_ENCODINGS = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-2, b"\x03"),
    (2, b"\x04"),
    (63, b"\x7e"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (150, b"\xac\x02"),
    (300, b"\xd8\x04"),
    (-300, b"\xd7\x04"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
    (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
    (-(2**63), b"\xff" * 9 + b"\x01"),
]


@pytest.mark.parametrize(("value", "encoded"), KNOWN_ENCODINGS)
def test_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))


@MODEST
@given(value=INT64, prefix=st.binary(max_size=8), suffix=st.binary(max_size=8))
def test_round_trip_inside_a_buffer(value: int, prefix: bytes, suffix: bytes) -> None:
    encoded = encode_varint(value)
    buf = prefix + encoded + suffix
    assert 1 <= len(encoded) <= 10
    assert decode_varint(buf, len(prefix)) == (value, len(prefix) + len(encoded))


@MODEST
@given(value=INT64)
def test_decodes_from_bytearray_and_memoryview(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(bytearray(encoded), 0) == (value, len(encoded))
    assert decode_varint(memoryview(encoded), 0) == (value, len(encoded))


@MODEST
@given(value=INT64)
def test_small_magnitudes_take_fewer_bytes(value: int) -> None:
    # Zig-zag exists so that small negative numbers (null lengths, -1 deltas) stay one byte.
    zigzag = 2 * value if value >= 0 else -2 * value - 1
    assert len(encode_varint(value)) == max(1, -(-zigzag.bit_length() // 7))


@MODEST
@given(value=INT64.filter(lambda v: not -64 <= v <= 63), data=st.data())
def test_truncated_varint_raises_corrupt_record(value: int, data: st.DataObject) -> None:
    encoded = encode_varint(value)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1), label="cut")
    with pytest.raises(CorruptRecordError) as excinfo:
        decode_varint(encoded[:cut], 0)
    assert excinfo.value.error_code == 2
    assert excinfo.value.error_name == "CORRUPT_MESSAGE"


def test_position_past_the_end_raises_corrupt_record() -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x02", 1)


def test_more_than_ten_bytes_is_corrupt() -> None:
    # Ten continuation bytes then a terminator: would decode if the length were not bounded.
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        decode_varint(b"\x80" * 10 + b"\x01", 0)
