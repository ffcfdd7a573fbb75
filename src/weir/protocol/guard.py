"""A pre-check of request bytes against the message schema, before kio decodes them.

kio's native decoder reserves memory for an array from its count before reading any element,
so one request claiming billions of elements could exhaust memory and abort the process. This
walk follows the same schema (kio's field metadata), checks that every array count and every
string or bytes length fits in the bytes that remain, and drops tagged fields the schema does
not know (KIP-482: receivers ignore unknown tags; kio would refuse them). It costs one pass
over the request's structure, never over record data.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from typing import Any

from kio.serial._introspect import classify_field, is_optional

from weir.protocol.errors import InvalidRequestError
from weir.protocol.uvarint import UvarintError, decode_uvarint, encode_uvarint

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "uint32": 4,
          "uint64": 8, "float64": 8, "error_code": 2, "timedelta_i32": 4, "timedelta_i64": 8,
          "datetime_i64": 8, "uuid": 16}  # fmt: skip
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    kafka_type: str | None
    optional: bool
    array: bool
    entity: type | None
    tag: int | None


@cache
def _schema(cls: type) -> tuple[tuple[_Field, ...], dict[int, _Field]]:
    plain, tagged = [], {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        entity = kind.type_ if type(kind).__name__.startswith("Entity") else None
        spec = _Field(f.metadata.get("kafka_type"), is_optional(f), kind.is_array, entity,
                      f.metadata.get("tag"))  # fmt: skip
        if spec.tag is None:
            plain.append(spec)
        else:
            tagged[spec.tag] = spec
    return tuple(plain), tagged


class _Walk:
    def __init__(self, payload: bytes | memoryview) -> None:
        self.data = payload
        self.pos = 0
        self.edits: list[tuple[int, int, bytes]] = []  # (start, end, replacement)

    def need(self, count: int) -> None:
        if count < 0 or self.pos + count > len(self.data):
            raise InvalidRequestError(
                f"request claims {count} bytes at {self.pos}, {len(self.data) - self.pos} remain"
            )

    def fixed(self, fmt: struct.Struct) -> int:
        self.need(fmt.size)
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def uvarint(self) -> int:
        try:
            value, self.pos = decode_uvarint(self.data, self.pos)
        except UvarintError as exc:
            raise InvalidRequestError(str(exc)) from None
        return value

    def length(self, flexible: bool, wide: bool) -> int:
        """A string/bytes/array length: compact uvarint-1 or int16/int32; -1 means null."""
        if flexible:
            return self.uvarint() - 1
        return self.fixed(_I32 if wide else _I16)

    def entity(self, cls: type, flexible: bool) -> None:
        plain, tagged = _schema(cls)
        for spec in plain:
            self.field(spec, flexible)
        if flexible:
            self.tags(tagged)

    def field(self, spec: _Field, flexible: bool) -> None:
        if spec.array:
            count = self.length(flexible, wide=True)
            self.need(max(count, 0))  # every element takes at least one byte
            for _ in range(max(count, 0)):
                self.value(spec, flexible)
            return
        self.value(spec, flexible)

    def value(self, spec: _Field, flexible: bool) -> None:
        if spec.entity is not None:
            self.entity(spec.entity, flexible)
        elif spec.kafka_type in _FIXED:
            self.need(_FIXED[spec.kafka_type])
            self.pos += _FIXED[spec.kafka_type]
        elif spec.kafka_type in ("string", "bytes", "records"):
            size = self.length(flexible, wide=spec.kafka_type != "string")
            self.need(max(size, 0))
            self.pos += max(size, 0)
        else:
            raise InvalidRequestError(f"unsupported field type {spec.kafka_type}")

    def tags(self, known: dict[int, _Field]) -> None:
        start = self.pos
        count = self.uvarint()
        kept = bytearray()
        kept_count = 0
        for _ in range(count):
            tag_start = self.pos
            tag, size = self.uvarint(), self.uvarint()
            self.need(size)
            body_start, self.pos = self.pos, self.pos + size
            if tag in known:
                inner = _Walk(self.data[body_start : self.pos])
                inner.value(known[tag], flexible=True)
                kept += self.data[tag_start : self.pos]
                kept_count += 1
        if kept_count != count:
            self.edits.append((start, self.pos, encode_uvarint(kept_count) + bytes(kept)))

    def result(self) -> bytes | memoryview:
        if not self.edits:
            return self.data
        out, last = bytearray(), 0
        for start, end, replacement in self.edits:
            out += self.data[last:start]
            out += replacement
            last = end
        out += self.data[last:]
        return bytes(out)


def checked_payload(
    payload: bytes | memoryview, header_type: Any, request_type: Any
) -> bytes | memoryview:
    """`payload` if every length in it fits (unknown tagged fields removed), else raise
    InvalidRequestError. The request header's client id is always a legacy string."""
    walk = _Walk(payload)
    walk.pos = 8  # api key, api version, correlation id
    walk.value(_Field("string", True, False, None, None), flexible=False)
    if header_type.__flexible__:
        walk.tags(_schema(header_type)[1])
    walk.entity(request_type, bool(request_type.__flexible__))
    return walk.result()
