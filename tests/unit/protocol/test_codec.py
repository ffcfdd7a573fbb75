"""Request decoding and response encoding against kio's own writer and reader."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import os
import resource
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from weir.protocol.apis import ADVERTISED, ApiKey, decodable
from weir.protocol.codec import (
    Request,
    codec_for,
    decode_request,
    encode_response,
    peek_header,
    response_type,
)
from weir.protocol.errors import (
    InvalidRequestError,
    RemoteProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from weir.protocol.uvarint import encode_uvarint

# kio registers strategies for its primitives but not for record bytes.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

MODEST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SUPPORTED = decodable()

ROUND_TRIPS = [
    (ApiKey.API_VERSIONS, 0),
    (ApiKey.API_VERSIONS, 1),
    (ApiKey.API_VERSIONS, 2),
    (ApiKey.API_VERSIONS, 3),
    (ApiKey.METADATA, 0),
    (ApiKey.METADATA, 1),
    (ApiKey.METADATA, 9),
    (ApiKey.METADATA, 12),
    (ApiKey.PRODUCE, 3),
    (ApiKey.PRODUCE, 9),
    (ApiKey.FETCH, 4),
    (ApiKey.FETCH, 12),
    (ApiKey.CREATE_TOPICS, 7),
]
CORRELATION_IDS = st.integers(min_value=-(2**31), max_value=2**31 - 1)
CLIENT_IDS = st.none() | st.text(max_size=20)


def encode_request(
    api_key: int, version: int, body: Any, correlation_id: int = 1, client_id: str | None = "t"
) -> bytes:
    """A request payload (no size prefix) written by kio, as a real client would send it."""
    cls = codec_for(api_key, version).request_type
    header_cls = cls.__header_schema__  # type: ignore[attr-defined]
    buffer = io.BytesIO()
    header = header_cls(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    entity_writer(header_cls)(buffer, header)
    entity_writer(cls)(buffer, body)
    return buffer.getvalue()


def metadata_request(version: int, topics: tuple[str, ...] = ("t",)) -> Any:
    module = importlib.import_module(f"kio.schema.metadata.v{version}.request")
    entries = tuple(build(module.MetadataRequestTopic, name=name, topic_id=None) for name in topics)
    return build(
        module.MetadataRequest,
        topics=entries,
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def build(cls: type, **values: Any) -> Any:
    """An instance of a kio class from the values its version has fields for."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def header_only(api_key: int, version: int, correlation_id: int = 9) -> bytes:
    return struct.pack(">hhi", api_key, version, correlation_id) + b"\xff\xff"


# ---- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version"), ROUND_TRIPS)
def test_a_request_written_by_kio_decodes_to_the_same_header_and_body(
    api_key: int, version: int
) -> None:
    cls = codec_for(api_key, version).request_type

    @MODEST
    @given(st.from_type(cls), CORRELATION_IDS, CLIENT_IDS)
    def round_trip(body: Any, correlation_id: int, client_id: str | None) -> None:
        payload = encode_request(api_key, version, body, correlation_id, client_id)
        request = decode_request(payload, SUPPORTED)
        assert request == Request(
            api_key=api_key,
            api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
            header=request.header,
            body=body,
        )
        assert request.header.request_api_key == api_key
        assert request.header.request_api_version == version
        assert request.header.correlation_id == correlation_id
        assert request.header.client_id == client_id
        assert type(request.body) is cls

    round_trip()


@pytest.mark.parametrize(
    ("api_key", "version", "header_version"),
    [
        (ApiKey.API_VERSIONS, 2, 1),
        (ApiKey.API_VERSIONS, 3, 2),
        (ApiKey.METADATA, 8, 1),
        (ApiKey.METADATA, 9, 2),
        (ApiKey.PRODUCE, 8, 1),
        (ApiKey.PRODUCE, 9, 2),
        (ApiKey.FETCH, 11, 1),
        (ApiKey.FETCH, 12, 2),
    ],
)
def test_flexible_versions_read_request_header_v2_and_others_v1(
    api_key: int, version: int, header_version: int
) -> None:
    header_cls = codec_for(api_key, version).request_type.__header_schema__  # type: ignore[attr-defined]
    assert header_cls.__version__ == header_version


TWO_UNKNOWN_TAGS = b"\x02" + b"\x05\x03abc" + b"\x07\x00"  # tag 5 (3 bytes), tag 7 (empty)


def test_unknown_tagged_fields_in_a_v2_request_header_are_skipped() -> None:
    payload = encode_request(ApiKey.METADATA, 12, metadata_request(12))
    fixed = struct.calcsize(">hhi") + 2 + len("t")  # key, version, correlation id, client id
    assert payload[fixed] == 0  # an empty tagged-field section
    payload = payload[:fixed] + TWO_UNKNOWN_TAGS + payload[fixed + 1 :]
    request = decode_request(payload, SUPPORTED)
    assert request.body == metadata_request(12)
    assert request.client_id == "t"


def test_unknown_tagged_fields_in_a_flexible_request_body_are_skipped() -> None:
    payload = encode_request(ApiKey.METADATA, 12, metadata_request(12))
    assert payload[-1] == 0  # the body's own empty tagged-field section comes last
    request = decode_request(payload[:-1] + TWO_UNKNOWN_TAGS, SUPPORTED)
    assert request.body == metadata_request(12)


def test_every_decodable_version_has_a_kio_codec() -> None:
    for api_key, (low, high) in SUPPORTED.items():
        for version in range(low, high + 1):
            codec = codec_for(api_key, version)
            assert codec.request_type.__api_key__ == api_key  # type: ignore[attr-defined]
            assert codec.request_type.__version__ == version  # type: ignore[attr-defined]


# ---- refusals --------------------------------------------------------------------------------


# Kafka APIs Weir does not serve, then numbers that are no API at all.
UNSERVED_KAFKA_APIS = sorted(set(api_key_map) - set(ADVERTISED))[:3]
NOT_APIS = [1000, -1, -32768, 32767]


@pytest.mark.parametrize("api_key", UNSERVED_KAFKA_APIS + NOT_APIS)
def test_an_unknown_api_key_is_refused(api_key: int) -> None:
    with pytest.raises(UnknownApiKeyError):
        decode_request(header_only(api_key, 0), SUPPORTED)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (ApiKey.METADATA, 13),
        (ApiKey.METADATA, 99),
        (ApiKey.METADATA, -1),
        (ApiKey.API_VERSIONS, 4),
        (ApiKey.API_VERSIONS, 99),
        (ApiKey.FETCH, 3),
        (ApiKey.FETCH, 13),
        (ApiKey.LIST_OFFSETS, 0),
        (ApiKey.CREATE_TOPICS, 1),
        (ApiKey.PRODUCE, 10),
        (ApiKey.PRODUCE, 0),
        (ApiKey.PRODUCE, 1),
        (ApiKey.PRODUCE, 2),
    ],
)
def test_a_version_outside_the_table_is_unsupported(api_key: int, version: int) -> None:
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(header_only(api_key, version, correlation_id=4242), SUPPORTED)
    error = caught.value
    assert (error.api_key, error.api_version, error.correlation_id) == (api_key, version, 4242)
    assert error.error_code == ErrorCode.unsupported_version


def test_an_allowed_version_kio_cannot_decode_is_unsupported_not_a_crash() -> None:
    table = {ApiKey.PRODUCE: (0, 9)}  # ADVERTISED before refusals: kio has no Produce v0-2
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(header_only(ApiKey.PRODUCE, 2, correlation_id=5), table)
    assert caught.value.api_version == 2


@pytest.mark.parametrize("size", range(8))
def test_a_payload_shorter_than_the_fixed_header_is_invalid(size: int) -> None:
    with pytest.raises(InvalidRequestError):
        decode_request(header_only(ApiKey.METADATA, 0)[:size], SUPPORTED)
    with pytest.raises(InvalidRequestError):
        peek_header(b"\x00" * size)


def test_peek_header_reads_key_version_and_correlation_id() -> None:
    assert peek_header(struct.pack(">hhi", 3, 12, -7) + b"rest") == (3, 12, -7)


@pytest.mark.parametrize("version", [1, 12])
@pytest.mark.parametrize("extra", [b"\x00", b"junk", b"\x00" * 100])
def test_bytes_after_the_body_are_ignored_as_kafka_does(version: int, extra: bytes) -> None:
    # Kafka's parser stops at the end of the body and librdkafka sends a few bytes more.
    payload = encode_request(ApiKey.METADATA, version, metadata_request(version), 31)
    request = decode_request(payload + extra, SUPPORTED)
    assert request.body == metadata_request(version)
    assert request.correlation_id == 31


@pytest.mark.parametrize(("api_key", "version"), [(ApiKey.METADATA, 1), (ApiKey.METADATA, 12)])
def test_every_truncation_of_a_request_is_invalid(api_key: int, version: int) -> None:
    payload = encode_request(api_key, version, metadata_request(version, ("alpha", "beta")))
    for end in range(len(payload)):
        with pytest.raises(InvalidRequestError):
            decode_request(payload[:end], SUPPORTED)


# ---- arbitrary input -------------------------------------------------------------------------

VERSIONED_KEYS = st.sampled_from(
    [(k, v) for k, (low, high) in SUPPORTED.items() for v in range(low - 1, high + 2)]
)


KIO_ABORTS = (
    "kio's native reader sizes an array from its untrusted count before reading it: a count "
    "too large to allocate aborts the whole process (see test_an_array_count_too_large_...)"
)


def decode_in_child(payload: bytes, address_space: int | None = None) -> str:
    """Decode in a forked child, so that an abort shows up as a result instead of ending the
    test run: "ok" (a Request or a RemoteProtocolError), the repr of any other exception, or
    "killed by signal N". `address_space` caps the child's memory, as a small host would."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_end)
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        try:
            outcome = "ok" if isinstance(decode_request(payload, SUPPORTED), Request) else "?"
        except RemoteProtocolError:
            outcome = "ok"
        except BaseException as exc:
            outcome = repr(exc)
        os.write(write_end, outcome.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        outcome = reader.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return outcome


def _decode_outcome(payload: bytes) -> str:
    try:
        return "ok" if isinstance(decode_request(payload, SUPPORTED), Request) else "?"
    except RemoteProtocolError:
        return "ok"
    except BaseException as exc:
        return repr(exc)


class DecodingChild:
    """One forked child that decodes payload after payload, so that an abort shows up as a
    result (and a fresh child for the next payload) without a fork per example."""

    def __init__(self) -> None:
        self._pid = 0
        self._to_child: Any = None
        self._from_child: Any = None

    def outcome(self, payload: bytes) -> str:
        if not self._pid:
            self._start()
        self._to_child.write(struct.pack(">I", len(payload)) + payload)
        self._to_child.flush()
        size = self._from_child.read(4)
        if len(size) == 4:
            return self._from_child.read(struct.unpack(">I", size)[0]).decode()
        _, status = os.waitpid(self._pid, 0)
        self._pid = 0
        return f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else "exited"

    def _start(self) -> None:
        payloads_r, payloads_w = os.pipe()
        outcomes_r, outcomes_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(payloads_w)
            os.close(outcomes_r)
            with os.fdopen(payloads_r, "rb") as reader, os.fdopen(outcomes_w, "wb") as writer:
                while len(size := reader.read(4)) == 4:
                    result = _decode_outcome(reader.read(struct.unpack(">I", size)[0])).encode()
                    writer.write(struct.pack(">I", len(result)) + result)
                    writer.flush()
            os._exit(0)
        os.close(payloads_r)
        os.close(outcomes_w)
        self._pid = pid
        self._to_child = os.fdopen(payloads_w, "wb")
        self._from_child = os.fdopen(outcomes_r, "rb")


_CHILD = DecodingChild()


def decodes_or_refuses(payload: bytes) -> None:
    outcome = _CHILD.outcome(payload)
    assert outcome == "ok", f"{payload!r} -> {outcome}"


SMALL_HOST = 4 << 30  # address space, so the outcome is the same on any machine


@pytest.mark.parametrize(
    "payload",
    [
        # Metadata v12, topics: a compact array of 2**35 - 2 entries (kio's largest), 17 bytes
        struct.pack(">hhih", ApiKey.METADATA, 12, 1, 1) + b"t\0" + encode_uvarint(2**35 - 1),
        # CreateTopics v2, topics: an int32 count of 2**31 - 1, 15 bytes
        struct.pack(">hhih", ApiKey.CREATE_TOPICS, 2, 1, 1) + b"t\x7f\xff\xff\xff",
    ],
    ids=["metadata-v12-compact-count", "create-topics-v2-int32-count"],
)
def test_an_array_count_too_large_to_allocate_is_invalid_not_an_abort(payload: bytes) -> None:
    assert decode_in_child(payload, address_space=SMALL_HOST) == "ok"


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_a_remote_protocol_error(payload: bytes) -> None:
    decodes_or_refuses(payload)


@settings(max_examples=1000, deadline=None)
@given(VERSIONED_KEYS, CORRELATION_IDS, st.binary(max_size=200))
def test_a_valid_header_start_with_arbitrary_bytes_decodes_or_is_refused(
    key_version: tuple[int, int], correlation_id: int, rest: bytes
) -> None:
    api_key, version = key_version
    decodes_or_refuses(struct.pack(">hhi", api_key, version, correlation_id) + rest)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(ROUND_TRIPS).flatmap(
        lambda kv: st.tuples(st.just(kv), st.from_type(codec_for(*kv).request_type))
    ),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(min_value=0),
)
def test_a_damaged_real_request_decodes_or_is_refused(
    request: tuple[tuple[int, int], Any], flips: list[tuple[int, int]], keep: int
) -> None:
    (api_key, version), body = request
    payload = bytearray(encode_request(api_key, version, body))
    for position, value in flips:
        payload[position % len(payload)] = value
    assume(bytes(payload) != encode_request(api_key, version, body))
    decodes_or_refuses(bytes(payload[: max(8, keep % (len(payload) + 1))]))


# ---- responses -------------------------------------------------------------------------------

RESPONSE_CASES = [
    (ApiKey.API_VERSIONS, 0, ResponseHeaderV0),
    (ApiKey.API_VERSIONS, 3, ResponseHeaderV0),  # flexible, but clients parse it before they know
    (ApiKey.METADATA, 0, ResponseHeaderV0),
    (ApiKey.METADATA, 8, ResponseHeaderV0),
    (ApiKey.METADATA, 9, ResponseHeaderV1),
    (ApiKey.METADATA, 12, ResponseHeaderV1),
    (ApiKey.PRODUCE, 3, ResponseHeaderV0),
    (ApiKey.PRODUCE, 9, ResponseHeaderV1),
    (ApiKey.FETCH, 4, ResponseHeaderV0),
    (ApiKey.FETCH, 12, ResponseHeaderV1),
    (ApiKey.LIST_OFFSETS, 7, ResponseHeaderV1),
    (ApiKey.CREATE_TOPICS, 7, ResponseHeaderV1),
    (ApiKey.DESCRIBE_CLUSTER, 1, ResponseHeaderV1),
]


@pytest.mark.parametrize(("api_key", "version", "header_cls"), RESPONSE_CASES)
def test_an_encoded_response_is_framed_and_reads_back_with_kio(
    api_key: int, version: int, header_cls: type
) -> None:
    cls = response_type(api_key, version)
    assert cls.__header_schema__ is header_cls  # type: ignore[attr-defined]
    read_header = entity_reader(header_cls)
    read_body = entity_reader(cls)

    @MODEST
    @given(st.from_type(cls), CORRELATION_IDS)
    def round_trip(response: Any, correlation_id: int) -> None:
        framed = encode_response(api_key, version, correlation_id, response)
        (size,) = struct.unpack_from(">i", framed)
        assert size == len(framed) - 4
        header, header_size = read_header(framed, 4)
        assert header_size == (4 if header_cls is ResponseHeaderV0 else 5)
        assert header.correlation_id == correlation_id
        body, body_size = read_body(framed, 4 + header_size)
        assert 4 + header_size + body_size == len(framed)
        assert body == response

    round_trip()


def test_an_api_versions_v3_response_puts_the_error_code_right_after_the_correlation_id() -> None:
    module = importlib.import_module("kio.schema.api_versions.v3.response")
    response = module.ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=(module.ApiVersion(api_key=3, min_version=0, max_version=12),),
        throttle_time=datetime.timedelta(0),
    )
    framed = encode_response(ApiKey.API_VERSIONS, 3, 77, response)
    assert framed[4:8] == struct.pack(">i", 77)
    assert framed[8:10] == struct.pack(">h", ErrorCode.unsupported_version.value)


def test_every_advertised_version_has_a_response_type() -> None:
    for api_key, (low, high) in SUPPORTED.items():
        for version in range(low, high + 1):
            assert response_type(api_key, version).__version__ == version  # type: ignore[attr-defined]
    assert set(SUPPORTED) == {int(k) for k in ADVERTISED}
