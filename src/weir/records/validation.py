"""Validation of a batch a client produced, as Kafka's log validator does before an append.

`validate_batch` raises a `RecordError` whose `error_code` goes back to the client; it never
modifies the batch. Header checks are O(1); the CRC runs in C over the whole batch; the record
walk (inner offsets 0..n-1, record framing) decompresses and reads each record's length and
offset delta only, and can be turned off by the caller with `check_records=False`.
"""

from __future__ import annotations

from weir.records.batch import HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, BatchHeader, Buffer
from weir.records.compression import Compression
from weir.records.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from weir.records.record import iter_records, records_section
from weir.records.varint import decode_varint


def validate_batch(
    buf: Buffer, *, max_message_bytes: int, check_records: bool = True
) -> BatchHeader:
    """Check that `buf` is one well-formed v2 batch a client may append; return its header."""
    if len(buf) < HEADER_SIZE:
        raise CorruptRecordError(f"{len(buf)} bytes is shorter than a batch header")
    header = BatchHeader(buf)
    if header.magic != MAGIC_V2:
        raise InvalidRecordError(f"magic {header.magic} is not supported; only magic 2")
    if header.batch_length + LOG_OVERHEAD != len(buf):
        raise CorruptRecordError(
            f"batch length {header.size} does not match the {len(buf)} bytes received"
        )
    if len(buf) > max_message_bytes:
        raise RecordTooLargeError(
            f"batch of {len(buf)} bytes exceeds max.message.bytes={max_message_bytes}"
        )
    if not header.crc_ok():
        raise CorruptRecordError("batch CRC32C does not match its contents")
    count = header.records_count
    if count <= 0 or count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"record count {count} does not equal last offset delta + 1 "
            f"({header.last_offset_delta + 1})"
        )
    if header.is_control:
        raise InvalidRecordError("clients may not produce control batches")
    if header.attributes & 0x07 > max(Compression):
        raise UnsupportedCompressionError(f"unknown compression codec {header.attributes & 0x07}")
    if check_records:
        check_inner_offsets(header)
    return header


def check_inner_offsets(header: BatchHeader) -> None:
    """Every record's offset delta must be its index, and records must tile the section exactly.

    Reads only each record's length, timestamp delta and offset delta. One- and two-byte varints
    (record lengths under 8 KiB, small deltas) are decoded inline: this loop runs once per record
    on the produce path, so it avoids a function call per field.
    """
    data = bytes(records_section(header))
    end = len(data)
    pos = 0
    try:
        for expected in range(header.records_count):
            length, body = _varint(data, pos)
            pos = body + length
            if length <= 0 or pos > end:
                raise CorruptRecordError(f"record {expected} of {length} bytes overruns the batch")
            after_ts = body + 2 if data[body + 1] < 0x80 else _varint(data, body + 1)[1]
            delta, after_delta = _varint(data, after_ts)
            if after_delta > pos:
                raise CorruptRecordError(f"record {expected} is shorter than its own fields")
            if delta != expected:
                raise InvalidRecordError(f"record {expected} has offset delta {delta}")
    except IndexError:
        raise CorruptRecordError("record truncated") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes after the last record")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at `pos`: one and two bytes inline, longer ones by decode_varint."""
    first = data[pos]
    if first < 0x80:
        return (first >> 1) ^ -(first & 1), pos + 1
    second = data[pos + 1]
    if second < 0x80:
        z = (first & 0x7F) | (second << 7)
        return (z >> 1) ^ -(z & 1), pos + 2
    return decode_varint(data, pos)


def check_keys(header: BatchHeader, where: str) -> None:
    """Every record must have a key (a compacted topic's rule); INVALID_RECORD naming each
    record without one."""
    missing = tuple(
        (index, f"Compacted topic cannot accept message without key in topic partition {where}.")
        for index, record in enumerate(iter_records(header))
        if record.key is None
    )
    if missing:
        raise InvalidRecordError(missing[0][1], missing)


def check_timestamps(header: BatchHeader, low: int, high: int) -> None:
    """Every record's timestamp must lie in [low, high]; INVALID_TIMESTAMP otherwise. Reads each
    record (timestamp deltas may be negative, so the header alone cannot tell): a topic pays for
    it only when it bounds timestamps."""
    wrong = tuple(
        (index, f"Timestamp {record.timestamp} of message with offset {index} is out of range. "
                f"The timestamp should be within [{low}, {high}]")
        for index, record in enumerate(iter_records(header))
        if not low <= record.timestamp <= high
    )  # fmt: skip
    if wrong:
        raise InvalidTimestampError(wrong[0][1], wrong)
