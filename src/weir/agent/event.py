"""An event as the agent stores it in a queue: key, value, headers and the time it was accepted.

Encoding (big-endian): timestamp i64 | key length i32 (-1: no key) | key | value length i32 |
value | header count u16 | per header: name length u16 | name | value length i32 | value.
Pure functions on bytes; nothing here touches files or sockets.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")

Headers = list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: Headers = field(default_factory=list)
    timestamp_ms: int = 0

    @property
    def size(self) -> int:
        header_bytes = sum(len(k) + len(v) for k, v in self.headers)
        return len(self.key or b"") + len(self.value or b"") + header_bytes


def _optional_bytes(data: bytes | None) -> bytes:
    if data is None:
        return _I32.pack(-1)
    return _I32.pack(len(data)) + data


_HEAD = struct.Struct(">qi")
_NO_HEADERS = _U16.pack(0)


def encode_event(event: Event) -> bytes:
    if not event.headers:
        key, value = event.key, event.value
        head = _HEAD.pack(event.timestamp_ms, -1 if key is None else len(key))
        if key is not None:
            head += key
        return head + _optional_bytes(value) + _NO_HEADERS
    parts = [_I64.pack(event.timestamp_ms), _optional_bytes(event.key)]
    parts.append(_optional_bytes(event.value))
    parts.append(_U16.pack(len(event.headers)))
    for name, value in event.headers:
        encoded = name.encode()
        parts += [_U16.pack(len(encoded)), encoded, _optional_bytes(value)]
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, unpacker: struct.Struct) -> int:
        (value,) = unpacker.unpack_from(self.data, self.at)
        self.at += unpacker.size
        return int(value)

    def optional_bytes(self) -> bytes | None:
        length = self.take(_I32)
        if length < 0:
            return None
        self.at += length
        return self.data[self.at - length : self.at]


def decode_event(topic: str, data: bytes) -> Event:
    reader = _Reader(data)
    timestamp = reader.take(_I64)
    key = reader.optional_bytes()
    value = reader.optional_bytes()
    headers: Headers = []
    for _ in range(reader.take(_U16)):
        name_length = reader.take(_U16)
        reader.at += name_length
        name = data[reader.at - name_length : reader.at].decode()
        headers.append((name, reader.optional_bytes() or b""))
    return Event(topic=topic, value=value, key=key, headers=headers, timestamp_ms=timestamp)
