"""The unsigned varint codec of Kafka's flexible versions, on bytes alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weir.protocol.uvarint import MAX_BYTES, UvarintError, decode_uvarint, encode_uvarint


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
     (2**31 - 1, b"\xff\xff\xff\xff\x07"), (2**35 - 1, b"\xff\xff\xff\xff\x7f")],
)  # fmt: skip
def test_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_uvarint(value) == encoded
    assert decode_uvarint(encoded, 0) == (value, len(encoded))


@given(value=st.integers(0, 2**35 - 1), prefix=st.binary(max_size=4), suffix=st.binary())
def test_decoding_an_encoding_gives_the_value_and_the_position_after_it(
    value: int, prefix: bytes, suffix: bytes
) -> None:
    encoded = encode_uvarint(value)
    assert len(encoded) <= MAX_BYTES
    buf = prefix + encoded + suffix
    assert decode_uvarint(buf, len(prefix)) == (value, len(prefix) + len(encoded))


def test_more_than_five_bytes_is_refused() -> None:
    with pytest.raises(UvarintError, match="longer than 5 bytes"):
        decode_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)


@pytest.mark.parametrize("buf", [b"", b"\x80", b"\xff\xff\xff\xff"])
def test_a_buffer_ending_inside_a_varint_is_refused(buf: bytes) -> None:
    with pytest.raises(UvarintError, match="ends inside"):
        decode_uvarint(buf, 0)


def test_negative_values_have_no_encoding() -> None:
    with pytest.raises(UvarintError):
        encode_uvarint(-1)
