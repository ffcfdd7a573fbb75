"""Zig-zag varints as used inside Kafka records (protobuf's signed varint encoding)."""

from __future__ import annotations

from weir.records.errors import CorruptRecordError


def encode_varint(value: int) -> bytes:
    """Encode a signed 64-bit integer as a zig-zag varint."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint at `pos`; return (value, position after it)."""
    shift = 0
    z = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            z |= (b & 0x7F) << shift
            if b < 0x80:
                return (z >> 1) ^ -(z & 1), pos
            shift += 7
            if shift > 63:
                raise CorruptRecordError("varint longer than 10 bytes")
    except IndexError:
        raise CorruptRecordError("record truncated inside a varint") from None
