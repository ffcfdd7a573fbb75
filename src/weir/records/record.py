"""Records inside a v2 batch: decoding (through any codec) and building batches.

One record on the wire::

    length varint | attributes int8 | timestamp_delta varlong | offset_delta varint
    key_length varint | key | value_length varint | value
    header_count varint | (key_length varint | key | value_length varint | value) * count

Lengths of -1 mean null. Iterating records is per-record Python work: it serves compaction,
internal topics, tools and tests, never the produce/fetch path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import crc32c

from weir.records.batch import (
    CONTROL_BIT,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from weir.records.compression import Compression, compress, decompress
from weir.records.errors import CorruptRecordError, InvalidRecordError
from weir.records.varint import decode_varint, encode_varint

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def records_section(header: BatchHeader) -> bytes | memoryview:
    """The batch's records, decompressed."""
    body = header.body()
    codec = header.compression
    return body if codec is Compression.NONE else decompress(codec, body)


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(buf):
        raise CorruptRecordError("record field runs past the end of the batch")
    return bytes(buf[pos:end]), end


def _decode_one(buf: bytes | memoryview, pos: int, header: BatchHeader) -> tuple[Record, int]:
    length, pos = decode_varint(buf, pos)
    end = pos + length
    if length <= 0 or end > len(buf):
        raise CorruptRecordError(f"record length {length} does not fit the batch")
    pos += 1  # attributes: unused in v2
    timestamp_delta, pos = decode_varint(buf, pos)
    offset_delta, pos = decode_varint(buf, pos)
    key, pos = _read_bytes(buf, pos)
    value, pos = _read_bytes(buf, pos)
    count, pos = decode_varint(buf, pos)
    if count < 0:
        raise InvalidRecordError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        name, pos = _read_bytes(buf, pos)
        if name is None:
            raise InvalidRecordError("null header key")
        data, pos = _read_bytes(buf, pos)
        headers.append((name.decode("utf-8", "replace"), data))
    if pos != end:
        raise CorruptRecordError(f"record declared {length} bytes but used {length + pos - end}")
    timestamp = (
        header.max_timestamp
        if header.is_log_append_time
        else header.base_timestamp + timestamp_delta
    )
    record = Record(
        offset=header.base_offset + offset_delta,
        timestamp=timestamp,
        key=key,
        value=value,
        headers=tuple(headers),
    )
    return record, end


def iter_records(header: BatchHeader) -> Iterator[Record]:
    """Decode every record of a batch, decompressing if needed."""
    buf = records_section(header)
    pos = 0
    for _ in range(header.records_count):
        record, pos = _decode_one(buf, pos, header)
        yield record
    if pos != len(buf):
        raise CorruptRecordError(f"{len(buf) - pos} bytes after the last record")


def encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    body = bytearray(b"\x00")
    body += encode_varint(record.timestamp - base_timestamp)
    body += encode_varint(record.offset - base_offset)
    _append_bytes(body, record.key)
    _append_bytes(body, record.value)
    body += encode_varint(len(record.headers))
    for name, data in record.headers:
        _append_bytes(body, name.encode("utf-8"))
        _append_bytes(body, data)
    return encode_varint(len(body)) + bytes(body)


def _append_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += encode_varint(-1)
    else:
        out += encode_varint(len(data))
        out += data


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSpec:
    """Batch-level fields for `build_batch`; the defaults are a plain non-idempotent batch."""

    compression: Compression = Compression.NONE
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = -1
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    log_append_time: bool = False
    transactional: bool = False
    control: bool = False
    compression_level: int | None = None

    @classmethod
    def of(cls, header: BatchHeader) -> BatchSpec:
        """The batch-level fields of an existing batch (to rebuild it with other records)."""
        return cls(
            compression=header.compression,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch,
            log_append_time=header.is_log_append_time,
            transactional=header.is_transactional,
            control=header.is_control,
        )


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    last_offset_delta: int | None = None,
    spec: BatchSpec | None = None,
) -> bytes:
    """Build one v2 batch. Record offsets are absolute; `base_offset` defaults to the first's.

    `last_offset_delta` may exceed the records' own span (compaction keeps a batch's original
    offset range after removing records from it).
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    spec = spec or BatchSpec()
    base = records[0].offset if base_offset is None else base_offset
    base_ts = min(r.timestamp for r in records)
    max_ts = max(r.timestamp for r in records)
    raw = b"".join(encode_record(r, base, base_ts) for r in records)
    body = compress(spec.compression, raw, spec.compression_level)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base
    attributes = int(spec.compression)
    attributes |= TIMESTAMP_TYPE_BIT if spec.log_append_time else 0
    attributes |= TRANSACTIONAL_BIT if spec.transactional else 0
    attributes |= CONTROL_BIT if spec.control else 0
    buf = bytearray(HEADER_SIZE + len(body))
    HEADER.pack_into(
        buf,
        0,
        base,
        HEADER_SIZE - LOG_OVERHEAD + len(body),
        spec.partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        spec.producer_id,
        spec.producer_epoch,
        spec.base_sequence,
        len(records),
    )
    buf[HEADER_SIZE:] = body
    crc = crc32c.crc32c(memoryview(buf)[CRC_START:])
    buf[17:21] = crc.to_bytes(4, "big")
    return bytes(buf)


def simple_batch(
    values: Iterable[bytes | None],
    *,
    keys: Iterable[bytes | None] | None = None,
    timestamp: int = 0,
    compression: Compression = Compression.NONE,
) -> bytes:
    """A batch of records at offsets 0..n-1 with one timestamp: a convenience for tools/tests."""
    values = list(values)
    key_list = list(keys) if keys is not None else [None] * len(values)
    records = [
        Record(offset=i, timestamp=timestamp, key=k, value=v)
        for i, (k, v) in enumerate(zip(key_list, values, strict=True))
    ]
    return build_batch(records, spec=BatchSpec(compression=compression))


def recompress(header: BatchHeader, codec: Compression, level: int | None = None) -> bytes:
    """The same batch (offsets, timestamps, producer fields) with its records compressed by
    `codec`: what a broker stores for a topic whose compression.type differs from the producer's."""
    spec = dataclasses.replace(BatchSpec.of(header), compression=codec, compression_level=level)
    return build_batch(
        list(iter_records(header)),
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        spec=spec,
    )
