"""Validation of a batch a client produced, as Kafka's log validator does before an append.

`validate_batch` raises a `RecordError` whose `error_code` goes back to the client; it never
modifies the batch. Header checks are O(1); the CRC runs in C over the whole batch; the record
walk (inner offsets 0..n-1, record framing) decompresses and reads each record's length and
offset delta only, in C too.
"""

from __future__ import annotations

from weir.records._records_walk import inner_problem
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


def validate_batch(buf: Buffer, *, max_message_bytes: int) -> BatchHeader:
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
    check_inner_offsets(header)
    return header


def check_inner_offsets(header: BatchHeader) -> None:
    """Every record's offset delta must be its index, and records must tile the section exactly.

    The walk reads only each record's length, timestamp delta and offset delta, and runs in C
    (`_records_walk`, built by the install): it is the one step of the produce path that visits
    every record."""
    problem = inner_problem(records_section(header), header.records_count)
    if problem is None:
        return
    kind, index, value = problem
    if kind == _OFFSET_DELTA:
        raise InvalidRecordError(f"record {index} has offset delta {value}")
    raise CorruptRecordError(_CORRUPTION[kind].format(index=index, value=value))


_OFFSET_DELTA = 4
_CORRUPTION = {
    1: "record truncated",
    2: "record {index} of {value} bytes overruns the batch",
    3: "record {index} is shorter than its own fields",
    5: "{value} bytes after the last record",
}


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
