"""Produce v0-2 is advertised but refused: each partition gets UNSUPPORTED_VERSION in a
response of the request's own version, read here field by field."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from weir.protocol.apis import ApiKey, decodable
from weir.protocol.codec import decode_request
from weir.protocol.errors import InvalidRequestError, RemoteProtocolError, UnsupportedVersionError
from weir.protocol.legacy_produce import refuse

UNSUPPORTED = ErrorCode.unsupported_version.value


def legacy_message_set(value: bytes) -> bytes:
    body = struct.pack(">bbq", 1, 0, 1_700_000_000_000)
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def legacy_request(
    version: int,
    topics: list[tuple[str, list[int]]],
    correlation_id: int = 7,
    client_id: bytes | None = b"old-client",
) -> bytes:
    out = struct.pack(">hhi", ApiKey.PRODUCE, version, correlation_id)
    out += struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id))
    out += client_id or b""
    out += struct.pack(">hii", 1, 1500, len(topics))
    for name, partitions in topics:
        out += struct.pack(">h", len(name)) + name.encode()
        out += struct.pack(">i", len(partitions))
        for index in partitions:
            messages = legacy_message_set(b"value-%d" % index)
            out += struct.pack(">ii", index, len(messages)) + messages
    return out


def parse_response(framed: bytes, version: int) -> tuple[int, list[tuple[str, list[tuple]]], int]:
    """(correlation id, [(topic, [partition fields])], throttle) from a Produce v0-2 response."""
    (size,) = struct.unpack_from(">i", framed)
    assert size == len(framed) - 4
    position = 4
    (correlation_id, count) = struct.unpack_from(">ii", framed, position)
    position += 8
    topics = []
    for _ in range(count):
        (length,) = struct.unpack_from(">h", framed, position)
        name = framed[position + 2 : position + 2 + length].decode()
        position += 2 + length
        (partition_count,) = struct.unpack_from(">i", framed, position)
        position += 4
        fields = ">ihqq" if version >= 2 else ">ihq"
        partitions = []
        for _ in range(partition_count):
            partitions.append(struct.unpack_from(fields, framed, position))
            position += struct.calcsize(fields)
        topics.append((name, partitions))
    throttle = -1
    if version >= 1:
        (throttle,) = struct.unpack_from(">i", framed, position)
        position += 4
    assert position == len(framed), "bytes after the response"
    return correlation_id, topics, throttle


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_decoder_refuses_produce_below_v3(version: int) -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_request(legacy_request(version, [("t", [0])]), decodable())


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_partition_is_answered_unsupported_version_in_the_requests_version(
    version: int,
) -> None:
    request = legacy_request(version, [("alpha", [0, 3]), ("beta", [1])], correlation_id=-9)
    correlation_id, topics, throttle = parse_response(refuse(request), version)
    assert correlation_id == -9
    no_time = (-1,) if version >= 2 else ()
    assert topics == [
        ("alpha", [(0, UNSUPPORTED, -1, *no_time), (3, UNSUPPORTED, -1, *no_time)]),
        ("beta", [(1, UNSUPPORTED, -1, *no_time)]),
    ]
    assert throttle == (0 if version >= 1 else -1)


def test_a_null_client_id_and_no_topics_are_answered() -> None:
    request = legacy_request(2, [], correlation_id=3, client_id=None)
    assert parse_response(refuse(request), 2) == (3, [], 0)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_request_cut_before_its_last_partition_is_whole_is_invalid(version: int) -> None:
    request = legacy_request(version, [("alpha", [0, 3])])
    last_records = len(legacy_message_set(b"value-3"))
    answerable = len(request) - last_records  # every index and records size has arrived
    for end in range(8 + 2 + len(b"old-client"), answerable):
        with pytest.raises(InvalidRequestError):
            refuse(request[:end])
    for end in range(answerable, len(request) + 1):
        _, topics, _ = parse_response(refuse(request[:end]), version)
        assert [(name, [p[:2] for p in ps]) for name, ps in topics] == [
            ("alpha", [(0, UNSUPPORTED), (3, UNSUPPORTED)])
        ]


@pytest.mark.parametrize("size", [8, 9])
def test_a_legacy_request_without_a_whole_client_id_length_is_invalid(size: int) -> None:
    with pytest.raises(RemoteProtocolError):
        refuse(legacy_request(1, [("t", [0])])[:size])


@settings(max_examples=500, deadline=None)
@given(
    st.integers(min_value=0, max_value=2),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.integers(min_value=-1, max_value=40),
    st.binary(max_size=200),
)
def test_arbitrary_bytes_after_a_legacy_header_answer_or_are_invalid(
    version: int, correlation_id: int, client_id_length: int, rest: bytes
) -> None:
    payload = struct.pack(">hhih", ApiKey.PRODUCE, version, correlation_id, client_id_length)
    try:
        framed = refuse(payload + rest)
    except RemoteProtocolError:
        return
    (size,) = struct.unpack_from(">i", framed)
    assert size == len(framed) - 4
    assert framed[4:8] == struct.pack(">i", correlation_id)
