"""Produce v0-2: advertised (librdkafka looks for version 0) but refused, as Kafka 4 does.

kio has no schema for these versions, so the few fields needed to answer are read and written
here: every partition of the request gets UNSUPPORTED_VERSION in a response of the same version.
Layouts (big-endian): request `acks:int16 timeout:int32 [topic:string [partition:int32
records:bytes]]`; response `[topic:string [partition:int32 error:int16 base_offset:int64
(v2: log_append_time:int64)]] (v1+: throttle_time_ms:int32)`.
"""

from __future__ import annotations

import struct

from weir.protocol.errors import ErrorCode, InvalidRequestError
from weir.protocol.framing import size_prefix

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER_START = struct.Struct(">hhih")  # api key, version, correlation id, client id length


class _Reader:
    def __init__(self, payload: bytes | memoryview, position: int) -> None:
        self.payload = payload
        self.position = position

    def take(self, fmt: struct.Struct) -> int:
        if self.position + fmt.size > len(self.payload):
            raise InvalidRequestError("truncated produce request")
        (value,) = fmt.unpack_from(self.payload, self.position)
        self.position += fmt.size
        return int(value)

    def skip(self, count: int) -> None:
        if count > 0:
            self.position += count

    def string(self) -> bytes:
        length = self.take(_I16)
        start = self.position
        self.skip(length)
        return bytes(self.payload[start : self.position])


def refuse(payload: bytes | memoryview) -> bytes:
    """A framed Produce response (same version) with UNSUPPORTED_VERSION for every partition,
    or InvalidRequestError when it asked for no response (acks=0): the connection closes."""
    if len(payload) < _HEADER_START.size:
        raise InvalidRequestError("truncated produce request header")
    _, version, correlation_id, client_id_length = _HEADER_START.unpack_from(payload)
    reader = _Reader(payload, _HEADER_START.size + max(client_id_length, 0))
    acks = reader.take(_I16)
    reader.skip(4)  # timeout
    out = bytearray(_I32.pack(correlation_id))
    topics = reader.take(_I32)
    out += _I32.pack(max(topics, 0))
    for _ in range(max(topics, 0)):
        name = reader.string()
        out += _I16.pack(len(name)) + name
        partitions = reader.take(_I32)
        out += _I32.pack(max(partitions, 0))
        for _ in range(max(partitions, 0)):
            index = reader.take(_I32)
            reader.skip(reader.take(_I32))
            out += _I32.pack(index) + _I16.pack(ErrorCode.unsupported_version) + b"\xff" * 8
            if version >= 2:
                out += b"\xff" * 8
    if version >= 1:
        out += _I32.pack(0)
    if acks == 0:
        raise InvalidRequestError("refused an acks=0 produce of an unsupported version")
    return size_prefix(len(out)) + bytes(out)
