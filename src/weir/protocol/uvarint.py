"""Unsigned varints, as Kafka's flexible versions write lengths, counts and tags (protobuf's
base-128 varint; at most five bytes, Kafka's `ByteUtils.readUnsignedVarint`). The one codec
for them: request checks, response framing and the broker's own records use it.

Signed zig-zag varints inside records are another encoding (`weir.records.varint`)."""

from __future__ import annotations

MAX_BYTES = 5


class UvarintError(ValueError):
    pass


def encode_uvarint(value: int) -> bytes:
    """`value` (>= 0) as an unsigned varint."""
    if value < 0:
        raise UvarintError(f"an unsigned varint cannot hold {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint at `pos`: (value, position after it). UvarintError if the buffer
    ends inside it or it runs past MAX_BYTES."""
    value = 0
    for i in range(MAX_BYTES):
        if pos + i >= len(buf):
            raise UvarintError(f"the buffer ends inside an unsigned varint at {pos}")
        byte = buf[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value, pos + i + 1
    raise UvarintError(f"unsigned varint longer than {MAX_BYTES} bytes at {pos}")
