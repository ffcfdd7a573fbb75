"""Validation of produced batches: every rejection carries the Kafka error code a client expects."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.records import (
    HEADER_SIZE,
    BatchHeader,
    BatchSpec,
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordError,
    RecordTooLargeError,
    UnsupportedCompressionError,
    build_batch,
    check_inner_offsets,
    iter_records,
    simple_batch,
    validate_batch,
)
from weir.records.record import encode_record
from weir.records.varint import encode_varint

MODEST = settings(max_examples=150, deadline=None)

LIMIT = 1024 * 1024  # a generous max.message.bytes for tests not about size

CORRUPT_MESSAGE = (2, "CORRUPT_MESSAGE")
MESSAGE_TOO_LARGE = (10, "MESSAGE_TOO_LARGE")
UNSUPPORTED_COMPRESSION_TYPE = (76, "UNSUPPORTED_COMPRESSION_TYPE")
INVALID_RECORD = (87, "INVALID_RECORD")


def rejection(buf: bytes | bytearray, *, max_message_bytes: int = LIMIT) -> tuple[int, str]:
    """The (error_code, error_name) validate_batch answers for `buf`."""
    with pytest.raises(RecordError) as excinfo:
        validate_batch(buf, max_message_bytes=max_message_bytes)
    return excinfo.value.error_code, excinfo.value.error_name


def edited(buf: bytes, fmt: str, position: int, value: int) -> bytearray:
    """`buf` with one header field rewritten and the CRC recomputed, as a client could send it."""
    out = bytearray(buf)
    struct.pack_into(fmt, out, position, value)
    out[17:21] = crc32c.crc32c(bytes(out[21:])).to_bytes(4, "big")
    return out


def with_records_section(template: bytes, section: bytes, count: int) -> bytearray:
    """An uncompressed batch with `template`'s header, the given section, consistent CRC."""
    out = bytearray(template[:HEADER_SIZE] + section)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">i", out, 57, count)
    out[17:21] = crc32c.crc32c(bytes(out[21:])).to_bytes(4, "big")
    return out


HEADERS = st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2)


@st.composite
def valid_batches(draw: st.DrawFn) -> bytes:
    """One batch as a producer sends it: consecutive offsets, any codec."""
    n = draw(st.integers(min_value=1, max_value=6))
    base = draw(st.integers(min_value=0, max_value=2**40))
    records = [
        Record(
            offset=base + i,
            timestamp=draw(st.integers(0, 2**41)),
            key=draw(st.none() | st.binary(max_size=16)),
            value=draw(st.none() | st.binary(max_size=64)),
            headers=tuple(draw(HEADERS)),
        )
        for i in range(n)
    ]
    spec = BatchSpec(
        compression=draw(st.sampled_from(Compression)),
        producer_id=draw(st.integers(-1, 2**40)),
        producer_epoch=draw(st.integers(-1, 5)),
        base_sequence=draw(st.integers(-1, 2**20)),
    )
    return build_batch(records, spec=spec)


# --- accepted batches -----------------------------------------------------------------------


@MODEST
@given(buf=valid_batches())
def test_a_well_formed_batch_is_accepted_unchanged(buf: bytes) -> None:
    received = bytearray(buf)
    header = validate_batch(received, max_message_bytes=len(buf))
    assert header.size == len(buf)
    assert header.records_count == header.last_offset_delta + 1
    assert received == buf  # validation never modifies the batch


# --- header checks --------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1, 3, -1, 127])
def test_wrong_magic_is_invalid_record(magic: int) -> None:
    buf = edited(simple_batch([b"v"]), ">b", 16, magic)
    assert rejection(buf) == INVALID_RECORD


def test_magic_1_message_set_is_invalid_record() -> None:
    # A legacy v1 message set: offset, size, crc, magic=1 ... padded past a v2 header's length.
    legacy = struct.pack(">qiIbbqi", 0, 200, 0, 1, 0, -1, -1) + b"\x00" * 188
    assert rejection(legacy) == INVALID_RECORD


@pytest.mark.parametrize("size", [0, 1, 12, HEADER_SIZE - 1])
def test_shorter_than_a_header_is_corrupt_message(size: int) -> None:
    assert rejection(simple_batch([b"value"])[:size]) == CORRUPT_MESSAGE


@MODEST
@given(buf=valid_batches(), data=st.data())
def test_buffer_not_matching_batch_length_is_corrupt_message(
    buf: bytes, data: st.DataObject
) -> None:
    how = data.draw(st.sampled_from(["truncated", "trailing bytes", "length field"]), label="how")
    if how == "truncated":
        bad = buf[: data.draw(st.integers(HEADER_SIZE, len(buf) - 1), label="cut")]
    elif how == "trailing bytes":
        bad = buf + data.draw(st.binary(min_size=1, max_size=100), label="extra")
    else:
        length = data.draw(st.integers(-(2**31), 2**31 - 1).filter(lambda n: n != len(buf) - 12))
        bad = bytes(edited(buf, ">i", 8, length))
    assert rejection(bad) == CORRUPT_MESSAGE


def test_two_batches_in_one_buffer_are_corrupt_message() -> None:
    # A v2 produce carries exactly one batch per partition.
    one = simple_batch([b"a"])
    assert rejection(one + one) == CORRUPT_MESSAGE


@MODEST
@given(buf=valid_batches(), slack=st.integers(min_value=1, max_value=1000))
def test_larger_than_max_message_bytes_is_message_too_large(buf: bytes, slack: int) -> None:
    assert rejection(buf, max_message_bytes=max(0, len(buf) - slack)) == MESSAGE_TOO_LARGE
    assert validate_batch(buf, max_message_bytes=len(buf)).size == len(buf)  # the limit is <=


def test_too_large_is_reported_before_a_bad_crc() -> None:
    buf = bytearray(simple_batch([b"x" * 500]))
    buf[-1] ^= 0xFF
    assert rejection(buf, max_message_bytes=100) == MESSAGE_TOO_LARGE
    assert rejection(buf, max_message_bytes=LIMIT) == CORRUPT_MESSAGE


# --- damage ---------------------------------------------------------------------------------


def expected_for_flip(position: int) -> tuple[int, str] | None:
    """What one flipped byte at `position` must produce; None where the broker ignores the field.

    base_offset and partition_leader_epoch are outside the CRC and overwritten on append, so a
    client may send anything there. The length check runs before the CRC; the CRC (bytes 21..end)
    runs before the count, control and record checks, so any damage it covers is CORRUPT_MESSAGE.
    """
    if position < 8 or 12 <= position < 16:
        return None
    if position == 16:
        return INVALID_RECORD
    return CORRUPT_MESSAGE


@MODEST
@given(buf=valid_batches(), data=st.data())
def test_one_flipped_byte_maps_to_its_error(buf: bytes, data: st.DataObject) -> None:
    position = data.draw(st.integers(min_value=0, max_value=len(buf) - 1), label="position")
    damaged = bytearray(buf)
    damaged[position] ^= data.draw(st.integers(min_value=1, max_value=255), label="mask")
    expected = expected_for_flip(position)
    if expected is None:
        assert validate_batch(damaged, max_message_bytes=LIMIT).size == len(buf)
    else:
        assert rejection(damaged) == expected


@MODEST
@given(buf=valid_batches(), data=st.data())
def test_flip_in_the_crc_covered_region_is_corrupt_message(buf: bytes, data: st.DataObject) -> None:
    position = data.draw(st.integers(min_value=21, max_value=len(buf) - 1), label="position")
    damaged = bytearray(buf)
    damaged[position] ^= data.draw(st.integers(min_value=1, max_value=255), label="mask")
    assert rejection(damaged) == CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_undecompressable_body_with_a_valid_crc_is_corrupt_message(codec: Compression) -> None:
    template = simple_batch([b"v"], compression=codec)
    buf = with_records_section(template, b"\x00 definitely not compressed \xff", count=1)
    assert BatchHeader(buf).compression is codec
    assert rejection(buf) == CORRUPT_MESSAGE


# --- record count and offsets ---------------------------------------------------------------


@MODEST
@given(
    buf=valid_batches(),
    count=st.integers(-(2**31), 2**31 - 1),
    last_offset_delta=st.integers(-(2**31), 2**31 - 1),
)
def test_count_not_matching_last_offset_delta_is_invalid_record(
    buf: bytes, count: int, last_offset_delta: int
) -> None:
    if count == last_offset_delta + 1 and count > 0:
        count -= 1
    bad = edited(bytes(edited(buf, ">i", 57, count)), ">i", 23, last_offset_delta)
    assert rejection(bad) == INVALID_RECORD


@pytest.mark.parametrize("count", [0, -1])
def test_empty_or_negative_count_is_invalid_record(count: int) -> None:
    buf = edited(bytes(edited(simple_batch([b"v"]), ">i", 57, count)), ">i", 23, count - 1)
    assert rejection(buf) == INVALID_RECORD


@pytest.mark.parametrize("codec", list(Compression))
def test_control_batch_from_a_client_is_invalid_record(codec: Compression) -> None:
    control = BatchSpec(
        compression=codec, producer_id=1, producer_epoch=0, transactional=True, control=True
    )
    commit_marker = Record(offset=0, timestamp=0, key=b"\x00\x00\x00\x01", value=b"\x00" * 6)
    buf = build_batch([commit_marker], spec=control)
    assert rejection(buf) == INVALID_RECORD


@st.composite
def wrong_offset_deltas(draw: st.DrawFn) -> list[int]:
    """Per-record offset deltas that are not 0..n-1."""
    n = draw(st.integers(min_value=1, max_value=8))
    deltas = draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n))
    if deltas == list(range(n)):
        deltas[-1] += 1
    return deltas


@MODEST
@given(deltas=wrong_offset_deltas(), codec=st.sampled_from(Compression))
def test_record_offset_delta_not_its_index_is_invalid_record(
    deltas: list[int], codec: Compression
) -> None:
    records = [
        Record(offset=d, timestamp=0, key=None, value=b"v%d" % i) for i, d in enumerate(deltas)
    ]
    # last_offset_delta fixed so the count check passes and only the record walk can object.
    spec = BatchSpec(compression=codec)
    buf = build_batch(records, base_offset=0, last_offset_delta=len(records) - 1, spec=spec)
    assert rejection(buf) == INVALID_RECORD
    header = BatchHeader(buf)
    assert [r.offset for r in iter_records(header)] == deltas
    with pytest.raises(InvalidRecordError):
        check_inner_offsets(header)


def test_gapped_offsets_0_2_4_are_invalid_record() -> None:
    records = [Record(offset=o, timestamp=0, key=None, value=b"v") for o in (0, 2, 4)]
    buf = build_batch(records, last_offset_delta=2)
    assert rejection(buf) == INVALID_RECORD
    assert BatchHeader(buf).records_count == 3


def record_bytes(index: int, value: bytes = b"v") -> bytes:
    return encode_record(Record(offset=index, timestamp=0, key=None, value=value), 0, 0)


def test_bytes_after_the_last_record_are_corrupt_message() -> None:
    template = simple_batch([b"v"])
    buf = with_records_section(template, record_bytes(0) + b"\x00\x00", count=1)
    assert rejection(buf) == CORRUPT_MESSAGE
    header = BatchHeader(buf)
    records = iter_records(header)
    assert next(records).value == b"v"
    with pytest.raises(CorruptRecordError, match="after the last record"):
        next(records)


def test_fewer_records_than_the_count_is_corrupt_message() -> None:
    template = simple_batch([b"v"])
    buf = with_records_section(template, record_bytes(0), count=2)
    assert rejection(buf) == CORRUPT_MESSAGE


@pytest.mark.parametrize("length", [0, -1, 1000])
def test_record_length_out_of_bounds_is_corrupt_message(length: int) -> None:
    template = simple_batch([b"v"])
    section = encode_varint(length) + record_bytes(0)[1:]
    assert rejection(with_records_section(template, section, count=1)) == CORRUPT_MESSAGE


def test_record_too_short_for_its_offset_delta_is_rejected() -> None:
    # Record 0 declares 1 byte (its attributes only); its "offset delta" is then read from
    # record 1's attributes byte, which happens to be 0. iter_records rejects the batch.
    template = simple_batch([b"v"])
    buf = with_records_section(template, encode_varint(1) + b"\x00" + record_bytes(1), count=2)
    with pytest.raises(CorruptRecordError):
        list(iter_records(BatchHeader(buf)))
    assert rejection(buf) == CORRUPT_MESSAGE


# --- compression codec ----------------------------------------------------------------------


@pytest.mark.parametrize("code", [5, 6, 7])
def test_unknown_codec_is_unsupported_compression_type(code: int) -> None:
    buf = edited(simple_batch([b"v"]), ">h", 21, code)
    assert rejection(buf) == UNSUPPORTED_COMPRESSION_TYPE
    header = BatchHeader(buf)
    with pytest.raises(UnsupportedCompressionError) as excinfo:
        list(iter_records(header))
    assert excinfo.value.error_code == 76


def test_error_classes_carry_their_kafka_codes() -> None:
    assert (CorruptRecordError.error_code, CorruptRecordError.error_name) == CORRUPT_MESSAGE
    assert (RecordTooLargeError.error_code, RecordTooLargeError.error_name) == MESSAGE_TOO_LARGE
    assert (InvalidRecordError.error_code, InvalidRecordError.error_name) == INVALID_RECORD
    assert issubclass(UnsupportedCompressionError, RecordError)


@pytest.mark.parametrize(
    ("headers_part", "problem"),
    [(encode_varint(-1), "negative header count"), (encode_varint(1) + encode_varint(-1), "null")],
)
def test_malformed_record_headers_are_invalid_record(headers_part: bytes, problem: str) -> None:
    body = b"\x00" + encode_varint(0) + encode_varint(0)  # attributes, timestamp/offset deltas
    body += encode_varint(-1) + encode_varint(1) + b"v" + headers_part + encode_varint(-1)
    section = encode_varint(len(body)) + body
    buf = with_records_section(simple_batch([b"v"]), section, count=1)
    header = validate_batch(buf, max_message_bytes=1 << 20)
    with pytest.raises(InvalidRecordError, match=problem):
        list(iter_records(header))
