"""Record keys and values of `__transaction_state`, in Kafka's own layouts (TransactionLogKey and
TransactionLogValue), so Kafka's tools read our topic and we read theirs. Big-endian.

    key   v0: version=0:int16 | transactional_id: int16-length string
    value v0: version=0:int16 | producer_id:int64 | producer_epoch:int16 | timeout_ms:int32 |
              state:int8 | partitions: int32 count (-1: null) of [topic: int16-length string |
              int32 count of partition:int32] | last_update_ms:int64 | start_ms:int64
    value v1: the same fields in Kafka's flexible encoding (lengths as unsigned varints of n+1,
              0 meaning null; a tagged-field section after each partition entry and after the
              value), with tagged fields 0 previous_producer_id:int64 (default -1),
              1 next_producer_id:int64 (-1), 2 client_transaction_version:int16 (0) and
              3 next_producer_epoch:int16 (-1), written only when not at their default.

The partition list is null when the state is Empty. A null value is a tombstone: the
transactional id expired.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from weir.broker.txn.state import EMPTY, TxnState
from weir.protocol.uvarint import decode_uvarint, encode_uvarint

KEY_VERSION = 0
VALUE_VERSIONS = (0, 1)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2
TAG_NEXT_PRODUCER_EPOCH = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnLogValue:
    """One transactional id's state as stored. `partitions` is sorted, by topic then index."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, int], ...] = ()
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0
    next_producer_epoch: int = -1


def key_bytes(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def parse_key(key: bytes) -> str | None:
    """The transactional id of a key, or None for a key version we do not know."""
    r = _Reader(key)
    if r.fixed(_I16) != KEY_VERSION:
        return None
    return r.string()


def value_bytes(value: TxnLogValue, version: int = 0) -> bytes:
    if version not in VALUE_VERSIONS:
        raise ValueError(f"transaction log value version {version} is not supported")
    flexible = version >= 1
    out = bytearray(_I16.pack(version))
    out += _I64.pack(value.producer_id) + _I16.pack(value.producer_epoch)
    out += _I32.pack(value.timeout_ms) + _I8.pack(value.state.id)
    groups = None if value.state is EMPTY else _by_topic(value.partitions)
    out += _partitions(groups, flexible)
    out += _I64.pack(value.last_update_ms) + _I64.pack(value.start_ms)
    if flexible:
        out += _tagged_fields(_value_tags(value))
    return bytes(out)


def parse_value(data: bytes) -> TxnLogValue:
    """Decode a value of version 0 or 1; ValueError for other versions or bad bytes."""
    r = _Reader(data)
    version = r.fixed(_I16)
    if version not in VALUE_VERSIONS:
        raise ValueError(f"transaction log value version {version} is not supported")
    flexible = version >= 1
    producer_id, epoch = r.fixed(_I64), r.fixed(_I16)
    timeout_ms, state = r.fixed(_I32), TxnState.from_id(r.fixed(_I8))
    partitions = _read_partitions(r, flexible)
    last_update_ms, start_ms = r.fixed(_I64), r.fixed(_I64)
    tags = r.tagged_fields() if flexible else {}
    return TxnLogValue(
        producer_id=producer_id,
        producer_epoch=epoch,
        timeout_ms=timeout_ms,
        state=state,
        partitions=() if state is EMPTY else partitions,
        last_update_ms=last_update_ms,
        start_ms=start_ms,
        previous_producer_id=_tag(tags, TAG_PREVIOUS_PRODUCER_ID, _I64, -1),
        next_producer_id=_tag(tags, TAG_NEXT_PRODUCER_ID, _I64, -1),
        client_transaction_version=_tag(tags, TAG_CLIENT_TRANSACTION_VERSION, _I16, 0),
        next_producer_epoch=_tag(tags, TAG_NEXT_PRODUCER_EPOCH, _I16, -1),
    )


# ---- encoding ---------------------------------------------------------------------------------


def _by_topic(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    topics: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        topics.setdefault(topic, []).append(index)
    return list(topics.items())


def _partitions(groups: list[tuple[str, list[int]]] | None, flexible: bool) -> bytes:
    if groups is None:
        return encode_uvarint(0) if flexible else _I32.pack(-1)
    out = bytearray(encode_uvarint(len(groups) + 1) if flexible else _I32.pack(len(groups)))
    for topic, indexes in groups:
        out += _compact_string(topic) if flexible else _string(topic)
        out += encode_uvarint(len(indexes) + 1) if flexible else _I32.pack(len(indexes))
        out += b"".join(_I32.pack(i) for i in indexes)
        if flexible:
            out += encode_uvarint(0)  # the entry's (empty) tagged-field section
    return bytes(out)


def _value_tags(value: TxnLogValue) -> dict[int, bytes]:
    tags = {}
    if value.previous_producer_id != -1:
        tags[TAG_PREVIOUS_PRODUCER_ID] = _I64.pack(value.previous_producer_id)
    if value.next_producer_id != -1:
        tags[TAG_NEXT_PRODUCER_ID] = _I64.pack(value.next_producer_id)
    if value.client_transaction_version != 0:
        tags[TAG_CLIENT_TRANSACTION_VERSION] = _I16.pack(value.client_transaction_version)
    if value.next_producer_epoch != -1:
        tags[TAG_NEXT_PRODUCER_EPOCH] = _I16.pack(value.next_producer_epoch)
    return tags


def _tagged_fields(tags: dict[int, bytes]) -> bytes:
    out = bytearray(encode_uvarint(len(tags)))
    for tag in sorted(tags):
        out += encode_uvarint(tag) + encode_uvarint(len(tags[tag])) + tags[tag]
    return bytes(out)


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _I16.pack(len(data)) + data


def _compact_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return encode_uvarint(len(data) + 1) + data


# ---- decoding ---------------------------------------------------------------------------------


def _read_partitions(r: _Reader, flexible: bool) -> tuple[tuple[str, int], ...]:
    count = r.uvarint() - 1 if flexible else r.fixed(_I32)
    out: list[tuple[str, int]] = []
    for _ in range(max(count, 0)):
        topic = r.compact_string() if flexible else r.string()
        indexes = r.uvarint() - 1 if flexible else r.fixed(_I32)
        out.extend((topic, r.fixed(_I32)) for _ in range(max(indexes, 0)))
        if flexible:
            r.tagged_fields()
    return tuple(sorted(out))


def _tag(tags: dict[int, bytes], tag: int, fmt: struct.Struct, default: int) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    (value,) = fmt.unpack(data)
    return int(value)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def fixed(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.position)
        self.position += fmt.size
        return int(value)

    def take(self, count: int) -> bytes:
        if count < 0 or self.position + count > len(self.data):
            raise ValueError("transaction log record ends early")
        start = self.position
        self.position += count
        return self.data[start : self.position]

    def string(self) -> str:
        length = self.fixed(_I16)
        return self.take(max(length, 0)).decode("utf-8")

    def compact_string(self) -> str:
        return self.take(max(self.uvarint() - 1, 0)).decode("utf-8")

    def uvarint(self) -> int:
        value, self.position = decode_uvarint(self.data, self.position)
        return value

    def tagged_fields(self) -> dict[int, bytes]:
        tags = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.take(self.uvarint())
        return tags
