"""Record keys and values of `__consumer_offsets`, in Kafka's own layouts (so Kafka's tools can
read our topic). Big-endian; string = int16 length + UTF-8 (-1: null); bytes = int32 length.

    offset commit key   v1: version=1 | group | topic | partition:int32
    offset commit value v3: version=3 | offset:int64 | leader_epoch:int32 | metadata | ts:int64
    group metadata key  v2: version=2 | group
    group metadata value v3: version=3 | protocol_type | generation:int32 | protocol? | leader? |
        state_timestamp:int64 | [member_id | instance_id? | client_id | client_host |
        rebalance_timeout:int32 | session_timeout:int32 | subscription:bytes | assignment:bytes]

A null value is a tombstone: the offset (or the whole group) was deleted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from weir.broker.group.group import CommittedOffset

OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 3
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i16(self, v: int) -> _Writer:
        self.out += _I16.pack(v)
        return self

    def i32(self, v: int) -> _Writer:
        self.out += _I32.pack(v)
        return self

    def i64(self, v: int) -> _Writer:
        self.out += _I64.pack(v)
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.i16(-1)
        data = v.encode("utf-8")
        self.out += _I16.pack(len(data)) + data
        return self

    def bytes_(self, v: bytes) -> _Writer:
        self.out += _I32.pack(len(v)) + v
        return self


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def _take(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.position)
        self.position += fmt.size
        return int(value)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def string(self) -> str | None:
        length = self.i16()
        if length < 0:
            return None
        start = self.position
        self.position += length
        return self.data[start : self.position].decode("utf-8")

    def bytes_(self) -> bytes:
        length = self.i32()
        start = self.position
        self.position += max(length, 0)
        return self.data[start : self.position]


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroup:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[StoredMember, ...]


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return bytes(_Writer().i16(OFFSET_KEY_VERSION).string(group).string(topic).i32(partition).out)


def offset_value(committed: CommittedOffset) -> bytes:
    w = _Writer().i16(OFFSET_VALUE_VERSION).i64(committed.offset).i32(committed.leader_epoch)
    return bytes(w.string(committed.metadata).i64(committed.commit_timestamp).out)


def group_key(group: str) -> bytes:
    return bytes(_Writer().i16(GROUP_KEY_VERSION).string(group).out)


def group_value(stored: StoredGroup) -> bytes:
    w = _Writer().i16(GROUP_VALUE_VERSION).string(stored.protocol_type).i32(stored.generation)
    w.string(stored.protocol).string(stored.leader).i64(stored.state_timestamp)
    w.i32(len(stored.members))
    for m in stored.members:
        w.string(m.member_id).string(m.group_instance_id).string(m.client_id)
        w.string(m.client_host).i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms)
        w.bytes_(m.subscription).bytes_(m.assignment)
    return bytes(w.out)


def parse_key(key: bytes) -> OffsetKey | GroupKey | None:
    """The key's meaning, or None for versions we do not know (they are skipped)."""
    r = _Reader(key)
    version = r.i16()
    if version in (0, 1):
        group, topic = r.string(), r.string()
        return OffsetKey(group or "", topic or "", r.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(r.string() or "")
    return None


def parse_offset_value(value: bytes) -> CommittedOffset:
    r = _Reader(value)
    version = r.i16()
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    return CommittedOffset(offset, epoch, metadata, r.i64())


def parse_group_value(value: bytes) -> StoredGroup:
    r = _Reader(value)
    version = r.i16()
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol, leader = r.string(), r.string()
    state_timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id, client_host = r.string() or "", r.string() or ""
        rebalance = r.i32() if version >= 1 else 0
        session = r.i32()
        members.append(StoredMember(member_id, instance, client_id, client_host, rebalance,
                                    session, r.bytes_(), r.bytes_()))  # fmt: skip
    return StoredGroup(protocol_type, generation, protocol, leader, state_timestamp,
                       tuple(members))  # fmt: skip
