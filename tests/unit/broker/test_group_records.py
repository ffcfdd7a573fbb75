"""`__consumer_offsets` keys and values in Kafka's layouts, and the group -> partition hash."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weir.broker.group.group import CommittedOffset
from weir.broker.group.records import (
    GroupKey,
    OffsetKey,
    StoredGroup,
    StoredMember,
    group_key,
    group_value,
    offset_key,
    offset_value,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from weir.broker.group.store import GroupStore, java_string_hash

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
NAMES = st.text(max_size=40)  # arbitrary unicode, including the empty string
BLOBS = st.one_of(st.just(b""), st.binary(max_size=200))

members = st.builds(
    StoredMember,
    member_id=NAMES,
    group_instance_id=st.none() | NAMES,
    client_id=NAMES,
    client_host=NAMES,
    rebalance_timeout_ms=INT32,
    session_timeout_ms=INT32,
    subscription=BLOBS,
    assignment=BLOBS,
)
groups = st.builds(
    StoredGroup,
    protocol_type=NAMES,
    generation=INT32,
    protocol=st.none() | NAMES,
    leader=st.none() | NAMES,
    state_timestamp=INT64,
    members=st.lists(members, max_size=5).map(tuple),
)
offsets = st.builds(
    CommittedOffset, offset=INT64, leader_epoch=INT32, metadata=NAMES, commit_timestamp=INT64
)


# ---- round trips --------------------------------------------------------------------------------


@given(group=NAMES, topic=NAMES, partition=INT32)
def test_offset_key_round_trip(group: str, topic: str, partition: int) -> None:
    assert parse_key(offset_key(group, topic, partition)) == OffsetKey(group, topic, partition)


@given(group=NAMES)
def test_group_key_round_trip(group: str) -> None:
    assert parse_key(group_key(group)) == GroupKey(group)


@given(committed=offsets)
def test_offset_value_round_trip(committed: CommittedOffset) -> None:
    assert parse_offset_value(offset_value(committed)) == committed


@given(stored=groups)
def test_group_value_round_trip(stored: StoredGroup) -> None:
    assert parse_group_value(group_value(stored)) == stored


@given(group=NAMES, topic=NAMES, partition=INT32)
def test_offset_and_group_keys_never_collide(group: str, topic: str, partition: int) -> None:
    assert offset_key(group, topic, partition) != group_key(group)
    assert isinstance(parse_key(group_key(group)), GroupKey)


@given(version=INT16.filter(lambda v: v not in (0, 1, 2)), rest=st.binary(max_size=20))
def test_unknown_key_versions_are_skipped(version: int, rest: bytes) -> None:
    assert parse_key(struct.pack(">h", version) + rest) is None


# ---- exact bytes, as Kafka writes them ----------------------------------------------------------


def _s(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _b(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def test_offset_key_bytes() -> None:
    assert offset_key("g", "t", 7) == b"\x00\x01" + _s("g") + _s("t") + b"\x00\x00\x00\x07"


def test_group_key_bytes() -> None:
    assert group_key("grüppe") == b"\x00\x02" + _s("grüppe")


def test_offset_value_v3_bytes() -> None:
    value = offset_value(CommittedOffset(42, 5, "meta", 1_700_000_000_000))
    expected = struct.pack(">hqi", 3, 42, 5) + _s("meta") + struct.pack(">q", 1_700_000_000_000)
    assert value == expected


def test_group_value_v3_bytes() -> None:
    member = StoredMember("m-1", None, "client", "/10.0.0.1", 300_000, 10_000, b"sub", b"asg")
    value = group_value(StoredGroup("consumer", 3, "range", "m-1", 1234, (member,)))
    expected = (
        struct.pack(">h", 3) + _s("consumer") + struct.pack(">i", 3) + _s("range") + _s("m-1")
        + struct.pack(">q", 1234) + struct.pack(">i", 1)
        + _s("m-1") + _s(None) + _s("client") + _s("/10.0.0.1")
        + struct.pack(">ii", 300_000, 10_000) + _b(b"sub") + _b(b"asg")
    )  # fmt: skip
    assert value == expected


def test_empty_group_value_with_null_protocol_and_leader() -> None:
    stored = StoredGroup("consumer", 4, None, None, 99, ())
    value = group_value(stored)
    assert value == (
        struct.pack(">h", 3) + _s("consumer") + struct.pack(">i", 4) + _s(None) + _s(None)
        + struct.pack(">qi", 99, 0)
    )  # fmt: skip
    assert parse_group_value(value) == stored


# ---- older layouts that an existing Kafka topic may hold ----------------------------------------


def test_parses_offset_key_v0() -> None:
    key = b"\x00\x00" + _s("g") + _s("t") + struct.pack(">i", 3)
    assert parse_key(key) == OffsetKey("g", "t", 3)


def test_parses_offset_value_v1_with_expire_timestamp() -> None:
    value = struct.pack(">hq", 1, 42) + _s("meta") + struct.pack(">qq", 1000, 2000)
    assert parse_offset_value(value) == CommittedOffset(42, -1, "meta", 1000)


def test_parses_offset_value_v0_and_null_metadata() -> None:
    value = struct.pack(">hq", 0, 42) + _s(None) + struct.pack(">q", 1000)
    assert parse_offset_value(value) == CommittedOffset(42, -1, "", 1000)


def test_parses_group_value_v0() -> None:
    value = (
        struct.pack(">h", 0) + _s("consumer") + struct.pack(">i", 2) + _s("range") + _s("m")
        + struct.pack(">i", 1) + _s("m") + _s("cid") + _s("host")
        + struct.pack(">i", 10_000) + _b(b"sub") + _b(b"asg")
    )  # fmt: skip
    stored = parse_group_value(value)
    assert stored == StoredGroup(
        "consumer", 2, "range", "m", -1,
        (StoredMember("m", None, "cid", "host", 0, 10_000, b"sub", b"asg"),),
    )  # fmt: skip


def test_parses_group_value_v2_without_instance_id() -> None:
    value = (
        struct.pack(">h", 2) + _s("consumer") + struct.pack(">i", 2) + _s("range") + _s("m")
        + struct.pack(">q", 77) + struct.pack(">i", 1) + _s("m") + _s("cid") + _s("host")
        + struct.pack(">ii", 60_000, 10_000) + _b(b"") + _b(b"\x00\xff")
    )  # fmt: skip
    stored = parse_group_value(value)
    assert stored.state_timestamp == 77
    assert stored.members == (
        StoredMember("m", None, "cid", "host", 60_000, 10_000, b"", b"\x00\xff"),
    )


# ---- java_string_hash and partition_for ---------------------------------------------------------


def java_hash_reference(text: str) -> int:
    """String.hashCode written from its definition: s[0]*31^(n-1) + ... over UTF-16 units."""
    units: list[int] = []
    for char in text:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            units += [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]
        else:
            units.append(code)
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return int(total) - 2**32 if total >= 2**31 else int(total)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("polygenelubricants", -(2**31)),
        ("GydZG_", -(2**31)),
        ("DESIGNING WORKHOUSES", -(2**31)),
        ("😀", 31 * 0xD83D + 0xDE00),  # a surrogate pair counts as two chars
        ("console-consumer-12345", java_hash_reference("console-consumer-12345")),
    ],
)
def test_java_string_hash_known_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


@given(text=st.text(max_size=60))
def test_java_string_hash_matches_definition(text: str) -> None:
    h = java_string_hash(text)
    assert h == java_hash_reference(text)
    assert -(2**31) <= h < 2**31


def _store(partitions: int) -> GroupStore:
    topics: Any = SimpleNamespace(metadata=SimpleNamespace(topic=lambda name: None))
    return GroupStore(replicas=None, topics=topics, partitions=partitions, clock=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["polygenelubricants", "GydZG_", "DESIGNING WORKHOUSES"])
def test_integer_min_value_hash_maps_to_partition_zero(text: str) -> None:
    # Kafka's Utils.abs(Integer.MIN_VALUE) is 0, so such groups live in partition 0.
    assert _store(50).partition_for(text) == 0
    assert _store(7).partition_for(text) == 0


def test_partition_for_known_groups() -> None:
    store = _store(50)
    assert store.partition_for("") == 0
    assert store.partition_for("a") == 97 % 50
    assert store.partition_for("hello") == 99162322 % 50


@given(group=st.text(max_size=60), partitions=st.integers(1, 200))
def test_partition_for_stays_in_range(group: str, partitions: int) -> None:
    partition = _store(partitions).partition_for(group)
    assert 0 <= partition < partitions
    assert partition == abs(java_hash_reference(group)) % partitions or (
        java_hash_reference(group) == -(2**31) and partition == 0
    )
