"""An event as the agent stores it in a queue: key, value, headers and the time it was accepted.

Encoding (big-endian): timestamp i64 | key length i32 (-1: no key) | key | value length i32 |
value | header count u16 | per header: name length u16 | name | value length i32 | value.
Pure functions on bytes; nothing here touches files or sockets.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
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
_NULL = _I32.pack(-1)


def encode_event(event: Event) -> bytes:
    return encode_record(event.timestamp_ms, event.key, event.value, event.headers)


def encode_record(
    timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Headers | None = None
) -> bytes:
    """The stored form of one event, built from its parts without an `Event` in between."""
    if not headers:
        head = _HEAD.pack(timestamp_ms, -1 if key is None else len(key))
        if key is not None:
            head += key
        return head + _optional_bytes(value) + _NO_HEADERS
    parts = [_I64.pack(timestamp_ms), _optional_bytes(key)]
    parts.append(_optional_bytes(value))
    parts.append(_U16.pack(len(headers)))
    for name, header_value in headers:
        encoded = name.encode()
        parts += [_U16.pack(len(encoded)), encoded, _optional_bytes(header_value)]
    return b"".join(parts)


def encode_unkeyed(timestamp_ms: int, values: Sequence[bytes | None]) -> list[bytes]:
    """The stored form of many unkeyed events without headers that share one timestamp."""
    head = _HEAD.pack(timestamp_ms, -1)
    length = _I32.pack
    return [
        head + length(len(v)) + v + _NO_HEADERS if v is not None else head + _NULL + _NO_HEADERS
        for v in values
    ]


def timestamp_prefix(timestamp_ms: int) -> bytes:
    """The first bytes of a stored event: put before an untimed record, they make it whole."""
    return _I64.pack(timestamp_ms)


def encode_untimed(key: bytes | None, value: bytes | None) -> bytes:
    """The stored form of an event without headers, minus its timestamp (see `timestamp_prefix`)."""
    return _optional_bytes(key) + _optional_bytes(value) + _NO_HEADERS


_UNTIMED_EMPTY = _I32.size * 2 + _U16.size
_TWO_I32 = struct.Struct(">ii")


def check_untimed(data: bytes, start: int, end: int) -> tuple[bytes | None, int]:
    """Checks that `data[start:end]` is a stored event minus its timestamp; returns its key and
    its size (key, value and header bytes). Raises ValueError when it is malformed."""
    if end - start < _UNTIMED_EMPTY:
        raise ValueError("event shorter than its fixed fields")
    key_length, value_length = _TWO_I32.unpack_from(data, start)
    if key_length == -1 and value_length >= 0:
        at = start + _TWO_I32.size + value_length
        if at + 2 == end and data[at] == 0 and data[at + 1] == 0:
            return None, value_length
    if key_length > 0:
        at = start + 4 + key_length
        key: bytes | None = data[start + 4 : at]
    elif key_length in (0, -1):
        at, key = start + 4, b"" if key_length == 0 else None
    else:
        raise ValueError("bad key length")
    if at + 6 > end:
        raise ValueError("bad key length")
    (value_length,) = _I32.unpack_from(data, at)
    if value_length < -1:
        raise ValueError("bad value length")
    size = value_length + (key_length if key_length > 0 else 0) + (value_length < 0)
    at += 4 + (value_length if value_length > 0 else 0)
    if at + 2 == end and data[at] == 0 and data[at + 1] == 0:
        return key, size
    if at + 2 > end:
        raise ValueError("bad value length")
    return key, _check_headers(data, at, end, size)


def _check_headers(data: bytes, at: int, end: int, size: int) -> int:
    reader = _Reader(data[:end])
    reader.at = at
    try:
        for _ in range(reader.take(_U16)):
            name_length = reader.take(_U16)
            reader.at += name_length
            data[reader.at - name_length : reader.at].decode()
            value = reader.optional_bytes()
            size += name_length + len(value or b"")
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"bad headers: {exc}") from exc
    if reader.at != end:
        raise ValueError("bytes left after the headers")
    return size


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


def record_key(data: bytes) -> bytes | None:
    """The key of a stored event, without decoding the rest of it."""
    (length,) = _I32.unpack_from(data, _I64.size)
    if length < 0:
        return None
    start = _I64.size + _I32.size
    return data[start : start + length]


Fields = tuple[int, bytes | None, bytes | None, Headers]


def decode_fields(data: bytes) -> Fields:
    """(timestamp, key, value, headers) of a stored event, without building an `Event`."""
    timestamp, key_length = _HEAD.unpack_from(data)
    at = _HEAD.size
    key = None
    if key_length >= 0:
        key = data[at : at + key_length]
        at += key_length
    (value_length,) = _I32.unpack_from(data, at)
    at += _I32.size
    value = None
    if value_length >= 0:
        value = data[at : at + value_length]
        at += value_length
    if len(data) == at + _U16.size and data[at] == 0 and data[at + 1] == 0:
        return timestamp, key, value, []
    return timestamp, key, value, decode_event("", data).headers


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
