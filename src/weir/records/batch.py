"""Record batch v2 (magic 2): the unit Kafka writes on the wire and on disk.

Layout (big-endian), 61 header bytes then the records section::

    0  base_offset            int64     \\  not covered by the CRC; the broker
    8  batch_length           int32      | rewrites base_offset and
    12 partition_leader_epoch int32     /   partition_leader_epoch in place
    16 magic                  int8
    17 crc                    uint32    CRC32C of bytes 21..end
    21 attributes             int16     codec(0-2) timestamp_type(3) transactional(4) control(5)
    23 last_offset_delta      int32
    27 base_timestamp         int64
    35 max_timestamp          int64
    43 producer_id            int64
    51 producer_epoch         int16
    53 base_sequence          int32
    57 records_count          int32
    61 records ...

`batch_length` counts the bytes after itself, so a batch occupies `12 + batch_length` bytes.
`BatchHeader` is a zero-copy view: it reads fields from the buffer on demand and never copies it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from weir.records.compression import Compression
from weir.records.errors import CorruptRecordError

Buffer = bytes | bytearray | memoryview

MAGIC_V2 = 2
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes not counted by batch_length
CRC_START = 21
NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

BASE_OFFSET_POS = 0
LENGTH_POS = 8
LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
MAX_TIMESTAMP_POS = 35

TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_I8 = struct.Struct(">b")
_OFFSET_AND_LENGTH = struct.Struct(">qi")


class HeaderFields(NamedTuple):
    """Every header field at once: one unpack instead of one per field (hot paths)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int


class BatchHeader:
    """A read-only view of one batch header at `position` in `buf`; copies nothing."""

    __slots__ = ("buf", "position")

    def __init__(self, buf: Buffer, position: int = 0) -> None:
        if len(buf) - position < HEADER_SIZE:
            raise CorruptRecordError(
                f"batch header needs {HEADER_SIZE} bytes, {len(buf) - position} available"
            )
        self.buf = buf
        self.position = position

    def fields(self) -> HeaderFields:
        return HeaderFields._make(HEADER.unpack_from(self.buf, self.position))

    def _field(self, fmt: struct.Struct, at: int) -> int:
        value: int = fmt.unpack_from(self.buf, self.position + at)[0]
        return value

    @property
    def base_offset(self) -> int:
        return self._field(_I64, 0)

    @property
    def batch_length(self) -> int:
        return self._field(_I32, 8)

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def partition_leader_epoch(self) -> int:
        return self._field(_I32, 12)

    @property
    def magic(self) -> int:
        return self._field(_I8, 16)

    @property
    def crc(self) -> int:
        return self._field(_U32, 17)

    @property
    def attributes(self) -> int:
        return self._field(_I16, 21)

    @property
    def compression(self) -> Compression:
        return Compression.from_attributes(self.attributes)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_offset_delta(self) -> int:
        return self._field(_I32, 23)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def base_timestamp(self) -> int:
        return self._field(_I64, 27)

    @property
    def max_timestamp(self) -> int:
        return self._field(_I64, 35)

    @property
    def producer_id(self) -> int:
        return self._field(_I64, 43)

    @property
    def producer_epoch(self) -> int:
        return self._field(_I16, 51)

    @property
    def base_sequence(self) -> int:
        return self._field(_I32, 53)

    @property
    def records_count(self) -> int:
        return self._field(_I32, 57)

    def body(self) -> memoryview:
        """The records section (compressed or not), as a view."""
        start = self.position + HEADER_SIZE
        return memoryview(self.buf)[start : self.position + self.size]

    def compute_crc(self) -> int:
        view = memoryview(self.buf)[self.position + CRC_START : self.position + self.size]
        result: int = crc32c.crc32c(view)
        return result

    def crc_ok(self) -> bool:
        return self.compute_crc() == self.crc

    def __repr__(self) -> str:
        return (
            f"BatchHeader(base_offset={self.base_offset}, size={self.size}, "
            f"records={self.records_count}, last_offset_delta={self.last_offset_delta})"
        )


def set_base_offset(buf: bytearray | memoryview, base_offset: int, position: int = 0) -> None:
    """Rewrite the base offset in place (outside the CRC)."""
    _I64.pack_into(buf, position + BASE_OFFSET_POS, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, position: int = 0) -> None:
    """Rewrite the partition leader epoch in place (outside the CRC)."""
    _I32.pack_into(buf, position + LEADER_EPOCH_POS, epoch)


def set_log_append_time(buf: bytearray | memoryview, timestamp: int, position: int = 0) -> None:
    """Mark the batch as LogAppendTime with `timestamp` as its max timestamp; recompute the CRC."""
    (attributes,) = _I16.unpack_from(buf, position + ATTRIBUTES_POS)
    _I16.pack_into(buf, position + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_BIT)
    _I64.pack_into(buf, position + MAX_TIMESTAMP_POS, timestamp)
    crc = BatchHeader(buf, position).compute_crc()
    _U32.pack_into(buf, position + CRC_POS, crc)


def peek_offset_and_size(buf: Buffer, position: int = 0) -> tuple[int, int]:
    """(base offset, total size) of the batch at `position`, from its first 12 bytes."""
    base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, position)
    return base_offset, LOG_OVERHEAD + length


def peek_transactional(buf: Buffer, position: int = 0) -> bool:
    """Whether the batch at `position` is a transactional data batch (a control batch is not),
    from its attributes alone: usable before the batch is validated (False if too short to
    have attributes)."""
    if len(buf) < position + ATTRIBUTES_POS + _I16.size:
        return False
    (attributes,) = _I16.unpack_from(buf, position + ATTRIBUTES_POS)
    return int(attributes) & (TRANSACTIONAL_BIT | CONTROL_BIT) == TRANSACTIONAL_BIT


def iter_batches(buf: Buffer, *, verify_crc: bool = False) -> Iterator[BatchHeader]:
    """Walk consecutive batches in `buf`. Raises CorruptRecordError at a torn or damaged one."""
    position = 0
    end = len(buf)
    while position < end:
        if end - position < HEADER_SIZE:
            raise CorruptRecordError(f"{end - position} trailing bytes at {position}")
        header = BatchHeader(buf, position)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > end:
            raise CorruptRecordError(f"batch at {position} claims {header.size} bytes")
        if verify_crc and not header.crc_ok():
            raise CorruptRecordError(f"CRC mismatch in batch at {position}")
        yield header
        position += header.size
